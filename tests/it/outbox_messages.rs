//! The table-less outbox (`sql/outbox_emit.sql`, `postgres.source`) against
//! real PostgreSQL and Kafka: outbox messages become the same CloudEvents as
//! rows, nothing else does, per-key order holds across rows and messages,
//! and a kill -9 of the relay loses none.

use std::collections::HashMap;

use crate::support::messages::{Write, install_outbox_emit};
use crate::support::*;

/// Messages that must never reach a topic: a rolled-back one, a
/// non-transactional one with the outbox prefix, and one of another prefix.
async fn write_strays(outbox: &TestOutbox) {
    let content = |id: &str| {
        format!(
            r#"{{"id":"{id}","aggregatetype":"order","aggregateid":"agg-0","type":"OrderPlaced","payload":{{"seq":0}}}}"#
        )
    };
    let mut writer = outbox.writer().await;
    let tx = writer.transaction().await.unwrap();
    tx.query_one(
        "SELECT outbox_emit('order', 'agg-0', 'OrderPlaced', '{\"rolled\": \"back\"}', \
         NULL, NULL, $1)",
        &[&outbox.message_prefix()],
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    outbox
        .admin
        .execute(
            "SELECT pg_logical_emit_message(false, $1, $2)",
            &[
                &outbox.message_prefix(),
                &content("stray-non-transactional"),
            ],
        )
        .await
        .unwrap();
    outbox
        .admin
        .execute(
            "SELECT pg_logical_emit_message(true, 'audit', $1)",
            &[&content("stray-other-prefix")],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_without_any_outbox_table_arrive_exactly_once_in_order() {
    let outbox = TestOutbox::create("jsonb").await;
    install_outbox_emit(&outbox.admin).await;
    // No outbox table at all: the publication stays, empty.
    outbox
        .admin
        .batch_execute(&format!(
            "ALTER PUBLICATION {} DROP TABLE public.{}; DROP TABLE public.{};",
            outbox.publication, outbox.table, outbox.table
        ))
        .await
        .unwrap();
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 4).await;
    let prefix = outbox.message_prefix();
    let settings =
        outbox.settings_with_postgres(&[("source", "messages"), ("message_prefix", &prefix)]);
    let relay = Relay::in_process(settings);

    write_strays(&outbox).await;
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let (mut committed, _) = outbox
        .emit_events(&mut writer, (200, 3, 30), Write::Messages, &mut seqs)
        .await;
    write_strays(&outbox).await;
    // A large transaction, too.
    let (more, _) = outbox
        .emit_events(&mut writer, (2, 500, 30), Write::Messages, &mut seqs)
        .await;
    committed.extend(more);

    consume_all_ids(&topic, &committed, DEADLINE).await;
    relay.stop().await.expect("graceful stop");
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("messages-only", &committed, &received);
    assert_eq!(summary.duplicated, 0, "a clean run delivers exactly once");
    assert_eq!(
        received.len(),
        committed.len(),
        "nothing but the committed messages: no rolled-back, non-transactional or \
         other-prefix message"
    );
    let by_id: HashMap<&str, &Committed> = committed.iter().map(|c| (c.id.as_str(), c)).collect();
    for r in &received {
        let c = by_id[r.header("ce_id").unwrap()];
        assert_eq!(r.header("ce_specversion"), Some("1.0"));
        assert_eq!(r.header("ce_type"), Some("OrderPlaced"));
        assert_eq!(r.header("ce_source"), Some("/orders-service"));
        assert_eq!(r.header("ce_subject"), Some(c.aggregate.as_str()));
        assert_eq!(r.header("content-type"), Some("application/json"));
        chrono::DateTime::parse_from_rfc3339(r.header("ce_time").unwrap()).unwrap();
        assert_eq!(r.key.as_deref(), Some(c.aggregate.as_bytes()));
        let data: serde_json::Value = serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
        assert_eq!(
            (data["seq"].as_i64(), data["total"].as_f64()),
            (Some(c.seq), Some(42.5))
        );
    }
    // The slot moved past the events: they were confirmed, not just sent.
    let confirmed = outbox.confirmed_flush_lsn().await.unwrap();
    assert!(confirmed > pgoutput::lsn::Lsn(0), "{confirmed}");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sources_keep_each_keys_order_across_rows_and_messages() {
    let outbox = TestOutbox::create("jsonb").await;
    install_outbox_emit(&outbox.admin).await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 6).await;
    let prefix = outbox.message_prefix();
    let settings =
        outbox.settings_with_postgres(&[("source", "both"), ("message_prefix", &prefix)]);
    let relay = Relay::in_process(settings);

    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let (committed, messages) = outbox
        .emit_events(&mut writer, (300, 4, 10), Write::Both, &mut seqs)
        .await;
    assert!(
        messages > 300 && messages < committed.len() - 300,
        "a real mix: {messages} messages of {}",
        committed.len()
    );
    consume_all_ids(&topic, &committed, DEADLINE).await;
    relay.stop().await.expect("graceful stop");
    let received = consume_to_end(&topic).await;
    // check_delivery asserts each aggregate's first occurrences sit in one
    // partition in commit (seq) order, whichever kind each event was.
    let summary = check_delivery("both", &committed, &received);
    assert_eq!(summary.duplicated, 0);
    assert_eq!(received.len(), committed.len());
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_messages_mode_loses_nothing() {
    let outbox = TestOutbox::create("jsonb").await;
    install_outbox_emit(&outbox.admin).await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 4).await;
    let config = outbox.write_config("");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        "heartbeat_interval_secs = 0\n",
        &format!(
            "heartbeat_interval_secs = 0\nsource = \"messages\"\nmessage_prefix = \"{}\"\n",
            outbox.message_prefix()
        ),
    );
    assert!(text.contains("source = \"messages\""));
    std::fs::write(&config, text).unwrap();
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = Vec::new();
    let seed: u64 = std::env::var("TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    for round in 0..3 {
        let relay = Relay::process(&config);
        let (events, _) = outbox
            .emit_events(&mut writer, (300, 3, 40), Write::Messages, &mut seqs)
            .await;
        committed.extend(events);
        // Seeded crash points: after how many delivered records each kill comes.
        let at =
            (committed.len() / 2) + ((seed as usize * 131 + round * 977) % (committed.len() / 2));
        let seen = consume(&topic, DEADLINE, move |r| r.len() >= at).await;
        assert!(
            seen.len() >= at,
            "round {round}: the relay delivers before the kill"
        );
        relay.kill9();
    }
    let mut relay = Relay::process(&config);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(
        status.success(),
        "graceful exit after the crashes: {status:?}"
    );
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("messages-kill-9", &committed, &received);
    assert_eq!(summary.lost, 0);
    assert_eq!(
        received.len() - summary.duplicated,
        committed.len(),
        "nothing but the committed messages"
    );
    outbox.drop_all().await;
}

/// Switched to `source = "messages"` while a service still inserts rows
/// into the outbox table (which the publication still publishes): those
/// rows are published like in "both", never skipped with the slot
/// confirmed past them, and one warning per session says they arrive.
/// (Current-thread runtime: the log capture sees the relay's tasks.)
#[tokio::test]
async fn rows_inserted_into_the_outbox_table_in_messages_mode_are_published() {
    let (logs, _guard) = LogCapture::start();
    let outbox = TestOutbox::create("jsonb").await;
    install_outbox_emit(&outbox.admin).await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 4).await;
    let prefix = outbox.message_prefix();
    let settings =
        outbox.settings_with_postgres(&[("source", "messages"), ("message_prefix", &prefix)]);
    let relay = Relay::in_process(settings);

    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    // Rows and messages, in transactions of either kind and mixed ones.
    let (committed, messages) = outbox
        .emit_events(&mut writer, (30, 2, 6), Write::Both, &mut seqs)
        .await;
    let rows = committed.len() - messages;
    assert!(rows > 0 && messages > 0, "{rows} rows, {messages} messages");
    // Once the slot is past the last commit, the relay handled every
    // transaction: what is not on the topic then was skipped.
    let end = outbox.current_wal_lsn().await;
    wait_until(
        "the slot to confirm the last transaction",
        DEADLINE,
        || async { outbox.confirmed_flush_lsn().await.is_some_and(|c| c >= end) },
    )
    .await;
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("rows-in-messages-mode", &committed, &received);
    assert_eq!(
        summary.lost,
        0,
        "{rows} rows of the outbox table among {} events; the slot confirmed {end}",
        committed.len()
    );
    relay.stop().await.expect("graceful stop");
    let warnings = logs.lines_with("rows arrive in the outbox table while postgres.source");
    assert_eq!(warnings.len(), 1, "one warning per session: {warnings:?}");
    outbox.drop_all().await;
}
