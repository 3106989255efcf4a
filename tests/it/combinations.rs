//! Features together, end to end: each test runs several of the relay's
//! features at once (delivery mode, source, cleanup, shards, webhook routes,
//! standby relays, dead letters, trace context) under a steady writer, kills
//! a relay process with -9 at least once, and then judges every sink with
//! the checker: nothing lost, per-aggregate order kept, no duplicate on an
//! exactly-once topic read read_committed, each bad row dead-lettered, each
//! writer's trace context on its record. docs/design.md ("Where features
//! meet") names, for every pair of features, the test here that shows the
//! pair works, or the validation message that refuses it; tests/it/docs.rs
//! keeps that table honest.
//!
//! The tests named for one pair (`cleanup_with_exactly_once_…`,
//! `shards_with_outbox_messages_…`, `cleanup_with_a_dead_letter_…`) show a
//! pair that did not hold when they were written; the others run many
//! features at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::messages::install_outbox_emit;
use crate::support::mixed::*;
use crate::support::shards::{create_shard, drop_shard, shard_config};
use crate::support::webhook::*;
use crate::support::*;

const STREAMING: &str = "streaming from the slot";
const STANDING_BY: &str = "standby: another relay holds the relay lock";
const CLEANUP: &str = "cleanup = \"delete-after-ack\"\n";
/// The writer's pause between transactions: about 50 transactions a
/// second on this machine, load the relays must keep up with.
const PAUSE: Duration = Duration::from_millis(10);
const SECRET: &str = "combination-secret";

/// A `text`-payload outbox (bad rows possible) with its `order` topic (3
/// partitions) and dead-letter topic; the relay's role may delete rows
/// (`cleanup`), `outbox_emit` is installed (`messages`).
async fn text_outbox(cleanup: bool, messages: bool) -> Arc<TestOutbox> {
    let outbox = TestOutbox::create("text").await;
    if cleanup {
        outbox
            .admin
            .batch_execute(&format!("GRANT DELETE ON public.{} TO relay", outbox.table))
            .await
            .unwrap();
    }
    if messages {
        install_outbox_emit(&outbox.admin).await;
    }
    outbox.create_topic(&outbox.topic("order"), 3).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    Arc::new(outbox)
}

/// A compacted checkpoint topic of the test's own.
async fn checkpoint_topic(outbox: &TestOutbox) -> String {
    let checkpoints = random_name("checkpoints");
    outbox
        .create_topic_with_config(&checkpoints, 1, &[("cleanup.policy", "compact")])
        .await;
    checkpoints
}

/// `[kafka]` lines for exactly-once delivery.
fn exactly_once(checkpoints: &str) -> String {
    format!("delivery = \"exactly-once\"\ncheckpoint_topic = \"{checkpoints}\"\n")
}

/// `[postgres]` lines for rows and messages (the test's message prefix).
fn source_both(outbox: &TestOutbox) -> String {
    format!(
        "source = \"both\"\nmessage_prefix = \"{}\"\n",
        outbox.message_prefix()
    )
}

fn secrets() -> Vec<String> {
    vec![SECRET.to_owned()]
}

/// Waits until every bad row is on the dead-letter topic; asserts nothing
/// else is, and (read to its end) each one once when `once`.
async fn check_dead_letters(outbox: &TestOutbox, written: &Written, once: bool) {
    let want = written.bad.len();
    let dlq = consume(&outbox.dlq_topic, DEADLINE, move |r| {
        dead_letter_ids(r).len() >= want
    })
    .await;
    let bad: HashSet<String> = written.bad.iter().cloned().collect();
    assert_eq!(dead_letter_ids(&dlq), bad, "every bad row dead-lettered");
    if once {
        let all = consume_ids_to_end(&outbox.dlq_topic).await;
        assert_eq!(all.len(), bad.len(), "each dead letter once");
    }
    println!("dead-letters: {} bad rows, all on the topic", bad.len());
}

