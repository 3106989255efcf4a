//! What an on-call engineer relies on, through the binary against the real
//! services: the exit codes, /ready, the metrics on /metrics, and the log
//! lines (start-up, progress, librdkafka's expected warning).

use std::time::Duration;

use crate::support::cli;
use crate::support::http::*;
use crate::support::*;

const FAST_EXIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Exit codes

/// A slot that does not exist is a PostgreSQL-side fatal error: exit 3, with
/// the slot named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_slot_exits_with_the_source_code() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox
        .admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
        .await
        .unwrap();
    let config = outbox.write_config("");
    let mut relay = Relay::process(&config);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SOURCE), "{log}");
    assert!(log.contains(&outbox.slot), "names the slot: {log}");
    // The fix names the config this relay runs with, ready to run.
    let init = format!("`outbox-relay init --config {}`", config.display());
    assert!(log.contains(&init), "names {init}: {log}");
    outbox.drop_all().await;
}

/// A dead-letter topic that does not exist, with a producer that may not
/// create topics, is a Kafka-side fatal error: exit 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_topic_exits_with_the_sink_code() {
    let outbox = TestOutbox::create("jsonb").await;
    let config =
        outbox.write_config("[kafka.properties]\n\"allow.auto.create.topics\" = \"false\"");
    let mut relay = Relay::process(&config);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SINK), "{log}");
    assert!(log.contains(&outbox.dlq_topic), "names the topic: {log}");
    outbox.drop_all().await;
}

/// A configuration the relay refuses: exit 2, naming the key, before any
/// connection (the slot does not even exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_config_exits_with_the_config_code() {
    let outbox = TestOutbox::create("jsonb").await;
    let config = outbox.write_config("[relay]\nunhealthy_after_secs = 0");
    let mut relay = Relay::process(&config);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{log}");
    assert!(log.contains("relay.unhealthy_after_secs"), "{log}");
    outbox.drop_all().await;
}

/// A librdkafka property librdkafka itself refuses (an unknown name, a
/// value it cannot take) is a refused configuration: `check-config` exits 2
/// naming the key and librdkafka's reason, and so does a relay, at once,
/// before the relay lock, where another relay holding the lock would keep
/// it standing by until it became active and failed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_property_librdkafka_refuses_exits_with_the_config_code_before_the_lock() {
    let outbox = TestOutbox::create("jsonb").await;
    let key = outbox_relay::relay::lock::lock_key(&outbox.slot);
    let held: bool = outbox
        .admin
        .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
        .await
        .unwrap()
        .get(0);
    assert!(held, "the test holds the relay lock of its slot");
    for (property, says) in [
        ("lingerr.ms", "No such configuration property"),
        ("batch.num.messages", "Invalid value"),
    ] {
        let config = outbox.write_config(&format!("[kafka.properties]\n\"{property}\" = \"abc\""));
        let field = format!("kafka.properties.\"{property}\"");
        let output = cli::cli(vec![
            "check-config".into(),
            "--config".into(),
            config.display().to_string(),
        ])
        .await;
        let shown = cli::shown(&output);
        assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{shown}");
        assert!(
            shown.contains(&field) && shown.contains(says),
            "names {field} and librdkafka's reason: {shown}"
        );

        let mut relay = Relay::process(&config);
        let status = relay.wait(FAST_EXIT).await;
        let log = relay.log_text();
        assert_eq!(status.code(), Some(EXIT_CONFIG), "{log}");
        assert!(log.contains(&field) && log.contains(says), "{log}");
        assert!(
            !log.contains("starting"),
            "refused before it started: {log}"
        );
    }
    outbox
        .admin
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    outbox.drop_all().await;
}

/// SIGTERM while streaming: drain, confirm, exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_streaming_exits_clean() {
    let outbox = TestOutbox::create("jsonb").await;
    let config = outbox.write_config("");
    let mut relay = Relay::process(&config);
    wait_until("the relay to hold the slot", FAST_EXIT, || {
        outbox.slot_active()
    })
    .await;
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{status:?}");
    outbox.drop_all().await;
}

// ---------------------------------------------------------------------------
// /ready

