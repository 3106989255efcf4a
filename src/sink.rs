//! Where events go: the Kafka producer and its transactions, and the
//! webhook sinks.
//!
//! Modules:
//! * `kafka`: the idempotent Kafka producer, [`KafkaSink`], its settings
//!   and errors; `kafka/transactional.rs`: its transactional mode
//!   (exactly-once, the broker's side);
//! * `refusal`: the broker's refusals, classified once;
//! * `counters`: the counters of what the broker acknowledged;
//! * `log`: librdkafka's log lines, forwarded to `tracing`;
//! * `reach`, `broker_watch`: whether the brokers can be reached, decided
//!   without I/O, and carried out for one producer;
//! * `checkpoint_reader`: exactly-once, the read of the last committed
//!   checkpoint; [`checkpoint_topic`]: the checkpoint topic's one verdict;
//! * [`http`]: the webhook sinks.
//!
//! This file is the module's doc and its public names only; the code is in
//! the files above, and `crate::sink::X` names stay what they were.

mod broker_watch;
mod checkpoint_reader;
pub mod checkpoint_topic;
mod counters;
pub mod http;
mod kafka;
mod log;
mod reach;
mod refusal;

pub use broker_watch::ReachObserver;
pub use checkpoint_reader::{CheckpointRead, CheckpointReadError, read_checkpoint};
pub use kafka::{
    CREATION_GRACE, DeliveryReport, KafkaSink, RELAY_OWNED_PROPERTIES, STATISTICS_INTERVAL_MS,
    SendError, SinkError, SinkSettings, TopicCheck, TransactionSettings, TxnFailure, client_config,
    producer_config, property_problem,
};
pub use refusal::{
    DeliveryError, OnUnroutable, RefusalClass, RefusalKind, Refused, classify, classify_error,
};