/// Waits until cleanup deleted every row but those of `at_restart` (the
/// rows in the table when the last relay started after a kill -9). Those
/// may stay: a relay killed after confirming rows and before its DELETE
/// leaves them behind, and the next relay starts past them (nothing
/// re-publishes them, so nothing deletes them). Prints how many are left,
/// which is how often that happens.
async fn wait_for_cleanup(outbox: &TestOutbox, at_restart: &HashSet<String>) {
    wait_until_explained(
        "cleanup to delete every row committed since the restart",
        DEADLINE,
        || async { ids_in_table(outbox).await.is_subset(at_restart) },
        || async {
            let left = ids_in_table(outbox).await;
            format!(
                "{} rows left, {} of them committed since the restart",
                left.len(),
                left.difference(at_restart).count()
            )
        },
    )
    .await;
    println!(
        "cleanup: {} rows left from before the restart",
        committed_rows(outbox).await
    );
}

/// Every accepted webhook request of a traced event carries its
/// traceparent (`ce-traceparent`); returns how many were checked.
fn check_webhook_traceparents(case: &str, written: &Written, receiver: &Receiver) -> usize {
    let mut checked = 0;
    for a in receiver.accepted() {
        if let Some(want) = written.traceparents.get(&a.id) {
            assert_eq!(
                a.headers.get("ce-traceparent"),
                Some(want),
                "{case}: webhook event {} lost its trace context",
                a.id
            );
            checked += 1;
        }
    }
    checked
}

// Exactly-once, rows and outbox messages, a trace context on every event,
// a bad row every 7th transaction; the relay killed with -9 three times
// under load. A read_committed consumer sees each event once, in order,
// with its writer's traceparent; each bad row is dead-lettered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_with_source_both_trace_context_and_dead_letters_survives_kill9() {
    let started = Instant::now();
    let case = "combo-eos-both-trace-dead";
    let outbox = text_outbox(false, true).await;
    let topic = outbox.topic("order");
    let checkpoints = checkpoint_topic(&outbox).await;
    let config = outbox.write_config_with(&source_both(&outbox), &exactly_once(&checkpoints), "");
    let mut relay = Relay::process(&config);
    relay.wait_for_log(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 12,
        messages: true,
        bad_every: 7,
        hook_type: None,
    };
    let writer = MixWriter::start(outbox.clone(), mix, PAUSE);
    for kill in 0..3 {
        writer.wait_for_more(40).await;
        println!("kill -9 #{kill}");
        relay.kill9();
        relay = Relay::process(&config);
        relay.wait_for_log(STREAMING, DEADLINE).await;
    }
    writer.wait_for_more(40).await;
    let written = writer.finish().await;
    assert!(written.messages > 0 && !written.bad.is_empty());
    let received = consume_all_ids(&topic, &written.kafka, DEADLINE).await;
    check_dead_letters(&outbox, &written, true).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    let everything = consume_ids_to_end(&topic).await;
    check_exactly_once(case, &written.kafka, &everything);
    let traced = check_kafka_traceparents(case, &written, &received);
    assert!(traced >= written.kafka.len(), "every event traced");
    outbox.drop_all().await;
    report_wall_time(case, started);
}

// At-least-once, rows and messages, cleanup, a webhook route beside Kafka,
// a bad row every 7th transaction, trace context; two relays on one slot,
// the active one killed with -9 under load and the standby taking over.
// Kafka and the webhook receiver get every event in order, the bad rows are
// dead-lettered, both sinks carry the trace context, and the table empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_webhook_route_standby_and_dead_letters_survive_kill9_of_the_active_relay() {
    let started = Instant::now();
    let case = "combo-cleanup-webhook-standby-dead";
    let outbox = text_outbox(true, true).await;
    let topic = outbox.topic("order");
    let receiver = Receiver::start(&[SECRET]).await;
    let table = create_delivery_table(&outbox).await;
    let config = outbox.write_config_with(
        &format!(
            "{}{CLEANUP}delivery_table = \"{table}\"\n",
            source_both(&outbox)
        ),
        "",
        &webhook_route_toml("hook*", &receiver.url(), &secrets(), ""),
    );
    let active = Relay::process(&config);
    active.wait_for_log(STREAMING, DEADLINE).await;
    let mut standby = Relay::process(&config);
    standby.wait_for_log(STANDING_BY, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 10,
        messages: true,
        bad_every: 7,
        hook_type: Some("hook"),
    };
    let writer = MixWriter::start(outbox.clone(), mix, PAUSE);
    writer.wait_for_more(60).await;
    active.kill9();
    standby.wait_for_log(STREAMING, DEADLINE).await;
    let at_restart = ids_in_table(&outbox).await;
    writer.wait_for_more(60).await;
    let written = writer.finish().await;
    assert!(!written.hooks.is_empty() && !written.bad.is_empty() && written.messages > 0);

    consume_all_ids(&topic, &written.kafka, DEADLINE).await;
    wait_until("every webhook event accepted", DEADLINE, || async {
        receiver.has_all(&written.hooks)
    })
    .await;
    check_dead_letters(&outbox, &written, false).await;
    wait_for_cleanup(&outbox, &at_restart).await;
    let status = standby.terminate().await;
    assert!(status.success(), "{status:?}\n{}", standby.log_text());
    let everything = consume_to_end(&topic).await;
    check_delivery(case, &written.kafka, &everything);
    check_webhook_delivery(case, &written.hooks, &receiver.accepted(), &[]);
    assert!(receiver.bad_signatures().is_empty());
    assert!(check_kafka_traceparents(case, &written, &everything) >= written.kafka.len());
    assert!(check_webhook_traceparents(case, &written, &receiver) >= written.hooks.len());
    outbox.drop_all().await;
    report_wall_time(case, started);
}

