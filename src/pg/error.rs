//! `PgError`: everything that can go wrong on a PostgreSQL connection (the
//! replication stream's or a plain SQL session's), and its classification
//! into [`ErrorKind`].
//!
//! Role: the relay's reconnect loop looks only at [`PgError::kind`]:
//! transient errors reconnect with [`crate::backoff::Backoff`], `SlotBusy` waits for the
//! other reader to go away, fatal errors stop the relay with the message.
//!
//! Invariants: every fatal message names the object (role, database, slot,
//! publication, host) and the fix; no message ever contains the password
//! (conninfo strings appear only in their redacted form, see
//! [`super::conninfo::Conninfo`]); server errors keep their SQLSTATE so the
//! classification is by code, not by message text, except where PostgreSQL
//! reuses one code for several situations (noted at the match).

use std::fmt;
use std::io;
use std::time::Duration;

use thiserror::Error;
use tokio_postgres::error::SqlState;

use super::quote::display_ident;
use pgoutput::DecodeError;

use crate::error::Cause;
pub use crate::error::ErrorKind;

/// An ErrorResponse from the server, with the fields the relay shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// `ERROR`, `FATAL`, `PANIC` (the non-localized `V` field when present).
    pub severity: String,
    /// SQLSTATE, e.g. `28P01`.
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " (detail: {detail})")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

/// SQLSTATE classes after which a reconnect can succeed, each named by its
/// class-wide code (`08000`...): connection exception, transaction rollback,
/// insufficient resources, operator intervention (admin shutdown, crash
/// shutdown, cannot connect now, walsender terminated), system error.
const TRANSIENT_CLASSES: [SqlState; 5] = [
    SqlState::CONNECTION_EXCEPTION,
    SqlState::TRANSACTION_ROLLBACK,
    SqlState::INSUFFICIENT_RESOURCES,
    SqlState::OPERATOR_INTERVENTION,
    SqlState::SYSTEM_ERROR,
];

impl ServerError {
    /// The SQLSTATE as a [`SqlState`] (`SqlState::Other` for a code the
    /// library does not know), for matching against its constants.
    pub fn sqlstate(&self) -> SqlState {
        SqlState::from_code(&self.code)
    }

    /// Whether the SQLSTATE is in the same class (its first two characters)
    /// as `class`.
    fn in_class(&self, class: &SqlState) -> bool {
        self.code.get(..2) == class.code().get(..2)
    }

    fn is_transient(&self) -> bool {
        TRANSIENT_CLASSES.iter().any(|class| self.in_class(class))
    }
}

/// An error on a PostgreSQL connection. See [`PgError::kind`].
#[derive(Debug, Error)]
pub enum PgError {
    #[error("invalid replication conninfo {conninfo}: {reason}")]
    Conninfo { conninfo: String, reason: String },

