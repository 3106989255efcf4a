//! The relay end to end against real PostgreSQL and real Kafka: outbox rows
//! become CloudEvents on the topic, exactly once in a clean run, in
//! per-aggregate order, and the slot is confirmed behind the broker's acks.

use std::collections::HashMap;
use std::time::Duration;

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
async fn structured_mode_writes_cloudevents_json() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let relay = Relay::in_process(outbox.settings_with(r#"mode = "structured""#));
    let mut writer = outbox.writer().await;
    let committed = outbox
        .commit_events(&mut writer, 10, 5, 7, &mut HashMap::new())
        .await;
    let want = committed.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    assert_eq!(received.len(), committed.len());
    for (r, c) in received.iter().zip(&committed) {
        assert_eq!(
            r.header("content-type"),
            Some("application/cloudevents+json")
        );
        let ce: serde_json::Value = serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
        assert_eq!(ce["specversion"], "1.0");
        assert_eq!(ce["id"], c.id.as_str());
        assert_eq!(ce["type"], "OrderPlaced");
        assert_eq!(ce["source"], "/orders-service");
        assert_eq!(ce["subject"], c.aggregate.as_str());
        assert_eq!(ce["datacontenttype"], "application/json");
        chrono::DateTime::parse_from_rfc3339(ce["time"].as_str().unwrap()).unwrap();
        // data is JSON, not a string holding JSON.
        assert_eq!(ce["data"]["seq"], c.seq);
    }
    relay.stop().await.expect("graceful stop");
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
async fn bad_rows_go_to_the_dead_letter_topic_and_the_stream_goes_on() {
    // A text payload column lets a service write something that is not JSON.
    let outbox = TestOutbox::create("text").await;
    let topic = outbox.topic("order");
    let mut settings = outbox.settings();
    // A small producer limit stands in for the broker's size limit.
    settings
        .sink
        .properties
        .push(("message.max.bytes".into(), "20000".into()));
    let relay = Relay::in_process(settings);
    let t = &outbox.table;
    let not_json = uuid::Uuid::new_v4().to_string();
    let null_key = uuid::Uuid::new_v4().to_string();
    let too_large = uuid::Uuid::new_v4().to_string();
    let good = uuid::Uuid::new_v4().to_string();
    let big = format!("{{\"blob\":\"{}\"}}", "x".repeat(50_000));
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{not_json}', 'order', 'o1', 'Placed', 'this is not json');
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{null_key}', 'order', NULL, 'Placed', '{{}}');
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{too_large}', 'order', 'o1', 'Placed', '{big}');
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{good}', 'order', 'o1', 'Placed', '{{\"ok\":true}}');"
        ))
        .await
        .unwrap();
    let after = outbox.current_wal_lsn().await;
    let good_records = consume(&topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(good_records.len(), 1);
    assert_eq!(good_records[0].header("ce_id"), Some(good.as_str()));

    let dlq = consume(&outbox.dlq_topic, DEADLINE, |r| r.len() >= 3).await;
    assert_eq!(dlq.len(), 3, "three dead letters");
    let by_id: HashMap<&str, &Received> = dlq
        .iter()
        .map(|r| (r.header("id").expect("id header"), r))
        .collect();
    let reason = |id: &str| by_id[id].header("dlq_reason").unwrap().to_string();
    assert!(
        reason(&not_json).contains("not valid JSON"),
        "{}",
        reason(&not_json)
    );
    assert!(reason(&null_key).contains("NULL"), "{}", reason(&null_key));
    assert!(
        reason(&too_large).contains("too large"),
        "{}",
        reason(&too_large)
    );
    // Dead letters keep the payload; one larger than the producer's
    // message.max.bytes goes without it, saying what it was.
    assert_eq!(
        by_id[not_json.as_str()].value.as_deref(),
        Some(&b"this is not json"[..])
    );
    assert_eq!(by_id[null_key.as_str()].value.as_deref(), Some(&b"{}"[..]));
    let cut = by_id[too_large.as_str()];
    assert_eq!(cut.header("dlq_truncated"), Some("true"));
    let size = big.len().to_string();
    assert_eq!(cut.header("dlq_payload_size"), Some(size.as_str()));
    let sha = sha256_hex(big.as_bytes());
    assert_eq!(cut.header("dlq_payload_sha256"), Some(sha.as_str()));
    for r in &dlq {
        assert_eq!(
            r.header("source_table"),
            Some(format!("public.{t}").as_str())
        );
        let lsn: outbox_relay::lsn::Lsn = r.header("lsn").unwrap().parse().expect("lsn header");
        assert!(lsn < after);
    }
    // The stream went on and the slot advanced past the bad rows.
    wait_until(
        "the slot to advance past the bad rows",
        DEADLINE,
        || async {
            outbox
                .confirmed_flush_lsn()
                .await
                .is_some_and(|c| c >= after)
        },
    )
    .await;
    relay.stop().await.expect("graceful stop");
    println!(
        "summary: case=dead-letters committed=4 delivered=1 lost=0 duplicated=0 dead-lettered=3"
    );
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_slot_is_a_fatal_error_naming_it() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox
        .admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
        .await
        .unwrap();
    let relay = Relay::in_process(outbox.settings());
    let err = relay
        .join(Duration::from_secs(30))
        .await
        .expect_err("a missing slot is fatal");
    let msg = err.to_string();
    assert!(msg.contains(&outbox.slot), "{msg}");
    // And the relay did not create it behind our back.
    assert!(outbox.confirmed_flush_lsn().await.is_none());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_side_size_limit_dead_letters_the_record_and_keeps_order() {
    // The topic accepts less than the producer's own limit, so the broker
    // (not librdkafka) refuses the record: with the gapless guarantee that
    // stops the producer; the relay rebuilds it and dead-letters the record
    // on the replay, and the aggregate's later events follow in order.
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox
        .create_topic_with_config(&topic, 3, &[("max.message.bytes", "20000")])
        .await;
    let relay = Relay::in_process(outbox.settings());
    let t = &outbox.table;
    let ids: Vec<String> = (0..4).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let big = format!("{{\"seq\":2,\"blob\":\"{}\"}}", "x".repeat(50_000));
    let mut sql = String::new();
    for (i, id) in ids.iter().enumerate() {
        let payload = if i == 1 {
            big.clone()
        } else {
            format!("{{\"seq\":{}}}", i + 1)
        };
        sql.push_str(&format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{id}', 'order', 'o1', 'Placed', '{payload}');"
        ));
    }
    outbox.admin.batch_execute(&sql).await.unwrap();
    let dlq = consume(&outbox.dlq_topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(dlq.len(), 1, "one dead letter");
    assert_eq!(dlq[0].header("id"), Some(ids[1].as_str()));
    assert_eq!(dlq[0].header("dlq_reason_code"), Some("too_large"));
    consume(&topic, DEADLINE, |r| r.len() >= 3).await;
    relay.stop().await.expect("graceful stop");
    let received = consume_to_end(&topic).await;
    let firsts: Vec<&str> = {
        let mut seen = std::collections::HashSet::new();
        received
            .iter()
            .filter_map(|r| r.header("ce_id"))
            .filter(|id| seen.insert(*id))
            .collect()
    };
    assert_eq!(
        firsts,
        vec![ids[0].as_str(), ids[2].as_str(), ids[3].as_str()]
    );
    outbox.drop_all().await;
}

/// The payload column's value as the relay receives it from pgoutput (the
/// type's text output: jsonb normalizes what was inserted).
async fn payload_text(outbox: &TestOutbox, id: &str) -> String {
    outbox
        .admin
        .query_one(
            &format!(
                "SELECT payload::text FROM public.{} WHERE id = $1::text::uuid",
                outbox.table
            ),
            &[&id],
        )
        .await
        .expect("read the payload back")
        .get(0)
}

fn sha256_hex(bytes: &[u8]) -> String {
    openssl::sha::sha256(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Waits until the slot confirmed everything committed up to `after`.
async fn wait_slot_past(outbox: &TestOutbox, after: outbox_relay::lsn::Lsn, what: &str) {
    wait_until(what, DEADLINE, || async {
        outbox
            .confirmed_flush_lsn()
            .await
            .is_some_and(|c| c >= after)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_key_dead_letter_keeps_the_payload_and_the_mapped_columns() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let relay = Relay::in_process(outbox.settings_with("[postgres.header_columns]\nseq = \"seq\""));
    let t = &outbox.table;
    let bad = uuid::Uuid::new_v4().to_string();
    let good = uuid::Uuid::new_v4().to_string();
    // Adversarial: multi-byte text, numbers whose spelling matters, nesting.
    let payload = r#"{"note": "ünï 🚀 שלום", "total": 42.50, "n": [1, null, {"k": "v"}]}"#;
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload, \"timestamp\", seq)
               VALUES ('{bad}', 'order', NULL, 'Placed', '{payload}', '2026-03-04 05:06:07.123456+00', 42);
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload)
               VALUES ('{good}', 'order', 'o1', 'Placed', '{{\"ok\":true}}');"
        ))
        .await
        .unwrap();
    let after = outbox.current_wal_lsn().await;
    let expected = payload_text(&outbox, &bad).await;

    let dlq = consume(&outbox.dlq_topic, Duration::from_secs(60), |r| {
        !r.is_empty()
    })
    .await;
    assert_eq!(dlq.len(), 1, "one dead letter");
    let d = &dlq[0];
    assert_eq!(d.header("dlq_reason_code"), Some("null_key"));
    assert_eq!(
        d.value.as_deref(),
        Some(expected.as_bytes()),
        "the dead letter's value is the row's payload, byte for byte"
    );
    assert_eq!(d.header("id"), Some(bad.as_str()));
    assert_eq!(d.header("aggregatetype"), Some("order"));
    assert_eq!(d.header("type"), Some("Placed"));
    assert_eq!(d.header("timestamp"), Some("2026-03-04T05:06:07.123456Z"));
    assert_eq!(d.header("seq"), Some("42"), "configured header columns too");
    assert_eq!(d.header("aggregateid"), None, "a NULL column is left out");
    assert_eq!(d.header("dlq_truncated"), None);

    let good_records = consume(&topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(good_records[0].header("ce_id"), Some(good.as_str()));
    wait_slot_past(&outbox, after, "the slot to advance past the dead letter").await;
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

/// Inserts `big` under a fresh id for aggregate `o1`, then `later` small
/// events of the same aggregate; returns the big row's id and the later ids.
async fn insert_big_then_small(
    outbox: &TestOutbox,
    big: &str,
    later: usize,
) -> (String, Vec<String>) {
    let t = &outbox.table;
    let big_id = uuid::Uuid::new_v4().to_string();
    let mut sql = format!(
        "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{big_id}', 'order', 'o1', 'Placed', '{big}');"
    );
    let ids: Vec<String> = (0..later)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    for (i, id) in ids.iter().enumerate() {
        sql.push_str(&format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{id}', 'order', 'o1', 'Placed', '{{\"seq\":{i}}}');"
        ));
    }
    outbox.admin.batch_execute(&sql).await.unwrap();
    (big_id, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_for_its_topic_is_dead_lettered_with_its_payload() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox
        .create_topic_with_config(&topic, 1, &[("max.message.bytes", "20000")])
        .await;
    outbox
        .create_topic_with_config(&outbox.dlq_topic, 1, &[("max.message.bytes", "400000")])
        .await;
    let relay = Relay::in_process(outbox.settings());
    let big = format!("{{\"blob\": \"{}\"}}", "y".repeat(60_000));
    let (big_id, later) = insert_big_then_small(&outbox, &big, 3).await;
    let after = outbox.current_wal_lsn().await;
    let expected = payload_text(&outbox, &big_id).await;

    let dlq = consume(&outbox.dlq_topic, Duration::from_secs(60), |r| {
        !r.is_empty()
    })
    .await;
    assert_eq!(dlq.len(), 1, "one dead letter");
    let d = &dlq[0];
    assert_eq!(d.header("id"), Some(big_id.as_str()));
    assert_eq!(d.header("dlq_reason_code"), Some("too_large"));
    assert_eq!(
        d.value.as_deref().map(<[u8]>::len),
        Some(expected.len()),
        "the dead letter carries the whole payload"
    );
    assert!(d.value.as_deref() == Some(expected.as_bytes()));
    assert_eq!(
        d.header("dlq_truncated"),
        None,
        "it fits the dead-letter topic"
    );
    assert_eq!(d.header("aggregateid"), Some("o1"));

    let want = later.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    let ids: Vec<&str> = received.iter().filter_map(|r| r.header("ce_id")).collect();
    for id in &later {
        assert!(ids.contains(&id.as_str()), "later event {id} delivered");
    }
    wait_slot_past(&outbox, after, "the slot to advance past the dead letter").await;
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_for_the_dead_letter_topic_too_goes_headers_only_and_the_stream_goes_on() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox
        .create_topic_with_config(&topic, 1, &[("max.message.bytes", "20000")])
        .await;
    outbox
        .create_topic_with_config(&outbox.dlq_topic, 1, &[("max.message.bytes", "20000")])
        .await;
    let relay = Relay::in_process(outbox.settings());
    let big = format!("{{\"blob\": \"{}\"}}", "z".repeat(60_000));
    let (big_id, later) = insert_big_then_small(&outbox, &big, 3).await;
    let after = outbox.current_wal_lsn().await;
    let expected = payload_text(&outbox, &big_id).await;

    let dlq = consume(&outbox.dlq_topic, Duration::from_secs(60), |r| {
        !r.is_empty()
    })
    .await;
    assert_eq!(dlq.len(), 1, "one dead letter");
    let d = &dlq[0];
    assert_eq!(d.header("id"), Some(big_id.as_str()));
    assert_eq!(d.header("dlq_reason_code"), Some("too_large"));
    assert_eq!(d.header("dlq_truncated"), Some("true"));
    assert_eq!(d.header("aggregatetype"), Some("order"));
    let size = expected.len().to_string();
    assert_eq!(d.header("dlq_payload_size"), Some(size.as_str()));
    let sha = sha256_hex(expected.as_bytes());
    assert_eq!(d.header("dlq_payload_sha256"), Some(sha.as_str()));
    assert!(
        d.value.as_deref().is_none_or(<[u8]>::is_empty),
        "headers only"
    );

    // The stream went on: the later events arrive and the slot advances.
    let want = later.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    let ids: Vec<&str> = received.iter().filter_map(|r| r.header("ce_id")).collect();
    for id in &later {
        assert!(ids.contains(&id.as_str()), "later event {id} delivered");
    }
    wait_slot_past(&outbox, after, "the slot to advance past the dead letter").await;
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

/// The producer may not create topics (as with a broker that does not), and
/// learns a topic is missing after 2 s instead of librdkafka's 30 s default
/// (`topic.metadata.propagation.max.ms`), to keep the tests short.
fn without_topic_auto_creation(settings: &mut outbox_relay::relay::RelaySettings) {
    settings.sink.properties.extend([
        ("allow.auto.create.topics".to_string(), "false".to_string()),
        (
            "topic.metadata.propagation.max.ms".to_string(),
            "2000".to_string(),
        ),
    ]);
}

/// Inserts one outbox row for `aggregate_type` in its own transaction;
/// returns its id and the transaction's commit end.
async fn insert_watched(
    outbox: &TestOutbox,
    aggregate_type: &str,
) -> (String, outbox_relay::lsn::Lsn) {
    let watch = outbox.open_commit_watch().await;
    let id = uuid::Uuid::new_v4().to_string();
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload)
             VALUES ('{id}', '{aggregate_type}', 'g1', 'Placed', '{{\"where\": \"{aggregate_type}\"}}')",
            outbox.table
        ))
        .await
        .unwrap();
    (id, outbox.first_outbox_commit_end(&watch).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_topic_without_auto_creation_stops_the_relay_naming_it_and_the_fix() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let mut settings = outbox.settings();
    without_topic_auto_creation(&mut settings);
    let relay = Relay::in_process(settings);
    let ghost = outbox.topic("ghost");
    let (_, commit_end) = insert_watched(&outbox, "ghost").await;
    let err = relay
        .join(Duration::from_secs(60))
        .await
        .expect_err("a missing topic stops the relay by default");
    let msg = err.to_string();
    println!("{msg}");
    assert!(
        msg.contains(&format!("topic \"{ghost}\" does not exist")),
        "{msg}"
    );
    assert!(msg.contains(&format!("--create --topic {ghost}")), "{msg}");
    assert!(msg.contains("on_unroutable"), "{msg}");
    let confirmed = outbox.confirmed_flush_lsn().await.expect("slot");
    assert!(
        confirmed < commit_end,
        "confirmed {confirmed} >= {commit_end}"
    );
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_topic_with_on_unroutable_dead_letter_dead_letters_the_event_and_goes_on() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    outbox.create_topic(&topic, 1).await;
    let mut settings = outbox.settings();
    without_topic_auto_creation(&mut settings);
    settings.on_unroutable = outbox_relay::sink::OnUnroutable::DeadLetter;
    let relay = Relay::in_process(settings);
    let (ghost_id, _) = insert_watched(&outbox, "ghost").await;
    let (order_id, _) = insert_watched(&outbox, "order").await;
    let after = outbox.current_wal_lsn().await;
    let expected = payload_text(&outbox, &ghost_id).await;

    let dlq = consume(&outbox.dlq_topic, Duration::from_secs(60), |r| {
        !r.is_empty()
    })
    .await;
    assert_eq!(dlq.len(), 1, "one dead letter");
    let d = &dlq[0];
    assert_eq!(d.header("id"), Some(ghost_id.as_str()));
    assert_eq!(d.header("dlq_reason_code"), Some("topic_missing"));
    let ghost = outbox.topic("ghost");
    assert!(
        d.header("dlq_reason").is_some_and(|r| r.contains(&ghost)),
        "{:?}",
        d.header("dlq_reason")
    );
    assert_eq!(d.value.as_deref(), Some(expected.as_bytes()));
    let received = consume(&topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(received[0].header("ce_id"), Some(order_id.as_str()));
    wait_slot_past(&outbox, after, "the slot to advance past the dead letter").await;
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_dead_letter_topic_stops_the_relay_at_start_naming_it_and_the_fix() {
    let outbox = TestOutbox::create("jsonb").await;
    let mut settings = outbox.settings();
    without_topic_auto_creation(&mut settings);
    let before = outbox.confirmed_flush_lsn().await;
    // No row at all: the relay must find out before the first dead letter.
    let relay = Relay::in_process(settings);
    let err = relay
        .join(Duration::from_secs(30))
        .await
        .expect_err("a missing dead-letter topic stops the relay at start");
    let msg = err.to_string();
    println!("{msg}");
    let dlq = &outbox.dlq_topic;
    assert!(
        msg.contains(&format!("the dead-letter topic \"{dlq}\" does not exist")),
        "{msg}"
    );
    assert!(msg.contains(&format!("--create --topic {dlq}")), "{msg}");
    assert!(
        !msg.contains("on_unroutable"),
        "no dead-letter way out for the dead-letter topic: {msg}"
    );
    assert_eq!(
        outbox.confirmed_flush_lsn().await,
        before,
        "the slot is untouched"
    );
    outbox.drop_all().await;
}

/// The client speaks SASL to a listener that does not: the broker refuses
/// the handshake, which librdkafka reports as an authentication failure.
/// The relay stops at once, saying so, without quoting the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_refused_by_the_broker_stops_the_relay() {
    let outbox = TestOutbox::create("jsonb").await;
    let mut settings = outbox.settings();
    settings.sink.properties.extend(
        [
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", "relay"),
            ("sasl.password", "Canary-Not-The-Password"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let relay = Relay::in_process(settings);
    let (_, commit_end) = insert_watched(&outbox, "order").await;
    let err = relay
        .join(Duration::from_secs(30))
        .await
        .expect_err("refused credentials stop the relay");
    let msg = err.to_string();
    println!("{msg}");
    assert!(
        msg.contains("SASL credentials") && msg.contains("sasl.password"),
        "{msg}"
    );
    assert!(!msg.contains("Canary-Not-The-Password"), "{msg}");
    let confirmed = outbox.confirmed_flush_lsn().await.expect("slot");
    assert!(confirmed < commit_end);
    outbox.drop_all().await;
}
