//! outbox-relay: turns rows inserted into a PostgreSQL outbox table into
//! CloudEvents on Kafka, reading a logical replication slot (pgoutput) and
//! confirming the slot's position only after the broker acknowledged.

pub mod ack;
pub mod assembler;
pub mod config;
pub mod envelope;
pub mod lsn;
pub mod pgoutput;
pub mod replication;
pub mod sink;
