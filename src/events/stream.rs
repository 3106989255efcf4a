//! The events of the replication side: the stream, the relay lock, the
//! slot's position and its lag, the session's stop.

use std::fmt::Display;

use pgoutput::lsn::Lsn;

use super::{event, say};
use crate::metrics as m;

/// The replication stream started (START_REPLICATION answered). `conninfo`
/// is the redacted conninfo.
pub struct StreamStarted<'a> {
    pub target: &'a dyn Display,
    pub conninfo: &'a dyn Display,
    pub slot: &'a str,
    pub publication: &'a str,
    pub slot_confirmed_flush: Lsn,
    pub server: &'a dyn Display,
    pub start_confirmed: Lsn,
    pub tls: bool,
    pub channel_binding: bool,
    pub backend_pid: i32,
    pub server_version: &'a str,
    pub status_interval_ms: u64,
}
event!(StreamStarted<'_>, "stream_started", INFO, Lifecycle);

impl StreamStarted<'_> {
    pub fn emit(&self) {
        say!(
            target_endpoint = %self.target,
            conninfo = %self.conninfo,
            slot = self.slot,
            publication = self.publication,
            slot_confirmed_flush = %self.slot_confirmed_flush,
            server = %self.server,
            start_confirmed = %self.start_confirmed,
            tls = self.tls,
            channel_binding = self.channel_binding,
            backend_pid = self.backend_pid,
            server_version = self.server_version,
            status_interval_ms = self.status_interval_ms,
            "replication stream started"
        );
    }
}

/// The replication stream was closed by the relay (`clean`: the server
/// took the goodbye).
pub struct StreamStopped<'a> {
    pub target: &'a dyn Display,
    pub slot: &'a str,
    pub confirmed: Lsn,
    pub clean: bool,
}
event!(StreamStopped<'_>, "stream_stopped", INFO, Lifecycle);

impl StreamStopped<'_> {
    pub fn emit(&self) {
        say!(
            target_endpoint = %self.target,
            slot = self.slot,
            confirmed = %self.confirmed,
            clean = self.clean,
            "replication stream stopped"
        );
    }
}

/// One of the conninfo's endpoints could not be reached; the next is
/// tried.
pub struct EndpointFailed<'a> {
    pub error: &'a dyn Display,
}
event!(EndpointFailed<'_>, "endpoint_failed", WARN, Notice);

impl EndpointFailed<'_> {
    pub fn emit(&self) {
        say!(error = %self.error, "replication endpoint failed");
    }
}

/// The server sent a notice on the replication connection.
pub struct ServerNotice<'a> {
    pub code: &'a dyn Display,
    pub message: &'a dyn Display,
}
event!(ServerNotice<'_>, "server_notice", WARN, Notice);

impl ServerNotice<'_> {
    pub fn emit(&self) {
        say!(code = %self.code, message = %self.message, "server notice");
    }
}

/// A session streams: the relay is the active one and events flow.
pub struct Streaming<'a> {
    pub slot: &'a str,
    pub confirmed: Lsn,
    pub parked_aggregates: usize,
}
event!(Streaming<'_>, "streaming", INFO, Lifecycle);

impl Streaming<'_> {
    /// Logs the line and sets the role gauge to active.
    pub fn emit(&self) {
        say!(
            slot = self.slot,
            confirmed = %self.confirmed,
            parked_aggregates = self.parked_aggregates,
            "streaming from the slot's confirmed position"
        );
        metrics::gauge!(m::ROLE_ACTIVE).set(1.0);
    }
}

/// Another relay holds the relay lock: this one stands by (said once per
/// change of role).
pub struct StandingBy<'a> {
    pub slot: &'a str,
    pub key: i64,
}
event!(StandingBy<'_>, "standing_by", INFO, Lifecycle);

impl StandingBy<'_> {
    pub fn emit(&self) {
        say!(
            slot = self.slot,
            key = self.key,
            "standby: another relay holds the relay lock on this slot; taking over when it \
             lets go"
        );
    }
}

/// This relay took the relay lock: it is the active one.
pub struct RelayLockHeld<'a> {
    pub slot: &'a str,
    pub key: i64,
}
event!(RelayLockHeld<'_>, "relay_lock_held", INFO, Lifecycle);

impl RelayLockHeld<'_> {
    /// Logs the line and sets the role gauge to active.
    pub fn emit(&self) {
        say!(
            slot = self.slot,
            key = self.key,
            "holding the relay lock: this relay is the active one"
        );
        metrics::gauge!(m::ROLE_ACTIVE).set(1.0);
    }
}

/// The relay lock held for the last session was found lost before the
/// next.
pub struct RelayLockLostBetweenSessions<'a> {
    pub slot: &'a str,
}
event!(
    RelayLockLostBetweenSessions<'_>,
    "relay_lock_lost_between_sessions",
    WARN,
    Notice
);