// Two shards in exactly-once mode, shard 0 with a standby relay; a bad
// row every 7th transaction, trace context. Shard 0's active relay is
// killed with -9 (its standby takes over), then shard 1's relay (started
// again). A read_committed consumer sees each event once, in order, from
// both shards; each bad row is dead-lettered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_exactly_once_with_a_standby_trace_context_and_dead_letters_survive_kill9() {
    let started = Instant::now();
    let case = "combo-shards-eos-standby-dead";
    let base = text_outbox(false, false).await;
    let topic = base.topic("order");
    // A checkpoint topic per shard: see
    // `shards_sharing_one_checkpoint_topic_take_over_under_load` for one
    // shared.
    let checkpoints = [checkpoint_topic(&base).await, checkpoint_topic(&base).await];
    let shards = [
        create_shard(&base, 2, 0).await,
        create_shard(&base, 2, 1).await,
    ];
    let configs: Vec<_> = (0..2u32)
        .map(|k| {
            let eos = exactly_once(&checkpoints[k as usize]);
            shard_config(&shards[k as usize], (2, k), "", &eos, "")
        })
        .collect();
    let active0 = Relay::process(&configs[0]);
    active0.wait_for_log(STREAMING, DEADLINE).await;
    let mut standby0 = Relay::process(&configs[0]);
    standby0.wait_for_log(STANDING_BY, DEADLINE).await;
    let mut relay1 = Relay::process(&configs[1]);
    relay1.wait_for_log(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 16,
        messages: false,
        bad_every: 7,
        hook_type: None,
    };
    let writer = MixWriter::start(base.clone(), mix, PAUSE);
    writer.wait_for_more(50).await;
    active0.kill9();
    standby0.wait_for_log(STREAMING, DEADLINE).await;
    writer.wait_for_more(50).await;
    relay1.kill9();
    relay1 = Relay::process(&configs[1]);
    relay1.wait_for_log(STREAMING, DEADLINE).await;
    writer.wait_for_more(50).await;
    let written = writer.finish().await;

    let received = consume_all_ids(&topic, &written.kafka, DEADLINE).await;
    check_dead_letters(&base, &written, true).await;
    for relay in [&mut standby0, &mut relay1] {
        let status = relay.terminate().await;
        assert!(status.success(), "{status:?}\n{}", relay.log_text());
    }
    let everything = consume_ids_to_end(&topic).await;
    check_exactly_once(case, &written.kafka, &everything);
    assert!(check_kafka_traceparents(case, &written, &received) >= written.kafka.len());
    let sources: HashSet<&str> = received
        .iter()
        .filter_map(|r| r.header("ce_source"))
        .collect();
    assert_eq!(sources.len(), 2, "both shards carried events: {sources:?}");
    for shard in &shards {
        drop_shard(shard).await;
    }
    base.drop_all().await;
    report_wall_time(case, started);
}

