//! outbox-relay: turns rows inserted into a PostgreSQL outbox table into
//! CloudEvents on Kafka, reading a logical replication slot (pgoutput) and
//! confirming the slot's position only after the broker acknowledged.
//!
//! The modules follow the data flow in `docs/design.md`:
//! replication stream ([`replication`]) → pgoutput decoder (`pgoutput`) →
//! transaction assembler (`pgoutput::assembler`) → outbox row ([`outbox`]) →
//! CloudEvents envelope ([`envelope`]) → Kafka producer ([`sink`]) →
//! ack tracker ([`ack`]) → flush LSN back to the replication stream.
//! [`relay`] wires them together; [`config`] is the one validated config.
//!
//! The sans-IO part, the decoder with its assembler and LSN type, is its own
//! crate (`crates/pgoutput`), so that Cargo keeps I/O out of it; the relay
//! and its tests use it by its own name (`pgoutput::assembler::TxEvent`,
//! `pgoutput::lsn::Lsn`), not through this crate.
//!
//! Under the replication stream, [`pg`] is the PostgreSQL client (conninfo,
//! TLS, authentication, simple-query SQL, [`pg::PgError`]) every connection
//! to PostgreSQL runs on.
//!
//! Beside the flow: [`cleanup`] deletes confirmed rows of a table outbox,
//! [`otel`] exports the produce spans of traced events, [`http_client`] is
//! the one HTTP client (webhook sinks, OTLP export, the schema registry),
//! [`registry`] talks to a Confluent-compatible schema registry and encodes
//! records in its wire format, and [`backoff`] is the one back-off policy
//! of every retry loop.

pub mod ack;
pub mod admin;
pub mod backoff;
pub mod cleanup;
pub mod config;
pub mod contracts;
pub mod deadletter;
pub mod envelope;
pub mod error;
pub mod events;
pub mod http_client;
pub mod invocation;
pub mod metrics;
pub mod otel;
pub mod outbox;
pub mod parking;
pub mod pg;
pub mod redact;
pub mod registry;
pub mod relay;
pub mod replication;
pub mod routes;
pub mod sink;
pub mod suggest;
