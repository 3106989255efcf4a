//! Features together, end to end: each test runs several of the relay's
//! features at once (delivery mode, source, cleanup, shards, webhook routes,
//! standby relays, dead letters, trace context, contracts) under a steady
//! writer, kills a relay process with -9 at least once, and then judges
//! every sink with
//! the checker: nothing lost, per-aggregate order kept, no duplicate on an
//! exactly-once topic read read_committed, each bad row dead-lettered, each
//! writer's trace context on its record. docs/design.md ("Where features
//! meet") names, for every pair of features, the test here or in
//! [`crate::feature_pairs`] that shows the pair works, or the validation
//! message that refuses it; tests/it/docs.rs keeps that table honest.

use std::collections::HashSet;
use std::time::Instant;

use crate::support::mixed::*;
use crate::support::shards::{create_shard, drop_shard, shard_config};
use crate::support::webhook::*;
use crate::support::*;

const SECRET: &str = "combination-secret";

fn secrets() -> Vec<String> {
    vec![SECRET.to_owned()]
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
    let config = outbox.write_config_with(
        &source_both(&outbox),
        &exactly_once(&checkpoints),
        &contract_toml(),
    );
    let mut relay = Relay::process(&config);
    relay.wait_for_event(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 12,
        messages: true,
        bad_every: 7,
        hook_type: None,
        contract_breaks: true,
    };
    let writer = MixWriter::start(outbox.clone(), mix, PAUSE);
    for kill in 0..3 {
        writer.wait_for_more(40).await;
        println!("kill -9 #{kill}");
        relay.kill9();
        relay = Relay::process(&config);
        relay.wait_for_event(STREAMING, DEADLINE).await;
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
    assert!(check_kafka_dataschemas(case, &received) >= written.kafka.len());
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
        &(webhook_route_toml("hook*", &receiver.url(), &secrets(), "") + &contract_toml()),
    );
    let active = Relay::process(&config);
    active.wait_for_event(STREAMING, DEADLINE).await;
    let mut standby = Relay::process(&config);
    standby.wait_for_event(STANDING_BY, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 10,
        messages: true,
        bad_every: 7,
        hook_type: Some("hook"),
        contract_breaks: true,
    };
    let writer = MixWriter::start(outbox.clone(), mix, PAUSE);
    writer.wait_for_more(60).await;
    active.kill9();
    standby.wait_for_event(STREAMING, DEADLINE).await;
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
    assert!(check_kafka_dataschemas(case, &everything) >= written.kafka.len());
    assert!(check_webhook_dataschemas(case, &receiver) >= written.hooks.len());
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
    let contract = contract_toml();
    let configs: Vec<_> = (0..2u32)
        .map(|k| {
            let eos = exactly_once(&checkpoints[k as usize]);
            shard_config(&shards[k as usize], (2, k), "", &eos, &contract)
        })
        .collect();
    let active0 = Relay::process(&configs[0]);
    active0.wait_for_event(STREAMING, DEADLINE).await;
    let mut standby0 = Relay::process(&configs[0]);
    standby0.wait_for_event(STANDING_BY, DEADLINE).await;
    let mut relay1 = Relay::process(&configs[1]);
    relay1.wait_for_event(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 16,
        messages: false,
        bad_every: 7,
        hook_type: None,
        contract_breaks: true,
    };
    let writer = MixWriter::start(base.clone(), mix, PAUSE);
    writer.wait_for_more(50).await;
    active0.kill9();
    standby0.wait_for_event(STREAMING, DEADLINE).await;
    writer.wait_for_more(50).await;
    relay1.kill9();
    relay1 = Relay::process(&configs[1]);
    relay1.wait_for_event(STREAMING, DEADLINE).await;
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
    assert!(check_kafka_dataschemas(case, &received) >= written.kafka.len());
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
    let hooks = webhook_route_toml("hook*", &receiver.url(), &secrets(), "") + &contract_toml();
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
    relay0.wait_for_event(STREAMING, DEADLINE).await;
    relay1.wait_for_event(STREAMING, DEADLINE).await;
    let mix = Mix {
        per_txn: 3,
        aggregates: 16,
        messages: false,
        bad_every: 7,
        hook_type: Some("hook"),
        contract_breaks: true,
    };
    let writer = MixWriter::start(base.clone(), mix, PAUSE);
    writer.wait_for_more(60).await;
    relay0.kill9();
    relay0 = Relay::process(&configs[0]);
    relay0.wait_for_event(STREAMING, DEADLINE).await;
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
    assert!(check_kafka_dataschemas(case, &everything) >= written.kafka.len());
    assert!(check_webhook_dataschemas(case, &receiver) >= written.hooks.len());
    for shard in &shards {
        drop_shard(shard).await;
    }
    base.drop_all().await;
    report_wall_time(case, started);
}
