//! Exactly-once delivery against what can go wrong with its checkpoint
//! topic: an event whose topic renders to it, a checkpoint above the
//! server's WAL (a database restored from a snapshot), and a checkpoint
//! topic of more than one partition.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use super::{eos_config, eos_outbox};
use crate::support::*;

/// Writes one record to `topic`, outside any transaction (a read_committed
/// reader sees it at once).
fn produce(topic: &str, key: &[u8], value: &[u8]) {
    let producer: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .create()
        .expect("producer");
    producer
        .send(BaseRecord::to(topic).key(key).payload(value))
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Asserts every committed event is on `topic`.
async fn assert_all_arrive(topic: &str, committed: &[Committed], log: impl Fn() -> String) {
    let received = consume_all_ids(topic, committed, DEADLINE).await;
    let seen: std::collections::HashSet<&str> =
        received.iter().filter_map(|r| r.header("ce_id")).collect();
    let missing = committed
        .iter()
        .filter(|c| !seen.contains(c.id.as_str()))
        .count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} events never arrived on {topic}:\n{}",
        committed.len(),
        log()
    );
}

/// An event whose topic template renders to the checkpoint topic (here
/// `<prefix>.{aggregatetype}` with aggregate type `checkpoints`, and the
/// checkpoint topic `<prefix>.checkpoints`). Before the fix it went to the
/// checkpoint topic, where the transactional producer dropped its delivery
/// report as a checkpoint's: its transaction was never confirmed and the
/// relay stalled for good. Now it is dead-lettered with its reason, the
/// events around it arrive, and the slot moves past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_bound_for_the_checkpoint_topic_is_dead_lettered_and_the_slot_moves_on() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let checkpoints = outbox.topic("checkpoints");
    outbox
        .create_topic_with_config(&checkpoints, 1, &[("cleanup.policy", "compact")])
        .await;
    let config = eos_config(&outbox, &checkpoints, "");
    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 10, 2, 5, &mut seqs).await;
    let bad_id = uuid::Uuid::new_v4().to_string();
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
             VALUES ('{bad_id}', 'checkpoints', 'c1', 'Placed', '{{}}')",
            outbox.table
        ))
        .await
        .unwrap();
    let after_bad = outbox.current_wal_lsn().await;
    committed.extend(outbox.commit_events(&mut writer, 10, 2, 5, &mut seqs).await);

    assert_all_arrive(&topic, &committed, || relay.log_text()).await;
    let dlq = consume(&outbox.dlq_topic, DEADLINE, |r| !r.is_empty()).await;
    let dead: Vec<_> = dlq
        .iter()
        .filter(|r| r.header("id") == Some(bad_id.as_str()))
        .collect();
    assert_eq!(dead.len(), 1, "the bad event's dead letter: {dlq:?}");
    assert_eq!(dead[0].header("dlq_reason_code"), Some("checkpoint_topic"));
    assert!(
        dead[0]
            .header("dlq_reason")
            .is_some_and(|r| r.contains("kafka.checkpoint_topic")),
        "{:?}",
        dead[0].header("dlq_reason")
    );
    wait_until("the slot to move past the bad event", DEADLINE, || async {
        outbox.confirmed_flush_lsn().await >= Some(after_bad)
    })
    .await;
    // The checkpoint topic holds checkpoints only.
    let records = consume_to_end(&checkpoints).await;
    assert!(
        !records.is_empty() && records.iter().all(|r| r.header("ce_id").is_none()),
        "{records:?}"
    );
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    outbox.drop_all().await;
}

/// A checkpoint above the server's WAL: what a relay finds after the
/// database was restored from a snapshot (same system identifier and
/// timeline, WAL ending below what the relay had delivered). Made here by
/// rewriting the relay's own checkpoint with an LSN far ahead. Before the
/// fix the relay resumed from it and skipped every new transaction below
/// it; now it ignores it, says so at ERROR, and starts from the slot: every
/// new event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_above_the_servers_wal_is_ignored_and_nothing_is_skipped() {
    let (outbox, topic, checkpoints) = eos_outbox(TestOutbox::create("jsonb").await).await;
    let config = eos_config(&outbox, &checkpoints, "");
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let first = outbox.commit_events(&mut writer, 5, 2, 5, &mut seqs).await;
    assert_all_arrive(&topic, &first, || relay.log_text()).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());

    // The relay's last checkpoint, moved far beyond the server's WAL.
    let records = consume_to_end(&checkpoints).await;
    let last = records.last().expect("a checkpoint was written");
    let key = last.key.clone().expect("keyed by the transactional id");
    let mut value: serde_json::Value =
        serde_json::from_slice(last.value.as_deref().expect("a value")).unwrap();
    assert!(value["lsn"].is_string(), "{value}");
    value["lsn"] = "FF/0".into();
    let value = serde_json::to_vec(&value).unwrap();
    tokio::task::block_in_place(|| produce(&checkpoints, &key, &value));

    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let second = outbox.commit_events(&mut writer, 5, 2, 5, &mut seqs).await;
    assert_all_arrive(&topic, &second, || relay.log_text()).await;
    let log = relay.log_text();
    let said = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("above the server's WAL position"))
        .count();
    assert_eq!(said, 1, "said once, at ERROR:\n{log}");
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    outbox.drop_all().await;
}

/// A checkpoint topic of more than one partition: its last checkpoint
/// cannot be told (records of two partitions have no order; once the
/// partition count changes, the key's older checkpoints stay in another
/// partition than its new ones). The relay stops at start with exit code 4,
/// naming the topic and how to replace it, and confirms nothing. Before the
/// fix it streamed on such a topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_topic_of_two_partitions_exits_4_naming_it() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox.create_topic(&outbox.topic("order"), 1).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let checkpoints = random_name("checkpoints");
    outbox
        .create_topic_with_config(&checkpoints, 2, &[("cleanup.policy", "compact")])
        .await;
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    outbox.commit_events(&mut writer, 5, 1, 5, &mut seqs).await;
    let before = outbox.confirmed_flush_lsn().await;
    let mut relay = Relay::process(&eos_config(&outbox, &checkpoints, ""));
    let status = relay.wait(DEADLINE).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SINK), "{log}");
    assert!(
        log.contains(&format!(
            "checkpoint topic \"{checkpoints}\" has 2 partitions"
        )) && log.contains("--partitions 1"),
        "names the topic and the fix:\n{log}"
    );
    assert!(
        !log.contains("streaming from the slot"),
        "stops before streaming:\n{log}"
    );
    assert_eq!(
        outbox.confirmed_flush_lsn().await,
        before,
        "confirms nothing"
    );
    outbox.drop_all().await;
}