impl RelayLockLostBetweenSessions<'_> {
    /// Logs the line and sets the role gauge to inactive.
    pub fn emit(&self) {
        say!(
            reason = m::reason::LOCK_LOST,
            slot = self.slot,
            "the relay lock was lost between sessions"
        );
        metrics::gauge!(m::ROLE_ACTIVE).set(0.0);
    }
}

/// The relay lock's session failed: the lock is lost.
pub struct RelayLockSessionFailed<'a> {
    pub slot: &'a str,
    pub error: &'a dyn Display,
}
event!(
    RelayLockSessionFailed<'_>,
    "relay_lock_session_failed",
    WARN,
    Notice
);

impl RelayLockSessionFailed<'_> {
    pub fn emit(&self) {
        say!(
            slot = self.slot,
            error = %self.error,
            "the relay lock's session failed: the lock is lost"
        );
    }
}

/// The relay lock's renewal did not come back within the lease.
pub struct RelayLockRenewalLate<'a> {
    pub slot: &'a str,
    pub lease_ms: u64,
}
event!(
    RelayLockRenewalLate<'_>,
    "relay_lock_renewal_late",
    WARN,
    Notice
);

impl RelayLockRenewalLate<'_> {
    pub fn emit(&self) {
        say!(
            slot = self.slot,
            lease_ms = self.lease_ms,
            "the relay lock's renewal did not come back before the lease ran out: the lock is \
             lost"
        );
    }
}

/// Taking the relay lock, the relay ended the slot's reader (which held no
/// relay lock).
pub struct SlotReaderEnded<'a> {
    pub slot: &'a str,
    pub pid: &'a str,
}
event!(SlotReaderEnded<'_>, "slot_reader_ended", WARN, Notice);

impl SlotReaderEnded<'_> {
    pub fn emit(&self) {
        say!(
            slot = self.slot,
            pid = self.pid,
            "the slot was still read by a process without the relay lock (a relay that lost it, \
             or another reader): ended it"
        );
    }
}

/// The slot's previous reader could not be ended.
pub struct SlotReaderNotEnded<'a> {
    pub slot: &'a str,
    pub error: &'a dyn Display,
}
event!(
    SlotReaderNotEnded<'_>,
    "slot_reader_not_ended",
    WARN,
    Notice
);

impl SlotReaderNotEnded<'_> {
    pub fn emit(&self) {
        say!(slot = self.slot, error = %self.error, "could not end the slot's previous reader");
    }
}

/// Ending the slot's previous reader took too long.
pub struct SlotReaderEndTimedOut<'a> {
    pub slot: &'a str,
}
event!(
    SlotReaderEndTimedOut<'_>,
    "slot_reader_end_timed_out",
    WARN,
    Notice
);

impl SlotReaderEndTimedOut<'_> {
    pub fn emit(&self) {
        say!(
            slot = self.slot,
            "ending the slot's previous reader took too long"
        );
    }
}

/// Someone else advanced (or recreated) the slot past what this relay
/// confirmed: transactions in between are not read.
pub struct SlotAhead<'a> {
    pub slot: &'a str,
    pub confirmed_by_relay: Lsn,
    pub slot_position: Lsn,
}
event!(SlotAhead<'_>, "slot_ahead", WARN, Fault);

impl SlotAhead<'_> {
    /// Counts it in [`m::SLOT_JUMPS`] and logs the line.
    pub fn emit(&self) {
        metrics::counter!(m::SLOT_JUMPS).increment(1);
        say!(
            slot = self.slot,
            confirmed_by_relay = %self.confirmed_by_relay,
            slot_position = %self.slot_position,
            gap_bytes = self
                .slot_position
                .as_u64()
                .saturating_sub(self.confirmed_by_relay.as_u64()),
            "the slot is ahead of the position this relay confirmed: someone else advanced or \
             recreated it, and transactions committed in between are not read"
        );
    }
}

/// The position this relay confirmed is above the server's WAL: the
/// database was restored.
pub struct ConfirmedAboveServerWal<'a> {
    pub slot: &'a str,
    pub confirmed_by_relay: Lsn,
    pub server_wal: Lsn,
    pub server: &'a dyn Display,
    pub slot_position: Lsn,
}
event!(
    ConfirmedAboveServerWal<'_>,
    "confirmed_above_server_wal",
    ERROR,
    Notice
);

impl ConfirmedAboveServerWal<'_> {
    /// Counts it in [`m::POSITIONS_AHEAD`] and logs the line.
    pub fn emit(&self) {
        metrics::counter!(m::POSITIONS_AHEAD).increment(1);
        say!(
            slot = self.slot,
            confirmed_by_relay = %self.confirmed_by_relay,
            server_wal = %self.server_wal,
            server = %self.server,
            slot_position = %self.slot_position,
            "the position this relay confirmed is above the server's WAL position: the database \
             was restored from a backup or snapshot. Starting from the slot's position. Kafka \
             may hold events of transactions the database no longer has: compare the topics \
             with the outbox before their consumers act on them"
        );
    }
}

