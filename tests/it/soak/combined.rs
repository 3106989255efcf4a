//! Soaks of several features at once: the most exposed combinations the
//! table of docs/design.md ("Where features meet") allows, under the
//! writer of [`crate::support::mixed`] and the seeded faults of
//! [`super::Schedule`] (kill -9 of a relay, broker restarts, walsender
//! kills), for `SOAK_SECS`. Set-up as in tests/it/combinations.rs.
//!
//! * exactly-once, cleanup, rows and outbox messages, two shards (one relay
//!   each, one checkpoint topic), bad rows: a read_committed consumer sees
//!   each event once, each bad row is dead-lettered once, the table empties
//!   but for rows a kill -9 left confirmed and undeleted.
//! * at-least-once, cleanup, a webhook route beside Kafka, two relays on
//!   one slot (the active one killed, started again as the standby): Kafka
//!   and the receiver get every event, in order per aggregate.
//!
//! A relay that exits by itself is a finding: it is counted, its log tail
//! printed, it is started again, and the soak fails at the end.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{Fault, Schedule};
use crate::support::mixed::*;
use crate::support::services;
use crate::support::shards::{create_shard, drop_shard, shard_config};
use crate::support::webhook::*;
use crate::support::*;

const SECRET: &str = "soak-secret";
/// How long the end of a soak waits for a sink to catch up: a broker
/// restart just before the end leaves minutes of backlog on this machine.
const CATCH_UP: Duration = Duration::from_secs(300);
/// A short delivery timeout, so broker outages exercise the
/// failed-delivery path (rebuild the producer, replay from the slot).
const SHORT_TIMEOUT: &str = "message_timeout_ms = 10000\n";

/// Whether a relay process's log says it streams now: its last
/// "streaming" event comes after its last "standing by" one.
fn streams(relay: &Relay) -> bool {
    relay.last_event(&[STREAMING, STANDING_BY]) == Some(STREAMING)
}

/// Relays that exited by themselves: printed with their log tail, counted.
#[derive(Default)]
struct Exits(Vec<String>);

impl Exits {
    /// If `relay` exited, records it and returns a new relay on `config`.
    async fn restart_if_exited(&mut self, relay: &mut Relay, config: &Path, name: &str) {
        if relay.running() {
            return;
        }
        let status = relay.wait(Duration::ZERO).await;
        let log = relay.log_text();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        println!(
            "soak: relay {name} exited by itself ({status:?}); log tail:\n{}",
            tail.join("\n")
        );
        self.0.push(format!("{name}: {status:?}"));
        *relay = Relay::process(config);
    }
}

/// The ids of rows in the table right after a kill -9: a relay killed
/// after confirming rows and before deleting them leaves them for good.
async fn remember_rows(outbox: &TestOutbox, left: &mut HashSet<String>) {
    left.extend(ids_in_table(outbox).await);
}

