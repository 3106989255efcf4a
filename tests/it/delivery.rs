//! Delivery in the normal course, the relay in-process against real
//! PostgreSQL and Kafka: outbox rows become CloudEvents on their topic
//! exactly once and in per-aggregate order, a graceful restart sends nothing
//! twice, the slot is confirmed only behind the broker's acknowledgements;
//! updates, deletes and truncates are ignored (and counted) while /health
//! stays 200; an idle outbox on a busy database still lets the slot advance.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::http::*;
use crate::support::*;

/// Checks what a consumer of the topic sees against what was committed:
/// every id exactly once, in per-aggregate commit order, nothing extra.
fn check_clean_delivery(case: &str, committed: &[Committed], received: &[Received]) {
    let summary = check_delivery(case, committed, received);
    assert_eq!(
        summary.duplicated, 0,
        "{case}: a clean run delivers exactly once"
    );
    assert_eq!(
        received.len(),
        committed.len(),
        "{case}: no unexpected records"
    );
}

fn check_binary_cloudevent(r: &Received, committed: &Committed) {
    assert_eq!(r.header("ce_specversion"), Some("1.0"));
    assert_eq!(r.header("ce_id"), Some(committed.id.as_str()));
    assert_eq!(r.header("ce_type"), Some("OrderPlaced"));
    assert_eq!(r.header("ce_source"), Some("/orders-service"));
    assert_eq!(r.header("ce_subject"), Some(committed.aggregate.as_str()));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("id"), Some(committed.id.as_str()));
    let time = r.header("ce_time").expect("ce_time");
    chrono::DateTime::parse_from_rfc3339(time).expect("ce_time is RFC 3339");
    assert_eq!(r.key.as_deref(), Some(committed.aggregate.as_bytes()));
    let data: serde_json::Value = serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
    assert_eq!(data["seq"], committed.seq);
    assert_eq!(data["aggregate"], committed.aggregate.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_exactly_once_in_order_then_graceful_restart_adds_no_duplicate() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    // Topics are often created ahead with many partitions: never assume one.
    outbox.create_topic(&topic, 6).await;
    let relay = Relay::in_process(outbox.settings());

    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = Vec::new();
    committed.extend(
        outbox
            .commit_events(&mut writer, 1000, 1, 100, &mut seqs)
            .await,
    );
    committed.extend(
        outbox
            .commit_events(&mut writer, 400, 10, 100, &mut seqs)
            .await,
    );
    committed.extend(
        outbox
            .commit_events(&mut writer, 5, 1000, 100, &mut seqs)
            .await,
    );
    assert_eq!(committed.len(), 10_000);
    let after_last_commit = outbox.current_wal_lsn().await;

    let want = committed.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    check_clean_delivery("clean-run", &committed, &received);
    let by_id: HashMap<&str, &Committed> = committed.iter().map(|c| (c.id.as_str(), c)).collect();
    for r in &received {
        check_binary_cloudevent(r, by_id[r.header("ce_id").unwrap()]);
    }

    // Everything acknowledged gets confirmed to the slot.
    wait_until(
        "the slot to confirm the last transaction",
        DEADLINE,
        || async {
            outbox
                .confirmed_flush_lsn()
                .await
                .is_some_and(|c| c >= after_last_commit)
        },
    )
    .await;
    relay.stop().await.expect("graceful stop");
    let confirmed = outbox.confirmed_flush_lsn().await.expect("slot exists");
    assert!(
        confirmed >= after_last_commit,
        "after draining, confirmed_flush_lsn {confirmed} covers the last commit (WAL insert position after it: {after_last_commit})"
    );

    // Restart after a graceful stop: nothing is sent twice.
    let relay = Relay::in_process(outbox.settings());
    let more = outbox
        .commit_events(&mut writer, 1, 1, 100, &mut seqs)
        .await;
    committed.extend(more);
    let want = committed.len();
    consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    relay.stop().await.expect("graceful stop");
    let received = consume_to_end(&topic).await;
    check_clean_delivery("graceful-restart", &committed, &received);
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_deletes_truncates_are_ignored_and_deleted_inserts_still_published() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let relay = Relay::in_process(outbox.settings());
    let t = &outbox.table;
    let ids: Vec<String> = (0..3).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    outbox
        .admin
        .batch_execute(&format!(
            "BEGIN;
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{a}', 'order', 'o1', 'Placed', '{{\"n\":1}}');
             DELETE FROM public.{t} WHERE id = '{a}';
             COMMIT;
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{b}', 'order', 'o1', 'Placed', '{{\"n\":2}}');
             UPDATE public.{t} SET type = 'Changed' WHERE id = '{b}';
             DELETE FROM public.{t} WHERE id = '{b}';
             TRUNCATE public.{t};
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{c}', 'order', 'o1', 'Placed', '{{\"n\":3}}');",
            a = ids[0],
            b = ids[1],
            c = ids[2],
        ))
        .await
        .unwrap();
    let received = consume(&topic, DEADLINE, |r| r.len() >= 3).await;
    let got: Vec<&str> = received
        .iter()
        .map(|r| r.header("ce_id").unwrap())
        .collect();
    assert_eq!(got, ids.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        received
            .iter()
            .all(|r| r.header("ce_type") == Some("Placed"))
    );
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_changes_are_counted_in_metrics_and_health_is_ok_while_streaming() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    // A publication that (wrongly) publishes everything: the relay must
    // ignore the other kinds, and count them. With the recommended
    // insert-only publication the server never sends them at all.
    outbox
        .admin
        .batch_execute(&format!(
            "ALTER PUBLICATION {} SET (publish = 'insert, update, delete, truncate')",
            outbox.publication
        ))
        .await
        .unwrap();
    let port = free_port();
    let config = outbox.write_config(&format!("[relay]\nmetrics_addr = \"127.0.0.1:{port}\""));
    let mut relay = Relay::process(&config);
    wait_until("/health to answer 200", DEADLINE, || async {
        http_get(port, "/health")
            .await
            .is_some_and(|(s, _)| s == 200)
    })
    .await;

    let t = &outbox.table;
    let ids: Vec<String> = (0..4).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let insert = |i: usize| {
        format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload)
             VALUES ('{}', 'order', 'o1', 'Placed', '{{\"seq\":{}}}');",
            ids[i],
            i + 1
        )
    };
    outbox
        .admin
        .batch_execute(&format!(
            "{}{}{}
             UPDATE public.{t} SET type = 'Changed' WHERE id IN ('{}', '{}');
             DELETE FROM public.{t} WHERE id = '{}';
             TRUNCATE public.{t};
             {}",
            insert(0),
            insert(1),
            insert(2),
            ids[0],
            ids[1],
            ids[2],
            insert(3),
        ))
        .await
        .unwrap();
    let committed: Vec<Committed> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Committed {
            id: id.clone(),
            aggregate: "o1".into(),
            seq: i as i64 + 1,
        })
        .collect();
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    // The last insert came after every ignored change: once it is
    // published, the counters are final.
    let published = |m: &str| metric_value(m, "outbox_relay_events_published_total", "");
    wait_until("the published counter to reach 4", DEADLINE, || async {
        let metrics = http_get(port, "/metrics").await.map(|(_, b)| b);
        metrics.is_some_and(|m| published(&m) >= 4.0)
    })
    .await;
    let (_, metrics) = http_get(port, "/metrics").await.expect("/metrics");
    let ignored = |kind: &str| {
        metric_value(
            &metrics,
            "outbox_relay_changes_ignored_total",
            &format!("kind=\"{kind}\""),
        )
    };
    assert_eq!(ignored("update"), 2.0, "{metrics}");
    assert_eq!(ignored("delete"), 1.0, "{metrics}");
    assert_eq!(ignored("truncate"), 1.0, "{metrics}");
    assert_eq!(published(&metrics), 4.0, "{metrics}");
    let (status, body) = http_get(port, "/health").await.expect("/health");
    assert_eq!(status, 200, "{body}");
    let summary = check_delivery("ignored-counted", &committed, &received);
    assert_eq!(summary.duplicated, 0);
    assert_eq!(
        received.len(),
        4,
        "updates, deletes, truncates publish nothing"
    );
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}");
    outbox.drop_all().await;
    report_wall_time("ignored-counted", started);
}

/// An event that comes after a pause, with nothing older waiting for the
/// broker, is sent at once rather than after `kafka.linger_ms`: the session
/// nudges the producer (`pace.rs` decides, `KafkaSink::nudge` carries it
/// out). With a 10 s linger, the second event (its topic already known to
/// the producer, so no metadata request stands between) must be on the
/// topic long before the linger would have sent it; without the nudge it
/// waits the whole 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_after_a_pause_is_sent_without_waiting_for_the_linger() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let relay = Relay::in_process(
        outbox.settings_with_kafka(&[("linger_ms", "10000"), ("message_timeout_ms", "120000")]),
    );
    let insert = |n: u32| {
        format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) \
             VALUES ('{id}', 'order', 'o1', 'Placed', '{{\"n\":{n}}}')",
            t = outbox.table,
            id = uuid::Uuid::new_v4(),
        )
    };
    // The first record also waits for the topic's metadata, and may then
    // wait for the linger: not what this test is about. The second comes
    // only once the relay holds nothing older for the broker: on the topic
    // is not enough (a consumer may see the record before the producer's
    // answer reaches the relay), so wait until the slot is confirmed into
    // the first's transaction, which the relay does once its report is in.
    let rows = outbox
        .admin
        .simple_query(&format!(
            "BEGIN; {}; SELECT pg_current_wal_insert_lsn()::text; COMMIT",
            insert(1)
        ))
        .await
        .unwrap();
    let inside_first: pgoutput::lsn::Lsn = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .expect("the LSN inside the first transaction")
        .parse()
        .unwrap();
    assert_eq!(consume(&topic, DEADLINE, |r| !r.is_empty()).await.len(), 1);
    wait_until(
        "the slot confirmed past the first event",
        DEADLINE,
        || async {
            outbox
                .confirmed_flush_lsn()
                .await
                .is_some_and(|c| c >= inside_first)
        },
    )
    .await;

    let committed = Instant::now();
    outbox.admin.batch_execute(&insert(2)).await.unwrap();
    let received = consume(&topic, Duration::from_secs(5), |r| r.len() >= 2).await;
    assert_eq!(
        received.len(),
        2,
        "the event after a pause was not on the topic {:?} after its commit: \
         it waited for the 10 s linger",
        committed.elapsed()
    );
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_outbox_on_a_busy_database_still_advances_the_slot() {
    let outbox = TestOutbox::create("jsonb").await;
    let mut settings = outbox.settings();
    settings.heartbeat_interval = Some(Duration::from_secs(1));
    let relay = Relay::in_process(settings);
    // Other tables write WAL; the outbox writes nothing.
    let busy = random_name("busy");
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE TABLE {busy} (id bigserial, v text);
             INSERT INTO {busy} (v) SELECT md5(i::text) FROM generate_series(1, 20000) i;"
        ))
        .await
        .unwrap();
    let busy_end = outbox.current_wal_lsn().await;
    wait_until(
        "the idle slot to advance past the busy table's WAL",
        DEADLINE,
        || async {
            outbox
                .confirmed_flush_lsn()
                .await
                .is_some_and(|c| c >= busy_end)
        },
    )
    .await;
    relay.stop().await.expect("graceful stop");
    outbox
        .admin
        .batch_execute(&format!("DROP TABLE {busy}"))
        .await
        .unwrap();
    outbox.drop_all().await;
}