/// /ready answers 503 with the reason while the relay cannot stream (here:
/// another reader holds the slot, and the relay lock is off, so it tries
/// the slot; with the lock, see standby.rs), 200 once it streams, and
/// /health and /metrics stay beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_with_the_reason_until_the_relay_streams() {
    let outbox = TestOutbox::create("jsonb").await;
    let other = Relay::in_process(outbox.settings());
    wait_until("the other reader to hold the slot", FAST_EXIT, || {
        outbox.slot_active()
    })
    .await;
    let port = free_port();
    let config = outbox.write_config(&format!(
        "[relay]\nmetrics_addr = \"127.0.0.1:{port}\"\nstandby_lock = false"
    ));
    let mut relay = Relay::process(&config);
    let ready_is = |want: u16, needle: &'static str| async move {
        http_get(port, "/ready")
            .await
            .is_some_and(|(status, body)| status == want && body.contains(needle))
    };
    wait_until(
        "/ready to answer 503 naming the busy slot",
        FAST_EXIT,
        || ready_is(503, "slot_busy"),
    )
    .await;
    // The same answer as a gauge, for alerts (present, not merely absent).
    let (status, metrics) = http_get(port, "/metrics").await.expect("/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.lines().any(|l| l == "outbox_relay_ready 0"),
        "{metrics}"
    );

    other.stop().await.expect("the other reader stops");
    wait_until("/ready to answer 200 once streaming", FAST_EXIT, || {
        ready_is(200, "streaming")
    })
    .await;
    let (status, body) = http_get(port, "/health").await.expect("/health");
    assert_eq!(status, 200, "{body}");
    let (_, metrics) = http_get(port, "/metrics").await.expect("/metrics");
    assert!(
        metrics.lines().any(|l| l == "outbox_relay_ready 1"),
        "{metrics}"
    );
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{status:?}");
    outbox.drop_all().await;
}

// ---------------------------------------------------------------------------
// Metrics

/// The metrics on-call reads, with their base units, after some events and
/// one dead letter: the commit-to-ack histogram counted every event, bytes
/// went to each topic, the dead letter is counted by its reason, and the
/// slot's lag and the oldest unacknowledged event's age are exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_latency_bytes_by_topic_dead_letters_by_reason_and_slot_lag() {
    let outbox = TestOutbox::create("jsonb").await;
    let port = free_port();
    let config = outbox.write_config(&format!("[relay]\nmetrics_addr = \"127.0.0.1:{port}\""));
    let mut relay = Relay::process(&config);
    wait_until("/ready to answer 200", FAST_EXIT, || async {
        http_get(port, "/ready")
            .await
            .is_some_and(|(s, _)| s == 200)
    })
    .await;
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let events = 20;
    outbox.commit_events(&mut writer, 10, 2, 3, &mut seqs).await;
    // A row without a key: dead-lettered as null_key.
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload)
             VALUES ('{}', 'order', NULL, 'Placed', '{{}}')",
            outbox.table,
            uuid::Uuid::new_v4()
        ))
        .await
        .unwrap();
    let scrape = || async { http_get(port, "/metrics").await.map(|(_, b)| b) };
    wait_until(
        "every event published, the dead letter written and the lag sampled",
        FAST_EXIT,
        || async {
            scrape().await.is_some_and(|m| {
                metric_value(&m, "outbox_relay_events_published_total", "") >= events as f64
                    && metric_value(
                        &m,
                        "outbox_relay_events_dead_lettered_total",
                        "reason=\"null_key\"",
                    ) == 1.0
                    && m.lines()
                        .any(|l| l.starts_with("outbox_relay_slot_lag_bytes "))
            })
        },
    )
    .await;
    let metrics = scrape().await.expect("/metrics");
    let value = |name: &str, labels: &str| metric_value(&metrics, name, labels);
    assert_eq!(
        value("outbox_relay_commit_to_ack_seconds_count", ""),
        events as f64,
        "one latency sample per event, none for the dead letter: {metrics}"
    );
    let sum = value("outbox_relay_commit_to_ack_seconds_sum", "");
    assert!(sum > 0.0 && sum < 60.0 * events as f64, "seconds: {sum}");
    assert!(
        metrics.contains("outbox_relay_commit_to_ack_seconds_bucket{le=\"0.005\"}"),
        "seconds buckets: {metrics}"
    );
    let topic_bytes = |topic: &str| {
        value(
            "outbox_relay_published_bytes_total",
            &format!("topic=\"{topic}\""),
        )
    };
    // Exactly what the topic holds: keys, values, header names and values.
    let held: usize = consume_to_end(&outbox.topic("order"))
        .await
        .iter()
        .map(|r| {
            let headers: usize = r.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
            r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len) + headers
        })
        .sum();
    assert!(
        held > 40 * events,
        "each event has at least its id and payload"
    );
    assert_eq!(
        topic_bytes(&outbox.topic("order")),
        held as f64,
        "{metrics}"
    );
    assert!(topic_bytes(&outbox.dlq_topic) > 0.0, "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("outbox_relay_oldest_unacked_event_age_seconds ")),
        "{metrics}"
    );
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{status:?}");
    outbox.drop_all().await;
}

