//! Metric names, their descriptions (in `descriptions.rs`), and the HTTP
//! endpoint: `/metrics`, `/health` and `/ready` (their state lives in
//! [`health`]).
//!
//! Every metric the relay records is named here, once, in Prometheus style
//! (`outbox_relay_*`, base units: seconds, bytes), and listed in [`ALL`]. The
//! rest of the crate records through the `metrics` facade; without an
//! installed exporter those calls are no-ops, which keeps library tests free
//! of global state.
//!
//! Label cardinality is bounded: `reason` and `kind` take values from fixed
//! sets in the code ([`reason`], the dead-letter reason codes, the ignored
//! change kinds); `topic` takes one value per topic the relay wrote to:
//! `kafka.topic` is a template over `{aggregatetype}` and `{type}`, so as
//! many series as the outbox has aggregate types or event types, plus the
//! dead-letter topic.

mod descriptions;
mod health;

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const EVENTS_PUBLISHED: &str = "outbox_relay_events_published_total";
pub const EVENTS_DEAD_LETTERED: &str = "outbox_relay_events_dead_lettered_total";
pub const PUBLISHED_BYTES: &str = "outbox_relay_published_bytes_total";
pub const TRANSACTIONS: &str = "outbox_relay_transactions_total";
pub const CHANGES_IGNORED: &str = "outbox_relay_changes_ignored_total";
pub const DELIVERY_FAILURES: &str = "outbox_relay_delivery_failures_total";
pub const RECONNECTS: &str = "outbox_relay_reconnects_total";
pub const HEARTBEATS: &str = "outbox_relay_heartbeats_total";
pub const CONFIRMED_LSN: &str = "outbox_relay_confirmed_lsn";
pub const RECEIVED_LSN: &str = "outbox_relay_received_lsn";
pub const EVENTS_IN_FLIGHT: &str = "outbox_relay_events_in_flight";
/// Bytes of those events' records (`relay.max_in_flight_bytes` bounds it).
pub const EVENTS_IN_FLIGHT_BYTES: &str = "outbox_relay_events_in_flight_bytes";
pub const OLDEST_UNACKED_AGE: &str = "outbox_relay_oldest_unacked_event_age_seconds";
pub const COMMIT_TO_ACK: &str = "outbox_relay_commit_to_ack_seconds";
pub const BYTES_RECEIVED: &str = "outbox_relay_wal_received_bytes_total";
pub const SLOT_LAG: &str = "outbox_relay_slot_lag_bytes";
pub const SLOT_SAFE_WAL_SIZE: &str = "outbox_relay_slot_safe_wal_size_bytes";
pub const SLOT_SAMPLE_FAILURES: &str = "outbox_relay_slot_sample_failures_total";
pub const SERVER_CHANGES: &str = "outbox_relay_server_changes_total";
pub const SLOT_JUMPS: &str = "outbox_relay_slot_jumps_total";
pub const READY: &str = "outbox_relay_ready";
pub const ROLE_ACTIVE: &str = "outbox_relay_role_active";
pub const MESSAGES_REFUSED: &str = "outbox_relay_messages_refused_total";
pub const CLEANUP_DELETED_ROWS: &str = "outbox_relay_cleanup_deleted_rows_total";
pub const CLEANUP_SKIPPED_ROWS: &str = "outbox_relay_cleanup_skipped_rows_total";
pub const CLEANUP_NOT_FOUND_ROWS: &str = "outbox_relay_cleanup_not_found_rows_total";
pub const TRACE_SPANS_EXPORTED: &str = "outbox_relay_trace_spans_exported_total";
pub const TRACE_SPANS_DROPPED: &str = "outbox_relay_trace_spans_dropped_total";
pub const TRACE_CONTEXT_DROPPED: &str = "outbox_relay_trace_context_dropped_total";
/// Webhook deliveries by `route` (the sink's name) and `outcome`
/// ([`webhook_outcome`]).
pub const WEBHOOK_DELIVERIES: &str = "outbox_relay_webhook_deliveries_total";
/// Rows of the delivery table per `route`, sampled by the retry worker.
pub const WEBHOOK_PENDING: &str = "outbox_relay_webhook_pending";
pub const WEBHOOK_PENDING_STUCK: &str = "outbox_relay_webhook_pending_over_10m";
pub const WEBHOOK_DEAD: &str = "outbox_relay_webhook_dead";
pub const WEBHOOK_OLDEST_PENDING_AGE: &str = "outbox_relay_webhook_oldest_pending_age_seconds";
pub const KAFKA_TRANSACTIONS: &str = "outbox_relay_kafka_transactions_total";
pub const CHECKPOINT_LSN: &str = "outbox_relay_checkpoint_lsn";
pub const POSITIONS_AHEAD: &str = "outbox_relay_positions_ahead_of_server_total";
pub const KAFKA_COMMIT_DURATION: &str = "outbox_relay_kafka_commit_seconds";
/// Aggregates parked behind a dead letter, events waiting behind them, and
/// the age of the oldest parked head: sampled from the parking table.
pub const PARKED_AGGREGATES: &str = "outbox_relay_parked_aggregates";
pub const PARKED_EVENTS: &str = "outbox_relay_parked_events";
pub const PARKED_OLDEST_HEAD_AGE: &str = "outbox_relay_parked_oldest_head_age_seconds";