// Two shards at-least-once, each deleting its rows after the ack, with a
// webhook route (one delivery table for both), a bad row every 7th
// transaction and trace context; shard 0's relay killed with -9 under load
// and started again. Kafka and the receiver get every event in order, the
// bad rows are dead-lettered, and the table empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_with_cleanup_a_webhook_route_and_dead_letters_survive_kill9() {
    let started = Instant::now();
    let case = "combo-shards-cleanup-webhook-dead";
    let base = text_outbox(true, false).await;
    let topic = base.topic("order");
    let receiver = Receiver::start(&[SECRET]).await;
    let table = create_delivery_table(&base).await;
    let shards = [
        create_shard(&base, 2, 0).await,
        create_shard(&base, 2, 1).await,
    ];
    let hooks = webhook_route_toml("hook*", &receiver.url(), &secrets(), "");
    let configs: Vec<_> = (0..2u32)
        .map(|k| {
            shard_config(
                &shards[k as usize],
                (2, k),
                &format!("{CLEANUP}delivery_table = \"{table}\"\n"),
                "",
                &hooks,
            )
        })
        .collect();
    let mut relay0 = Relay::process(&configs[0]);
    let mut relay1 = Relay::process(&configs[1]);
    relay0.wait_for_log(STREAMING, DEADLINE).await;
    relay1.wait_for_log(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 16,
        messages: false,
        bad_every: 7,
        hook_type: Some("hook"),
    };
    let writer = MixWriter::start(base.clone(), mix, PAUSE);
    writer.wait_for_more(60).await;
    relay0.kill9();
    relay0 = Relay::process(&configs[0]);
    relay0.wait_for_log(STREAMING, DEADLINE).await;
    let at_restart = ids_in_table(&base).await;
    writer.wait_for_more(60).await;
    let written = writer.finish().await;

    consume_all_ids(&topic, &written.kafka, DEADLINE).await;
    wait_until("every webhook event accepted", DEADLINE, || async {
        receiver.has_all(&written.hooks)
    })
    .await;
    check_dead_letters(&base, &written, false).await;
    wait_for_cleanup(&base, &at_restart).await;
    for relay in [&mut relay0, &mut relay1] {
        let status = relay.terminate().await;
        assert!(status.success(), "{status:?}\n{}", relay.log_text());
    }
    let everything = consume_to_end(&topic).await;
    check_delivery(case, &written.kafka, &everything);
    check_webhook_delivery(case, &written.hooks, &receiver.accepted(), &[]);
    assert!(receiver.bad_signatures().is_empty());
    assert!(check_kafka_traceparents(case, &written, &everything) >= written.kafka.len());
    assert!(check_webhook_traceparents(case, &written, &receiver) >= written.hooks.len());
    for shard in &shards {
        drop_shard(shard).await;
    }
    base.drop_all().await;
    report_wall_time(case, started);
}

/// The ids of the rows in the outbox table now.
async fn ids_in_table(outbox: &TestOutbox) -> HashSet<String> {
    outbox
        .admin
        .query(
            &format!("SELECT id::text FROM public.{}", outbox.table),
            &[],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.get(0))
        .collect()
}

// The pair cleanup x exactly-once. A row may go only once its event is in
// a committed Kafka transaction: a row deleted while its transaction is
// open is lost for good if that transaction aborts (kill -9) and the slot
// is lost before the replay. Transactions here stay open up to 10 s; while
// they are, every row gone from the table must have its event visible to a
// read_committed consumer. Then kill -9 mid-transaction: each event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_with_exactly_once_deletes_no_row_before_its_kafka_transaction_commits() {
    let started = Instant::now();
    let case = "combo-cleanup-eos";
    let outbox = text_outbox(true, false).await;
    let topic = outbox.topic("order");
    let checkpoints = checkpoint_topic(&outbox).await;
    let config = outbox.write_config_with(
        CLEANUP,
        &format!("{}transaction_max_ms = 10000\n", exactly_once(&checkpoints)),
        "",
    );
    let mut relay = Relay::process(&config);
    relay.wait_for_log(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 10,
        messages: false,
        bad_every: 0,
        hook_type: None,
    };
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut written = Written::default();
    for _ in 0..20 {
        outbox
            .commit_mixed(&mut writer, &mix, &mut seqs, &mut written)
            .await;
    }
    let ids: HashSet<String> = written.kafka.iter().map(|c| c.id.clone()).collect();
    wait_until("cleanup to delete rows", DEADLINE, || async {
        ids_in_table(&outbox).await.len() < ids.len()
    })
    .await;
    // Which rows are gone first, then what a consumer can see: a commit in
    // between only makes more visible.
    let gone: HashSet<String> = ids
        .difference(&ids_in_table(&outbox).await)
        .cloned()
        .collect();
    let visible = consume(&topic, Duration::from_secs(2), |_| false).await;
    let visible: HashSet<&str> = visible.iter().filter_map(|r| r.header("ce_id")).collect();
    let early: Vec<&String> = gone
        .iter()
        .filter(|id| !visible.contains(id.as_str()))
        .collect();
    assert!(
        early.is_empty(),
        "{} of {} rows deleted while their events sat in a Kafka transaction not yet \
         committed (a read_committed consumer sees none of them), e.g. {:?}",
        early.len(),
        gone.len(),
        early.first()
    );

    // Kill -9 with a transaction open, then each event once all the same.
    for _ in 0..20 {
        outbox
            .commit_mixed(&mut writer, &mix, &mut seqs, &mut written)
            .await;
    }
    relay.kill9();
    relay = Relay::process(&config);
    relay.wait_for_log(STREAMING, DEADLINE).await;
    let at_restart = ids_in_table(&outbox).await;
    for _ in 0..10 {
        outbox
            .commit_mixed(&mut writer, &mix, &mut seqs, &mut written)
            .await;
    }
    consume_all_ids(&topic, &written.kafka, DEADLINE).await;
    wait_for_cleanup(&outbox, &at_restart).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    let everything = consume_ids_to_end(&topic).await;
    check_exactly_once(case, &written.kafka, &everything);
    outbox.drop_all().await;
    report_wall_time(case, started);
}

