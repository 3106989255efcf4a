//! [`ReplicationStream`]: connect, start, stream, answer, confirm, stop.
//!
//! Role: the life cycle of one walsender connection. Connecting runs the
//! transport, authentication and catalog checks; streaming splits CopyData
//! frames off the read buffer and hands them up; the status updates it sends
//! carry the caller's confirmed LSN and nothing else.
//!
//! Invariants:
//! * write = flush = apply = [`ReplicationStream::confirmed`] in every status
//!   update. Before anything is confirmed that is the `start_confirmed`
//!   value given to `connect`; `0/0` there is harmless, the server ignores an
//!   invalid flush position.
//! * [`ReplicationStream::next`] awaits only before a frame is split off;
//!   once it has a frame it returns without awaiting, so cancelling it never
//!   drops a message.
//! * Liveness: a periodic status update asks for a reply when nothing arrived
//!   since the previous one (a probe). A probe unanswered for the read
//!   timeout (`wal_sender_timeout`) means a dead peer or a stalled TCP
//!   connection, reported as transient. The clock runs from the probe, not
//!   from the last byte received, so a caller that paused reading (e.g. under
//!   backpressure) is not mistaken for a silent server.

use std::time::Duration;

use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::time::{Instant, sleep_until, timeout};

use super::auth::{self, read_error, server_error, server_notice};
use super::catalog::{self, ServerIdentity, start_replication_command, validate_slot_name};
use super::conninfo::{Conninfo, Endpoint};
use super::error::{ErrorKind, ReplicationError, ServerError};
use super::outbox_table::OutboxTable;
use super::socket::{self, Frame, FramedSocket};
use super::{ReplicationSettings, StreamItem};
use crate::lsn::Lsn;
use crate::pgoutput::{ReplicationMessage, decode_copy_data, encode_standby_status_update};

/// Floor for the status interval, so a zero or tiny setting cannot turn the
/// stream into a busy loop of status updates.
const MIN_STATUS_INTERVAL: Duration = Duration::from_millis(100);

/// Read timeout when the server disables `wal_sender_timeout`: that many
/// status intervals without an answer to a reply request.
const READ_TIMEOUT_INTERVALS: u32 = 6;

/// How soon an advanced confirmed position is reported, at the latest, and
/// how often at most. After a crash the slot re-sends everything above the
/// last position the server *received*, so reporting only every
/// `status_interval` (10 s) would re-send up to ten seconds of events;
/// 100 ms keeps that window small while coalescing a busy stream's
/// confirmations into at most ten small updates a second.
pub const PROGRESS_REPORT_DELAY: Duration = Duration::from_millis(100);

/// How long [`ReplicationStream::shutdown`] waits for the server to end the
/// stream. The final status update is processed before the CopyDone, so a
/// timeout here loses no confirmation; it only bounds the goodbye.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// A started logical replication stream on one walsender connection.
pub struct ReplicationStream {
    socket: FramedSocket,
    /// The endpoint, for errors (no credentials in it).
    target: String,
    slot: String,
    publication: String,
    database: String,
    backend_pid: i32,
    slot_confirmed_flush: Lsn,
    identity: ServerIdentity,
    timeline_fork: Option<Lsn>,
    outbox: Option<OutboxTable>,
    confirmed: Lsn,
    status_interval: Duration,
    read_timeout: Duration,
    next_status_at: Instant,
    /// When we asked the server for a reply that has not come yet (nothing
    /// at all arrived since).
    probe_sent_at: Option<Instant>,
    /// Whether anything arrived since the last status update we queued.
    received_since_status: bool,
    /// The flush LSN of the last status update queued, and when.
    reported: Lsn,
    reported_at: Instant,
}