    #[error("invalid replication slot name {slot:?}: {reason}")]
    InvalidSlotName { slot: String, reason: &'static str },

    #[error("cannot connect to PostgreSQL at {target}: {source}")]
    Connect { target: String, source: io::Error },

    #[error("connecting to PostgreSQL at {target} timed out after {timeout:?}")]
    ConnectTimeout { target: String, timeout: Duration },

    #[error("I/O error on the replication connection to {target} while {action}: {source}")]
    Io {
        target: String,
        action: &'static str,
        source: io::Error,
    },

    #[error("PostgreSQL at {target} closed the replication connection while {action}")]
    Closed {
        target: String,
        action: &'static str,
    },

    #[error(
        "PostgreSQL at {target} did not answer a reply request for {silent_for:?}; treating \
         the connection as dead"
    )]
    ReadTimeout {
        target: String,
        silent_for: Duration,
    },

    #[error("PostgreSQL at {target} ended the replication stream (the walsender is stopping)")]
    StreamEnded { target: String },

    #[error(
        "PostgreSQL at {target} does not offer TLS but sslmode={sslmode} requires it: enable \
         `ssl = on` on the server or lower sslmode"
    )]
    TlsNotOffered {
        target: String,
        sslmode: &'static str,
    },

    #[error(
        "sslmode={sslmode} for PostgreSQL at {target} needs a certificate authority to verify \
         the server against: set sslrootcert=<path to the CA certificate file>, or \
         sslrootcert=system with sslmode=verify-full for the system trust store (the relay does \
         not read ~/.postgresql/root.crt)"
    )]
    TlsRootCertMissing {
        target: String,
        sslmode: &'static str,
    },

    #[error(
        "TLS certificate of PostgreSQL at {target} (verified as {server_name:?}) was refused: \
         {reason}; check sslrootcert and that the host name is in the certificate, or lower \
         sslmode"
    )]
    TlsVerify {
        target: String,
        server_name: String,
        reason: String,
    },

    #[error("TLS with PostgreSQL at {target} failed: {reason}")]
    Tls { target: String, reason: String },

    #[error(
        "authentication failed for role {role:?} at {target}: {server}; check the password in \
         the conninfo and the server's pg_hba.conf"
    )]
    AuthFailed {
        role: String,
        target: String,
        server: Box<ServerError>,
    },

    #[error(
        "PostgreSQL at {target} asked for a password for role {role:?} but the conninfo has \
         none: add `password=...` (or user:password@ in the URL)"
    )]
    PasswordMissing { role: String, target: String },

    #[error("channel binding with PostgreSQL at {target} failed: {reason}")]
    ChannelBinding { target: String, reason: String },

    #[error(
        "PostgreSQL at {target} asked for authentication method {method}, which the relay does \
         not support: configure pg_hba.conf for scram-sha-256, md5, password or trust"
    )]
    UnsupportedAuth { target: String, method: String },

    #[error(
        "role {role:?} may not open a replication connection: {server}; fix with \
         `ALTER ROLE {} REPLICATION;`",
        display_ident(role)
    )]
    MissingReplicationRole {
        role: String,
        server: Box<ServerError>,
    },

    #[error(
        "database {database:?} does not exist at {target}: {server}; check dbname in the conninfo"
    )]
    DatabaseMissing {
        database: String,
        target: String,
        server: Box<ServerError>,
    },

    #[error(
        "replication slot {slot:?} does not exist in database {database:?}; the relay never \
         creates it: run `{}`, which creates it, or refuses and says why when a slot was \
         lost (a new slot would skip the events committed since)",
        crate::invocation::command("init")
    )]
    SlotMissing { slot: String, database: String },

    #[error(
        "replication slot {slot:?} is a {slot_type} slot with plugin {plugin:?}; the relay needs a \
         logical slot with plugin pgoutput: drop it and create it with \
         `SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput');`"
    )]
    SlotNotPgoutput {
        slot: String,
        slot_type: String,
        plugin: String,
    },

    #[error(
        "replication slot {slot:?} belongs to database {slot_database:?}, but the conninfo \
         connects to {database:?}: point dbname at the slot's database"
    )]
    SlotWrongDatabase {
        slot: String,
        slot_database: String,
        database: String,
    },

    #[error(
        "replication slot {slot:?} was created with two_phase = true: PostgreSQL may then \
         send a prepared transaction at PREPARE and only its COMMIT PREPARED later, while the \
         relay reads committed transactions only. Create the slot without two-phase: \
         `SELECT pg_drop_replication_slot('{slot}'); SELECT \
         pg_create_logical_replication_slot('{slot}', 'pgoutput');` (on a slot that was in \
         use, note its confirmed_flush_lsn first)"
    )]
    SlotTwoPhase { slot: String },

    #[error(
        "replication slot {slot:?} is invalidated (wal_status = {wal_status}{reason}): the WAL \
         it needed is gone and events may be lost. Drop and recreate the slot, then re-publish \
         the outbox from a known position"
    )]
    SlotInvalidated {
        slot: String,
        wal_status: String,
        /// `, invalidation_reason = ...` or `, conflicting` where the server says so.
        reason: String,
    },

    #[error(
        "replication slot {slot:?} is in use by another process (active_pid {}); waiting \
         for it to disconnect: never two readers on one slot",
        active_pid.map_or_else(|| "unknown".to_owned(), |pid| pid.to_string())
    )]
    SlotInUse {
        slot: String,
        active_pid: Option<i32>,
    },

    #[error(
        "publication {publication:?} does not exist in database {database:?}: run `outbox-relay \
         init`, which creates it, or, where the slot holds WAL written before, refuses and names \
         the outbox rows that would never be relayed and the ways out. A publication created by \
         hand does not publish the changes already in the slot: pgoutput decodes each change \
         with the catalog as of that change"
    )]
    PublicationMissing {
        publication: String,
        database: String,
    },

    #[error(
        "publication {publication:?} does not publish inserts, so no outbox row would ever \
         arrive: run `outbox-relay init`, which runs `ALTER PUBLICATION {} SET (publish = \
         'insert');` or, where the slot holds WAL written before, refuses and names the outbox \
         rows that would never be relayed (the change does not reach the slot's older WAL)",
        display_ident(publication)
    )]
    PublicationWithoutInserts { publication: String },

    #[error(
        "the outbox table {table} does not exist in database {database:?}: check \
         postgres.table (schema.name), or create the table (sql/outbox.sql)"
    )]
    TableMissing { table: String, database: String },

    #[error(
        "publication {publication:?} does not contain the outbox table {table}, so none of its \
         rows would ever arrive: run `outbox-relay init`, which runs `ALTER PUBLICATION {} ADD \
         TABLE {table};` or, where the slot holds WAL written before, refuses and names the \
         outbox rows that would never be relayed (the change does not reach the slot's older \
         WAL)",
        display_ident(publication)
    )]
    PublicationLacksTable { publication: String, table: String },

    #[error("PostgreSQL at {target} refused {action}: {server}")]
    Server {
        target: String,
        action: &'static str,
        server: Box<ServerError>,
    },

    #[error("protocol violation from PostgreSQL at {target} while {action}: {reason}")]
    Protocol {
        target: String,
        action: &'static str,
        reason: String,
    },

    #[error("undecodable replication message from PostgreSQL at {target}: {source}")]
    Decode { target: String, source: DecodeError },
}