/// Every metric name above: the dashboard and the alert rules in `deploy/`
/// may use these and no others (a unit test checks it).
pub const ALL: &[&str] = &[
    EVENTS_PUBLISHED,
    EVENTS_DEAD_LETTERED,
    PUBLISHED_BYTES,
    TRANSACTIONS,
    CHANGES_IGNORED,
    DELIVERY_FAILURES,
    RECONNECTS,
    HEARTBEATS,
    CONFIRMED_LSN,
    RECEIVED_LSN,
    EVENTS_IN_FLIGHT,
    EVENTS_IN_FLIGHT_BYTES,
    OLDEST_UNACKED_AGE,
    COMMIT_TO_ACK,
    BYTES_RECEIVED,
    SLOT_LAG,
    SLOT_SAFE_WAL_SIZE,
    SLOT_SAMPLE_FAILURES,
    SERVER_CHANGES,
    SLOT_JUMPS,
    READY,
    ROLE_ACTIVE,
    MESSAGES_REFUSED,
    CLEANUP_DELETED_ROWS,
    CLEANUP_SKIPPED_ROWS,
    CLEANUP_NOT_FOUND_ROWS,
    TRACE_SPANS_EXPORTED,
    TRACE_SPANS_DROPPED,
    TRACE_CONTEXT_DROPPED,
    WEBHOOK_DELIVERIES,
    WEBHOOK_PENDING,
    WEBHOOK_PENDING_STUCK,
    WEBHOOK_DEAD,
    WEBHOOK_OLDEST_PENDING_AGE,
    KAFKA_TRANSACTIONS,
    CHECKPOINT_LSN,
    POSITIONS_AHEAD,
    KAFKA_COMMIT_DURATION,
    PARKED_AGGREGATES,
    PARKED_EVENTS,
    PARKED_OLDEST_HEAD_AGE,
];

/// The `outcome` label of [`WEBHOOK_DELIVERIES`]: one value per way a try
/// ends.
pub mod webhook_outcome {
    /// A 2xx answer.
    pub const DELIVERED: &str = "delivered";
    /// A retryable failure (408, 429, 5xx, transport).
    pub const FAILED: &str = "failed";
    /// Moved to the delivery table after the in-line tries.
    pub const PARKED: &str = "parked";
    /// Queued behind a PENDING row of its aggregate.
    pub const QUEUED: &str = "queued";
    /// DEAD: refused for good, or out of attempts.
    pub const DEAD: &str = "dead";
    /// Every value above.
    pub const ALL: &[&str] = &[DELIVERED, FAILED, PARKED, QUEUED, DEAD];
}

/// The histograms among [`ALL`]: Prometheus shows each as `<name>_bucket`,
/// `<name>_sum` and `<name>_count`.
pub const HISTOGRAMS: &[&str] = &[COMMIT_TO_ACK, KAFKA_COMMIT_DURATION];

/// Buckets of [`COMMIT_TO_ACK`], in seconds: from a few milliseconds (a
/// relay keeping up, broker close by) to an hour (a backlog drained after an
/// outage).
pub const COMMIT_TO_ACK_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Buckets of [`KAFKA_COMMIT_DURATION`], in seconds: a commit is a flush of
/// the transaction's records plus two round trips to the transaction
/// coordinator, milliseconds on a healthy cluster; the top buckets catch a
/// commit that waits on a slow or restarting broker (up to
/// `kafka.transaction_timeout_ms`).
pub const KAFKA_COMMIT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

