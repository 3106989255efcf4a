//! pgoutput: the logical replication protocol, decoded without I/O.
//!
//! Role: turn the bytes PostgreSQL's `pgoutput` plugin sends into typed
//! [`Message`]s ([`decode`]), unwrap the streaming replication envelope
//! around them ([`decode_copy_data`]), build the status update sent back
//! ([`encode_standby_status_update`]), and frame the decoded messages into
//! transactions ([`assembler`]). WAL positions are [`lsn::Lsn`]. Covers every
//! message of protocol versions 1–4 (streaming, two-phase, parallel stream
//! abort), although the relay itself runs protocol 1 and the assembler
//! accepts only its framing.
//!
//! Invariants: nothing here does I/O or reads the clock. It is a crate of its
//! own so that Cargo holds the line: its only dependencies are bytes, chrono
//! (without its `clock` feature) and thiserror, so tokio, a socket, a
//! database or a Kafka client does not compile here (`cargo tree -p
//! pgoutput`; `cargo test -p pgoutput` and `fuzz/` build it on its own).
//! std's `fs` and `net` stay reachable; only the test fixtures read files.
//! No input makes it panic (`fuzz/` and the property tests check this);
//! counts and lengths are validated against the remaining bytes before any
//! allocation; column values are zero-copy `Bytes` slices of the received
//! message.
//!
//! Reference: PostgreSQL docs, "Logical Replication Message Formats" and
//! "Streaming Replication Protocol"
//! (<https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html>).

pub mod assembler;
pub mod lsn;

mod copy_data;
mod decode;
mod error;
mod message;
mod reader;
mod timestamp;

#[cfg(test)]
mod decode_tests;
// The decoder's inverse, for building protocol messages in tests: this
// crate's own, and other crates' through the `test-encoder` feature (the
// relay turns it on for its tests only, as a dev-dependency).
#[cfg(any(test, feature = "test-encoder"))]
pub mod encode;
#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod proptests;

/// The buffer type of every input and column value, re-exported so a caller
/// (such as the fuzz target) uses exactly the `bytes` version this crate does.
pub use bytes::Bytes;
pub use copy_data::{ReplicationMessage, decode_copy_data, encode_standby_status_update};
pub use decode::{DecodeContext, decode};
pub use error::DecodeError;
pub use message::{
    Begin, BeginPrepare, Column, Commit, CommitPrepared, Delete, Insert, LogicalMessage, Message,
    OldTuple, Origin, ParallelAbort, PrepareBody, RelationBody, RollbackPrepared, StreamAbort,
    StreamCommit, StreamStart, Truncate, TupleData, TupleValue, TypeBody, Update,
};
pub use timestamp::{PG_EPOCH_UNIX_MICROS, pg_timestamp_to_utc, utc_to_pg_timestamp};
