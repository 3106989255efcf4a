//! outbox-relay: turns rows inserted into a PostgreSQL outbox table into
//! CloudEvents on Kafka, reading a logical replication slot (pgoutput) and
//! confirming the slot's position only after the broker acknowledged.

pub mod assembler;
pub mod lsn;
pub mod pgoutput;
pub mod replication;
