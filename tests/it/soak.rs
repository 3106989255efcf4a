//! `make soak`: mixed faults at seeded random moments under steady load, for
//! a bounded time, ending with the checker. Not part of `make test`
//! (`#[ignore]`); `make soak` runs it.
//!
//! Faults: `kill -9` of the relay (then restarted), a Kafka broker restart,
//! `pg_terminate_backend` on the relay's walsender. Settings by environment:
//! `SOAK_SECS` (default 300), `SOAK_SEED` (default: from the clock, printed),
//! `SOAK_RATE` (events/s, default 500).

use std::time::{Duration, Instant};

use crate::support::services;
use crate::support::*;

/// A small deterministic generator (xorshift64*), so a seed replays a run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long-running; run with `make soak`"]
async fn soak_mixed_faults_under_steady_load() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let rate: u64 = std::env::var("SOAK_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let seed: u64 = std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("soak: seed={seed} duration={secs}s rate={rate}/s");
    let mut rng = Seeded(seed);

    // It restarts the broker: no other test may run beside it.
    let serial = services::exclusive().await;
    let outbox = TestOutbox::create_exclusive(&serial, "jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 6).await;
    // A short delivery timeout, so broker outages exercise the
    // failed-delivery path (rebuild the producer, replay from the slot).
    let config = outbox.write_config("");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("dlq_topic =", "message_timeout_ms = 10000\ndlq_topic =");
    std::fs::write(&config, text).unwrap();
    let mut loadgen = outbox.start_loadgen(&[
        "--rate",
        &rate.to_string(),
        "--events",
        "0",
        "--duration-secs",
        &secs.to_string(),
        "--connections",
        "2",
        "--aggregates",
        "200",
        "--rows-per-txn",
        "3",
    ]);
    let mut relay = Some(Relay::process(&config));
    let started = Instant::now();
    let (mut kills, mut broker_restarts, mut walsender_kills) = (0, 0, 0);
    while started.elapsed() < Duration::from_secs(secs) {
        // Next fault in 3..=11 s.
        tokio::time::sleep(Duration::from_millis(3000 + rng.below(8_000))).await;
        if started.elapsed() >= Duration::from_secs(secs) {
            break;
        }
        match rng.below(10) {
            0..=4 => {
                relay.take().expect("relay running").kill9();
                tokio::time::sleep(Duration::from_millis(rng.below(2000))).await;
                relay = Some(Relay::process(&config));
                kills += 1;
            }
            5..=7 => {
                if outbox.terminate_slot_holder().await.is_some() {
                    walsender_kills += 1;
                }
            }
            _ => {
                services::output(&["stop-kafka"]);
                tokio::time::sleep(Duration::from_millis(1000 + rng.below(5000))).await;
                services::output(&["start-kafka"]);
                broker_restarts += 1;
            }
        }
    }
    wait_child(&mut loadgen, Duration::from_secs(60)).await;
    let committed = outbox.committed_from_table().await;
    consume_all_ids(&topic, &committed, Duration::from_secs(300)).await;
    let status = relay.take().unwrap().terminate().await;
    assert!(status.success(), "relay exits 0 on SIGTERM after the soak");
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("soak", &committed, &received);
    println!(
        "soak: seed={seed} faults={} (kill-9={kills}, broker-restarts={broker_restarts}, walsender-kills={walsender_kills}) committed={} delivered={} lost={} duplicated={}",
        kills + broker_restarts + walsender_kills,
        summary.committed,
        summary.delivered,
        summary.lost,
        summary.duplicated
    );
    assert_eq!(summary.lost, 0);
    outbox.drop_all().await;
}
