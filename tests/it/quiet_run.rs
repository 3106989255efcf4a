//! A log an operator can alert on, and metrics there from start-up, through
//! the binary against the real services. ERROR means a person must act,
//! WARN that the relay is degraded and retrying: a healthy start, run and
//! stop (at-least-once, exactly-once, with a webhook route) logs neither,
//! also right after the services came up (the transaction coordinator
//! still loading). A Kafka dead letter is one WARN line that names it and
//! never carries its payload. Every metric the alert rules and dashboards
//! of deploy/ name is on /metrics before the first event, and a JSON log
//! writes numbers as numbers.

use std::collections::HashMap;
use std::path::Path;

use crate::support::http::*;
use crate::support::services::{self, WalKeepLimit};
use crate::support::webhook::*;
use crate::support::*;

/// The relay process of a healthy run. Its relay lock's lease is 10 s, not
/// the default 3 s: these tests run beside others on two cores, where a
/// load of 9 once kept a renewal past 3 s, and the lock's loss and
/// take-over are the standby tests' to judge, not a quiet run's.
fn quiet_relay(config: &Path) -> Relay {
    Relay::process_with_env(config, &[("OUTBOX_RELAY__RELAY__LOCK_LEASE_MS", "10000")])
}

/// The WARN and ERROR lines of a relay's text log.
fn loud_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| matches!(l.split_whitespace().nth(1), Some("WARN" | "ERROR")))
        .collect()
}

/// Fails, printing them, if `log` has WARN or ERROR lines.
fn assert_quiet(case: &str, log: &str) {
    let loud = loud_lines(log);
    assert!(
        loud.is_empty(),
        "{case}: a healthy run logged {} WARN/ERROR lines:\n{}",
        loud.len(),
        loud.join("\n")
    );
}

