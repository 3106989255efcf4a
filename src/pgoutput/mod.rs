//! pgoutput: the logical replication protocol, decoded without I/O.
//!
//! Role: turn the bytes PostgreSQL's `pgoutput` plugin sends into typed
//! [`Message`]s ([`decode`]), unwrap the streaming replication envelope
//! around them ([`decode_copy_data`]) and build the status update sent back
//! ([`encode_standby_status_update`]). Covers every message of protocol
//! versions 1–4 (streaming, two-phase, parallel stream abort), although the
//! relay itself runs protocol 1.
//!
//! Invariants: nothing here does I/O or imports tokio; no input makes it
//! panic (`fuzz/` and the property tests check this); counts and lengths are
//! validated against the remaining bytes before any allocation; column values
//! are zero-copy `Bytes` slices of the received message.
//!
//! Reference: PostgreSQL docs, "Logical Replication Message Formats" and
//! "Streaming Replication Protocol"
//! (<https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html>).

mod copy_data;
mod decode;
mod error;
mod message;
mod reader;
mod timestamp;

#[cfg(test)]
mod decode_tests;
#[cfg(test)]
pub(crate) mod encode;
#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod proptests;

pub use copy_data::{ReplicationMessage, decode_copy_data, encode_standby_status_update};
pub use decode::{DecodeContext, decode};
pub use error::DecodeError;
pub use message::{
    Begin, BeginPrepare, Column, Commit, CommitPrepared, Delete, Insert, LogicalMessage, Message,
    OldTuple, Origin, ParallelAbort, PrepareBody, RelationBody, RollbackPrepared, StreamAbort,
    StreamCommit, StreamStart, Truncate, TupleData, TupleValue, TypeBody, Update,
};
pub use timestamp::{PG_EPOCH_UNIX_MICROS, pg_timestamp_to_utc, utc_to_pg_timestamp};