pub use descriptions::describe;
pub use health::{Health, ParkedStats};

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
    /// The relay lock was lost (its session failed or its lease ran out):
    /// the relay stopped producing and stands by.
    pub const LOCK_LOST: &str = "lock_lost";
    /// The webhook sinks could not use the delivery table (PostgreSQL
    /// away, the table dropped, a privilege revoked): the retry worker or
    /// the dispatcher tries again, backing off.
    pub const DELIVERY_TABLE: &str = "delivery_table";
    /// The cleanup's DELETE of confirmed outbox rows failed and is tried
    /// again, backing off.
    pub const CLEANUP_DELETE: &str = "cleanup_delete";
    /// The parking table could not be written or read (PostgreSQL away,
    /// the table dropped, a privilege revoked): the writer tries again,
    /// backing off, and nothing behind a parked event is confirmed.
    pub const PARKED_TABLE: &str = "parked_table";
    /// The schema registry did not answer when the relay fetched its
    /// contracts' schemas: it waits, sending nothing unchecked.
    pub const SCHEMA_REGISTRY: &str = "schema_registry";
}

/// Values of the `kind` label of [`CHANGES_IGNORED`] (besides `update`,
/// `delete`, `truncate`, `other_table`, `unknown_relation` and `message`).
pub mod ignored {
    /// An outbox logical message whose aggregate id is another shard's
    /// (`postgres.shards`): every shard's slot receives every message.
    pub const OTHER_SHARD: &str = "other_shard";
}

/// The `outcome` label of [`KAFKA_TRANSACTIONS`] (exactly-once delivery).
pub mod transaction_outcome {
    /// The transaction and its checkpoint committed.
    pub const COMMITTED: &str = "committed";
    /// The relay aborted the open transaction: after a failure, or at a
    /// graceful stop that could not end between two PostgreSQL
    /// transactions.
    pub const ABORTED: &str = "aborted";
    /// The commit call failed (timed out, aborted by the coordinator, or
    /// in doubt): the next producer's `init_transactions` settles it, and
    /// the relay replays from the last committed checkpoint.
    pub const COMMIT_FAILED: &str = "commit_failed";
    /// Every value above.
    pub const ALL: &[&str] = &[COMMITTED, ABORTED, COMMIT_FAILED];
}

/// The `reason` values of [`DELIVERY_FAILURES`].
pub const DELIVERY_FAILURE_REASONS: &[&str] = &[
    reason::MESSAGE_TIMEOUT,
    reason::PRODUCER_FATAL,
    reason::TOO_LARGE,
    reason::UNROUTABLE,
    reason::BROKER_ERROR,
];

/// The `reason` values of [`RECONNECTS`].
pub const RECONNECT_REASONS: &[&str] = &[
    reason::STREAM_BROKE,
    reason::CONNECT_FAILED,
    reason::SLOT_BUSY,
    reason::LOCK_LOST,
    reason::DELIVERY_TABLE,
    reason::CLEANUP_DELETE,
    reason::SCHEMA_REGISTRY,
    reason::PARKED_TABLE,
];

/// The `reason` values of [`EVENTS_DEAD_LETTERED`]: every reason code a
/// dead letter carries in its `dlq_reason_code` header (a test in
/// `relay::routing` checks that none is missing).
pub const DEAD_LETTER_REASONS: &[&str] = &[
    "missing_column",
    "null_key",
    "null_column",
    "not_utf8",
    "unchanged_toast",
    "shape_mismatch",
    "message_invalid",
    "payload_not_json",
    "missing_attribute",
    "invalid_topic",
    "too_large",
    "topic_missing",
    "policy_violation",
    "invalid_record",
    "checkpoint_topic",
    "contract_violation",
];

/// The `kind` values of [`CHANGES_IGNORED`].
pub const IGNORED_KINDS: &[&str] = &[
    "update",
    "delete",
    "truncate",
    "other_table",
    "unknown_relation",
    "message",
    ignored::OTHER_SHARD,
];