/// Another PostgreSQL server answers than the one of the last session.
pub struct ServerChanged<'a> {
    pub slot: &'a str,
    pub previous_server: &'a dyn Display,
    pub previous_confirmed: Lsn,
    pub server: &'a dyn Display,
    pub timeline_fork: &'a str,
    pub slot_position: Lsn,
}
event!(ServerChanged<'_>, "server_changed", ERROR, Notice);

impl ServerChanged<'_> {
    /// Counts it in [`m::SERVER_CHANGES`] and logs the line.
    pub fn emit(&self) {
        metrics::counter!(m::SERVER_CHANGES).increment(1);
        say!(
            slot = self.slot,
            previous_server = %self.previous_server,
            previous_confirmed = %self.previous_confirmed,
            server = %self.server,
            timeline_fork = self.timeline_fork,
            slot_position = %self.slot_position,
            "another PostgreSQL server answers (failover or a new cluster behind the URL): \
             starting from the new slot's position, not the old server's. Events committed on \
             the new server before the slot's position (since the timeline fork, when the slot \
             was created after it) were never decoded by this slot and may be missing; events \
             the relay confirmed on the old server above the fork may not exist on the new one"
        );
    }
}

/// A sample of the slot's lag failed. Counted each time; the sampler logs
/// the first of a run only.
pub struct SlotLagUnsampled<'a> {
    pub slot: &'a str,
    pub error: &'a dyn Display,
}
event!(SlotLagUnsampled<'_>, "slot_lag_unsampled", WARN, Notice);

impl SlotLagUnsampled<'_> {
    /// Counts the failed sample in [`m::SLOT_SAMPLE_FAILURES`].
    pub fn count() {
        metrics::counter!(m::SLOT_SAMPLE_FAILURES).increment(1);
    }

    pub fn emit(&self) {
        say!(
            slot = self.slot,
            error = %self.error,
            "cannot sample the slot's lag; outbox_relay_slot_lag_bytes keeps its last value \
             until a sample works"
        );
    }
}

/// Sampling the slot's lag works again.
pub struct SlotLagSampled<'a> {
    pub slot: &'a str,
}
event!(SlotLagSampled<'_>, "slot_lag_sampled", INFO, Lifecycle);

impl SlotLagSampled<'_> {
    pub fn emit(&self) {
        say!(slot = self.slot, "sampling the slot's lag works again");
    }
}

/// A heartbeat write failed; tried again at the next interval.
pub struct HeartbeatFailed<'a> {
    pub error: &'a dyn Display,
}
event!(HeartbeatFailed<'_>, "heartbeat_failed", WARN, Notice);

impl HeartbeatFailed<'_> {
    pub fn emit(&self) {
        say!(error = %self.error, "heartbeat failed; trying again at the next interval");
    }
}

/// A stop was asked for in the middle of a transaction: the session reads
/// on to its commit.
pub struct StopMidTransaction;
event!(StopMidTransaction, "stop_mid_transaction", INFO, Lifecycle);

impl StopMidTransaction {
    pub fn emit(&self) {
        say!("stop requested mid-transaction: reading on to its commit");
    }
}

/// The stop's deadline passed before the open transaction's commit came.
pub struct StopDeadlineMidTransaction;
event!(
    StopDeadlineMidTransaction,
    "stop_deadline_mid_transaction",
    WARN,
    Notice
);

impl StopDeadlineMidTransaction {
    pub fn emit(&self) {
        say!(
            "shutdown deadline passed before the open transaction's commit arrived; its events \
             will be sent again on restart"
        );
    }
}

/// The stop's deadline passed with events unacknowledged.
pub struct DrainDeadlinePassed {
    pub pending: u64,
}
event!(DrainDeadlinePassed, "drain_deadline_passed", WARN, Notice);

impl DrainDeadlinePassed {
    pub fn emit(&self) {
        say!(
            pending = self.pending,
            "shutdown deadline passed with events unacknowledged; they will be sent again on \
             restart"
        );
    }
}

/// A status update while draining failed.
pub struct DrainStatusUpdateFailed<'a> {
    pub error: &'a dyn Display,
}
event!(
    DrainStatusUpdateFailed<'_>,
    "drain_status_update_failed",
    WARN,
    Notice
);

impl DrainStatusUpdateFailed<'_> {
    pub fn emit(&self) {
        say!(error = %self.error, "status update while draining failed");
    }
}

/// The last status update of a stop failed: the slot keeps its last
/// confirmed position.
pub struct FinalStatusUpdateFailed<'a> {
    pub error: &'a dyn Display,
}
event!(
    FinalStatusUpdateFailed<'_>,
    "final_status_update_failed",
    WARN,
    Notice
);

impl FinalStatusUpdateFailed<'_> {
    pub fn emit(&self) {
        say!(
            error = %self.error,
            "final status update failed; the slot keeps its last confirmed position"
        );
    }
}
