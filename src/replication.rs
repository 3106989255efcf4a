//! The replication connection: logical replication over the PostgreSQL
//! client in [`crate::pg`], and what the relay reads from the catalog about
//! its slot, its publication and the outbox table.
//!
//! Role: connect with `replication=database` (conninfo, TLS and
//! authentication are `pg`'s), check the slot and publication, run
//! `START_REPLICATION ... LOGICAL 0/0` with pgoutput, and hand each CopyData
//! payload upward as a [`StreamItem`], raw: transaction framing belongs to the
//! pgoutput decoder and the assembler, not to the connection. Status updates
//! flow back from here, carrying only what the caller [`confirmed`]. Beside
//! the stream, on `pg`'s ordinary sessions ([`crate::pg::PgClient`], on the
//! server the stream reads): which relations are the outbox
//! (`outbox_table`'s look-ups), and the idle heartbeat that lets the slot
//! advance (`heartbeat`). What stays here is what is about replication (a slot, a
//! publication, the WAL, the outbox table the stream reads); what any SQL
//! session needs is `pg`'s.
//!
//! Invariants:
//! * the flush LSN sent is the caller's confirmed LSN (or the start value),
//!   never anything received, never lower than before: confirm only what the
//!   broker holds, and a position merely received only when nothing is in
//!   flight (both the caller's to decide);
//! * the stream starts at the slot (`0/0`), never at a computed position
//!   (start where the slot says); a missing slot is a fatal error, never
//!   created here (never create a slot behind the operator's back);
//! * keepalives that ask for a reply are answered at once, and a status
//!   update goes out at least every `min(status_interval,
//!   wal_sender_timeout / 2)` while the caller keeps calling `next`;
//! * [`ReplicationStream::next`] is cancel-safe (see `pg/socket.rs`);
//! * no password in any log line or error (see `pg/conninfo.rs`).
//!
//! Modules, and which others each uses (no cycles; `mod` is this file,
//! for [`ReplicationSettings`]; tests aside; `pg::…` is the client):
//! * `outbox_table`: pg (its `PgClient`), pg::error, pg::socket, pg::sql;
//! * `catalog`: mod, outbox_table, pg::error, pg::quote, pg::socket,
//!   pg::sql (the slot and publication checks, `START_REPLICATION`);
//! * `heartbeat`: mod, pg (its `PgClient`), pg::error;
//! * `stream`: mod, catalog, outbox_table, pg::auth, pg::conninfo,
//!   pg::error, pg::protocol, pg::socket;
//! * `mod`: pg (the settings hold a [`ConnectSettings`]).
//!
//! `stream` has private submodules (`stream/connect.rs`, `stream/status.rs`)
//! that use only what its line above names.
//!
//! [`confirmed`]: ReplicationStream::confirm

mod catalog;
mod heartbeat;
mod outbox_table;
mod stream;

use std::time::Duration;

use bytes::Bytes;

pub use catalog::{ServerIdentity, evaluate_slot_json};
pub use heartbeat::{HEARTBEAT_PREFIX, emit_heartbeat};
pub use outbox_table::{
    OutboxTable, RelationClass, RelationLookup, classify, look_up, publication_relids, resolve_on,
};
pub use stream::ReplicationStream;

use crate::pg::{ConnectSettings, Conninfo};
use pgoutput::lsn::Lsn;

/// Everything the replication connection needs, as validated plain data.
#[derive(Debug, Clone)]
pub struct ReplicationSettings {
    /// Where and as whom to connect, how long a connect may take (here the
    /// whole connect: TCP, TLS, authentication, checks, start), the
    /// application name; the same for the plain SQL sessions beside the
    /// stream.
    pub connection: ConnectSettings,
    pub slot: String,
    pub publication: String,
    /// The outbox table `(schema, name)`: resolved from the catalog at
    /// connect, and the publication must contain it. `None` skips both
    /// (a stream read for other purposes, as in tests of the connection).
    pub outbox_table: Option<(String, String)>,
    /// With `outbox_table`: a table that does not exist, or that the
    /// publication does not publish, is no error but no outbox (events come
    /// from logical messages, `postgres.source = "messages"`); one that
    /// does is resolved, so that rows inserted into it are not skipped.
    pub outbox_table_optional: bool,
    /// The outbox table's OID from an earlier session, preferred over the
    /// name: a table renamed while the relay runs is still found after a
    /// reconnect.
    pub outbox_oid: Option<u32>,
    /// Upper bound between status updates; the effective interval is
    /// `min(this, wal_sender_timeout / 2)`, read from the server at connect.
    pub status_interval: Duration,
}

impl ReplicationSettings {
    /// Settings with the documented defaults: status every 10 s, and
    /// [`ConnectSettings::new`]'s (10 s to connect, application name
    /// `outbox-relay`).
    pub fn new(
        conninfo: Conninfo,
        slot: impl Into<String>,
        publication: impl Into<String>,
    ) -> Self {
        ReplicationSettings {
            connection: ConnectSettings::new(conninfo),
            slot: slot.into(),
            publication: publication.into(),
            outbox_table: None,
            outbox_table_optional: false,
            outbox_oid: None,
            status_interval: Duration::from_secs(10),
        }
    }
}

/// One CopyData payload of the replication stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    /// One pgoutput message (`data`), a zero-copy slice of the read buffer.
    XLogData {
        wal_start: Lsn,
        wal_end: Lsn,
        data: Bytes,
    },
    /// The server is alive. `wal_end` is the last LSN it *sent*: not a
    /// position anybody confirmed (the connection already answered if asked).
    Keepalive { wal_end: Lsn },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_debug_hides_the_password() {
        let conninfo = Conninfo::parse("postgres://relay:hunter2@db/app").unwrap();
        let settings = ReplicationSettings::new(conninfo, "s", "p");
        let debug = format!("{settings:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("postgres://relay:***@db/app"), "{debug}");
    }
}