impl ReplicationStream {
    /// Connects, authenticates, checks slot and publication, and starts
    /// streaming from the slot's `confirmed_flush_lsn`. Endpoints are tried in
    /// conninfo order; a fatal error on one stops the attempt.
    ///
    /// # Errors
    /// Fatal: bad conninfo or slot name, TLS refused, authentication failed,
    /// missing REPLICATION attribute or database, slot missing / not pgoutput
    /// / invalidated, publication missing. `SlotBusy`: another process
    /// streams from the slot. Transient: network, timeouts, server shutdown.
    pub async fn connect(
        settings: &ReplicationSettings,
        start_confirmed: Lsn,
    ) -> Result<Self, ReplicationError> {
        let conninfo = Conninfo::parse(&settings.conninfo)?;
        validate_slot_name(&settings.slot)?;
        let connect_timeout = conninfo
            .connect_timeout
            .map_or(settings.connect_timeout, |t| {
                t.min(settings.connect_timeout)
            });
        let mut last_error = None;
        for endpoint in &conninfo.endpoints {
            let target = endpoint.to_string();
            let attempt = Self::connect_endpoint(
                settings,
                &conninfo,
                endpoint,
                target.clone(),
                start_confirmed,
            );
            let error = match timeout(connect_timeout, attempt).await {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(error)) if error.kind() != ErrorKind::Transient => return Err(error),
                Ok(Err(error)) => error,
                Err(_elapsed) => ReplicationError::ConnectTimeout {
                    target,
                    timeout: connect_timeout,
                },
            };
            tracing::warn!(%error, "replication endpoint failed");
            last_error = Some(error);
        }
        Err(last_error.unwrap_or_else(|| ReplicationError::Conninfo {
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
    ) -> Result<Self, ReplicationError> {
        let socket = socket::open(endpoint, &conninfo.tls, &target).await?;
        let mut socket = FramedSocket::new(socket);
        let session =
            auth::startup(&mut socket, conninfo, &settings.application_name, &target).await?;
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
        tracing::info!(
            target_endpoint = %stream.target,
            conninfo = %conninfo,
            slot = %stream.slot,
            publication = %stream.publication,
            slot_confirmed_flush = %stream.slot_confirmed_flush,
            server = %stream.identity,
            start_confirmed = %start_confirmed,
            tls = stream.is_tls(),
            channel_binding = session.channel_bound,
            backend_pid = stream.backend_pid,
            server_version = session.server_version.as_deref().unwrap_or("?"),
            status_interval_ms = stream.status_interval.as_millis() as u64,
            "replication stream started"
        );
        Ok(stream)
    }

    /// Sends START_REPLICATION and waits for CopyBothResponse.
    async fn start(&mut self) -> Result<(), ReplicationError> {
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
                    return Err(ReplicationError::Protocol {
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

    /// The next XLogData or keepalive. Answers keepalives that request a
    /// reply and sends the periodic status update on the way. Cancel-safe.
    ///
    /// Keep calling it (or [`ReplicationStream::send_status`]) at least once
    /// per status interval, also while applying backpressure: without status
    /// updates the server ends the connection after `wal_sender_timeout`.
    ///
    /// # Errors
    /// Transient on I/O errors, EOF, server shutdown, walsender terminated,
    /// read timeout; fatal on protocol violations, an undecodable message, or
    /// a server error that retrying cannot fix (publication dropped, slot
    /// invalidated while streaming).
    pub async fn next(&mut self) -> Result<StreamItem, ReplicationError> {
        loop {
            // Frames already read come first; nothing from here to `return`
            // awaits, so a frame taken off the buffer is always returned.
            if let Some(frame) = self
                .socket
                .try_frame()
                .map_err(|e| read_error(&self.target, "streaming", e))?
            {
                if let Some(item) = self.handle_frame(frame)? {
                    return Ok(item);
                }
                continue;
            }
            self.queue_due_status()?;
            let read_deadline = self.probe_sent_at.map(|sent| sent + self.read_timeout);
            let status_at = self.status_due_at();
            let wake_at = read_deadline.map_or(status_at, |d| d.min(status_at));
            // Biased: the socket is polled before the timer, so the timer
            // branch means "nothing to read right now" (a reply that had
            // arrived during a pause of the caller is read first).
            tokio::select! {
                biased;
                filled = self.socket.fill() => {
                    filled.map_err(|e| read_error(&self.target, "streaming", e))?;
                    self.probe_sent_at = None;
                    self.received_since_status = true;
                }
                () = sleep_until(wake_at) => {
                    if let (Some(sent), Some(deadline)) = (self.probe_sent_at, read_deadline)
                        && Instant::now() >= deadline
                    {
                        return Err(ReplicationError::ReadTimeout {
                            target: self.target.clone(),
                            silent_for: sent.elapsed(),
                        });
                    }
                }
            }
        }
    }

    fn handle_frame(&mut self, frame: Frame) -> Result<Option<StreamItem>, ReplicationError> {
        match frame.tag {
            b'd' => {
                let mut payload = frame.into_body();
                let message =
                    decode_copy_data(&mut payload).map_err(|source| ReplicationError::Decode {
                        target: self.target.clone(),
                        source,
                    })?;
                Ok(Some(match message {
                    ReplicationMessage::XLogData {
                        wal_start,
                        wal_end,
                        data,
                        ..
                    } => StreamItem::XLogData {
                        wal_start,
                        wal_end,
                        data,
                    },
                    ReplicationMessage::PrimaryKeepalive {
                        wal_end,
                        reply_requested,
                        ..
                    } => {
                        if reply_requested {
                            self.queue_status(false)?;
                            // Not awaited (see `next`); a write error shows up
                            // again on the next read of the dead connection.
                            let _ = self.socket.flush_now();
                        }
                        StreamItem::Keepalive { wal_end }
                    }
                }))
            }
            b'c' => Err(ReplicationError::StreamEnded {
                target: self.target.clone(),
            }),
            tag => {
                let mut bytes = frame.bytes;
                match Message::parse(&mut bytes).map_err(|e| self.protocol("streaming", e))? {
                    Some(Message::ErrorResponse(body)) => {
                        Err(self.server_failure(server_error(&body), "streaming"))
                    }
                    Some(Message::NoticeResponse(body)) => {
                        let notice = server_notice(&body);
                        tracing::warn!(code = %notice.code, message = %notice.message, "server notice");
                        Ok(None)
                    }
                    Some(Message::ParameterStatus(_)) => Ok(None),
                    // On a fast shutdown the walsender ends the stream with
                    // CommandComplete ("COPY 0") and no CopyDone (WalSndDone
                    // in walsender.c), then exits: the server is going away,
                    // which a reconnect rides out.
                    Some(Message::CommandComplete(_)) => Err(ReplicationError::StreamEnded {
                        target: self.target.clone(),
                    }),
                    _ => Err(ReplicationError::Protocol {
                        target: self.target.clone(),
                        action: "streaming",
                        reason: format!("unexpected message {:?}", char::from(tag)),
                    }),
                }
            }
        }
    }

    /// When the next status update is due: the periodic one, or sooner a
    /// progress report when the confirmed position moved since the last
    /// update (at most one per [`PROGRESS_REPORT_DELAY`]).
    pub fn status_due_at(&self) -> Instant {
        if self.confirmed > self.reported {
            self.next_status_at
                .min(self.reported_at + PROGRESS_REPORT_DELAY)
        } else {
            self.next_status_at
        }
    }

    /// Queues the status update that is due, if any; returns whether it did.
    fn queue_due_status(&mut self) -> Result<bool, ReplicationError> {
        let now = Instant::now();
        if now >= self.next_status_at {
            // Asking for a reply when the server has been quiet is the
            // liveness probe the read timeout relies on.
            let probe = !self.received_since_status;
            self.queue_status(probe)?;
            Ok(true)
        } else if self.confirmed > self.reported && now >= self.reported_at + PROGRESS_REPORT_DELAY
        {
            self.queue_progress_report()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Appends a status update carrying the confirmed LSN to the write buffer
    /// and restarts the periodic interval.
    fn queue_status(&mut self, reply_requested: bool) -> Result<(), ReplicationError> {
        self.write_status_update(reply_requested)?;
        let now = Instant::now();
        self.next_status_at = now + self.status_interval;
        self.received_since_status = false;
        if reply_requested && self.probe_sent_at.is_none() {
            self.probe_sent_at = Some(now);
        }
        Ok(())
    }

    /// A status update that only reports progress: it leaves the periodic
    /// interval and the liveness probe alone.
    fn queue_progress_report(&mut self) -> Result<(), ReplicationError> {
        self.write_status_update(false)
    }

    fn write_status_update(&mut self, reply_requested: bool) -> Result<(), ReplicationError> {
        let lsn = self.confirmed;
        let client_time = crate::pgoutput::utc_to_pg_timestamp(chrono::Utc::now());
        let update = encode_standby_status_update(lsn, lsn, lsn, client_time, reply_requested);
        frontend::CopyData::new(update)
            .map_err(|e| self.protocol("sending a status update", e))?
            .write(self.socket.write_buf());
        self.reported = lsn;
        self.reported_at = Instant::now();
        Ok(())
    }

    /// Records the LSN the caller confirms: the end LSN of the last
    /// transaction the broker acknowledged, with all before it. Lower values
    /// are ignored. No I/O: the next status update carries it.
    pub fn confirm(&mut self, lsn: Lsn) {
        self.confirmed = self.confirmed.max(lsn);
    }

    /// The flush LSN status updates carry.
    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// The slot's `confirmed_flush_lsn` when this connection started: where
    /// the server began streaming, and the seed for the caller's tracker.
    pub fn slot_confirmed_flush(&self) -> Lsn {
        self.slot_confirmed_flush
    }

    /// The server this connection reached (`IDENTIFY_SYSTEM`).
    pub fn identity(&self) -> &ServerIdentity {
        &self.identity
    }

    /// Where the server's current timeline forked from its parent, when it
    /// is not the first timeline.
    pub fn timeline_fork_point(&self) -> Option<Lsn> {
        self.timeline_fork
    }

    /// The outbox table as resolved at connect, when the settings name one.
    pub fn outbox_table(&self) -> Option<&OutboxTable> {
        self.outbox.as_ref()
    }

    /// Whether the connection runs over TLS.
    pub fn is_tls(&self) -> bool {
        self.socket.is_tls()
    }

    /// The walsender's pid (`pg_stat_replication.pid`).
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// The effective status interval: `min(status_interval, wal_sender_timeout / 2)`.
    pub fn status_interval(&self) -> Duration {
        self.status_interval
    }

    /// Sends the status update that is due by [`ReplicationStream::status_due_at`],
    /// if any. For a caller that is not calling `next` (backpressure, drain).
    /// Cancel-safe like [`ReplicationStream::send_status`].
    ///
    /// # Errors
    /// Transient I/O errors.
    pub async fn send_due_status(&mut self) -> Result<(), ReplicationError> {
        self.queue_due_status()?;
        self.socket
            .flush()
            .await
            .map_err(|e| self.io("sending a status update", e))
    }

    /// Sends a status update with the confirmed LSN now. Cancel-safe: a
    /// cancelled call leaves the rest of the update queued for the next call.
    ///
    /// # Errors
    /// Transient I/O errors.
    pub async fn send_status(&mut self, reply_requested: bool) -> Result<(), ReplicationError> {
        self.queue_status(reply_requested)?;
        self.socket
            .flush()
            .await
            .map_err(|e| self.io("sending a status update", e))
    }

    /// Ends the stream: a final status update with the confirmed LSN,
    /// CopyDone, the server's end of stream (bounded wait), Terminate. The
    /// server processes the status update before the CopyDone, so the slot's
    /// `confirmed_flush_lsn` equals [`ReplicationStream::confirmed`] after it.
    ///
    /// # Errors
    /// Transient when the connection fails or the server does not finish in
    /// time; the final status update may still have been applied.
    pub async fn shutdown(mut self) -> Result<(), ReplicationError> {
        let action = "shutting down";
        self.queue_status(false)?;
        frontend::copy_done(self.socket.write_buf());
        let goodbye = async {
            self.socket.flush().await.map_err(|e| self.io(action, e))?;
            loop {
                let frame = self
                    .socket
                    .read_frame()
                    .await
                    .map_err(|e| read_error(&self.target, action, e))?;
                match frame.tag {
                    // Data still in flight is dropped unconfirmed: the slot
                    // sends it again to the next reader.
                    b'd' | b'c' | b'C' | b'N' | b'S' => {}
                    b'Z' => break,
                    _ => {
                        let mut bytes = frame.bytes;
                        if let Ok(Some(Message::ErrorResponse(body))) = Message::parse(&mut bytes) {
                            return Err(self.server_failure(server_error(&body), action));
                        }
                    }
                }
            }
            frontend::terminate(self.socket.write_buf());
            self.socket.flush().await.map_err(|e| self.io(action, e))?;
            // The server closes after Terminate; a failed close changes nothing.
            let _ = self.socket.close().await;
            Ok(())
        };
        let result = match timeout(SHUTDOWN_TIMEOUT, goodbye).await {
            Ok(result) => result,
            Err(_elapsed) => Err(ReplicationError::Io {
                target: self.target.clone(),
                action,
                source: std::io::ErrorKind::TimedOut.into(),
            }),
        };
        tracing::info!(
            target_endpoint = %self.target,
            slot = %self.slot,
            confirmed = %self.confirmed,
            clean = result.is_ok(),
            "replication stream stopped"
        );
        result
    }

    /// Maps a server ErrorResponse after startup to the error to report.
    fn server_failure(&self, server: ServerError, action: &'static str) -> ReplicationError {
        match server.code.as_str() {
            // undefined_object: the slot vanished after the check, or (while
            // streaming) the publication was dropped.
            "42704" if server.message.contains("publication") => {
                ReplicationError::PublicationMissing {
                    publication: self.publication.clone(),
                    database: self.database.clone(),
                }
            }
            "42704" => ReplicationError::SlotMissing {
                slot: self.slot.clone(),
                database: self.database.clone(),
            },
            // object_in_use: "replication slot "s" is active for PID 1234".
            "55006" => ReplicationError::SlotInUse {
                slot: self.slot.clone(),
                active_pid: server
                    .message
                    .rsplit(' ')
                    .next()
                    .and_then(|pid| pid.parse().ok()),
            },
            // object_not_in_prerequisite_state also covers other misuse, so
            // only the invalidation wording maps to SlotInvalidated.
            "55000"
                if server.message.contains("invalidated")
                    || server
                        .detail
                        .as_deref()
                        .is_some_and(|d| d.contains("invalidated")) =>
            {
                ReplicationError::SlotInvalidated {
                    slot: self.slot.clone(),
                    wal_status: "lost".to_owned(),
                    reason: format!(", server: {server}"),
                }
            }
            _ => ReplicationError::Server {
                target: self.target.clone(),
                action,
                server: Box::new(server),
            },
        }
    }

    fn io(&self, action: &'static str, source: std::io::Error) -> ReplicationError {
        ReplicationError::Io {
            target: self.target.clone(),
            action,
            source,
        }
    }

    fn protocol(&self, action: &'static str, error: std::io::Error) -> ReplicationError {
        ReplicationError::Protocol {
            target: self.target.clone(),
            action,
            reason: error.to_string(),
        }
    }
}

/// `min(configured, wal_sender_timeout / 2)`, at least [`MIN_STATUS_INTERVAL`].
fn status_interval(configured: Duration, wal_sender_timeout: Option<Duration>) -> Duration {
    wal_sender_timeout
        .map_or(configured, |t| configured.min(t / 2))
        .max(MIN_STATUS_INTERVAL)
}

/// How long a reply request may go unanswered. A live walsender answers at
/// once (it reads our messages between every record it decodes or sends);
/// `wal_sender_timeout` is the bound the server applies to us in turn. When
/// the server has none, a few status intervals.
fn read_timeout(configured: Duration, wal_sender_timeout: Option<Duration>) -> Duration {
    match wal_sender_timeout {
        Some(t) => t,
        None => status_interval(configured, None) * READ_TIMEOUT_INTERVALS,
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