/// The counters whose every series is known before the relay runs, with
/// their label and its values (none: one series without labels).
/// [`register_known_series`] makes each series at 0 at start-up. The
/// other two counters are labelled by what the configuration names: the
/// producer makes [`PUBLISHED_BYTES`] of the dead-letter topic at 0 (an
/// event topic's series appears with its first record, as the template
/// names it), the webhook retry worker [`WEBHOOK_DELIVERIES`] of each
/// route and outcome.
pub const KNOWN_SERIES: &[(&str, &str, &[&str])] = &[
    (EVENTS_PUBLISHED, "", &[]),
    (EVENTS_DEAD_LETTERED, "reason", DEAD_LETTER_REASONS),
    (TRANSACTIONS, "", &[]),
    (CHANGES_IGNORED, "kind", IGNORED_KINDS),
    (DELIVERY_FAILURES, "reason", DELIVERY_FAILURE_REASONS),
    (RECONNECTS, "reason", RECONNECT_REASONS),
    (HEARTBEATS, "", &[]),
    (BYTES_RECEIVED, "", &[]),
    (SLOT_SAMPLE_FAILURES, "", &[]),
    (SERVER_CHANGES, "", &[]),
    (SLOT_JUMPS, "", &[]),
    (MESSAGES_REFUSED, "", &[]),
    (CLEANUP_DELETED_ROWS, "", &[]),
    (CLEANUP_SKIPPED_ROWS, "", &[]),
    (CLEANUP_NOT_FOUND_ROWS, "", &[]),
    (TRACE_SPANS_EXPORTED, "", &[]),
    (TRACE_SPANS_DROPPED, "", &[]),
    (
        TRACE_CONTEXT_DROPPED,
        "part",
        &["traceparent", "tracestate"],
    ),
    (KAFKA_TRANSACTIONS, "outcome", transaction_outcome::ALL),
    (POSITIONS_AHEAD, "", &[]),
];

/// Makes every series of [`KNOWN_SERIES`] at 0. A counter series that
/// first appears at 1 hides that increment from `increase()` and
/// `rate()`: an alert on the first dead letter or the first reconnect would
/// never fire. (Gauges appear with their first value, at start-up: the
/// slot's lag at its first sample, /ready's state, the role.)
pub fn register_known_series() {
    for &(name, label, values) in KNOWN_SERIES {
        if values.is_empty() {
            metrics::counter!(name).increment(0);
        }
        for &value in values {
            metrics::counter!(name, label => value).increment(0);
        }
    }
}

/// How long a retry loop may go on without progress before /health turns
/// 503, unless `relay.unhealthy_after_secs` says otherwise.
pub const DEFAULT_UNHEALTHY_AFTER: Duration = Duration::from_secs(120);

/// Installs the Prometheus recorder and returns its handle for rendering;
/// describes every metric and makes the known counter series at 0.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(COMMIT_TO_ACK.to_owned()),
            COMMIT_TO_ACK_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(KAFKA_COMMIT_DURATION.to_owned()),
                KAFKA_COMMIT_BUCKETS,
            )
        })
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| format!("could not install the metrics recorder: {e}"))?;
    describe();
    register_known_series();
    Ok(handle)
}

