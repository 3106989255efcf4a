//! One pair of features each, under load and kill -9 with the checker
//! after: pairs that did not hold when these tests were written (cleanup
//! with exactly-once, shards with outbox messages, cleanup with a dead
//! letter that lost its payload, shards sharing one checkpoint topic in
//! exactly-once mode). docs/design.md ("Where features meet") names them
//! beside [`crate::combinations`], which runs many features at once.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::support::mixed::*;
use crate::support::shards::{create_shard, drop_shard, shard_config};
use crate::support::*;

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
        // Open up to 10 s, however quiet the stream.
        &format!(
            "{}transaction_max_ms = 10000\ntransaction_quiet_ms = 30000\n",
            exactly_once(&checkpoints)
        ),
        "",
    );
    let mut relay = Relay::process(&config);
    relay.wait_for_event(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 10,
        messages: false,
        bad_every: 0,
        hook_type: None,
        contract_breaks: false,
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
    relay.wait_for_event(STREAMING, DEADLINE).await;
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
    relay0.wait_for_event(STREAMING, DEADLINE).await;
    relay1.wait_for_event(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 16,
        messages: true,
        bad_every: 0,
        hook_type: None,
        contract_breaks: false,
    };
    let writer = MixWriter::start(base.clone(), mix, PAUSE);
    writer.wait_for_more(40).await;
    relay0.kill9();
    relay0 = Relay::process(&configs[0]);
    relay0.wait_for_event(STREAMING, DEADLINE).await;
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
    relay.wait_for_event(STREAMING, DEADLINE).await;
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
    // Its dead letter first, then more load: the broker refuses the big
    // record's whole batch, and a batch librdkafka sent right behind it can
    // be in the log before the replay (docs/reliability.md, "a record
    // written after a failed one of the same key": a known hazard for the
    // order of first occurrences, tested in broker_faults). This pair is
    // about the row cleanup keeps, so nothing else is in flight then.
    let dlq = consume(&outbox.dlq_topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(dlq[0].header("id"), Some(big_id.as_str()));
    assert_eq!(
        dlq[0].header("dlq_truncated"),
        Some("true"),
        "the dead letter lost its payload"
    );
    committed.extend(outbox.commit_events(&mut writer, 30, 2, 5, &mut seqs).await);
    relay.kill9();
    relay = Relay::process(&config);
    relay.wait_for_event(STREAMING, DEADLINE).await;
    let at_restart = ids_in_table(&outbox).await;
    committed.extend(outbox.commit_events(&mut writer, 30, 2, 5, &mut seqs).await);
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
    relay0.wait_for_event(STREAMING, DEADLINE).await;
    relay1.wait_for_event(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 16,
        messages: false,
        bad_every: 0,
        hook_type: None,
        contract_breaks: false,
    };
    let writer = MixWriter::start(base.clone(), mix, PAUSE);
    writer.wait_for_more(40).await;
    relay0.kill9();
    relay0 = Relay::process(&configs[0]);
    relay0.wait_for_event(STREAMING, DEADLINE).await;
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
