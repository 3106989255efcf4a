//! The idle heartbeat: a `pg_logical_emit_message` written on its own short
//! connection, so the slot has something to advance on while the outbox is
//! quiet (design.md pitfalls: idle slots pin WAL until the disk fills).
//!
//! It runs on a `replication=database` connection, which accepts simple SQL
//! and authenticates exactly like the stream does (same conninfo, TLS and
//! SCRAM), so the relay needs no second client library. The message is
//! non-transactional and carries no payload; the relay recognizes its prefix
//! and never publishes it.

use super::ReplicationSettings;
use super::error::ReplicationError;
use super::sql::SqlConnection;

/// The logical message prefix of heartbeats.
pub const HEARTBEAT_PREFIX: &str = "outbox-relay-heartbeat";

/// Writes one heartbeat message to the WAL.
///
/// # Errors
/// The same classification as the stream's connect; the relay logs a failed
/// heartbeat and tries again at the next interval.
pub async fn emit_heartbeat(settings: &ReplicationSettings) -> Result<(), ReplicationError> {
    let mut connection = SqlConnection::connect(settings).await?;
    let target = connection.target().to_owned();
    let emitted = tokio::time::timeout(
        settings.connect_timeout,
        connection.query(
            &format!("SELECT pg_logical_emit_message(false, '{HEARTBEAT_PREFIX}', '')"),
            "emitting a heartbeat",
        ),
    )
    .await;
    connection.close().await;
    match emitted {
        Ok(result) => result.map(drop),
        Err(_) => Err(ReplicationError::Io {
            target,
            action: "emitting a heartbeat",
            source: std::io::ErrorKind::TimedOut.into(),
        }),
    }
}
