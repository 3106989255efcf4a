//! The idle heartbeat: a `pg_logical_emit_message` written on its own short
//! connection, so the slot has something to advance on while the outbox is
//! quiet (an idle slot on a busy database pins WAL until the disk fills).
//!
//! It runs on an ordinary session ([`PgClient`]: the stream's conninfo,
//! TLS and SCRAM, pinned to the server the stream reads), its prefix a
//! statement parameter. The message is non-transactional and carries no
//! payload. The relay does not look at its
//! prefix: it publishes no logical decoding message at all, whatever the
//! prefix, and any non-transactional message (this one or anyone's) arriving
//! while nothing is in flight lets the slot move up to it.

use super::ReplicationSettings;
use crate::pg::PgClient;
use crate::pg::error::PgError;

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
    let action = "emitting a heartbeat";
    let client = PgClient::connect(&settings.connection).await?;
    let emitted = tokio::time::timeout(
        settings.connection.connect_timeout,
        client.execute(
            "SELECT pg_logical_emit_message(false, $1::text, $2::text)",
            &[&HEARTBEAT_PREFIX, &""],
        ),
    )
    .await;
    // Dropping the client ends the session.
    match emitted {
        Ok(result) => result.map(drop).map_err(|e| client.error(action, e)),
        Err(_) => Err(PgError::Io {
            target: client.target().to_owned(),
            action,
            source: std::io::ErrorKind::TimedOut.into(),
        }),
    }
}