impl PgError {
    /// Transient (reconnect), slot busy (wait), or fatal (stop and tell).
    pub fn kind(&self) -> ErrorKind {
        use PgError as E;
        match self {
            E::Connect { .. }
            | E::ConnectTimeout { .. }
            | E::Io { .. }
            | E::Closed { .. }
            | E::ReadTimeout { .. }
            | E::StreamEnded { .. } => ErrorKind::Transient,
            E::SlotInUse { .. } => ErrorKind::SlotBusy,
            E::Server { server, .. } if server.is_transient() => ErrorKind::Transient,
            E::Conninfo { .. }
            | E::InvalidSlotName { .. }
            | E::TlsNotOffered { .. }
            | E::TlsRootCertMissing { .. }
            | E::TlsVerify { .. }
            | E::Tls { .. }
            | E::AuthFailed { .. }
            | E::PasswordMissing { .. }
            | E::ChannelBinding { .. }
            | E::UnsupportedAuth { .. }
            | E::MissingReplicationRole { .. }
            | E::DatabaseMissing { .. }
            | E::SlotMissing { .. }
            | E::SlotNotPgoutput { .. }
            | E::SlotWrongDatabase { .. }
            | E::SlotTwoPhase { .. }
            | E::SlotInvalidated { .. }
            | E::PublicationMissing { .. }
            | E::PublicationWithoutInserts { .. }
            | E::TableMissing { .. }
            | E::PublicationLacksTable { .. }
            | E::Server { .. }
            | E::Protocol { .. }
            | E::Decode { .. } => ErrorKind::Fatal,
        }
    }

    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> Cause {
        use PgError as E;
        match self {
            E::Conninfo { .. } | E::InvalidSlotName { .. } => Cause::PostgresSettingsInvalid,
            E::TlsNotOffered { .. }
            | E::TlsRootCertMissing { .. }
            | E::TlsVerify { .. }
            | E::Tls { .. } => Cause::PostgresTlsFailed,
            E::AuthFailed { .. }
            | E::PasswordMissing { .. }
            | E::ChannelBinding { .. }
            | E::UnsupportedAuth { .. } => Cause::PostgresAuthenticationFailed,
            E::MissingReplicationRole { .. } => Cause::ReplicationPrivilegeMissing,
            E::DatabaseMissing { .. } => Cause::DatabaseMissing,
            E::Connect { .. }
            | E::ConnectTimeout { .. }
            | E::Io { .. }
            | E::Closed { .. }
            | E::ReadTimeout { .. }
            | E::StreamEnded { .. } => Cause::PostgresUnreachable,
            E::SlotMissing { .. } => Cause::SlotMissing,
            E::SlotInvalidated { .. } => Cause::SlotInvalidated,
            E::SlotNotPgoutput { .. } | E::SlotWrongDatabase { .. } | E::SlotTwoPhase { .. } => {
                Cause::SlotUnusable
            }
            E::SlotInUse { .. } => Cause::SlotInUse,
            E::PublicationMissing { .. }
            | E::PublicationWithoutInserts { .. }
            | E::PublicationLacksTable { .. } => Cause::PublicationUnusable,
            E::TableMissing { .. } => Cause::OutboxTableMissing,
            E::Server { .. } => Cause::PostgresRefused,
            E::Protocol { .. } => Cause::PostgresProtocolViolation,
            E::Decode { .. } => Cause::StreamUndecodable,
        }
    }