/// Where a healthy run's events go.
enum Sink<'a> {
    Kafka(&'a str),
    Webhook(&'a Receiver),
}

/// Starts the relay with `config`, commits 200 events, waits until `sink`
/// has them all, stops the relay with SIGTERM and returns its log, after
/// checking it exited 0.
async fn healthy_run(outbox: &TestOutbox, config: &Path, sink: Sink<'_>) -> String {
    let mut relay = quiet_relay(config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let committed = outbox
        .commit_events(&mut writer, 50, 4, 10, &mut seqs)
        .await;
    match sink {
        Sink::Kafka(topic) => {
            consume_all_ids(topic, &committed, DEADLINE).await;
        }
        Sink::Webhook(receiver) => {
            wait_until("every event accepted by the receiver", DEADLINE, || async {
                receiver.has_all(&committed)
            })
            .await;
        }
    }
    let status = relay.terminate().await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_at_least_once_run_logs_no_warn_or_error() {
    let outbox = TestOutbox::create("jsonb").await;
    let config = outbox.write_config("[relay]\nprogress_interval_secs = 1");
    let log = healthy_run(&outbox, &config, Sink::Kafka(&outbox.topic("order"))).await;
    assert_quiet("at-least-once", &log);
    outbox.drop_all().await;
}

/// Two runs: the first start (no checkpoint yet; on fresh services the
/// transaction coordinator is still loading), then a restart that reads
/// its checkpoint back (the reader meets the end of the partition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_exactly_once_start_restart_and_stop_log_no_warn_or_error() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    // As `outbox-relay init` says to create it: compacted, one partition.
    let checkpoints = random_name("checkpoints");
    outbox
        .create_topic_with_config(&checkpoints, 1, &[("cleanup.policy", "compact")])
        .await;
    let config = outbox.write_config_with(
        "",
        &format!("delivery = \"exactly-once\"\ncheckpoint_topic = \"{checkpoints}\""),
        "",
    );
    let first = healthy_run(&outbox, &config, Sink::Kafka(&topic)).await;
    assert_quiet("exactly-once, first start", &first);
    assert!(
        first.contains("no checkpoint of this relay found"),
        "{first}"
    );
    let again = healthy_run(&outbox, &config, Sink::Kafka(&topic)).await;
    assert_quiet("exactly-once, restart", &again);
    assert!(
        again.contains("resuming from the last committed checkpoint"),
        "the restart read its checkpoint:\n{again}"
    );
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_run_with_a_webhook_route_logs_no_warn_or_error() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["quiet-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    let config = outbox.write_config_with(
        &format!("delivery_table = \"{table}\""),
        "",
        &webhook_toml(&receiver.url(), &["quiet-secret".to_owned()], ""),
    );
    let log = healthy_run(&outbox, &config, Sink::Webhook(&receiver)).await;
    assert_quiet("webhook route", &log);
    assert!(receiver.bad_signatures().is_empty());
    outbox.drop_all().await;
}

/// A row whose payload is not JSON goes to the dead-letter topic: one WARN
/// line names it (topic, partition, offset, event id, reason) and nothing
/// of its payload is in the log; nothing else is loud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_dead_letter_logs_one_warn_without_its_payload() {
    let outbox = TestOutbox::create("text").await;
    let config = outbox.write_config("");
    let mut relay = quiet_relay(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let id = uuid::Uuid::new_v4().to_string();
    let marker = random_name("payload_secret");
    outbox
        .admin
        .execute(
            &format!(
                "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload)
                 VALUES ($1::text::uuid, 'order', 'agg-1', 'Placed', $2)",
                outbox.table
            ),
            &[&id, &format!("not json: {marker}")],
        )
        .await
        .unwrap();
    let dead = consume(&outbox.dlq_topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(dead.len(), 1, "the row is dead-lettered");
    assert_eq!(dead[0].header("dlq_reason_code"), Some("payload_not_json"));
    assert!(
        String::from_utf8_lossy(dead[0].value.as_deref().unwrap_or_default()).contains(&marker),
        "the dead letter keeps the payload"
    );
    relay.wait_for_event("dead_lettered", DEADLINE).await;
    let status = relay.terminate().await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{log}");
    assert!(!log.contains(&marker), "the payload is in the log:\n{log}");
    let loud = loud_lines(&log);
    assert_eq!(
        loud.len(),
        1,
        "one line for one dead letter:\n{}",
        loud.join("\n")
    );
    let line = loud[0];
    for shown in [
        " WARN ".to_owned(),
        format!("topic=\"{}\"", outbox.dlq_topic),
        format!("partition={}", dead[0].partition),
        format!("offset={}", dead[0].offset),
        format!("event_id=\"{id}\""),
        "reason=\"payload_not_json\"".to_owned(),
        format!("original_topic=\"{}\"", outbox.topic("order")),
    ] {
        assert!(line.contains(&shown), "{shown} in {line}");
    }
    outbox.drop_all().await;
}

/// Every `outbox_relay_*` name in the files under deploy/ (alert rules,
/// dashboard, the deployment's probes), with the file that names it.
fn metric_names_in_deploy() -> Vec<(String, String)> {
    fn walk(dir: &Path, names: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, names);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for (at, _) in text.match_indices("outbox_relay_") {
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let file = path.display().to_string();
                if !names.contains(&(name.clone(), file.clone())) {
                    names.push((name, file));
                }
            }
        }
    }
    let mut names = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"),
        &mut names,
    );
    names
}

/// Whether the exposition `metrics` has a sample of `name`.
fn has_series(metrics: &str, name: &str) -> bool {
    metrics.lines().any(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
    })
}

