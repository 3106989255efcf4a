//! The idle heartbeat: a `pg_logical_emit_message` written on its own short
//! connection, so the slot has something to advance on while the outbox is
//! quiet (an idle slot on a busy database pins WAL until the disk fills).
//!
//! It runs on a `replication=database` connection, which accepts simple SQL
//! and authenticates exactly like the stream does (same conninfo, TLS and
//! SCRAM), so the relay needs no second client library. The message is
//! non-transactional and carries no payload. The relay does not look at its
//! prefix: it publishes no logical decoding message at all, whatever the
//! prefix, and any non-transactional message (this one or anyone's) arriving
//! while nothing is in flight lets the slot move up to it.

use super::ReplicationSettings;
use crate::pg::error::PgError;
use crate::pg::sql::SqlConnection;

/// The logical message prefix of heartbeats: names them for other readers
/// of the WAL (`pg_logical_slot_peek_changes`, other slots); the relay itself
/// treats every logical message alike.
pub const HEARTBEAT_PREFIX: &str = "outbox-relay-heartbeat";

/// Writes one heartbeat message to the WAL.
///
/// # Errors
/// The same classification as the stream's connect; the relay logs a failed
/// heartbeat and tries again at the next interval.
pub async fn emit_heartbeat(settings: &ReplicationSettings) -> Result<(), PgError> {
    let mut connection = SqlConnection::connect(&settings.connection).await?;
    let target = connection.target().to_owned();
    let emitted = tokio::time::timeout(
        settings.connection.connect_timeout,
        connection.query(
            &format!("SELECT pg_logical_emit_message(false, '{HEARTBEAT_PREFIX}', '')"),
            "emitting a heartbeat",
        ),
    )
    .await;
    connection.close().await;
    match emitted {
        Ok(result) => result.map(drop),
        Err(_) => Err(PgError::Io {
            target,
            action: "emitting a heartbeat",
            source: std::io::ErrorKind::TimedOut.into(),
        }),
    }
}
