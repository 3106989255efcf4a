//! The idle heartbeat: a `pg_logical_emit_message` written on its own short
//! connection, so the slot has something to advance on while the outbox is
//! quiet (design.md pitfalls: idle slots pin WAL until the disk fills).
//!
//! It runs on a `replication=database` connection, which accepts simple SQL
//! and authenticates exactly like the stream does (same conninfo, TLS and
//! SCRAM), so the relay needs no second client library. The message is
//! non-transactional and carries no payload; the relay recognizes its prefix
//! and never publishes it.

use postgres_protocol::message::frontend;
use tokio::time::timeout;

use super::ReplicationSettings;
use super::auth;
use super::catalog::simple_query;
use super::conninfo::Conninfo;
use super::error::ReplicationError;
use super::socket::{self, FramedSocket};

/// The logical message prefix of heartbeats.
pub const HEARTBEAT_PREFIX: &str = "outbox-relay-heartbeat";

/// Writes one heartbeat message to the WAL.
///
/// # Errors
/// The same classification as the stream's connect; the relay logs a failed
/// heartbeat and tries again at the next interval.
pub async fn emit_heartbeat(settings: &ReplicationSettings) -> Result<(), ReplicationError> {
    let conninfo = Conninfo::parse(&settings.conninfo)?;
    let mut last_error = None;
    for endpoint in &conninfo.endpoints {
        let target = endpoint.to_string();
        let attempt = async {
            let socket = socket::open(endpoint, &conninfo.tls, &target).await?;
            let mut socket = FramedSocket::new(socket);
            auth::startup(&mut socket, &conninfo, &settings.application_name, &target).await?;
            simple_query(
                &mut socket,
                &format!("SELECT pg_logical_emit_message(false, '{HEARTBEAT_PREFIX}', '')"),
                &target,
                "emitting a heartbeat",
            )
            .await?;
            frontend::terminate(socket.write_buf());
            // The server closes the connection on Terminate; a failed
            // goodbye changes nothing.
            let _ = socket.flush().await;
            Ok::<(), ReplicationError>(())
        };
        match timeout(settings.connect_timeout, attempt).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => last_error = Some(e),
            Err(_) => {
                last_error = Some(ReplicationError::ConnectTimeout {
                    target,
                    timeout: settings.connect_timeout,
                });
            }
        }
    }
    Err(last_error.unwrap_or_else(|| ReplicationError::Conninfo {
        conninfo: conninfo.to_string(),
        reason: "no host to connect to".into(),
    }))
}
