//! Where events go: the Kafka producer and its transactions, and the
//! webhook sinks.
//!
//! Modules:
//! * `kafka`: the idempotent Kafka producer, [`KafkaSink`], its settings
//!   and errors; `kafka/transactional.rs`: its transactional mode
//!   (exactly-once, the broker's side);
//! * `refusal_kind`: the broker's refusals, classified once;
//! * `counters`: the counters of what the broker acknowledged;
//! * `librdkafka_log`: librdkafka's log lines, forwarded to `tracing`;
//! * `reachability`, `broker_watch`: whether the brokers can be reached, decided
//!   without I/O, and carried out for one producer;
//! * exactly-once's checkpoint topic and its reader are the relay's
//!   (`crate::relay::exactly_once`); the transactional producer is here;
//! * [`http`]: the webhook sinks.
//!
//! This file is the module's doc and its public names only; the code is in
//! the files above, and `crate::sink::X` names stay what they were.

mod broker_watch;
mod counters;
pub mod http;
mod kafka;
mod librdkafka_log;
mod reachability;
mod refusal_kind;

pub(crate) use librdkafka_log::{Reader, ReaderContext};

pub use broker_watch::ReachObserver;
pub(crate) use kafka::transactional::connect_at_once;
pub use kafka::{
    ANSWER_PROBE_EVERY, CREATION_GRACE, DeliveryReport, KafkaSink, RELAY_OWNED_PROPERTIES,
    SendError, SinkError, SinkSettings, TopicCheck, TransactionSettings, TxnFailure,
    allows_topic_creation, client_config, producer_config, property_problem,
};
pub use refusal_kind::{
    BrokerFailure, DeliveryError, FailureKind, OnUnroutable, RefusalClass, RefusalKind, Refused,
    classify, classify_error,
};
