//! Metric names, their descriptions, and the HTTP endpoint: `/metrics`,
//! `/health` and `/ready` (their state lives in [`health`]).
//!
//! Every metric the relay records is named here, once, in Prometheus style
//! (`outbox_relay_*`, base units). The rest of the crate records through the
//! `metrics` facade; without an installed exporter those calls are no-ops,
//! which keeps library tests free of global state.

mod health;

use std::time::Duration;

use axum::Router;
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
pub const READY: &str = "outbox_relay_ready";

pub use health::Health;

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
    metrics::describe_counter!(
        BYTES_RECEIVED,
        Unit::Bytes,
        "Replication payload bytes received from PostgreSQL."
    );
    describe_gauge!(
        READY,
        "1 while /ready answers 200 (streaming, producer working), else 0."
    );
}

/// How long a retry loop may go on without progress before /health turns
/// 503, unless `relay.unhealthy_after_secs` says otherwise.
pub const DEFAULT_UNHEALTHY_AFTER: Duration = Duration::from_secs(120);

/// Installs the Prometheus recorder and returns its handle for rendering.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("could not install the metrics recorder: {e}"))?;
    describe();
    Ok(handle)
}

/// Serves `/metrics` (Prometheus text), `/health` (see [`Health::status`])
/// and `/ready` (see [`Health::readiness`]) on `listener` until the task is
/// dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    health: Health,
) -> std::io::Result<()> {
    health.publish_readiness();
    let ready = health.clone();
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route("/health", get(move || std::future::ready(health.status())))
        .route("/ready", get(move || std::future::ready(ready.readiness())));
    axum::serve(listener, app).await
}
