//! The session's errands beside the stream: catalog look-ups, the relay
//! lock's fence, the heartbeat, and the metrics updated per message.

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Session, SessionResult};
use crate::metrics as m;
use crate::pg::PgClient;
use crate::relay::machine::Now;
use crate::replication::{ReplicationSettings, emit_heartbeat, look_up};

impl Session<'_> {
    /// One catalog look-up on the session's ordinary SQL session (opened
    /// on first use, on the server the stream reads, kept for the session);
    /// `None` without an outbox table.
    pub(super) async fn look_up(
        &mut self,
        oid: u32,
    ) -> SessionResult<Option<crate::replication::RelationLookup>> {
        let Some(outbox) = self.machine.outbox().cloned() else {
            return Ok(None);
        };
        let connection = match &mut self.catalog {
            Some(connection) => connection,
            None => self
                .catalog
                .insert(PgClient::connect(&self.replication.connection).await?),
        };
        let result = look_up(connection, &outbox, &self.replication.publication, oid).await;
        if result.is_err() {
            // A broken connection is not reused.
            self.catalog = None;
        }
        Ok(Some(result?))
    }

    /// Adds what the machine counted since the last call to the metrics.
    /// Called beside [`Session::log_notices`], wherever the machine may
    /// have counted something.
    pub(super) fn count(&mut self) {
        let counts = self.machine.take_counts();
        if counts.transactions > 0 {
            self.hot.transactions.increment(counts.transactions);
        }
        for (kind, n) in counts.ignored.iter() {
            metrics::counter!(m::CHANGES_IGNORED, "kind" => kind).increment(n);
        }
        if counts.messages_refused > 0 {
            metrics::counter!(m::MESSAGES_REFUSED).increment(counts.messages_refused);
        }
        for (part, n) in counts.trace_context_dropped.iter() {
            metrics::counter!(m::TRACE_CONTEXT_DROPPED, "part" => part).increment(n);
        }
    }
}

/// Resolves once the relay lock is lost (a dropped sender counts as lost);
/// never without a lock.
pub(super) async fn lock_lost(fence: &mut Option<watch::Receiver<bool>>) {
    match fence {
        Some(lost) => {
            let _ = lost.wait_for(|lost| *lost).await;
        }
        None => std::future::pending().await,
    }
}

/// Handles to the metrics a session updates per message or per loop turn.
/// `metrics::counter!` and friends look the name up in the recorder's
/// registry on every call; at three messages per single-row transaction
/// that showed in the W3 profile (benches/cpu-notes.md).
pub(super) struct HotMetrics {
    pub(super) bytes_received: metrics::Counter,
    pub(super) received_lsn: metrics::Gauge,
    pub(super) confirmed_lsn: metrics::Gauge,
    pub(super) events_in_flight: metrics::Gauge,
    pub(super) events_in_flight_bytes: metrics::Gauge,
    pub(super) commit_to_ack: metrics::Histogram,
    /// Counted once per transaction, and a backlog of single-row
    /// transactions is many.
    pub(super) transactions: metrics::Counter,
}

impl HotMetrics {
    pub(super) fn register() -> Self {
        HotMetrics {
            bytes_received: metrics::counter!(m::BYTES_RECEIVED),
            received_lsn: metrics::gauge!(m::RECEIVED_LSN),
            confirmed_lsn: metrics::gauge!(m::CONFIRMED_LSN),
            events_in_flight: metrics::gauge!(m::EVENTS_IN_FLIGHT),
            events_in_flight_bytes: metrics::gauge!(m::EVENTS_IN_FLIGHT_BYTES),
            commit_to_ack: metrics::histogram!(m::COMMIT_TO_ACK),
            transactions: metrics::counter!(m::TRANSACTIONS),
        }
    }
}

/// The clocks read now, for the machine, which reads none itself.
pub(super) fn clocks() -> Now {
    Now {
        at: std::time::Instant::now(),
        wall: chrono::Utc::now(),
    }
}

/// Seconds from `time` to now; 0 for a time ahead of this host's clock.
pub(super) fn seconds_since(time: chrono::DateTime<chrono::Utc>) -> f64 {
    let elapsed = chrono::Utc::now().signed_duration_since(time);
    elapsed.to_std().map_or(0.0, |d| d.as_secs_f64())
}

/// Emits one heartbeat in the background; a failure is logged, the stream
/// goes on (the next interval tries again).
pub(super) fn spawn_heartbeat(settings: ReplicationSettings) -> JoinHandle<()> {
    tokio::spawn(async move {
        match emit_heartbeat(&settings).await {
            Ok(()) => metrics::counter!(m::HEARTBEATS).increment(1),
            Err(e) => crate::events::HeartbeatFailed { error: &e }.emit(),
        }
    })
}
