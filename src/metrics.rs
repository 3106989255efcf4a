//! Metric names, their descriptions, and the /metrics + /health endpoint.
//!
//! Every metric the relay records is named here, once, in Prometheus style
//! (`outbox_relay_*`, base units). The rest of the crate records through the
//! `metrics` facade; without an installed exporter those calls are no-ops,
//! which keeps library tests free of global state.
//!
//! `/health` answers 200 while the relay streams and makes progress; 503 when
//! it does not stream, or when a retry loop (reconnecting, rebuilding the
//! producer) has gone on for `relay.unhealthy_after_secs` without progress,
//! with the last reason in the body.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use metrics::{Unit, describe_counter, describe_gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

pub const EVENTS_PUBLISHED: &str = "outbox_relay_events_published_total";
pub const EVENTS_DEAD_LETTERED: &str = "outbox_relay_events_dead_lettered_total";
pub const TRANSACTIONS: &str = "outbox_relay_transactions_total";
pub const CHANGES_IGNORED: &str = "outbox_relay_changes_ignored_total";
pub const DELIVERY_FAILURES: &str = "outbox_relay_delivery_failures_total";
pub const RECONNECTS: &str = "outbox_relay_reconnects_total";
pub const HEARTBEATS: &str = "outbox_relay_heartbeats_total";
pub const CONFIRMED_LSN: &str = "outbox_relay_confirmed_lsn";
pub const RECEIVED_LSN: &str = "outbox_relay_received_lsn";
pub const EVENTS_IN_FLIGHT: &str = "outbox_relay_events_in_flight";
pub const BYTES_RECEIVED: &str = "outbox_relay_wal_received_bytes_total";
pub const SERVER_CHANGES: &str = "outbox_relay_server_changes_total";
pub const SLOT_JUMPS: &str = "outbox_relay_slot_jumps_total";
pub const MESSAGES_REFUSED: &str = "outbox_relay_messages_refused_total";
pub const CLEANUP_DELETED_ROWS: &str = "outbox_relay_cleanup_deleted_rows_total";
pub const CLEANUP_SKIPPED_ROWS: &str = "outbox_relay_cleanup_skipped_rows_total";
pub const TRACE_SPANS_EXPORTED: &str = "outbox_relay_trace_spans_exported_total";
pub const TRACE_SPANS_DROPPED: &str = "outbox_relay_trace_spans_dropped_total";
pub const TRACE_CONTEXT_DROPPED: &str = "outbox_relay_trace_context_dropped_total";

/// The `reason` label of [`DELIVERY_FAILURES`] and [`RECONNECTS`]: a small
/// fixed set, so that a dashboard can tell a broker outage from a refusal
/// from a database restart.
pub mod reason {
    /// Records not acknowledged within `kafka.message_timeout_ms`.
    pub const MESSAGE_TIMEOUT: &str = "message_timeout";
    /// The producer hit a fatal error (idempotence, gapless guarantee).
    pub const PRODUCER_FATAL: &str = "producer_fatal";
    /// The broker refused a record as too large; the replay isolates it.
    pub const TOO_LARGE: &str = "too_large";
    /// The broker cannot route a record; the replay dead-letters it
    /// (`kafka.on_unroutable = "dead-letter"`).
    pub const UNROUTABLE: &str = "unroutable";
    /// Any other broker or producer error.
    pub const BROKER_ERROR: &str = "broker_error";
    /// The replication stream broke (server restart, network, timeout).
    pub const STREAM_BROKE: &str = "stream_broke";
    /// Connecting to PostgreSQL or starting replication failed.
    pub const CONNECT_FAILED: &str = "connect_failed";
    /// Another process holds the slot.
    pub const SLOT_BUSY: &str = "slot_busy";
}