/// `log_format = "json"`: every line is one JSON object, the progress line's
/// counts, rate and lag are JSON numbers, and no field anywhere holds a
/// number in a string.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_log_writes_numbers_as_numbers() {
    let outbox = TestOutbox::create("jsonb").await;
    let config = outbox.write_config("[relay]\nlog_format = \"json\"\nprogress_interval_secs = 1");
    let mut relay = quiet_relay(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let committed = outbox
        .commit_events(&mut writer, 50, 4, 10, &mut seqs)
        .await;
    consume_all_ids(&outbox.topic("order"), &committed, DEADLINE).await;
    relay.wait_for_event("progress", DEADLINE).await;
    let status = relay.terminate().await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{log}");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for line in &lines {
        let fields = line["fields"].as_object().expect("fields");
        for (name, value) in fields {
            let quoted_number = value
                .as_str()
                .is_some_and(|s| s.parse::<f64>().is_ok() && name != "message");
            assert!(!quoted_number, "{name} is a number in a string: {line}");
        }
    }
    let progress = lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("progress over the last"))
        })
        .expect("a progress line");
    for field in [
        "events",
        "events_per_sec",
        "dead_lettered",
        "in_flight",
        "slot_lag_bytes",
    ] {
        assert!(
            progress["fields"][field].is_number(),
            "{field} is a JSON number: {progress}"
        );
    }
    outbox.drop_all().await;
}

/// The tests here hold the services alone ([`services::exclusive`]):
/// `make test` runs them after the others, one at a time.
mod alone {
    use super::*;

    /// Every metric the alert rules and the dashboard name is on /metrics
    /// before the first event (a series that first appears at 1 hides that
    /// increment from `increase()`, and an alert on a missing series never
    /// fires), and so are the labelled counters' series at 0. With a webhook
    /// route, for its gauges and counters; and with a
    /// `max_slot_wal_keep_size`, without which the slot has no
    /// `safe_wal_size` and the relay exports none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_metric_deploy_names_is_exported_before_the_first_event() {
        let names = metric_names_in_deploy();
        assert!(names.len() >= 15, "{names:?}");
        let held = services::exclusive().await;
        let outbox = TestOutbox::create_exclusive(&held, "jsonb").await;
        let _limit = WalKeepLimit::set(&outbox.admin, "10GB").await;
        let receiver = Receiver::start(&["quiet-secret"]).await;
        let table = create_delivery_table(&outbox).await;
        let port = free_port();
        let config = outbox.write_config_with(
            &format!("delivery_table = \"{table}\""),
            "",
            &format!(
                "[relay]\nmetrics_addr = \"127.0.0.1:{port}\"\n{}",
                webhook_toml(&receiver.url(), &["quiet-secret".to_owned()], "")
            ),
        );
        let mut relay = quiet_relay(&config);
        wait_until("/ready to answer 200", DEADLINE, || async {
            http_get(port, "/ready")
                .await
                .is_some_and(|(status, _)| status == 200)
        })
        .await;
        let scrape = || async { http_get(port, "/metrics").await.map(|(_, body)| body) };
        let missing = |metrics: &str| -> Vec<String> {
            names
                .iter()
                .filter(|(name, _)| !has_series(metrics, name))
                .map(|(name, file)| format!("{name} (named in {file})"))
                .collect()
        };
        wait_until_explained(
            "every metric deploy/ names on /metrics",
            DEADLINE,
            || async { scrape().await.is_some_and(|m| missing(&m).is_empty()) },
            || async {
                let metrics = scrape().await.unwrap_or_default();
                format!("missing: {:?}\n{metrics}", missing(&metrics))
            },
        )
        .await;
        let metrics = scrape().await.expect("/metrics");
        for series in [
            "outbox_relay_events_published_total 0",
            "outbox_relay_events_dead_lettered_total{reason=\"null_key\"} 0",
            "outbox_relay_events_dead_lettered_total{reason=\"too_large\"} 0",
            "outbox_relay_delivery_failures_total{reason=\"message_timeout\"} 0",
            "outbox_relay_reconnects_total{reason=\"stream_broke\"} 0",
            "outbox_relay_reconnects_total{reason=\"delivery_table\"} 0",
            "outbox_relay_server_changes_total 0",
            "outbox_relay_webhook_deliveries_total{route=\"hooks\",outcome=\"dead\"} 0",
            "outbox_relay_webhook_dead{route=\"hooks\"} 0",
        ] {
            assert!(
                metrics.lines().any(|l| l == series),
                "{series} before the first event:\n{metrics}"
            );
        }
        let status = relay.terminate().await;
        assert_eq!(status.code(), Some(EXIT_CLEAN), "{}", relay.log_text());
        outbox.drop_all().await;
    }
}
