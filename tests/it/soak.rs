//! `make soak`: mixed faults at seeded random moments under steady load, for
//! a bounded time, ending with the checker. Not part of `make test`
//! (`#[ignore]`); `make soak` runs every soak one after the other (each holds
//! the services alone), `make soak SOAK_CASE=<name>` one of them.
//!
//! Faults: `kill -9` of a relay (then restarted), a Kafka broker restart,
//! `pg_terminate_backend` on a relay's walsender. Settings by environment:
//! `SOAK_SECS` (default 300), `SOAK_SEED` (default: from the clock, printed),
//! `SOAK_RATE` (events/s of the loadgen here, default 500). The soaks of
//! several features at once are in [`combined`].

mod combined;

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

/// Which fault comes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// `kill -9` of a relay, which the soak starts again.
    Kill9,
    /// `pg_terminate_backend` of the walsender serving a relay.
    WalsenderKill,
    /// The Kafka broker stopped for 1 to 6 s and started again.
    BrokerRestart,
}

/// One soak's settings (from the environment) and its seeded schedule of
/// faults, with a count of each fault injected.
struct Schedule {
    secs: u64,
    seed: u64,
    rng: Seeded,
    started: Instant,
    kills: u32,
    walsender_kills: u32,
    broker_restarts: u32,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

impl Schedule {
    /// `SOAK_SECS` and `SOAK_SEED` read and printed; the clock starts now.
    fn from_env(case: &str) -> Self {
        let secs = env_u64("SOAK_SECS").unwrap_or(300);
        let seed = env_u64("SOAK_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
        println!("soak: case={case} seed={seed} duration={secs}s");
        Schedule {
            secs,
            seed,
            rng: Seeded(seed),
            started: Instant::now(),
            kills: 0,
            walsender_kills: 0,
            broker_restarts: 0,
        }
    }

    /// Sleeps until the next fault (3 to 11 s) and says which, or `None`
    /// once the soak's time is up: half kill -9, 3 in 10 walsender kills,
    /// 2 in 10 broker restarts.
    async fn next_fault(&mut self) -> Option<Fault> {
        tokio::time::sleep(Duration::from_millis(3000 + self.rng.below(8_000))).await;
        if self.started.elapsed() >= Duration::from_secs(self.secs) {
            return None;
        }
        Some(match self.rng.below(10) {
            0..=4 => Fault::Kill9,
            5..=7 => Fault::WalsenderKill,
            _ => Fault::BrokerRestart,
        })
    }

    /// A seeded choice in `0..n` (which relay a fault hits).
    fn pick(&mut self, n: u64) -> u64 {
        self.rng.below(n)
    }

    /// A seeded pause of up to `max_ms` (a killed relay stays down so long).
    async fn pause(&mut self, max_ms: u64) {
        tokio::time::sleep(Duration::from_millis(self.rng.below(max_ms))).await;
    }

    /// Stops the broker for 1 to 6 s and starts it again; counted.
    async fn restart_broker(&mut self) {
        services::output(&["stop-kafka"]);
        tokio::time::sleep(Duration::from_millis(1000 + self.rng.below(5000))).await;
        services::output(&["start-kafka"]);
        self.broker_restarts += 1;
    }

    /// The faults injected, for the summary line.
    fn faults(&self) -> String {
        format!(
            "faults={} (kill-9={}, broker-restarts={}, walsender-kills={})",
            self.kills + self.broker_restarts + self.walsender_kills,
            self.kills,
            self.broker_restarts,
            self.walsender_kills
        )
    }
}

/// The tests here hold the services alone ([`services::exclusive`]):
/// `make test` runs them after the others, one at a time.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "long-running; run with `make soak`"]
    async fn soak_mixed_faults_under_steady_load() {
        let rate = env_u64("SOAK_RATE").unwrap_or(500);
        // It restarts the broker: no other test may run beside it.
        let serial = services::exclusive().await;
        let mut soak = Schedule::from_env("mixed-faults");
        println!("soak: rate={rate}/s");
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
            &soak.secs.to_string(),
            "--connections",
            "2",
            "--aggregates",
            "200",
            "--rows-per-txn",
            "3",
        ]);
        let mut relay = Some(Relay::process(&config));
        while let Some(fault) = soak.next_fault().await {
            match fault {
                Fault::Kill9 => {
                    relay.take().expect("relay running").kill9();
                    soak.pause(2000).await;
                    relay = Some(Relay::process(&config));
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
        wait_child(&mut loadgen, Duration::from_secs(60)).await;
        let committed = outbox.committed_from_table().await;
        consume_all_ids(&topic, &committed, Duration::from_secs(300)).await;
        let status = relay.take().unwrap().terminate().await;
        assert!(status.success(), "relay exits 0 on SIGTERM after the soak");
        let received = consume_to_end(&topic).await;
        let summary = check_delivery("soak", &committed, &received);
        println!(
            "soak: seed={} {} committed={} delivered={} lost={} duplicated={}",
            soak.seed,
            soak.faults(),
            summary.committed,
            summary.delivered,
            summary.lost,
            summary.duplicated
        );
        assert_eq!(summary.lost, 0);
        outbox.drop_all().await;
    }
}
