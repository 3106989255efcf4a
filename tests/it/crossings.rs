//! Where two features meet, against the real PostgreSQL and Kafka: cleanup
//! with a dead letter that lost its payload, cleanup in exactly-once mode,
//! and exactly-once with a PostgreSQL transaction that outlives the Kafka
//! transaction timeout (paused, killed, and streaming longer than it).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::support::mixed::ids_in_table;
use crate::support::*;

async fn rows_in_table(outbox: &TestOutbox) -> i64 {
    outbox
        .admin
        .query_one(
            &format!("SELECT count(*) FROM public.{}", outbox.table),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

async fn grant_delete(outbox: &TestOutbox) {
    outbox
        .admin
        .batch_execute(&format!("GRANT DELETE ON public.{} TO relay", outbox.table))
        .await
        .unwrap();
}

/// The relay config of `outbox` with keys added to `[postgres]` and
/// `[kafka]`.
fn config_with(outbox: &TestOutbox, postgres: &str, kafka: &str) -> std::path::PathBuf {
    let path = outbox.write_config("");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("heartbeat_interval_secs = 0\n"),
        "config layout changed"
    );
    let text = text
        .replacen(
            "heartbeat_interval_secs = 0\n",
            &format!("heartbeat_interval_secs = 0\n{postgres}"),
            1,
        )
        .replacen("[kafka]\n", &format!("[kafka]\n{kafka}"), 1);
    std::fs::write(&path, text).unwrap();
    path
}

/// Inserts one row with a payload of `bytes` bytes; returns its id.
async fn insert_large_row(outbox: &TestOutbox, bytes: usize) -> String {
    let id = uuid::Uuid::new_v4().to_string();
    let payload = format!(r#"{{"seq":1,"blob":"{}"}}"#, "x".repeat(bytes));
    outbox
        .admin
        .execute(
            &format!(
                "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
                 VALUES ($1::text::uuid, 'order', 'big-1', 'OrderPlaced', $2::text::jsonb, 1)",
                outbox.table
            ),
            &[&id, &payload],
        )
        .await
        .unwrap();
    id
}

/// Cleanup on, an event too large for its topic and for the dead-letter
/// topic: the dead letter goes without its payload (`dlq_truncated`), so
/// the outbox row is the only copy left and must stay; the other rows,
/// before and after it, are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_keeps_the_row_of_a_dead_letter_that_lost_its_payload() {
    let outbox = TestOutbox::create("jsonb").await;
    grant_delete(&outbox).await;
    let topic = outbox.topic("order");
    outbox
        .create_topic_with_config(&topic, 1, &[("max.message.bytes", "2000")])
        .await;
    outbox
        .create_topic_with_config(&outbox.dlq_topic, 1, &[("max.message.bytes", "2000")])
        .await;
    let config = config_with(&outbox, "cleanup = \"delete-after-ack\"\n", "");
    let relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let before = outbox.commit_events(&mut writer, 3, 2, 4, &mut seqs).await;
    let big = insert_large_row(&outbox, 5 * 1024).await;
    let after = outbox.commit_events(&mut writer, 3, 2, 4, &mut seqs).await;
    let committed: Vec<Committed> = before.iter().chain(&after).cloned().collect();
    consume_all_ids(&topic, &committed, DEADLINE).await;
    // The dead letter arrives without its payload.
    let wanted = big.clone();
    let dead = consume(&outbox.dlq_topic, DEADLINE, move |r| {
        r.iter().any(|x| x.header("id") == Some(wanted.as_str()))
    })
    .await;
    let letter = dead
        .iter()
        .find(|x| x.header("id") == Some(big.as_str()))
        .expect("the dead letter of the large row");
    assert_eq!(letter.header("dlq_truncated"), Some("true"), "{letter:?}");
    // Every other row goes; the large one stays.
    wait_until_explained(
        "every row but the large one to be deleted",
        DEADLINE,
        || async { rows_in_table(&outbox).await == 1 },
        || async { format!("rows left: {:?}", ids_in_table(&outbox).await) },
    )
    .await;
    assert_eq!(ids_in_table(&outbox).await, HashSet::from([big.clone()]));
    // It stays once the slot is past it, after a restart too.
    relay.kill9();
    let relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let more = outbox.commit_events(&mut writer, 2, 2, 4, &mut seqs).await;
    consume_all_ids(&topic, &more, DEADLINE).await;
    wait_until("the new rows to be deleted", DEADLINE, || async {
        rows_in_table(&outbox).await == 1
    })
    .await;
    assert!(ids_in_table(&outbox).await.contains(&big));
    let received = consume_ids_to_end(&topic).await;
    let all: Vec<Committed> = committed.into_iter().chain(more).collect();
    check_delivery("cleanup-x-truncated-dead-letter", &all, &received);
}

/// The same row kept, in a transaction too large to hold its ids: one
/// transaction commits the large row first and 100 001 small ones after it,
/// more than the relay holds ids for, so the small rows past the cap are
/// deleted by `xmin`. That delete must spare the large row: its dead letter
/// went without its payload, and the table holds the only copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_by_xmin_keeps_the_row_of_a_dead_letter_that_lost_its_payload() {
    const SMALL: i64 = 100_001;
    let outbox = TestOutbox::create("jsonb").await;
    grant_delete(&outbox).await;
    let topic = outbox.topic("order");
    outbox
        .create_topic_with_config(&topic, 3, &[("max.message.bytes", "2000")])
        .await;
    outbox
        .create_topic_with_config(&outbox.dlq_topic, 1, &[("max.message.bytes", "2000")])
        .await;
    // The small rows go to a topic of their own: the broker's limit is on a
    // batch of records, which many small ones would exceed too.
    outbox.create_topic(&outbox.topic("bulk"), 3).await;
    let config = config_with(&outbox, "cleanup = \"delete-after-ack\"\n", "");
    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let big = uuid::Uuid::new_v4().to_string();
    let payload = format!(r#"{{"seq":1,"blob":"{}"}}"#, "x".repeat(5 * 1024));
    let mut writer = outbox.writer().await;
    let txn = writer.transaction().await.unwrap();
    txn.execute(
        &format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
             VALUES ($1::text::uuid, 'order', 'big-1', 'OrderPlaced', $2::text::jsonb, 1)",
            outbox.table
        ),
        &[&big, &payload],
    )
    .await
    .unwrap();
    txn.execute(
        &format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
             SELECT gen_random_uuid(), 'bulk', 'small-' || (i % 64), 'OrderPlaced',
                    jsonb_build_object('seq', i), i
             FROM generate_series(1, $1::bigint) AS i",
            outbox.table
        ),
        &[&SMALL],
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();
    assert_eq!(rows_in_table(&outbox).await, SMALL + 1);
    let others = format!(
        "SELECT count(*) FROM public.{} WHERE id <> $1::text::uuid",
        outbox.table
    );
    let count_others = || async {
        let n: i64 = outbox
            .admin
            .query_one(&others, &[&big])
            .await
            .unwrap()
            .get(0);
        n
    };
    wait_until_explained(
        "the 100 001 small rows to be deleted once confirmed",
        // Three passes over the transaction (the event refused, then its
        // dead letter, then the stand-in sent), each of 100 002 events.
        3 * DEADLINE,
        || async { count_others().await == 0 },
        || async {
            let log = relay.log_text();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            format!(
                "{} small rows left; slot confirmed {:?}, WAL at {}; the relay's last lines: {tail:#?}",
                count_others().await,
                outbox.confirmed_flush_lsn().await,
                outbox.current_wal_lsn().await
            )
        },
    )
    .await;
    assert_eq!(
        ids_in_table(&outbox).await,
        HashSet::from([big.clone()]),
        "the large row, whose dead letter lost its payload, stays in the table"
    );
    let wanted = big.clone();
    let dead = consume(&outbox.dlq_topic, DEADLINE, move |r| {
        r.iter().any(|x| x.header("id") == Some(wanted.as_str()))
    })
    .await;
    let letter = dead
        .iter()
        .find(|x| x.header("id") == Some(big.as_str()))
        .expect("the dead letter of the large row");
    assert_eq!(letter.header("dlq_truncated"), Some("true"), "{letter:?}");
    assert!(
        letter.value.as_deref().unwrap_or_default().is_empty(),
        "headers only: {letter:?}"
    );
    relay.terminate().await;
    outbox.drop_all().await;
}

