//! Opening a [`ReplicationStream`]: each endpoint in conninfo order, the
//! transport (TLS per `sslmode`), authentication, the catalog checks on the
//! slot and the publication, and `START_REPLICATION` from the slot.
//!
//! Role: the constructor half of the stream's life cycle; the rest is in
//! [`super`].
//!
//! Invariants: the stream starts where the slot says (`0/0`, never a computed
//! position), and a missing slot is a fatal error here, never created.

use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::time::{Instant, timeout};

use super::ReplicationStream;
use super::status::{read_timeout, status_interval};
use crate::pg::auth;
use crate::pg::conninfo::{Conninfo, Endpoint};
use crate::pg::error::{ErrorKind, PgError};
use crate::pg::protocol::{read_error, server_error};
use crate::pg::socket::{self, FramedSocket};
use crate::replication::ReplicationSettings;
use crate::replication::catalog::{self, start_replication_command, validate_slot_name};
use pgoutput::lsn::Lsn;

impl ReplicationStream {
    /// Connects, authenticates, checks slot and publication, and starts
    /// streaming from the slot's `confirmed_flush_lsn`. Endpoints are tried in
    /// conninfo order; a fatal error on one stops the attempt.
    ///
    /// # Errors
    /// Fatal: bad slot name, TLS refused, authentication failed,
    /// missing REPLICATION attribute or database, slot missing / not pgoutput
    /// / invalidated, publication missing. `SlotBusy`: another process
    /// streams from the slot. Transient: network, timeouts, server shutdown.
    pub async fn connect(
        settings: &ReplicationSettings,
        start_confirmed: Lsn,
    ) -> Result<Self, PgError> {
        let conninfo = &settings.connection.conninfo;
        validate_slot_name(&settings.slot)?;
        let connect_timeout = conninfo
            .connect_timeout
            .map_or(settings.connection.connect_timeout, |t| {
                t.min(settings.connection.connect_timeout)
            });
        let mut last_error = None;
        for endpoint in &conninfo.endpoints {
            let target = endpoint.to_string();
            let attempt = Self::connect_endpoint(
                settings,
                conninfo,
                endpoint,
                target.clone(),
                start_confirmed,
            );
            let error = match timeout(connect_timeout, attempt).await {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(error)) if error.kind() != ErrorKind::Transient => return Err(error),
                Ok(Err(error)) => error,
                Err(_elapsed) => PgError::ConnectTimeout {
                    target,
                    timeout: connect_timeout,
                },
            };
            crate::events::EndpointFailed { error: &error }.emit();
            last_error = Some(error);
        }
        Err(last_error.unwrap_or_else(|| PgError::Conninfo {
            conninfo: conninfo.to_string(),
            reason: "no host to connect to".into(),
        }))
    }

    async fn connect_endpoint(
        settings: &ReplicationSettings,
        conninfo: &Conninfo,
        endpoint: &Endpoint,
        target: String,
        start_confirmed: Lsn,
    ) -> Result<Self, PgError> {
        let socket = socket::open(endpoint, &conninfo.tls, &target).await?;
        let mut socket = FramedSocket::new(socket);
        let session = auth::startup(
            &mut socket,
            conninfo,
            &settings.connection.application_name,
            &target,
        )
        .await?;
        let checked = catalog::check(&mut socket, settings, &target).await?;
        let mut stream = ReplicationStream {
            socket,
            target,
            slot: settings.slot.clone(),
            publication: settings.publication.clone(),
            database: conninfo.dbname.clone(),
            backend_pid: session.backend_pid,
            slot_confirmed_flush: checked.confirmed_flush,
            identity: checked.identity,
            server_wal: checked.server_wal,
            timeline_fork: checked.timeline_fork,
            outbox: checked.outbox,
            confirmed: start_confirmed,
            status_interval: status_interval(settings.status_interval, checked.wal_sender_timeout),
            read_timeout: read_timeout(settings.status_interval, checked.wal_sender_timeout),
            next_status_at: Instant::now(),
            probe_sent_at: None,
            received_since_status: false,
            reported: start_confirmed,
            reported_at: Instant::now(),
        };
        stream.start().await?;
        crate::events::StreamStarted {
            target: &stream.target,
            conninfo,
            slot: &stream.slot,
            publication: &stream.publication,
            slot_confirmed_flush: stream.slot_confirmed_flush,
            server: &stream.identity,
            start_confirmed,
            tls: stream.is_tls(),
            channel_binding: session.channel_bound,
            backend_pid: stream.backend_pid,
            server_version: session.server_version.as_deref().unwrap_or("?"),
            status_interval_ms: stream.status_interval.as_millis() as u64,
        }
        .emit();
        Ok(stream)
    }

    /// Sends START_REPLICATION and waits for CopyBothResponse.
    async fn start(&mut self) -> Result<(), PgError> {
        let action = "starting replication";
        let command = start_replication_command(&self.slot, &self.publication);
        frontend::query(&command, self.socket.write_buf()).map_err(|e| self.protocol(action, e))?;
        self.socket.flush().await.map_err(|e| self.io(action, e))?;
        loop {
            let mut frame = self
                .socket
                .read_frame()
                .await
                .map_err(|e| read_error(&self.target, action, e))?;
            // CopyBothResponse ('W') is not among the messages
            // postgres-protocol parses; it has to be recognized by its tag.
            if frame.tag == b'W' {
                self.next_status_at = Instant::now() + self.status_interval;
                return Ok(());
            }
            match Message::parse(&mut frame.bytes).map_err(|e| self.protocol(action, e))? {
                Some(Message::ErrorResponse(body)) => {
                    return Err(self.server_failure(server_error(&body), action));
                }
                Some(Message::NoticeResponse(_) | Message::ParameterStatus(_)) => {}
                _ => {
                    return Err(PgError::Protocol {
                        target: self.target.clone(),
                        action,
                        reason: format!(
                            "message {:?} instead of CopyBothResponse",
                            char::from(frame.tag)
                        ),
                    });
                }
            }
        }
    }
}
