//! Sharded slots with outbox logical messages (`postgres.source = "both"`):
//! no publication row filter reaches a logical message, every shard's slot
//! receives each one, so each relay must publish only the messages of its
//! own aggregates, by the row filter's function. Nothing lost, per-aggregate
//! order kept across rows and messages, no event published by two shards,
//! through a graceful stop and a kill -9 mid-load.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::{drop_shards, init_shards, shard_on_server};
use crate::support::messages::{Write, install_outbox_emit};
use crate::support::*;

/// Checks that every record came from the relay of its aggregate's shard
/// (the `ce_source` each shard's config names), the server's filter being
/// the judge of which shard that is, and that no event was published by
/// both shards. Returns the records per shard.
async fn assert_each_event_from_its_shard_only(
    base: &TestOutbox,
    committed: &[Committed],
    received: &[Received],
) -> [usize; 2] {
    let aggregate_of: HashMap<&str, &str> = committed
        .iter()
        .map(|c| (c.id.as_str(), c.aggregate.as_str()))
        .collect();
    let mut shard_of_aggregate = HashMap::new();
    for aggregate in aggregate_of.values().copied().collect::<HashSet<_>>() {
        shard_of_aggregate.insert(aggregate, shard_on_server(&base.admin, aggregate, 2).await);
    }
    let mut sources: HashMap<&str, HashSet<&str>> = HashMap::new();
    for record in received {
        let id = record.header("ce_id").expect("ce_id");
        sources
            .entry(id)
            .or_default()
            .insert(record.header("ce_source").expect("ce_source"));
    }
    let by_both: Vec<&&str> = sources
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(
        by_both.is_empty(),
        "{} events published by both shards, e.g. {:?}",
        by_both.len(),
        by_both.first()
    );
    let mut per_shard = [0; 2];
    for record in received {
        let id = record.header("ce_id").unwrap();
        let aggregate = aggregate_of[id];
        let want = shard_of_aggregate[aggregate];
        assert_eq!(
            record.header("ce_source"),
            Some(format!("/shard-{want}").as_str()),
            "event {id} of aggregate {aggregate}, which is shard {want}'s"
        );
        per_shard[want as usize] += 1;
    }
    per_shard
}

/// Rows of the business table: how far the writer got.
async fn business_rows(base: &TestOutbox) -> i64 {
    base.admin
        .query_one(
            &format!("SELECT count(*) FROM public.{}_orders", base.table),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

// Two shards, `source = "both"`: rows, outbox messages and one undecodable
// message. A graceful run publishes each event once, from its aggregate's
// shard (the undecodable message is dead-lettered once, by shard 0); then,
// under load, shard 0's relay is killed with -9 and restarted while the
// writer goes on: nothing lost, order kept, still no event from both shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_publish_each_outbox_message_once_through_its_aggregates_shard() {
    let base = TestOutbox::create("jsonb").await;
    install_outbox_emit(&base.admin).await;
    let topic = base.topic("order");
    base.create_topic(&topic, 3).await;
    let prefix = base.message_prefix();
    let sources = format!("source = \"both\"\nmessage_prefix = \"{prefix}\"\n");
    let Some(shards) = init_shards(&base, 2, &sources).await else {
        base.drop_all().await;
        return;
    };
    let start = |k: usize| Relay::process(&shards[k].1);
    let mut relays = vec![start(0), start(1)];
    for (shard, _) in &shards {
        wait_until("each shard's relay to hold its slot", DEADLINE, || {
            shard.slot_active()
        })
        .await;
    }

    // A graceful run.
    base.admin
        .execute(
            "SELECT pg_logical_emit_message(true, $1, 'not an outbox object')",
            &[&prefix],
        )
        .await
        .unwrap();
    let mut writer = base.writer().await;
    let mut seqs = HashMap::new();
    let (mut committed, messages) = base
        .emit_events(&mut writer, (60, 4, 40), Write::Both, &mut seqs)
        .await;
    assert!(
        messages > 60 && messages < committed.len() - 60,
        "a real mix"
    );
    consume_all_ids(&topic, &committed, DEADLINE).await;
    for relay in &mut relays {
        assert!(relay.terminate().await.success(), "{}", relay.log_text());
    }
    let received = consume_to_end(&topic).await;
    let per_shard = assert_each_event_from_its_shard_only(&base, &committed, &received).await;
    assert!(per_shard.iter().all(|n| *n > 0), "{per_shard:?}");
    let summary = check_delivery("shards-both-graceful", &committed, &received);
    assert_eq!(
        summary.duplicated, 0,
        "a graceful run publishes each event once"
    );
    assert_eq!(received.len(), committed.len());
    assert_eq!(
        topic_len(&base.dlq_topic).await,
        1,
        "the undecodable message is dead-lettered once, by shard 0 alone"
    );
    println!("shards-both: {messages} messages; events per shard {per_shard:?}");

    // Under load: shard 0's relay killed with -9, restarted while the
    // writer goes on.
    let mut relays = vec![start(0), start(1)];
    let killed = relays.remove(0);
    let delivered = received.len();
    let restarted = AtomicBool::new(false);
    let started = Instant::now();
    let writing = async {
        let mut out = Vec::new();
        let mut after_restart = 0;
        while after_restart < 5 {
            if restarted.load(Ordering::SeqCst) {
                after_restart += 1;
            }
            assert!(
                started.elapsed() < 4 * DEADLINE,
                "the kill and restart did not happen while writing"
            );
            let (events, _) = base
                .emit_events(&mut writer, (10, 4, 40), Write::Both, &mut seqs)
                .await;
            out.extend(events);
        }
        out
    };
    let crashing = async {
        // Mid-load: once the relays delivered some of the new events.
        let seen = consume(&topic, DEADLINE, move |r| r.len() >= delivered + 100).await;
        assert!(
            seen.len() >= delivered + 100,
            "the relays deliver before the kill"
        );
        killed.kill9();
        let written = business_rows(&base).await;
        wait_until(
            "the writer to go on while shard 0's relay is down",
            DEADLINE,
            || async { business_rows(&base).await >= written + 100 },
        )
        .await;
        let relay = start(0);
        restarted.store(true, Ordering::SeqCst);
        relay
    };
    let (more, relay) = tokio::join!(writing, crashing);
    relays.insert(0, relay);
    committed.extend(more);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    for relay in &mut relays {
        assert!(relay.terminate().await.success(), "{}", relay.log_text());
    }
    let received = consume_to_end(&topic).await;
    let per_shard = assert_each_event_from_its_shard_only(&base, &committed, &received).await;
    let summary = check_delivery("shards-both-kill-9", &committed, &received);
    println!(
        "shards-both-kill-9: {} events, per shard {per_shard:?}, {} duplicates (shard 0 re-sends \
         what it had not confirmed)",
        committed.len(),
        summary.duplicated
    );
    drop_shards(&shards).await;
    base.drop_all().await;
}
