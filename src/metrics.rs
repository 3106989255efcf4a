//! Metric names, their descriptions, and the /metrics + /health endpoint.
//!
//! Every metric the relay records is named here, once, in Prometheus style
//! (`outbox_relay_*`, base units). The rest of the crate records through the
//! `metrics` facade; without an installed exporter those calls are no-ops,
//! which keeps library tests free of global state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
        "Failed deliveries that made the relay rebuild the producer and replay from the confirmed LSN."
    );
    describe_counter!(
        RECONNECTS,
        "Replication reconnects after a transient error."
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
}

/// Shared readiness flag for /health: true while the relay streams.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<AtomicBool>);

impl Health {
    pub fn set_streaming(&self, streaming: bool) {
        self.0.store(streaming, Ordering::Relaxed);
    }

    pub fn is_streaming(&self) -> bool {
        self.0.load(Ordering::Relaxed)
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

/// Serves `/metrics` (Prometheus text) and `/health` (200 while streaming,
/// 503 otherwise) on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    health: Health,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route(
            "/health",
            get(move || {
                let code = if health.is_streaming() {
                    (StatusCode::OK, "streaming\n")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not streaming\n")
                };
                std::future::ready(code)
            }),
        );
    axum::serve(listener, app).await
}