/// An outbox in exactly-once mode: its event topic (3 partitions) and a
/// compacted checkpoint topic of its own.
async fn eos_topics(outbox: &TestOutbox) -> (String, String) {
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let checkpoints = random_name("checkpoints");
    outbox
        .create_topic_with_config(&checkpoints, 1, &[("cleanup.policy", "compact")])
        .await;
    (topic, checkpoints)
}

/// The offsets on `topic` a consumer with `isolation` can read up to, all
/// partitions summed: with `read_uncommitted` every record the broker
/// holds, with `read_committed` those below the last stable offset (no
/// record of a transaction still open, but the commit markers).
async fn topic_len_as(topic: &str, isolation: &'static str) -> usize {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", env("KAFKA_BROKERS"))
            .set("group.id", random_name("uncommitted"))
            .set("isolation.level", isolation)
            .create()
            .expect("consumer");
        let Ok(md) = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10)) else {
            return 0;
        };
        let partitions = md.topics().first().map_or(0, |t| t.partitions().len()) as i32;
        (0..partitions)
            .map(|p| {
                consumer
                    .fetch_watermarks(&topic, p, Duration::from_secs(10))
                    .map_or(0, |(low, high)| (high - low) as usize)
            })
            .sum()
    })
    .await
    .unwrap()
}