// The pair shards x outbox messages. A message is in no table, so no
// publication's row filter splits messages between shards: each shard's
// relay must publish only the messages of its own aggregates, as it does
// rows. Two shards on rows and messages, exactly-once, shard 0's relay
// killed with -9 under load: a read_committed consumer must see each
// event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_with_outbox_messages_publish_each_message_once() {
    let started = Instant::now();
    let case = "combo-shards-messages";
    let base = text_outbox(false, true).await;
    let topic = base.topic("order");
    let checkpoints = [checkpoint_topic(&base).await, checkpoint_topic(&base).await];
    let shards = [
        create_shard(&base, 2, 0).await,
        create_shard(&base, 2, 1).await,
    ];
    let configs: Vec<_> = (0..2u32)
        .map(|k| {
            shard_config(
                &shards[k as usize],
                (2, k),
                &source_both(&base),
                &exactly_once(&checkpoints[k as usize]),
                "",
            )
        })
        .collect();
    let mut relay0 = Relay::process(&configs[0]);
    let mut relay1 = Relay::process(&configs[1]);
    relay0.wait_for_log(STREAMING, DEADLINE).await;
    relay1.wait_for_log(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 16,
        messages: true,
        bad_every: 0,
        hook_type: None,
    };
    let writer = MixWriter::start(base.clone(), mix, PAUSE);
    writer.wait_for_more(40).await;
    relay0.kill9();
    relay0 = Relay::process(&configs[0]);
    relay0.wait_for_log(STREAMING, DEADLINE).await;
    writer.wait_for_more(40).await;
    let written = writer.finish().await;
    assert!(written.messages > 0);
    consume_all_ids(&topic, &written.kafka, DEADLINE).await;
    for relay in [&mut relay0, &mut relay1] {
        let status = relay.terminate().await;
        assert!(status.success(), "{status:?}\n{}", relay.log_text());
    }
    let everything = consume_ids_to_end(&topic).await;
    check_exactly_once(case, &written.kafka, &everything);
    for shard in &shards {
        drop_shard(shard).await;
    }
    base.drop_all().await;
    report_wall_time(case, started);
}