    /// The SQLSTATE when the server reported the error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            PgError::AuthFailed { server, .. }
            | PgError::MissingReplicationRole { server, .. }
            | PgError::DatabaseMissing { server, .. }
            | PgError::Server { server, .. } => Some(&server.code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> ServerError {
        ServerError {
            severity: "FATAL".into(),
            code: code.into(),
            message: "m".into(),
            detail: None,
            hint: None,
        }
    }

    #[test]
    fn server_errors_are_classified_by_sqlstate_class() {
        for (code, kind) in [
            ("57P01", ErrorKind::Transient),
            ("57P02", ErrorKind::Transient),
            ("57P03", ErrorKind::Transient),
            ("53300", ErrorKind::Transient),
            ("08006", ErrorKind::Transient),
            ("40001", ErrorKind::Transient),
            ("58030", ErrorKind::Transient),
            ("28P01", ErrorKind::Fatal),
            ("5", ErrorKind::Fatal),
            ("", ErrorKind::Fatal),
            ("42704", ErrorKind::Fatal),
            ("55000", ErrorKind::Fatal),
            ("XX000", ErrorKind::Fatal),
        ] {
            let error = PgError::Server {
                target: "h".into(),
                action: "streaming",
                server: Box::new(server(code)),
            };
            assert_eq!(error.kind(), kind, "{code}");
            assert_eq!(error.sqlstate(), Some(code));
        }
    }

    #[test]
    fn fatal_messages_name_the_object_and_the_fix() {
        let missing = PgError::SlotMissing {
            slot: "outbox_slot".into(),
            database: "app".into(),
        };
        assert_eq!(missing.kind(), ErrorKind::Fatal);
        let text = missing.to_string();
        // `init`, which refuses where a slot was lost, is the one fix named:
        // a raw CREATE beside it would be the blind creation it warns about.
        assert!(
            text.contains("outbox_slot") && text.contains("outbox-relay init --config"),
            "{text}"
        );
        assert!(
            !text.contains("pg_create_logical_replication_slot"),
            "{text}"
        );

        let role = PgError::MissingReplicationRole {
            role: "relay".into(),
            server: Box::new(server("42501")),
        };
        assert!(role.to_string().contains("ALTER ROLE relay REPLICATION"));

        let busy = PgError::SlotInUse {
            slot: "s".into(),
            active_pid: Some(42),
        };
        assert_eq!(busy.kind(), ErrorKind::SlotBusy);
        assert!(busy.to_string().contains("42"));
    }
}