/// Exactly-once with cleanup: the broker acknowledges the records long
/// before the Kafka transaction holding them commits (here after 4 s: the
/// quiet stream's early commit is put off past it), and the rows must stay
/// until it does: a crash before the commit replays them from the slot,
/// and the table is where `outbox-relay status` counts them. (Checked by
/// time: the records turn visible to read_committed a moment after the
/// commit, so rows already deleted while they are not yet visible are no
/// proof of an early delete.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_cleanup_waits_for_the_kafka_commit() {
    let outbox = TestOutbox::create("jsonb").await;
    grant_delete(&outbox).await;
    let (topic, checkpoints) = eos_topics(&outbox).await;
    let config = config_with(
        &outbox,
        "cleanup = \"delete-after-ack\"\n",
        &format!(
            "delivery = \"exactly-once\"\ncheckpoint_topic = \"{checkpoints}\"\n\
             transaction_max_ms = 4000\ntransaction_quiet_ms = 30000\n"
        ),
    );
    let relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let committed = outbox.commit_events(&mut writer, 5, 1, 5, &mut seqs).await;
    // The relay's Kafka transaction begins once it reads these rows, so it
    // commits 4 s after this at the earliest.
    let rows_committed = Instant::now();
    // The broker holds all five, uncommitted.
    wait_until("the broker to hold the five records", DEADLINE, || async {
        topic_len_as(&topic, "read_uncommitted").await >= 5
    })
    .await;
    assert!(
        topic_len_as(&topic, "read_committed").await < 5,
        "the transaction committed too soon to tell"
    );
    // The rows stay until the Kafka transaction commits. Its commit returns
    // once the coordinator decided it, a moment before a read_committed
    // consumer sees the records, so the check is by time: a relay that
    // deleted at the broker's acknowledgement would do so well within the
    // 4 s; a relay that waits for the commit, however loaded the machine,
    // only later.
    let deleted_after = loop {
        let rows = rows_in_table(&outbox).await;
        if rows < 5 {
            break rows_committed.elapsed();
        }
        assert!(
            rows_committed.elapsed() < DEADLINE,
            "the rows were never deleted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "exactly-once-x-cleanup: first row deleted {:.2} s after the rows committed",
        deleted_after.as_secs_f64()
    );
    assert!(
        deleted_after >= Duration::from_millis(3500),
        "a row was deleted {deleted_after:?} after the rows committed: before the Kafka \
         transaction holding it could commit (4 s)"
    );
    wait_until("the committed rows to be deleted", DEADLINE, || async {
        rows_in_table(&outbox).await == 0
    })
    .await;
    wait_until(
        "a read_committed consumer to see the five",
        DEADLINE,
        || async { topic_len_as(&topic, "read_committed").await >= 5 },
    )
    .await;
    relay.kill9();
    let received = consume_ids_to_end(&topic).await;
    check_exactly_once("exactly-once-x-cleanup", &committed, &received);
}

/// Inserts `rows` outbox rows over `aggregates` aggregates in ONE
/// transaction, server-side; the payload's `seq` rises per aggregate.
async fn insert_one_large_transaction(outbox: &TestOutbox, rows: i64, aggregates: i64) {
    outbox
        .admin
        .execute(
            &format!(
                "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
                 SELECT gen_random_uuid(), 'order', 'big-' || (i % $2::bigint), 'OrderPlaced',
                        jsonb_build_object('seq', i / $2::bigint + 1000000), i / $2::bigint + 1000000
                 FROM generate_series(0, $1::bigint - 1) AS i",
                outbox.table
            ),
            &[&rows, &aggregates],
        )
        .await
        .unwrap();
}