/// How often the recorder drains histogram samples into their buckets when
/// nobody scrapes: without it every observation stays in memory until the
/// next scrape.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Serves `/metrics` (Prometheus text), `/health` (see [`Health::status`])
/// and `/ready` (see [`Health::readiness`]) on `listener` until the task is
/// dropped; keeps the recorder's histograms drained meanwhile.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    health: Health,
) -> std::io::Result<()> {
    health.publish_readiness();
    let upkeep = handle.clone();
    let upkeep = tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let ready = health.clone();
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route("/health", get(move || std::future::ready(health.status())))
        .route(
            "/ready",
            get(move |uri: axum::http::Uri| {
                let standby_ok = uri
                    .query()
                    .is_some_and(|q| q.split('&').any(|pair| pair == "standby=ok"));
                std::future::ready(ready.readiness_with(standby_ok))
            }),
        );
    let served = axum::serve(listener, app).await;
    upkeep.abort();
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of `pub const NAME: &str = "outbox_relay_...";` in this
    /// file's source.
    fn declared_metric_names() -> Vec<String> {
        include_str!("metrics.rs")
            .lines()
            .filter_map(|line| {
                let rest = line.trim().strip_prefix("pub const ")?;
                let (_, value) = rest.split_once(": &str = \"")?;
                let name = value.strip_suffix("\";")?;
                name.starts_with("outbox_relay_").then(|| name.to_owned())
            })
            .collect()
    }

    /// Every `outbox_relay_*` name in `text`, histogram series
    /// (`_bucket`, `_sum`, `_count`) under their histogram's name.
    fn metric_names_used_in(text: &str) -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("outbox_relay_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|base| HISTOGRAMS.contains(base))
                })
                .unwrap_or(name);
            names.push(base.to_owned());
            rest = &tail[end..];
        }
        names
    }

    /// The dashboard and the alert rules in deploy/ name only metrics the
    /// relay exports: a renamed metric would leave a silent, empty panel or
    /// an alert that can never fire.
    #[test]
    fn deploy_files_use_only_metrics_the_relay_exports() {
        for (file, text) in [
            (
                "deploy/grafana/outbox-relay.json",
                include_str!("../deploy/grafana/outbox-relay.json"),
            ),
            (
                "deploy/prometheus/alerts.yaml",
                include_str!("../deploy/prometheus/alerts.yaml"),
            ),
        ] {
            let used = metric_names_used_in(text);
            assert!(used.len() >= 8, "{file} names few metrics: {used:?}");
            for name in &used {
                assert!(
                    ALL.contains(&name.as_str()),
                    "{file} uses {name}, which src/metrics.rs does not declare"
                );
            }
        }
        // The alerts on-call needs are there, on the metrics that carry them.
        let alerts = include_str!("../deploy/prometheus/alerts.yaml");
        for (alert, metric) in [
            ("OutboxRelaySlotLagHigh", SLOT_LAG),
            ("OutboxRelayStuck", OLDEST_UNACKED_AGE),
            ("OutboxRelayDeadLetters", EVENTS_DEAD_LETTERED),
            ("OutboxRelayNotReady", READY),
            ("OutboxRelayWebhookStuck", WEBHOOK_PENDING_STUCK),
            (
                "OutboxRelayWebhookOldestPending",
                WEBHOOK_OLDEST_PENDING_AGE,
            ),
            ("OutboxRelayWebhookDead", WEBHOOK_DEAD),
            ("OutboxRelayParkedHeadOld", PARKED_OLDEST_HEAD_AGE),
        ] {
            let rule = alerts
                .split("- alert: ")
                .find(|rule| rule.starts_with(&format!("{alert}\n")))
                .unwrap_or_else(|| panic!("no alert {alert}"));
            assert!(rule.contains(metric), "{alert} uses {metric}: {rule}");
        }
    }

    /// Every counter series known before the relay runs is on /metrics at
    /// 0 once the recorder is installed: no alert waits for a series to
    /// appear, and every counter but those labelled by what the relay meets
    /// (topics, routes) is among them.
    #[test]
    fn known_counter_series_are_exported_at_zero_from_the_start() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, register_known_series);
        let text = handle.render();
        let mut series = 0;
        for &(name, label, values) in KNOWN_SERIES {
            let lines: Vec<String> = if values.is_empty() {
                vec![format!("{name} 0")]
            } else {
                values
                    .iter()
                    .map(|v| format!("{name}{{{label}=\"{v}\"}} 0"))
                    .collect()
            };
            for line in lines {
                assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
                series += 1;
            }
        }
        assert!(series > 40, "{series}");
        let labelled_at_run_time = [PUBLISHED_BYTES, WEBHOOK_DELIVERIES];
        for name in ALL.iter().filter(|n| n.ends_with("_total")) {
            assert!(
                KNOWN_SERIES.iter().any(|(known, _, _)| known == name)
                    || labelled_at_run_time.contains(name),
                "{name} is a counter without series at start-up"
            );
        }
    }

    /// Each `reason` constant is a value of the counter it labels.
    #[test]
    fn every_retry_reason_is_a_known_series() {
        let source = include_str!("metrics.rs");
        let module = source
            .split("pub mod reason {")
            .nth(1)
            .and_then(|rest| rest.split("\n}").next())
            .expect("the reason module");
        let values: Vec<&str> = module
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub const "))
            .filter_map(|l| l.split_once("= \"")?.1.strip_suffix("\";"))
            .collect();
        assert!(values.len() >= 10, "{values:?}");
        for value in values {
            assert!(
                DELIVERY_FAILURE_REASONS.contains(&value) || RECONNECT_REASONS.contains(&value),
                "reason {value} is registered with neither counter"
            );
        }
    }

    #[test]
    fn the_name_scanner_sees_histogram_series_and_unknown_names() {
        assert_eq!(
            metric_names_used_in(
                "rate(outbox_relay_commit_to_ack_seconds_bucket[5m]) + outbox_relay_nope_total"
            ),
            [COMMIT_TO_ACK, "outbox_relay_nope_total"]
        );
    }

    #[test]
    fn every_declared_metric_is_listed_once_in_all() {
        let declared = declared_metric_names();
        assert!(declared.len() >= 20, "{declared:?}");
        for name in &declared {
            assert_eq!(
                ALL.iter().filter(|n| **n == name.as_str()).count(),
                1,
                "{name} is declared but not listed exactly once in ALL"
            );
        }
        assert_eq!(ALL.len(), declared.len(), "ALL lists a name not declared");
        for name in ALL {
            assert!(
                name.starts_with("outbox_relay_")
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}: outbox_relay_ and snake case"
            );
        }
        for histogram in HISTOGRAMS {
            assert!(ALL.contains(histogram), "{histogram}");
        }
    }
}
