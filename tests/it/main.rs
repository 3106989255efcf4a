//! The integration tests, one test binary (`cargo test --test it`): the
//! relay against the real PostgreSQL and Kafka of `scripts/services`
//! (`eval "$(scripts/services up)"` first), librdkafka's mock cluster, and
//! the fuzz corpus. One module per feature; run one with its path, e.g.
//! `cargo test --test it -- takeover::`.
//!
//! * [`delivery`]: events exactly once and in order in the normal course;
//!   what the relay ignores; heartbeats on an idle outbox.
//! * [`dead_letters`]: rows that cannot become events, topics that refuse
//!   them or do not exist.
//! * [`dead_cli`]: `outbox-relay dead list | retry | discard` on the Kafka
//!   dead-letter topic and the delivery table.
//! * [`payloads`]: structured mode, payloads that break JSON handling.
//! * [`contracts`]: events checked against their JSON Schema; a violation
//!   dead-lettered, retried once the schema is fixed; `schema check`.
//! * [`schema_change`]: ALTER TABLE, a partitioned or renamed outbox,
//!   publications, and what is refused at start.
//! * [`auth_tls`]: authentication, TLS, secrets never in logs.
//! * [`shutdown`]: SIGTERM and `kill -9`, restarts.
//! * [`shards`]: the outbox split between relays by row-filtered
//!   publications (`postgres.shards`): init, check, the union delivered.
//! * [`standby`]: several relays with one config: one streams, the others
//!   stand by (the relay lock); kill -9 and network cuts of the active one.
//! * [`takeover`]: two relays on a slot, failover, a slot moved by others.
//! * [`outbox_messages`]: the table-less outbox (`outbox_emit`,
//!   `postgres.source`): end to end, order across rows and messages, kill -9.
//! * [`outbox_cleanup`]: `postgres.cleanup = "delete-after-ack"`: never a
//!   row the broker does not hold (a mock broker down), a small table under
//!   sustained load.
//! * [`trace_context`]: a writer's trace reaches the consumer; the produce
//!   span exported over OTLP.
//! * [`exactly_once`]: `kafka.delivery = "exactly-once"` read with
//!   read_committed: no duplicate across kill -9, a broker restart, a
//!   walsender kill, a takeover; a fenced relay exits 4.
//! * [`webhooks`]: HTTP sinks end to end against a receiver that verifies
//!   signatures and fails on purpose; kill -9 during retries; two relays
//!   sharing the delivery table.
//! * [`combinations`]: several features at once (delivery mode, source,
//!   cleanup, shards, webhook routes, standby relays, dead letters, trace
//!   context) under load and kill -9; docs/design.md "Where features meet"
//!   names these tests pair by pair.
//! * [`feature_pairs`]: one pair of features each, for pairs that did not
//!   hold when the tests were written.
//! * [`memory`]: a 1M-row transaction in bounded memory.
//! * [`broker_faults`]: Kafka faults injected with the mock cluster.
//! * [`secured_broker`]: the relay over SASL_SSL (SCRAM-SHA-512, TLS) with
//!   exactly the documented ACLs, both delivery modes; each ACL removed
//!   stops it with one ERROR naming the grant; no password in any log.
//! * [`unreachable_broker`]: `kafka.brokers` pointing where nothing
//!   answers: /ready, one clear log line, delivery once a broker answers.
//! * [`service_faults`]: Kafka or PostgreSQL stopped, a stalled route, the
//!   slot dropped or invalidated (these hold the services alone).
//! * [`replication`]: the replication client itself.
//! * [`pg_client`]: the ordinary SQL session (tokio-postgres on the relay's
//!   transport and TLS): parameters, SQLSTATEs, connect semantics.
//! * [`registry`]: the schema registry client, Confluent's wire format and
//!   JSON payloads as Avro against Apicurio Registry, read back by the
//!   official Python deserializers; a registry outage.
//! * [`admin`]: the operator commands `init`, `check` and `status` as a
//!   user runs them.
//! * [`ops`]: what on-call relies on, through the binary: exit codes and
//!   `--help`, `/ready`, the metrics on `/metrics`, the log lines.
//! * [`quiet_run`]: a healthy run logs no WARN or ERROR (at-least-once,
//!   exactly-once, a webhook route); a dead letter is one WARN without its
//!   payload; every metric deploy/ names is there before the first event;
//!   a JSON log's numbers are numbers.
//! * [`smoke`]: the services are what the tests expect.
//! * [`fuzz_corpus`]: the decoder fuzz corpus replayed.
//! * [`docs_run`]: the command blocks of the pages a user follows run as
//!   written against the services.
//! * [`docs`]: every test docs/reliability.md names exists; the table of
//!   feature pairs in docs/design.md is decided and honest.
//! * [`soak`]: mixed faults for minutes (ignored; `make soak`).
//!
//! Helpers live in [`support`], one module per concern. Tests run side by
//! side on the same servers: each uses randomly named objects of its own,
//! and a test that disturbs the services holds them alone (see
//! [`support::services`]).
//!
//! A new test goes into the module of its feature. A new module is a file
//! here, a `mod` line below and `use crate::support::*;` at its top, under
//! a `//!` header that says in words which behaviour or faults it covers.

mod support;

mod admin;
mod auth_tls;
mod broker_faults;
mod combinations;
mod contracts;
mod crossings;
mod dead_cli;
mod dead_letters;
mod delivery;
mod docs;
mod docs_run;
mod exactly_once;
mod feature_pairs;
mod fuzz_corpus;
mod memory;
mod ops;
mod outbox_cleanup;
mod outbox_messages;
mod parking;
mod payloads;
mod pg_client;
mod quiet_run;
mod registry;
mod replication;
mod schema_change;
mod secured_broker;
mod service_faults;
mod shards;
mod shutdown;
mod smoke;
mod soak;
mod standby;
mod takeover;
mod trace_context;
mod unreachable_broker;
mod webhooks;