/// Registers the description of every metric above.
pub fn describe() {
    describe_counter!(
        EVENTS_PUBLISHED,
        "Outbox events acknowledged by the broker."
    );
    describe_counter!(
        EVENTS_DEAD_LETTERED,
        "Outbox rows written to the dead-letter topic, by reason."
    );
    describe_counter!(
        TRANSACTIONS,
        "Committed transactions decoded from the slot."
    );
    describe_counter!(
        CHANGES_IGNORED,
        "UPDATE, DELETE and TRUNCATE on the outbox, and rows of other tables, ignored by kind."
    );
    describe_counter!(
        DELIVERY_FAILURES,
        "Failed deliveries that made the relay rebuild the producer and replay from the confirmed LSN, by reason."
    );
    describe_counter!(
        RECONNECTS,
        "Replication reconnects after a transient error, by reason."
    );
    describe_counter!(
        HEARTBEATS,
        "Heartbeat messages emitted while the outbox was idle."
    );
    describe_gauge!(
        CONFIRMED_LSN,
        "Flush LSN confirmed to PostgreSQL (as a number): the broker-acknowledged prefix."
    );
    describe_gauge!(RECEIVED_LSN, "Highest WAL position received from the slot.");
    describe_gauge!(
        EVENTS_IN_FLIGHT,
        "Events handed to the producer and not yet acknowledged."
    );
    describe_counter!(
        SERVER_CHANGES,
        "Sessions that found another server (system identifier or timeline) than the last one: a failover, or another cluster behind the URL."
    );
    describe_counter!(
        SLOT_JUMPS,
        "Sessions that found the slot ahead of the position this relay confirmed: someone else advanced or recreated it."
    );
    describe_counter!(
        MESSAGES_REFUSED,
        "Logical messages with the outbox prefix that are not transactional (not atomic with any business write): logged at error, never published."
    );
    describe_counter!(
        CLEANUP_DELETED_ROWS,
        "Outbox rows deleted after their events were confirmed (postgres.cleanup = \"delete-after-ack\")."
    );
    describe_counter!(
        CLEANUP_SKIPPED_ROWS,
        "Confirmed outbox rows the cleanup left in the table: it lagged, held too many, or its DELETE failed."
    );
    describe_counter!(
        TRACE_CONTEXT_DROPPED,
        "Malformed traceparent or tracestate values (label part) left out of events; the events were published without them."
    );
    describe_counter!(
        TRACE_SPANS_EXPORTED,
        "Produce spans exported to the OTLP collector."
    );
    describe_counter!(
        TRACE_SPANS_DROPPED,
        "Produce spans dropped: the export queue was full or the collector did not take them."
    );
    metrics::describe_counter!(
        BYTES_RECEIVED,
        Unit::Bytes,
        "Replication payload bytes received from PostgreSQL."
    );
}

/// How long a retry loop may go on without progress before /health turns
/// 503, unless `relay.unhealthy_after_secs` says otherwise.
pub const DEFAULT_UNHEALTHY_AFTER: Duration = Duration::from_secs(120);

/// Longest failure text /health shows.
const MAX_REASON_LEN: usize = 300;

/// Shared state behind /health: whether the relay streams, and since when a
/// retry loop has gone on without progress.
///
/// Progress is the confirmed LSN moving, or the stream showing that nothing
/// is left to confirm; a session that starts, sends and fails again is not
/// progress. Recording progress is two atomic loads on the hot path.
#[derive(Debug, Clone)]
pub struct Health(Arc<HealthState>);

#[derive(Debug)]
struct HealthState {
    streaming: AtomicBool,
    origin: Instant,
    /// Milliseconds since `origin` of the first failure since the last
    /// progress, plus one; 0 when there is none.
    failing_since: AtomicU64,
    unhealthy_after_ms: AtomicU64,
    reason: Mutex<String>,
}