/// What waits in the parking table is on /metrics, /health and `status`.
/// The relay starts before its parking table exists: the gauges are there
/// at 0, and one WARN line names the fix (not one per sample). Once the
/// table holds two live heads (one parked two hours ago), three events
/// behind them and a released head of a day ago, the gauges say 2, 3 and
/// two hours at the next sample; /health shows the figures and stays 200;
/// `status` shows them, text and JSON, with the command to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_aggregates_show_on_metrics_health_and_status() {
    let outbox = TestOutbox::create("jsonb").await;
    let parked = format!("public.{}_parked", outbox.table);
    outbox
        .admin
        .batch_execute(&format!("DROP TABLE {parked}"))
        .await
        .unwrap();
    let port = free_port();
    let config = outbox.write_config(&format!("[relay]\nmetrics_addr = \"127.0.0.1:{port}\""));
    let mut relay = Relay::process(&config);
    relay
        .wait_for_event("parked_gauges_unread", FAST_EXIT)
        .await;
    let scrape = || async { http_get(port, "/metrics").await.map(|(_, b)| b) };
    let metrics = scrape().await.expect("/metrics");
    for series in [
        "outbox_relay_parked_aggregates 0",
        "outbox_relay_parked_events 0",
        "outbox_relay_parked_oldest_head_age_seconds 0",
    ] {
        assert!(metrics.lines().any(|l| l == series), "{series}: {metrics}");
    }

    let table = outbox_relay::parking::ParkedTable {
        schema: "public".into(),
        name: format!("{}_parked", outbox.table),
    };
    let row = |aggregate: &str, id: &str, kind: &str, lsn: &str, parked_at: &str| {
        format!(
            "('order', '{aggregate}', '{id}', '{kind}', 0, '{lsn}', 0, now() - interval '{parked_at}')"
        )
    };
    outbox
        .admin
        .batch_execute(&format!(
            "{create} GRANT SELECT ON {parked} TO relay;
             INSERT INTO {parked} (aggregatetype, aggregateid, event_id, kind, shard, commit_lsn,
                 position, parked_at) VALUES {rows};
             INSERT INTO {parked} (aggregatetype, aggregateid, event_id, kind, shard, commit_lsn,
                 position, parked_at, released_at)
                 VALUES ('order', 'agg-9', 'e9', 'HEAD', 0, '0/90', 0, now() - interval '1 day', now());",
            create = table.create_sql(),
            rows = [
                row("agg-1", "e1", "HEAD", "0/10", "2 hours"),
                row("agg-1", "e2", "EVENT", "0/11", "1 hour"),
                row("agg-1", "e3", "EVENT", "0/12", "1 hour"),
                row("agg-2", "e4", "HEAD", "0/20", "10 minutes"),
                row("agg-2", "e5", "EVENT", "0/21", "5 minutes"),
            ]
            .join(", "),
        ))
        .await
        .unwrap();
    let figures = |m: &str| {
        (
            metric_value(m, "outbox_relay_parked_aggregates", ""),
            metric_value(m, "outbox_relay_parked_events", ""),
            metric_value(m, "outbox_relay_parked_oldest_head_age_seconds", ""),
        )
    };
    wait_until_explained(
        "the gauges to show 2 aggregates, 3 events, a head two hours old",
        FAST_EXIT,
        || async {
            scrape().await.is_some_and(|m| {
                let (aggregates, events, age) = figures(&m);
                aggregates == 2.0 && events == 3.0 && (7_200.0..7_400.0).contains(&age)
            })
        },
        || async { format!("{:?}", figures(&scrape().await.unwrap_or_default())) },
    )
    .await;
    let (status, body) = http_get(port, "/health").await.expect("/health");
    assert_eq!(status, 200, "parking is no failure: {body}");
    assert!(
        body.contains("parked: 2 aggregates behind a dead letter, 3 events waiting")
            && body.contains("(outbox-relay dead list)"),
        "{body}"
    );
    // One line for the incident, and one when it ended.
    let log = relay.log_text();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cannot read the parking table"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(
        warned[0].contains(" WARN ") && warned[0].contains("`outbox-relay init` creates it"),
        "{}",
        warned[0]
    );
    assert!(
        log.contains("the parked gauges read the parking table again"),
        "{log}"
    );

    let status = |json: bool| {
        let mut args = vec![
            "status".to_owned(),
            "--config".to_owned(),
            config.display().to_string(),
        ];
        if json {
            args.push("--json".to_owned());
        }
        cli::cli(args)
    };
    let output = status(true).await;
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", cli::shown(&output)));
    assert_eq!(json["parked"]["aggregates"], 2, "{json}");
    assert_eq!(json["parked"]["events"], 3, "{json}");
    let age = json["parked"]["oldest_head_secs"].as_f64().unwrap();
    assert!((7_200.0..7_400.0).contains(&age), "{json}");
    let output = status(false).await;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("2 aggregates behind a dead letter, 3 events waiting behind them")
            && text.contains("`outbox-relay dead list` shows them"),
        "{}",
        cli::shown(&output)
    );

    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{}", relay.log_text());
    outbox.drop_all().await;
}

