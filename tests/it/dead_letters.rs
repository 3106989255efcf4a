//! Rows that cannot become events, and events no topic takes: a payload
//! that is not JSON, a NULL key, a record too large for the producer, for
//! its topic or for the dead-letter topic too, a topic that does not exist
//! (stop, or dead-letter with `on_unroutable`), a dead-letter topic that
//! does not exist (in-process and as a process). Each dead letter keeps the
//! payload and the mapped columns or says why not; the stream goes on and
//! the slot advances past it; per-aggregate order of the rest is kept.
//! (Refusals injected with the mock cluster are in `broker_faults`.)

use std::collections::HashMap;
use std::time::Duration;

use crate::support::*;

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
    hex::encode(openssl::sha::sha256(bytes))
}

/// Waits until the slot confirmed everything committed up to `after`.
async fn wait_slot_past(outbox: &TestOutbox, after: pgoutput::lsn::Lsn, what: &str) {
    wait_until(what, DEADLINE, || async {
        outbox
            .confirmed_flush_lsn()
            .await
            .is_some_and(|c| c >= after)
    })
    .await;
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
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{too_large}', 'order', 'o2', 'Placed', '{big}');
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{good}', 'order', 'o1', 'Placed', '{{\"ok\":true}}');"
        ))
        .await
        .unwrap();
    let after = outbox.current_wal_lsn().await;
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
        let lsn: pgoutput::lsn::Lsn = r.header("lsn").unwrap().parse().expect("lsn header");
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
    // Aggregate o1 is parked behind its dead letter (the default,
    // after_dead_letter = "park"): its good event waits in the parking
    // table and never reached the topic ahead of it.
    let parked = outbox.parked().await;
    let o1: Vec<(String, String)> = parked
        .iter()
        .filter(|(aggregate, _, _)| aggregate == "o1")
        .map(|(_, kind, id)| (kind.clone(), id.clone()))
        .collect();
    assert_eq!(
        o1,
        vec![
            ("HEAD".to_owned(), not_json.clone()),
            ("EVENT".to_owned(), good.clone()),
        ],
        "o1 parked behind its first dead letter: {parked:?}"
    );
    assert!(
        parked.contains(&("o2".to_owned(), "HEAD".to_owned(), too_large.clone())),
        "o2 parked behind its dead letter: {parked:?}"
    );
    relay.stop().await.expect("graceful stop");
    assert!(
        consume_to_end(&topic).await.is_empty(),
        "nothing of o1 reached its topic ahead of its dead letter"
    );
    println!(
        "summary: case=dead-letters committed=4 delivered=0 parked=1 lost=0 duplicated=0 dead-lettered=3"
    );
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
    consume(&topic, DEADLINE, |r| !r.is_empty()).await;
    let later = [ids[2].clone(), ids[3].clone()];
    let parked = wait_later_parked_or_delivered(&outbox, &topic, &ids[1], &later).await;
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
    // In commit order; what the broker took before it refused the big
    // record stays delivered, the rest waits behind its dead letter.
    let delivered: Vec<&str> = [ids[0].as_str(), ids[2].as_str(), ids[3].as_str()]
        .into_iter()
        .filter(|id| !parked.iter().any(|p| p == id))
        .collect();
    assert_eq!(firsts, delivered, "parked: {parked:?}");
    outbox.drop_all().await;
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
/// Waits until each of `later` (events of the aggregate after `head`, in
/// commit order) is either on `topic` or parked behind `head` in the
/// parking table, and checks the parked ones are the tail: none delivered
/// after one parked. Returns the parked ids.
async fn wait_later_parked_or_delivered(
    outbox: &TestOutbox,
    topic: &str,
    head: &str,
    later: &[String],
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let (parked, delivered) = loop {
        let rows = outbox.parked().await;
        let on_topic = consume_to_end(topic).await;
        let parked: Vec<String> = rows
            .iter()
            .filter(|(_, kind, _)| kind == "EVENT")
            .map(|(_, _, id)| id.clone())
            .collect();
        let delivered: Vec<String> = on_topic
            .iter()
            .filter_map(|r| r.header("ce_id").map(str::to_owned))
            .collect();
        let head_parked = rows
            .iter()
            .any(|(_, kind, id)| kind == "HEAD" && id == head);
        let placed = later
            .iter()
            .all(|id| parked.contains(id) || delivered.contains(id));
        if placed && (parked.is_empty() || head_parked) {
            break (parked, delivered);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the later events {later:?} neither parked behind {head} nor delivered: parked \
             {parked:?}, delivered {delivered:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if let Some(first) = later.iter().position(|id| parked.contains(id)) {
        assert!(
            later[first..]
                .iter()
                .all(|id| parked.contains(id) && !delivered.contains(id)),
            "an event delivered after one parked: later {later:?}, parked {parked:?}"
        );
    }
    parked
}

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

    // Its aggregate's later events are parked behind it, or (taken by the
    // broker before it refused the big record) delivered in order.
    wait_later_parked_or_delivered(&outbox, &topic, &big_id, &later).await;
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

    // The stream went on: the later events are parked behind the dead
    // letter (or were taken before it was refused), and the slot advances.
    wait_later_parked_or_delivered(&outbox, &topic, &big_id, &later).await;
    wait_slot_past(&outbox, after, "the slot to advance past the dead letter").await;
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

// ----------------------------------------------------- topics that do not exist

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

/// A dead-letter topic that does not exist, on a broker that does not
/// create topics (here: a producer that may not), stops the binary at start
/// with the sink's exit code and the command that creates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_dead_letter_topic_exits_non_zero_with_the_fix() {
    let outbox = TestOutbox::create("jsonb").await;
    let config =
        outbox.write_config("[kafka.properties]\n\"allow.auto.create.topics\" = \"false\"");
    let mut relay = Relay::process(&config);
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(EXIT_SINK), "{status:?}");
    let log = relay.log_text();
    let fix = format!(
        "kafka-topics.sh --bootstrap-server <broker> --create --topic {}",
        outbox.dlq_topic
    );
    assert!(log.contains(&fix), "{log}");
    outbox.drop_all().await;
}
