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
use tokio_postgres::error::SqlState;

use super::StreamItem;
use super::catalog::ServerIdentity;
use super::outbox_table::OutboxTable;
use crate::pg::error::{PgError, ServerError};
use crate::pg::protocol::{read_error, server_error, server_notice};
use crate::pg::socket::{Frame, FramedSocket};
use pgoutput::lsn::Lsn;
use pgoutput::{ReplicationMessage, decode_copy_data};

mod connect;
mod status;

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
    server_wal: Lsn,
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
    pub async fn next(&mut self) -> Result<StreamItem, PgError> {
        loop {
            // Frames already read come first; nothing from here to `return`
            // awaits, so a frame taken off the buffer is always returned.
            if let Some(item) = self.try_next()? {
                return Ok(item);
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
                        return Err(PgError::ReadTimeout {
                            target: self.target.clone(),
                            silent_for: sent.elapsed(),
                        });
                    }
                }
            }
        }
    }

    /// Whether everything the server sent so far has been taken: no
    /// message waits in the read buffer, and no part of one (whose rest
    /// would be on its way). What "the stream is quiet" means.
    pub fn caught_up(&self) -> bool {
        !self.socket.bytes_buffered()
    }

    /// The next XLogData or keepalive already read off the socket, without
    /// waiting; `None` when no complete frame is buffered. Lets a caller
    /// handle what one read brought in without a trip through its own
    /// `select!` per message. Errors as [`ReplicationStream::next`].
    pub fn try_next(&mut self) -> Result<Option<StreamItem>, PgError> {
        while let Some(frame) = self
            .socket
            .try_frame()
            .map_err(|e| read_error(&self.target, "streaming", e))?
        {
            if let Some(item) = self.handle_frame(frame)? {
                return Ok(Some(item));
            }
        }
        Ok(None)
    }

    fn handle_frame(&mut self, frame: Frame) -> Result<Option<StreamItem>, PgError> {
        match frame.tag {
            b'd' => {
                let mut payload = frame.into_body();
                let message = decode_copy_data(&mut payload).map_err(|source| PgError::Decode {
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
            b'c' => Err(PgError::StreamEnded {
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
                        crate::events::ServerNotice {
                            code: &notice.code,
                            message: &notice.message,
                        }
                        .emit();
                        Ok(None)
                    }
                    Some(Message::ParameterStatus(_)) => Ok(None),
                    // On a fast shutdown the walsender ends the stream with
                    // CommandComplete ("COPY 0") and no CopyDone (WalSndDone
                    // in walsender.c), then exits: the server is going away,
                    // which a reconnect rides out.
                    Some(Message::CommandComplete(_)) => Err(PgError::StreamEnded {
                        target: self.target.clone(),
                    }),
                    _ => Err(PgError::Protocol {
                        target: self.target.clone(),
                        action: "streaming",
                        reason: format!("unexpected message {:?}", char::from(tag)),
                    }),
                }
            }
        }
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

    /// The server's WAL flush position when this connection started
    /// (`IDENTIFY_SYSTEM`): every position the relay confirmed on this
    /// server is at or below it.
    pub fn server_wal_position(&self) -> Lsn {
        self.server_wal
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

    /// Ends the stream: a final status update with the confirmed LSN,
    /// CopyDone, the server's end of stream (bounded wait), Terminate. The
    /// server processes the status update before the CopyDone, so the slot's
    /// `confirmed_flush_lsn` equals [`ReplicationStream::confirmed`] after it.
    ///
    /// # Errors
    /// Transient when the connection fails or the server does not finish in
    /// time; the final status update may still have been applied.
    pub async fn shutdown(mut self) -> Result<(), PgError> {
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
            Err(_elapsed) => Err(PgError::Io {
                target: self.target.clone(),
                action,
                source: std::io::ErrorKind::TimedOut.into(),
            }),
        };
        crate::events::StreamStopped {
            target: &self.target,
            slot: &self.slot,
            confirmed: self.confirmed,
            clean: result.is_ok(),
        }
        .emit();
        result
    }

    /// Maps a server ErrorResponse after startup to the error to report.
    fn server_failure(&self, server: ServerError, action: &'static str) -> PgError {
        match server.sqlstate() {
            // The slot vanished after the check, or (while streaming) the
            // publication was dropped.
            SqlState::UNDEFINED_OBJECT if server.message.contains("publication") => {
                PgError::PublicationMissing {
                    publication: self.publication.clone(),
                    database: self.database.clone(),
                }
            }
            SqlState::UNDEFINED_OBJECT => PgError::SlotMissing {
                slot: self.slot.clone(),
                database: self.database.clone(),
            },
            // "replication slot "s" is active for PID 1234".
            SqlState::OBJECT_IN_USE => PgError::SlotInUse {
                slot: self.slot.clone(),
                active_pid: server
                    .message
                    .rsplit(' ')
                    .next()
                    .and_then(|pid| pid.parse().ok()),
            },
            // This SQLSTATE also covers other misuse, so only the
            // invalidation wording maps to SlotInvalidated.
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
                if server.message.contains("invalidated")
                    || server
                        .detail
                        .as_deref()
                        .is_some_and(|d| d.contains("invalidated")) =>
            {
                PgError::SlotInvalidated {
                    slot: self.slot.clone(),
                    wal_status: "lost".to_owned(),
                    reason: format!(", server: {server}"),
                }
            }
            _ => PgError::Server {
                target: self.target.clone(),
                action,
                server: Box::new(server),
            },
        }
    }

    fn io(&self, action: &'static str, source: std::io::Error) -> PgError {
        PgError::Io {
            target: self.target.clone(),
            action,
            source,
        }
    }

    fn protocol(&self, action: &'static str, error: std::io::Error) -> PgError {
        PgError::Protocol {
            target: self.target.clone(),
            action,
            reason: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests;