impl Default for Health {
    fn default() -> Self {
        Health(Arc::new(HealthState {
            streaming: AtomicBool::new(false),
            origin: Instant::now(),
            failing_since: AtomicU64::new(0),
            unhealthy_after_ms: AtomicU64::new(millis(DEFAULT_UNHEALTHY_AFTER)),
            reason: Mutex::new(String::new()),
        }))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Health {
    pub fn set_streaming(&self, streaming: bool) {
        self.0.streaming.store(streaming, Ordering::Relaxed);
    }

    pub fn is_streaming(&self) -> bool {
        self.0.streaming.load(Ordering::Relaxed)
    }

    /// How long a retry loop may go on without progress.
    pub fn set_unhealthy_after(&self, after: Duration) {
        self.0
            .unhealthy_after_ms
            .store(millis(after), Ordering::Relaxed);
    }

    /// A retry loop went round once more: `reason` is one of
    /// [`reason`]'s labels, `detail` the error (shown, cut, on /health).
    pub fn retrying(&self, reason: &str, detail: &dyn std::fmt::Display) {
        let mut text = format!("{reason}: {detail}");
        if text.len() > MAX_REASON_LEN {
            let mut end = MAX_REASON_LEN;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        *self.0.reason.lock().unwrap_or_else(|e| e.into_inner()) = text;
        let now = millis(self.0.origin.elapsed()) + 1;
        let _ = self
            .0
            .failing_since
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The relay made progress: whatever failed before is over.
    pub fn progress(&self) {
        if self.0.failing_since.load(Ordering::Relaxed) != 0 {
            self.0.failing_since.store(0, Ordering::Relaxed);
        }
    }

    /// The /health answer: status code and body.
    pub fn status(&self) -> (StatusCode, String) {
        self.status_at(self.0.origin.elapsed())
    }

    /// The /health answer at `now` (time since this value was created).
    fn status_at(&self, now: Duration) -> (StatusCode, String) {
        let since = self.0.failing_since.load(Ordering::Relaxed);
        let reason = || {
            self.0
                .reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        };
        if since != 0 {
            let stalled = Duration::from_millis(millis(now).saturating_sub(since - 1));
            let limit = Duration::from_millis(self.0.unhealthy_after_ms.load(Ordering::Relaxed));
            if stalled >= limit {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "unhealthy: no progress for {} s; last failure: {}\n",
                        stalled.as_secs(),
                        reason()
                    ),
                );
            }
        }
        match (self.is_streaming(), since != 0) {
            (true, _) => (StatusCode::OK, "streaming\n".to_owned()),
            (false, false) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "not streaming\n".to_owned(),
            ),
            (false, true) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not streaming; retrying: {}\n", reason()),
            ),
        }
    }
}

/// Installs the Prometheus recorder and returns its handle for rendering.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("could not install the metrics recorder: {e}"))?;
    describe();
    Ok(handle)
}

/// Serves `/metrics` (Prometheus text) and `/health` (see [`Health::status`])
/// on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    health: Health,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route("/health", get(move || std::future::ready(health.status())));
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn health_turns_503_only_after_the_limit_without_progress() {
        let health = Health::default();
        health.set_unhealthy_after(Duration::from_secs(10));
        assert_eq!(health.status_at(SEC).0, StatusCode::SERVICE_UNAVAILABLE);
        health.set_streaming(true);
        assert_eq!(health.status_at(SEC).0, StatusCode::OK);

        // A failure starts the clock; more failures do not restart it.
        health.retrying(reason::MESSAGE_TIMEOUT, &"Local: Message timed out");
        let first = health.0.failing_since.load(Ordering::Relaxed);
        health.retrying(reason::MESSAGE_TIMEOUT, &"Local: Message timed out");
        assert_eq!(health.0.failing_since.load(Ordering::Relaxed), first);
        let at = |secs: u64| Duration::from_millis(first - 1) + Duration::from_secs(secs);
        assert_eq!(health.status_at(at(9)).0, StatusCode::OK);
        let (code, body) = health.status_at(at(10));
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("no progress for 10 s") && body.contains("message_timeout: Local"),
            "{body}"
        );
        // Between sessions, not streaming: 503 with the reason either way.
        health.set_streaming(false);
        assert!(
            health
                .status_at(at(1))
                .1
                .contains("retrying: message_timeout")
        );
        health.set_streaming(true);

        // Progress clears it.
        health.progress();
        assert_eq!(health.status_at(at(1000)).0, StatusCode::OK);
    }

    #[test]
    fn health_reason_is_cut_at_a_character_boundary() {
        let health = Health::default();
        health.retrying(reason::BROKER_ERROR, &"é".repeat(400));
        let reason = health.0.reason.lock().unwrap().clone();
        assert!(reason.len() <= MAX_REASON_LEN, "{}", reason.len());
        assert!(reason.starts_with("broker_error: é"));
    }
}