/// The tests here hold the services alone ([`services::exclusive`]):
/// `make test` runs them after the others, one at a time.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "long-running; run with `make soak`"]
    async fn soak_exactly_once_cleanup_both_sources_two_shards() {
        // It restarts the broker: no other test may run beside it.
        let serial = services::exclusive().await;
        let case = "soak-eos-cleanup-both-2shards";
        let mut soak = Schedule::from_env(case);
        let started = Instant::now();
        let base = text_outbox_from(
            TestOutbox::create_exclusive(&serial, "text").await,
            true,
            true,
        )
        .await;
        let topic = base.topic("order");
        let checkpoints = checkpoint_topic(&base).await;
        let shards = [
            create_shard(&base, 2, 0).await,
            create_shard(&base, 2, 1).await,
        ];
        let kafka = format!("{}{SHORT_TIMEOUT}", exactly_once(&checkpoints));
        let configs: Vec<_> = (0..2u32)
            .map(|k| {
                let postgres = format!("{}{CLEANUP}", source_both(&base));
                shard_config(&shards[k as usize], (2, k), &postgres, &kafka, "")
            })
            .collect();
        let mut relays: Vec<Relay> = configs.iter().map(|c| Relay::process(c)).collect();
        for relay in &relays {
            relay.wait_for_event(STREAMING, DEADLINE).await;
        }
        let mix = Mix {
            per_txn: 3,
            aggregates: 32,
            messages: true,
            bad_every: 250,
            hook_type: None,
            contract_breaks: false,
        };
        let writer = MixWriter::start(base.clone(), mix, PAUSE);
        let mut exits = Exits::default();
        let mut left_by_kills = HashSet::new();
        while let Some(fault) = soak.next_fault().await {
            for (k, relay) in relays.iter_mut().enumerate() {
                exits
                    .restart_if_exited(relay, &configs[k], &format!("shard-{k}"))
                    .await;
            }
            match fault {
                Fault::Kill9 => {
                    let k = soak.pick(2) as usize;
                    relays.remove(k).kill9();
                    remember_rows(&base, &mut left_by_kills).await;
                    soak.pause(2000).await;
                    relays.insert(k, Relay::process(&configs[k]));
                    soak.kills += 1;
                }
                Fault::WalsenderKill => {
                    let k = soak.pick(2) as usize;
                    if shards[k].terminate_slot_holder().await.is_some() {
                        soak.walsender_kills += 1;
                    }
                }
                Fault::BrokerRestart => soak.restart_broker().await,
            }
        }
        let written = writer.finish().await;
        println!(
            "soak: case={case} {} transactions={} events={} messages={} bad-rows={}",
            soak.faults(),
            written.transactions,
            written.kafka.len(),
            written.messages,
            written.bad.len()
        );
        consume_all_ids(&topic, &written.kafka, CATCH_UP).await;
        for (k, relay) in relays.iter_mut().enumerate() {
            exits
                .restart_if_exited(relay, &configs[k], &format!("shard-{k}"))
                .await;
        }
        let everything = consume_ids_to_end(&topic).await;
        let summary = check_exactly_once(case, &written.kafka, &everything);
        check_dead_letters(&base, &written, true).await;
        wait_for_cleanup(&base, &left_by_kills).await;
        for relay in &mut relays {
            let status = relay.terminate().await;
            assert!(status.success(), "{status:?}\n{}", relay.log_text());
        }
        println!(
            "soak: case={case} seed={} {} committed={} delivered={} lost={} duplicated={} \
             dead-lettered={} left-by-kills={} relay-exits={} secs={:.0}",
            soak.seed,
            soak.faults(),
            summary.committed,
            summary.delivered,
            summary.lost,
            summary.duplicated,
            written.bad.len(),
            committed_rows(&base).await,
            exits.0.len(),
            started.elapsed().as_secs_f64()
        );
        assert!(
            exits.0.is_empty(),
            "relays exited by themselves: {:?}",
            exits.0
        );
        for shard in &shards {
            drop_shard(shard).await;
        }
        base.drop_all().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "long-running; run with `make soak`"]
    async fn soak_at_least_once_cleanup_webhook_route_standby() {
        // It restarts the broker: no other test may run beside it.
        let serial = services::exclusive().await;
        let case = "soak-alo-cleanup-webhook-standby";
        let mut soak = Schedule::from_env(case);
        let started = Instant::now();
        let outbox = text_outbox_from(
            TestOutbox::create_exclusive(&serial, "text").await,
            true,
            true,
        )
        .await;
        let topic = outbox.topic("order");
        let receiver = Receiver::start(&[SECRET]).await;
        let table = create_delivery_table(&outbox).await;
        let config = outbox.write_config_with(
            &format!(
                "{}{CLEANUP}delivery_table = \"{table}\"\n",
                source_both(&outbox)
            ),
            SHORT_TIMEOUT,
            &webhook_route_toml("hook*", &receiver.url(), &[SECRET.to_owned()], ""),
        );
        let first = Relay::process(&config);
        first.wait_for_event(STREAMING, DEADLINE).await;
        let second = Relay::process(&config);
        second.wait_for_event(STANDING_BY, DEADLINE).await;
        let mut relays = vec![first, second];
        let mix = Mix {
            per_txn: 3,
            aggregates: 32,
            messages: true,
            bad_every: 250,
            hook_type: Some("hook"),
            contract_breaks: false,
        };
        let writer = MixWriter::start(outbox.clone(), mix, PAUSE);
        let mut exits = Exits::default();
        let mut left_by_kills = HashSet::new();
        let mut takeovers = 0;
        while let Some(fault) = soak.next_fault().await {
            for (k, relay) in relays.iter_mut().enumerate() {
                exits
                    .restart_if_exited(relay, &config, &format!("relay-{k}"))
                    .await;
            }
            match fault {
                Fault::Kill9 => {
                    // The active relay (the other one if neither streams right
                    // now: it is reconnecting).
                    let active = relays.iter().position(streams).unwrap_or(0);
                    relays.remove(active).kill9();
                    remember_rows(&outbox, &mut left_by_kills).await;
                    let standby = &relays[0];
                    wait_until("the standby to take over", DEADLINE, || async {
                        streams(standby)
                    })
                    .await;
                    takeovers += 1;
                    soak.pause(2000).await;
                    let restarted = Relay::process(&config);
                    wait_until("the restarted relay to stand by", DEADLINE, || async {
                        restarted.last_event(&[STANDING_BY, STREAMING]).is_some()
                    })
                    .await;
                    relays.push(restarted);
                    soak.kills += 1;
                }
                Fault::WalsenderKill => {
                    if outbox.terminate_slot_holder().await.is_some() {
                        soak.walsender_kills += 1;
                    }
                }
                Fault::BrokerRestart => soak.restart_broker().await,
            }
        }
        let written = writer.finish().await;
        println!(
            "soak: case={case} {} takeovers={takeovers} transactions={} kafka-events={} \
             webhook-events={} messages={} bad-rows={}",
            soak.faults(),
            written.transactions,
            written.kafka.len(),
            written.hooks.len(),
            written.messages,
            written.bad.len()
        );
        consume_all_ids(&topic, &written.kafka, CATCH_UP).await;
        wait_until_explained(
            "every webhook event accepted",
            CATCH_UP,
            || async { receiver.has_all(&written.hooks) },
            || async {
                let accepted: HashSet<String> =
                    receiver.accepted().into_iter().map(|a| a.id).collect();
                let missing = written
                    .hooks
                    .iter()
                    .filter(|c| !accepted.contains(&c.id))
                    .count();
                format!("{missing} of {} never accepted", written.hooks.len())
            },
        )
        .await;
        for (k, relay) in relays.iter_mut().enumerate() {
            exits
                .restart_if_exited(relay, &config, &format!("relay-{k}"))
                .await;
        }
        let everything = consume_to_end(&topic).await;
        let summary = check_delivery(case, &written.kafka, &everything);
        let webhook_duplicates =
            check_webhook_delivery(case, &written.hooks, &receiver.accepted(), &[]);
        assert!(receiver.bad_signatures().is_empty());
        check_dead_letters(&outbox, &written, false).await;
        wait_for_cleanup(&outbox, &left_by_kills).await;
        for relay in &mut relays {
            let status = relay.terminate().await;
            assert!(status.success(), "{status:?}\n{}", relay.log_text());
        }
        println!(
            "soak: case={case} seed={} {} committed={} delivered={} lost={} duplicated={} \
             webhook-committed={} webhook-accepted={} webhook-lost=0 webhook-duplicated={} \
             dead-lettered={} left-by-kills={} relay-exits={} secs={:.0}",
            soak.seed,
            soak.faults(),
            summary.committed,
            summary.delivered,
            summary.lost,
            summary.duplicated,
            written.hooks.len(),
            receiver.accepted().len(),
            webhook_duplicates,
            written.bad.len(),
            committed_rows(&outbox).await,
            exits.0.len(),
            started.elapsed().as_secs_f64()
        );
        assert!(
            exits.0.is_empty(),
            "relays exited by themselves: {:?}",
            exits.0
        );
        outbox.drop_all().await;
    }
}