/// The checkpoint records of `topic` that hold part of a transaction
/// (version 2, `partial_commit_lsn`), read_committed.
async fn partial_checkpoints(topic: &str) -> usize {
    consume_to_end(topic)
        .await
        .iter()
        .filter(|r| {
            r.value
                .as_deref()
                .is_some_and(|v| String::from_utf8_lossy(v).contains("partial_commit_lsn"))
        })
        .count()
}

fn signal(relay: &Relay, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(relay.pid()).unwrap();
    // SAFETY: kill(2) with a pid of our own child and a valid signal.
    assert_eq!(
        unsafe { libc::kill(pid, signal) },
        0,
        "kill({pid}, {signal})"
    );
}

/// Exactly-once with a PostgreSQL transaction that takes longer to stream
/// than the Kafka transaction timeout: the relay commits the part it has
/// sent (a checkpoint inside the transaction) instead of being aborted by
/// the coordinator at every attempt. Paused (SIGSTOP) longer than the
/// timeout, its open Kafka transaction is aborted by the coordinator: the
/// relay is fenced, rebuilds its producer and goes on from the checkpoint
/// (it used to exit, fenced, as if another relay ran). Then kill -9 in
/// the middle of the transaction: the next start skips exactly the part
/// in Kafka. A read_committed consumer sees every event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_streams_a_transaction_longer_than_the_kafka_timeout_through_a_pause() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let (topic, checkpoints) = eos_topics(&outbox).await;
    let config = config_with(
        &outbox,
        "",
        &format!(
            "delivery = \"exactly-once\"\ncheckpoint_topic = \"{checkpoints}\"\n\
             message_timeout_ms = 1500\ntransaction_timeout_ms = 2000\n"
        ),
    );
    // A relay lock lease longer than the pause: the lock survives it, so
    // what the relay meets on waking is the coordinator's abort (with the
    // default lease it would find its lock lost first, a path of its own:
    // a_frozen_exactly_once_relay_that_was_taken_over_stands_by).
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}\n[relay]\nlock_lease_ms = 30000\n")).unwrap();
    let relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    outbox.commit_events(&mut writer, 5, 2, 5, &mut seqs).await;
    insert_one_large_transaction(&outbox, 100_000, 50).await;
    outbox.commit_events(&mut writer, 5, 2, 5, &mut seqs).await;
    let committed = outbox.committed_from_table().await;
    wait_until(
        "a checkpoint inside the large transaction",
        Duration::from_secs(120),
        || async { partial_checkpoints(&checkpoints).await >= 1 },
    )
    .await;
    // Paused for over twice the transaction timeout: the coordinator aborts
    // the open Kafka transaction and fences the producer.
    signal(&relay, libc::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(5)).await;
    signal(&relay, libc::SIGCONT);
    let mut relay = relay;
    let seen = partial_checkpoints(&checkpoints).await;
    wait_until_explained(
        "the resumed relay to commit more of the transaction",
        Duration::from_secs(120),
        || async {
            partial_checkpoints(&checkpoints).await > seen
                || topic_len_as(&topic, "read_committed").await >= committed.len()
        },
        || async { format!("relay log:\n{}", relay.log_text()) },
    )
    .await;
    assert!(
        relay.running(),
        "the relay exited after the pause:\n{}",
        relay.log_text()
    );
    // The pause was the fault, not another relay: the relay replays from
    // its checkpoint, and says nothing a person must act on. (What it meets
    // first on waking is a race: its records timed out, or the coordinator
    // aborted the transaction and fenced the producer.)
    let log = relay.log_text();
    let own_errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" ERROR outbox_relay"))
        .collect();
    assert!(
        own_errors.is_empty(),
        "the pause was taken for another relay: {own_errors:#?}"
    );
    relay.kill9();
    let relay = Relay::process(&config);
    let received = consume_all_ids(&topic, &committed, Duration::from_secs(180)).await;
    drop(relay);
    let received_all = consume_ids_to_end(&topic).await;
    assert!(received.len() <= received_all.len());
    check_exactly_once("exactly-once-x-long-transaction", &committed, &received_all);
    println!("took {:?}", started.elapsed());
}