// ---------------------------------------------------------------------------
// Log lines

/// At info, as deployed: the start-up report shows the effective config,
/// one line a table, with the password hidden (and a metrics address given
/// by host name binds); librdkafka's expected gapless-guarantee warning is
/// not printed; a progress line appears while there is work (interval cut
/// to 1 s here) with the rate, the lag, what is in flight and the dead
/// letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_line_redacts_secrets_progress_line_appears_and_confwarn_is_quiet() {
    let outbox = TestOutbox::create("jsonb").await;
    let password = env("PG_RELAY_URL")
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(user, _)| user.split_once(':'))
        .map(|(_, password)| password.to_owned())
        .expect("PG_RELAY_URL has a password");
    let port = free_port();
    let config = outbox.write_config(&format!(
        "[relay]\nprogress_interval_secs = 1\nmetrics_addr = \"localhost:{port}\""
    ));
    let mut relay = Relay::process(&config);
    wait_until("the relay to hold the slot", FAST_EXIT, || {
        outbox.slot_active()
    })
    .await;
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    outbox.commit_events(&mut writer, 20, 5, 4, &mut seqs).await;
    relay.wait_for_event("progress", FAST_EXIT).await;
    let log_path = relay.log_path().to_path_buf();
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{status:?}");
    let log = std::fs::read_to_string(&log_path).expect("the relay's log");

    assert!(!log.contains(&password), "the password leaked:\n{log}");
    assert!(
        log.lines().any(|l| l.contains("outbox-relay starting")),
        "no start-up line:\n{log}"
    );
    let table = |name: &str| {
        log.lines()
            .find(|l| l.contains(" INFO ") && l.contains(&format!(": config {name} = {{ ")))
            .unwrap_or_else(|| panic!("no config line of [{name}]:\n{log}"))
    };
    for (name, shown) in [
        ("postgres", "url = \"postgres://relay:***@".to_owned()),
        ("postgres", format!("slot = \"{}\"", outbox.slot)),
        ("kafka", format!("dlq_topic = \"{}\"", outbox.dlq_topic)),
        ("relay", "progress_interval_secs = 1,".to_owned()),
        ("relay", "unhealthy_after_secs = 120,".to_owned()),
        ("relay", format!("metrics_addr = \"localhost:{port}\"")),
    ] {
        let line = table(name);
        assert!(line.contains(&shown), "{shown} in {line}");
    }
    assert!(
        !log.contains("transactional_id"),
        "no exactly-once keys in at-least-once mode:\n{log}"
    );
    assert!(
        !log.contains("enable.gapless.guarantee"),
        "librdkafka's expected warning is at debug only:\n{log}"
    );
    let progress = log
        .lines()
        .find(|l| l.contains("progress over the last"))
        .expect("a progress line");
    assert!(progress.contains(" INFO "), "{progress}");
    for field in [
        "events=",
        "events_per_sec=",
        "slot_lag_bytes=",
        "in_flight=",
        "dead_lettered=0",
    ] {
        assert!(progress.contains(field), "{field} in {progress}");
    }
    outbox.drop_all().await;
}

/// `outbox-relay --help` and `outbox-relay run --help` list the exit codes
/// an operator's supervisor sees, with what each means.
#[test]
fn help_documents_the_exit_codes() {
    for args in [&["--help"][..], &["run", "--help"][..]] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(args)
            .output()
            .expect("run outbox-relay --help");
        assert!(output.status.success(), "{args:?}: {output:?}");
        let help = String::from_utf8_lossy(&output.stdout);
        for (code, meaning) in [
            (EXIT_CLEAN, "clean stop"),
            (EXIT_CONFIG, "configuration refused"),
            (EXIT_SOURCE, "PostgreSQL"),
            (EXIT_SINK, "Kafka"),
        ] {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{code} ")))
                .unwrap_or_else(|| panic!("{args:?}: no line for exit code {code}:\n{help}"));
            assert!(line.contains(meaning), "{args:?}: {line}");
        }
        // Exit 4 also covers a relay fenced in exactly-once mode: what a
        // supervisor must not answer with a restart loop. The entry goes on
        // over the indented lines below its code.
        let entry: Vec<&str> = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(&format!("{EXIT_SINK} ")))
            .enumerate()
            .take_while(|(i, l)| *i == 0 || (l.starts_with("     ") && !l.trim().is_empty()))
            .map(|(_, l)| l.trim())
            .collect();
        let entry = entry.join(" ");
        assert!(
            entry.contains("fenced by another relay with the same kafka.transactional_id"),
            "{args:?}: exit {EXIT_SINK}: {entry}\n{help}"
        );
    }
}
