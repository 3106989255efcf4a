//! Webhook sinks end to end: events routed by `[[routes]]` are POSTed to a
//! real HTTP receiver in the suite (support/webhook.rs) that verifies every
//! signature on the raw body, while it fails on purpose: an outage of 503s,
//! 429 with Retry-After, requests that hang past the relay's timeout, a
//! permanent refusal. The checker: nothing lost, per-aggregate order kept,
//! duplicates only across a crash, and the slot never waits on a retry
//! (its confirmed_flush_lsn moves past events that sit PENDING). Then
//! kill -9 during retries, and two relays sharing one delivery table; and
//! ([`delivery_table`]) the table missing at start or dropped while running;
//! ([`parked`]) a DEAD event holding its aggregate under
//! `after_dead_letter = "park"` until `dead retry` or `dead discard`;
//! ([`typed_sql`]) no value spliced into the relay's statements on it.

mod claim;
mod delivery_table;
mod parked;
mod typed_sql;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::webhook::*;
use crate::support::*;

const SIGNING: [&str; 2] = ["new-secret", "old-secret"];

fn secrets() -> Vec<String> {
    SIGNING.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_429_and_timeouts_lose_nothing_keep_order_and_never_hold_the_slot() {
    let outbox = TestOutbox::create("jsonb").await;
    // The receiver knows only the old secret: the relay signs with both
    // (rotation), so every request must still verify.
    let receiver = Receiver::start(&["old-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    let mut settings = outbox.settings_with(&webhook_toml(&receiver.url(), &secrets(), ""));
    settings.webhooks.table.name = table.clone();
    let relay = Relay::in_process(settings);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();

    // Healthy: delivered in line.
    let mut committed = outbox
        .commit_events(&mut writer, 40, 2, 10, &mut seqs)
        .await;
    wait_until("the first events accepted", DEADLINE, || async {
        receiver.has_all(&committed)
    })
    .await;
    assert_eq!(
        delivery_counts(&outbox, &table).await.get("PENDING"),
        None,
        "nothing needed a retry"
    );

    // An outage: every event fails its in-line tries and moves to the
    // delivery table; the slot's position moves past them all the same.
    let outage_started = Instant::now();
    receiver.set_mode(Mode::Status(503));
    let outage = outbox
        .commit_events(&mut writer, 30, 1, 10, &mut seqs)
        .await;
    let after_outage_commits = outbox.current_wal_lsn().await;
    wait_until(
        "the slot to confirm past events that wait for a retry",
        DEADLINE,
        || async {
            outbox
                .confirmed_flush_lsn()
                .await
                .is_some_and(|c| c >= after_outage_commits)
        },
    )
    .await;
    let counts = delivery_counts(&outbox, &table).await;
    assert_eq!(
        counts.get("PENDING"),
        Some(&30),
        "every event of the outage sits PENDING while the slot moved past it: {counts:?}"
    );
    let accepted_ids: Vec<String> = receiver.accepted().into_iter().map(|a| a.id).collect();
    assert!(
        outage.iter().all(|c| !accepted_ids.contains(&c.id)),
        "nothing is accepted during the outage"
    );
    committed.extend(outage);

    // The outage goes on (30 s in all), then the receiver throttles
    // (429, Retry-After: 2), then hangs past the relay's 2 s timeout (a timeout long enough that a
    // loaded machine never makes an accepted request look failed, which would
    // be a legitimate duplicate);
    // events keep arriving meanwhile and queue behind their aggregates.
    while outage_started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    receiver.set_mode(Mode::TooMany {
        retry_after_secs: 2,
    });
    // Aggregates agg-10.. have no pending row: their events are tried in
    // line and meet the 429 there.
    committed.extend(
        outbox
            .commit_events(&mut writer, 20, 1, 20, &mut seqs)
            .await,
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    receiver.set_mode(Mode::Hang(Duration::from_secs(4)));
    committed.extend(
        outbox
            .commit_events(&mut writer, 10, 1, 10, &mut seqs)
            .await,
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    receiver.set_mode(Mode::Accept {
        delay: Duration::ZERO,
    });
    committed.extend(
        outbox
            .commit_events(&mut writer, 10, 2, 10, &mut seqs)
            .await,
    );

    wait_until(
        "every event accepted after the faults",
        DEADLINE,
        || async { receiver.has_all(&committed) },
    )
    .await;
    let accepted = receiver.accepted();
    let duplicates = check_webhook_delivery("webhook-faults", &committed, &accepted, &[]);
    if duplicates > 0 {
        let mut count: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, a) in accepted.iter().enumerate() {
            count.entry(a.id.as_str()).or_default().push(i);
        }
        // Say which, and what the delivery table knows of them.
        for (id, at) in count.iter().filter(|(_, v)| v.len() > 1) {
            let row = outbox
                .admin
                .query_opt(
                    &format!("SELECT status, attempts, last_error FROM public.{table} WHERE event_id = $1"),
                    &[id],
                )
                .await
                .unwrap()
                .map(|r| (r.get::<_, String>(0), r.get::<_, i32>(1), r.get::<_, Option<String>>(2)));
            eprintln!(
                "duplicate {id} at {at:?} of {}: row {row:?}",
                accepted.len()
            );
        }
    }
    assert_eq!(duplicates, 0, "no crash, so no duplicate");
    assert_eq!(
        receiver.max_in_flight_per_key(),
        1,
        "one event of an aggregate in flight at a time, in line or retried"
    );
    assert!(
        receiver.bad_signatures().is_empty(),
        "every request verifies: {:?}",
        receiver.bad_signatures()
    );
    // Retry-After is honoured: after a 429 the same event comes back no
    // sooner than 2 s later, in line or from the delivery table.
    let log = receiver.log();
    let mut throttled = 0;
    for (i, (id, at, status)) in log.iter().enumerate() {
        if *status != 429 {
            continue;
        }
        throttled += 1;
        if let Some((_, next, _)) = log[i + 1..].iter().find(|(other, _, _)| other == id) {
            let waited = next.duration_since(*at);
            assert!(
                waited >= Duration::from_millis(1950),
                "event {id} came back {waited:?} after a 429 with Retry-After: 2"
            );
        }
    }
    assert!(throttled > 0, "the 429 phase throttled some requests");
    wait_until("every delivery row SENT", DEADLINE, || async {
        let counts = delivery_counts(&outbox, &table).await;
        !counts.contains_key("PENDING") && !counts.contains_key("DEAD")
    })
    .await;
    let sent_without_time: i64 = outbox
        .admin
        .query_one(
            &format!(
                "SELECT count(*) FROM public.{table} WHERE status = 'SENT' AND sent_at IS NULL"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(sent_without_time, 0, "SENT rows carry sent_at");

    // The request itself: binary-mode CloudEvent, the payload bytes exactly.
    let sample = &accepted[0];
    let payload: String = outbox
        .admin
        .query_one(
            &format!(
                "SELECT payload::text FROM public.{} WHERE id = $1::text::uuid",
                outbox.table
            ),
            &[&sample.id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(sample.body.as_ref(), payload.as_bytes());
    let h = |n: &str| sample.headers.get(n).map(String::as_str);
    assert_eq!(h("ce-id"), Some(sample.id.as_str()));
    assert_eq!(h("idempotency-key"), Some(sample.id.as_str()));
    assert_eq!(h("ce-type"), Some("OrderPlaced"));
    assert_eq!(h("ce-source"), Some("/orders-service"));
    assert_eq!(h("ce-specversion"), Some("1.0"));
    assert_eq!(h("ce-subject"), Some(sample.aggregate.as_str()));
    assert_eq!(h("content-type"), Some("application/json"));
    assert!(h("ce-time").is_some());
    let signature = h("x-outbox-signature").unwrap();
    assert_eq!(
        signature.matches("v1=").count(),
        2,
        "one v1 per secret: {signature}"
    );

    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_refusal_is_dead_with_its_status_and_under_skip_the_aggregate_goes_on() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    // The route's own setting, over its sink's (park, the default).
    let toml = webhook_toml(&receiver.url(), &secrets(), "").replacen(
        "sink = \"hooks\"\n",
        "sink = \"hooks\"\nafter_dead_letter = \"skip\"\n",
        1,
    );
    assert!(toml.contains("after_dead_letter"), "route layout changed");
    let mut settings = outbox.settings_with(&toml);
    settings.webhooks.table.name = table.clone();
    // The 2nd event of agg-0 is refused for good (410).
    receiver.refuse("agg-0", 2, 410);
    let relay = Relay::in_process(settings);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let committed = outbox.commit_events(&mut writer, 8, 1, 2, &mut seqs).await;
    let refused: Vec<String> = committed
        .iter()
        .filter(|c| c.aggregate == "agg-0" && c.seq == 2)
        .map(|c| c.id.clone())
        .collect();
    assert_eq!(refused.len(), 1);
    wait_until("the others accepted", DEADLINE, || async {
        let ids: Vec<String> = receiver.accepted().into_iter().map(|a| a.id).collect();
        committed
            .iter()
            .all(|c| refused.contains(&c.id) || ids.contains(&c.id))
    })
    .await;
    check_webhook_delivery("webhook-410", &committed, &receiver.accepted(), &refused);
    let row = outbox
        .admin
        .query_one(
            &format!(
                "SELECT status, last_status, last_error, attempts, after_dead_letter \
                 FROM public.{table} WHERE event_id = $1"
            ),
            &[&refused[0]],
        )
        .await
        .expect("the refused event has its row");
    assert_eq!(row.get::<_, String>(0), "DEAD");
    assert_eq!(row.get::<_, Option<i32>>(1), Some(410));
    assert!(row.get::<_, Option<String>>(2).unwrap().contains("410"));
    assert_eq!(
        row.get::<_, i32>(3),
        1,
        "a permanent refusal is not retried"
    );
    assert_eq!(
        row.get::<_, String>(4),
        "skip",
        "the row records its route's setting: it holds nothing"
    );
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_retries_loses_nothing() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    let metrics_port = free_port();
    let config = outbox.write_config(&format!(
        "[relay]\nmetrics_addr = \"127.0.0.1:{metrics_port}\"\n{}",
        webhook_toml(&receiver.url(), &secrets(), "")
    ));
    let vars = [("OUTBOX_RELAY__POSTGRES__DELIVERY_TABLE", table.as_str())];
    receiver.set_mode(Mode::Status(503));
    let relay = Relay::process_with_env(&config, &vars);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 40, 1, 8, &mut seqs).await;
    // Retries under way: rows PENDING and the worker has tried some of
    // them again.
    wait_until("rows pending and retried", DEADLINE, || async {
        let counts = delivery_counts(&outbox, &table).await;
        let retried: i64 = outbox
            .admin
            .query_one(
                &format!("SELECT count(*) FROM public.{table} WHERE attempts > 2"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        counts.get("PENDING").copied().unwrap_or(0) >= 8 && retried > 0
    })
    .await;
    // The stuck-delivery gauges show them, per route.
    wait_until("the pending gauge to show the rows", DEADLINE, || async {
        match crate::support::http::http_get(metrics_port, "/metrics").await {
            Some((200, body)) => {
                crate::support::http::metric_value(
                    &body,
                    "outbox_relay_webhook_pending",
                    "route=\"hooks\"",
                ) >= 8.0
                    && body.contains(
                        "outbox_relay_webhook_oldest_pending_age_seconds{route=\"hooks\"}",
                    )
            }
            _ => false,
        }
    })
    .await;
    committed.extend(outbox.commit_events(&mut writer, 10, 1, 8, &mut seqs).await);
    relay.kill9();
    receiver.set_mode(Mode::Accept {
        delay: Duration::ZERO,
    });
    committed.extend(outbox.commit_events(&mut writer, 10, 1, 8, &mut seqs).await);
    let mut relay = Relay::process_with_env(&config, &vars);
    wait_until(
        "every event accepted after the restart",
        DEADLINE,
        || async { receiver.has_all(&committed) },
    )
    .await;
    check_webhook_delivery("webhook-kill9", &committed, &receiver.accepted(), &[]);
    assert!(receiver.bad_signatures().is_empty());
    relay.terminate().await;
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_sharing_the_delivery_table_never_send_one_row_at_once() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    let mut settings = outbox.settings_with(&webhook_toml(&receiver.url(), &secrets(), ""));
    settings.webhooks.table.name = table.clone();
    // One relay streams the slot; the other waits for it, but its retry
    // worker works the shared table from the start.
    receiver.set_mode(Mode::Status(503));
    let first = Relay::in_process(settings.clone());
    let second = Relay::in_process(settings);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    // Many aggregates: many queue heads due at once, for 2 × 4 workers.
    let committed = outbox
        .commit_events(&mut writer, 60, 1, 30, &mut seqs)
        .await;
    wait_until("every event parked", DEADLINE, || async {
        delivery_counts(&outbox, &table).await.get("PENDING") == Some(&60)
    })
    .await;
    // Slow answers: a row sent twice at once would overlap.
    receiver.set_mode(Mode::Accept {
        delay: Duration::from_millis(300),
    });
    wait_until("every event accepted", DEADLINE, || async {
        receiver.has_all(&committed)
    })
    .await;
    let duplicates =
        check_webhook_delivery("webhook-two-relays", &committed, &receiver.accepted(), &[]);
    assert_eq!(
        receiver.max_in_flight_per_id(),
        1,
        "one row in flight once at most"
    );
    assert_eq!(
        receiver.max_in_flight_per_key(),
        1,
        "only the head of an aggregate's queue is claimed"
    );
    assert_eq!(duplicates, 0, "no crash, so no duplicate");
    first.stop().await.expect("graceful stop");
    second.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

/// The binary with the delivery table named by the environment.
async fn cli(args: Vec<String>, table: &str) -> std::process::Output {
    let table = table.to_owned();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(&args)
            .env_remove("OUTBOX_RELAY_ADMIN_URL")
            .env_remove("OUTBOX_RELAY_CONFIG")
            .env("OUTBOX_RELAY__POSTGRES__DELIVERY_TABLE", table)
            .output()
            .expect("run outbox-relay")
    })
    .await
    .unwrap()
}

fn delivery_item(output: &std::process::Output) -> serde_json::Value {
    let items: Vec<serde_json::Value> =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "check --json is not JSON ({e}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    items
        .into_iter()
        .find(|i| i["name"] == "postgres.delivery_table")
        .expect("check reports the delivery table when a sink is configured")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_creates_the_delivery_table_and_check_verifies_it() {
    let outbox = TestOutbox::create("jsonb").await;
    let table = random_name("delivery");
    let config = outbox
        .write_config(&webhook_toml("https://hooks.example/in", &secrets(), ""))
        .display()
        .to_string();
    let check = || {
        vec![
            "check".to_owned(),
            "--config".to_owned(),
            config.clone(),
            "--json".to_owned(),
        ]
    };
    let before = cli(check(), &table).await;
    let item = delivery_item(&before);
    assert_eq!(item["status"], "fail", "{item}");
    assert!(item["fix"].as_str().unwrap().contains("init"), "{item}");
    assert_ne!(before.status.code(), Some(0));

    let init = vec![
        "init".to_owned(),
        "--config".to_owned(),
        config.clone(),
        "--grant".to_owned(),
        "relay".to_owned(),
        "--admin-url".to_owned(),
        env("PG_URL"),
    ];
    for run in 0..2 {
        let output = cli(init.clone(), &table).await;
        assert!(
            output.status.success(),
            "init run {run}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let writable: bool = outbox
        .admin
        .query_one(
            "SELECT has_table_privilege('relay', 'public.' || quote_ident($1), 'INSERT')
                AND has_table_privilege('relay', 'public.' || quote_ident($1), 'UPDATE')
                AND has_table_privilege('relay', 'public.' || quote_ident($1), 'DELETE')",
            &[&table],
        )
        .await
        .expect("the table exists")
        .get(0);
    assert!(
        writable,
        "init --grant lets the relay write the delivery table"
    );
    let after = cli(check(), &table).await;
    let item = delivery_item(&after);
    assert_eq!(item["status"], "ok", "{item}");
    outbox
        .admin
        .batch_execute(&format!("DROP TABLE public.{table}"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_mid_delivery_repeats_nothing() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    let mut settings = outbox.settings_with(&webhook_toml(&receiver.url(), &secrets(), ""));
    settings.webhooks.table.name = table.clone();
    receiver.set_mode(Mode::Status(503));
    let relay = Relay::in_process(settings.clone());
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox
        .commit_events(&mut writer, 20, 1, 10, &mut seqs)
        .await;
    wait_until("every event parked", DEADLINE, || async {
        delivery_counts(&outbox, &table).await.get("PENDING") == Some(&20)
    })
    .await;
    // Slow answers: the retry worker and (for aggregates without a
    // pending row) the session both have requests in flight at the stop.
    receiver.set_mode(Mode::Accept {
        delay: Duration::from_millis(300),
    });
    committed.extend(
        outbox
            .commit_events(&mut writer, 20, 1, 20, &mut seqs)
            .await,
    );
    // Stop once retries are under way: the worker holds rows whose
    // requests are in flight (30 rows, 300 ms each, 4 loops).
    wait_until("retried rows being sent", DEADLINE, || async {
        delivery_counts(&outbox, &table)
            .await
            .get("SENT")
            .is_some_and(|&n| n >= 3)
    })
    .await;
    relay.stop().await.expect("graceful stop");
    let relay = Relay::in_process(settings);
    wait_until(
        "every event accepted after the restart",
        DEADLINE,
        || async { receiver.has_all(&committed) },
    )
    .await;
    let duplicates = check_webhook_delivery(
        "webhook-graceful-stop",
        &committed,
        &receiver.accepted(),
        &[],
    );
    assert_eq!(duplicates, 0, "a graceful stop repeats nothing");
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_verifies_the_endpoint_against_ca_file_and_refuses_an_unknown_ca() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let ca = crate::support::tls::ThrowawayCa::create();
    let front = tls_front(receiver.port, &ca).await;
    let table = create_delivery_table(&outbox).await;
    let url = format!("https://localhost:{front}/hook");
    // Without the CA the certificate does not verify: every try fails in
    // line and the events wait in the delivery table.
    let mut settings = outbox.settings_with(&webhook_toml(&url, &secrets(), ""));
    settings.webhooks.table.name = table.clone();
    let relay = Relay::in_process(settings);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 4, 1, 4, &mut seqs).await;
    wait_until("the events parked", DEADLINE, || async {
        delivery_counts(&outbox, &table).await.get("PENDING") == Some(&4)
    })
    .await;
    assert_eq!(
        receiver.requests(),
        0,
        "nothing got through an unverified TLS"
    );
    let error: String = outbox
        .admin
        .query_one(
            &format!("SELECT last_error FROM public.{table} LIMIT 1"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(error.contains("TLS handshake"), "{error}");
    relay.stop().await.expect("graceful stop");

    // With the CA: delivered, the parked events too.
    let mut settings = outbox.settings_with(&webhook_toml(
        &url,
        &secrets(),
        &format!("ca_file = {:?}", ca.ca_cert.display().to_string()),
    ));
    settings.webhooks.table.name = table.clone();
    let relay = Relay::in_process(settings);
    committed.extend(outbox.commit_events(&mut writer, 4, 1, 4, &mut seqs).await);
    wait_until("every event accepted over https", DEADLINE, || async {
        receiver.has_all(&committed)
    })
    .await;
    check_webhook_delivery("webhook-https", &committed, &receiver.accepted(), &[]);
    assert!(receiver.bad_signatures().is_empty());
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}