// The pair cleanup x dead letters, for a dead letter that lost its payload
// (too large for the dead-letter topic too: headers only, with its size and
// SHA-256). The row is then the payload's only copy: cleanup must keep it,
// while it deletes every other row. Load before and after a kill -9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_with_a_dead_letter_that_lost_its_payload_keeps_the_row() {
    let case = "combo-cleanup-lost-payload";
    let outbox = TestOutbox::create("jsonb").await;
    outbox
        .admin
        .batch_execute(&format!("GRANT DELETE ON public.{} TO relay", outbox.table))
        .await
        .unwrap();
    let topic = outbox.topic("order");
    outbox
        .create_topic_with_config(&topic, 1, &[("max.message.bytes", "20000")])
        .await;
    outbox
        .create_topic_with_config(&outbox.dlq_topic, 1, &[("max.message.bytes", "20000")])
        .await;
    let config = outbox.write_config_with(CLEANUP, "", "");
    let mut relay = Relay::process(&config);
    relay.wait_for_log(STREAMING, DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 30, 2, 5, &mut seqs).await;
    let big_id = uuid::Uuid::new_v4().to_string();
    let big = format!("{{\"blob\": \"{}\"}}", "z".repeat(60_000));
    outbox
        .admin
        .execute(
            &format!(
                "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                 VALUES ($1::text::uuid, 'order', 'big', 'Placed', $2::text::jsonb)",
                outbox.table
            ),
            &[&big_id, &big],
        )
        .await
        .unwrap();
    committed.extend(outbox.commit_events(&mut writer, 30, 2, 5, &mut seqs).await);
    relay.kill9();
    relay = Relay::process(&config);
    relay.wait_for_log(STREAMING, DEADLINE).await;
    let at_restart = ids_in_table(&outbox).await;
    committed.extend(outbox.commit_events(&mut writer, 30, 2, 5, &mut seqs).await);
    let dlq = consume(&outbox.dlq_topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(dlq[0].header("id"), Some(big_id.as_str()));
    assert_eq!(
        dlq[0].header("dlq_truncated"),
        Some("true"),
        "the dead letter lost its payload"
    );
    consume_all_ids(&topic, &committed, DEADLINE).await;
    // Cleanup went past it: every row committed since the restart is gone
    // (rows the killed relay confirmed but had not deleted may stay).
    wait_until_explained(
        "cleanup to delete every row committed since the restart",
        DEADLINE,
        || async { ids_in_table(&outbox).await.is_subset(&at_restart) },
        || async {
            let warnings: Vec<String> = relay
                .log_text()
                .lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .map(str::to_owned)
                .collect();
            format!(
                "{} rows left; the relay's warnings: {warnings:?}",
                committed_rows(&outbox).await
            )
        },
    )
    .await;
    assert!(
        ids_in_table(&outbox).await.contains(&big_id),
        "cleanup deleted the row of a dead letter without its payload: the payload is gone \
         for good"
    );
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    let everything = consume_to_end(&topic).await;
    check_delivery(case, &committed, &everything);
    outbox.drop_all().await;
}

// Shards x exactly-once with the relays sharing one checkpoint topic, as
// docs/exactly-once.md allows ("one key each"). Two shards under load;
// shard 0's relay killed with -9 and started again: it must stream again
// (its checkpoint read must not wait forever on the other shard's
// transactions) and a read_committed consumer see each event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_sharing_one_checkpoint_topic_take_over_under_load() {
    let started = Instant::now();
    let case = "combo-shards-shared-checkpoints";
    let base = text_outbox(false, false).await;
    let topic = base.topic("order");
    let checkpoints = checkpoint_topic(&base).await;
    let shards = [
        create_shard(&base, 2, 0).await,
        create_shard(&base, 2, 1).await,
    ];
    let configs: Vec<_> = (0..2u32)
        .map(|k| {
            shard_config(
                &shards[k as usize],
                (2, k),
                "",
                &exactly_once(&checkpoints),
                "",
            )
        })
        .collect();
    let mut relay0 = Relay::process(&configs[0]);
    let mut relay1 = Relay::process(&configs[1]);
    relay0.wait_for_log(STREAMING, DEADLINE).await;
    relay1.wait_for_log(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 16,
        messages: false,
        bad_every: 0,
        hook_type: None,
    };
    let writer = MixWriter::start(base.clone(), mix, PAUSE);
    writer.wait_for_more(40).await;
    relay0.kill9();
    relay0 = Relay::process(&configs[0]);
    relay0.wait_for_log(STREAMING, DEADLINE).await;
    writer.wait_for_more(40).await;
    let written = writer.finish().await;
    consume_all_ids(&topic, &written.kafka, DEADLINE).await;
    for relay in [&mut relay0, &mut relay1] {
        let status = relay.terminate().await;
        assert!(status.success(), "{status:?}\n{}", relay.log_text());
    }
    let everything = consume_ids_to_end(&topic).await;
    check_exactly_once(case, &written.kafka, &everything);
    for shard in &shards {
        drop_shard(shard).await;
    }
    base.drop_all().await;
    report_wall_time(case, started);
}
