//! The status updates of a [`ReplicationStream`]: when one is due, what it
//! carries, and the liveness probe the read timeout relies on.
//!
//! Role: the periodic update (every `min(status_interval,
//! wal_sender_timeout / 2)`), the sooner progress report when the confirmed
//! position moved, and the send methods for a caller that is not reading.
//!
//! Invariants: write = flush = apply = [`ReplicationStream::confirmed`] in
//! every update, never anything merely received.

use std::time::Duration;

use postgres_protocol::message::frontend;
use tokio::time::Instant;

use super::ReplicationStream;
use crate::pg::error::PgError;
use pgoutput::encode_standby_status_update;

/// Floor for the status interval, so a zero or tiny setting cannot turn the
/// stream into a busy loop of status updates.
pub(super) const MIN_STATUS_INTERVAL: Duration = Duration::from_millis(100);

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

impl ReplicationStream {
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
    pub(super) fn queue_due_status(&mut self) -> Result<bool, PgError> {
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
    pub(super) fn queue_status(&mut self, reply_requested: bool) -> Result<(), PgError> {
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
    fn queue_progress_report(&mut self) -> Result<(), PgError> {
        self.write_status_update(false)
    }

    fn write_status_update(&mut self, reply_requested: bool) -> Result<(), PgError> {
        let lsn = self.confirmed;
        let client_time = pgoutput::utc_to_pg_timestamp(chrono::Utc::now());
        let update = encode_standby_status_update(lsn, lsn, lsn, client_time, reply_requested);
        frontend::CopyData::new(update)
            .map_err(|e| self.protocol("sending a status update", e))?
            .write(self.socket.write_buf());
        self.reported = lsn;
        self.reported_at = Instant::now();
        Ok(())
    }

    /// Sends the status update that is due by [`ReplicationStream::status_due_at`],
    /// if any. For a caller that is not calling `next` (backpressure, drain).
    /// Cancel-safe like [`ReplicationStream::send_status`].
    ///
    /// # Errors
    /// Transient I/O errors.
    pub async fn send_due_status(&mut self) -> Result<(), PgError> {
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
    pub async fn send_status(&mut self, reply_requested: bool) -> Result<(), PgError> {
        self.queue_status(reply_requested)?;
        self.socket
            .flush()
            .await
            .map_err(|e| self.io("sending a status update", e))
    }
}

/// `min(configured, wal_sender_timeout / 2)`, at least [`MIN_STATUS_INTERVAL`].
pub(super) fn status_interval(
    configured: Duration,
    wal_sender_timeout: Option<Duration>,
) -> Duration {
    wal_sender_timeout
        .map_or(configured, |t| configured.min(t / 2))
        .max(MIN_STATUS_INTERVAL)
}

/// How long a reply request may go unanswered. A live walsender answers at
/// once (it reads our messages between every record it decodes or sends);
/// `wal_sender_timeout` is the bound the server applies to us in turn. When
/// the server has none, a few status intervals.
pub(super) fn read_timeout(configured: Duration, wal_sender_timeout: Option<Duration>) -> Duration {
    match wal_sender_timeout {
        Some(t) => t,
        None => status_interval(configured, None) * READ_TIMEOUT_INTERVALS,
    }
}