/// Exactly-once with a standby relay: the active relay frozen (SIGSTOP)
/// with a Kafka transaction open, the standby takes the lock and fences
/// its producer; thawed, the first relay finds its lock lost and stands
/// by (it used to exit 4, "fenced", as if a misconfigured relay shared its
/// transactional id). Then the new active relay is killed with -9, the
/// first takes over again, and a read_committed consumer sees every event
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_exactly_once_relay_that_was_taken_over_stands_by() {
    let outbox = TestOutbox::create("jsonb").await;
    let (topic, checkpoints) = eos_topics(&outbox).await;
    let config = config_with(
        &outbox,
        "",
        &format!(
            "delivery = \"exactly-once\"\ncheckpoint_topic = \"{checkpoints}\"\n\
             transaction_max_ms = 3000\n"
        ),
    );
    let mut a = Relay::process(&config);
    a.wait_for_event("streaming", DEADLINE).await;
    let b = Relay::process(&config);
    b.wait_for_event("standing_by", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 10, 1, 5, &mut seqs).await;
    // A's Kafka transaction holds them, open for 3 s.
    wait_until(
        "the broker to hold A's records, uncommitted",
        DEADLINE,
        || async { topic_len_as(&topic, "read_uncommitted").await >= 10 },
    )
    .await;
    signal(&a, libc::SIGSTOP);
    wait_until_explained(
        "the standby to take over",
        DEADLINE,
        || async { b.log_text().contains("streaming from the slot") },
        || async { b.log_text() },
    )
    .await;
    committed.extend(outbox.commit_events(&mut writer, 10, 1, 5, &mut seqs).await);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let standing_by_before = a
        .log_text()
        .matches("another relay holds the relay lock")
        .count();
    signal(&a, libc::SIGCONT);
    wait_until_explained(
        "the thawed relay to stand by",
        DEADLINE,
        || {
            let log = a.log_text();
            async move { log.matches("another relay holds the relay lock").count() > standing_by_before }
        },
        || async { a.log_text() },
    )
    .await;
    assert!(a.running(), "the thawed relay exited:\n{}", a.log_text());
    // The active relay dies; the thawed one takes over from the checkpoint.
    b.kill9();
    committed.extend(outbox.commit_events(&mut writer, 10, 1, 5, &mut seqs).await);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    assert!(a.running(), "{}", a.log_text());
    a.kill9();
    let received = consume_ids_to_end(&topic).await;
    check_exactly_once("exactly-once-x-standby-frozen", &committed, &received);
}

/// At-least-once with a standby: the active relay frozen past its lease,
/// the standby takes over and confirms more, the thawed relay stands by;
/// the new active relay is killed with -9 and the first takes over again.
/// The slot moved while it stood by, by the relay that held the lock: that
/// is no gap to warn about (it used to say "the slot is ahead of the
/// position this relay confirmed … transactions committed in between are
/// not read" at every such takeover, while nothing was missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_taking_over_again_after_standing_by_reports_no_gap() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let config = outbox.write_config("");
    let a = Relay::process(&config);
    a.wait_for_event("streaming", DEADLINE).await;
    let b = Relay::process(&config);
    b.wait_for_event("standing_by", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 10, 1, 5, &mut seqs).await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    signal(&a, libc::SIGSTOP);
    wait_until_explained(
        "the standby to take over",
        DEADLINE,
        || async { b.log_text().contains("streaming from the slot") },
        || async { b.log_text() },
    )
    .await;
    let before = outbox.confirmed_flush_lsn().await;
    committed.extend(outbox.commit_events(&mut writer, 10, 1, 5, &mut seqs).await);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    wait_until("the standby to confirm what it sent", DEADLINE, || async {
        outbox.confirmed_flush_lsn().await > before
    })
    .await;
    let standing_by_before = a
        .log_text()
        .matches("another relay holds the relay lock")
        .count();
    signal(&a, libc::SIGCONT);
    wait_until_explained(
        "the thawed relay to stand by",
        DEADLINE,
        || {
            let log = a.log_text();
            async move { log.matches("another relay holds the relay lock").count() > standing_by_before }
        },
        || async { a.log_text() },
    )
    .await;
    b.kill9();
    let streams_before = a.log_text().matches("streaming from the slot").count();
    wait_until_explained(
        "the first relay to take over again",
        DEADLINE,
        || {
            let log = a.log_text();
            async move { log.matches("streaming from the slot").count() > streams_before }
        },
        || async { a.log_text() },
    )
    .await;
    committed.extend(outbox.commit_events(&mut writer, 10, 1, 5, &mut seqs).await);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    assert!(
        !a.log_text()
            .contains("the slot is ahead of the position this relay confirmed"),
        "a takeover is not someone else moving the slot:\n{}",
        a.log_text()
    );
    a.kill9();
    let received = consume_ids_to_end(&topic).await;
    check_delivery("standby-takes-over-again", &committed, &received);
}
