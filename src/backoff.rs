//! The relay's one back-off policy, for every loop that tries something
//! again after a failure (the reconnects of the outer loop, the webhook
//! retry worker and dispatcher's SQL, the cleanup's DELETEs), and
//! [`Incident`], which says when such a loop logs.
//!
//! [`Backoff`] is capped exponential back-off with full jitter: the n-th
//! delay since the last success (n from 1) is drawn uniformly between the
//! first delay and a ceiling of `first × factorⁿ`, capped. So the delays grow
//! (their ceiling by `factor` a step, their mean to about half the cap)
//! while loops that failed together (several relays after a server
//! restart, loops on one table) spread out instead of trying again in
//! lockstep. [`Backoff::reset`] after a success starts over.
//!
//! Invariants: every delay is at least `first` and at most `cap` (so no
//! loop using it can spin, whatever the draws); the draws come from a
//! seeded generator of its own, so a test with a seed sees the same delays
//! every run. Pure: no clock, no I/O; the loops sleep on tokio's clock.
//!
//! [`Backoff::exact`] is the same growth without jitter (`first`, then
//! `first × factor`, ... up to `cap`), for loops that wait on something
//! quick and local rather than on a server others retry against too: the
//! relay asking after a topic a broker is creating, a webhook tried again
//! in line.

mod incident;

use std::time::Duration;

pub use incident::{Incident, Recovered, Still};

/// Capped exponential back-off with full jitter above the first delay
/// (see the module docs).
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    factor: u32,
    /// The ceiling of the next (n-th) delay: `first × factorⁿ`, capped.
    ceiling: Duration,
    /// The next delay without jitter: `first × factorⁿ⁻¹`, capped.
    step: Duration,
    /// `None`: no jitter ([`Backoff::exact`]).
    rng: Option<SplitMix>,
}

impl Backoff {
    /// Delays from `first` up to `cap`, growing by up to `factor` a step
    /// (at least 2), jittered by a generator seeded at random.
    pub fn new(first: Duration, cap: Duration, factor: u32) -> Backoff {
        Backoff::seeded(first, cap, factor, rand::random())
    }

    /// As [`Backoff::new`], the jitter drawn from `seed`: the same seed
    /// gives the same delays.
    pub fn seeded(first: Duration, cap: Duration, factor: u32, seed: u64) -> Backoff {
        Backoff::with_jitter(first, cap, factor, Some(SplitMix(seed)))
    }

    /// Without jitter: `first`, `first × factor`, `first × factor²`, ...
    /// up to `cap` (`factor` at least 2).
    pub fn exact(first: Duration, cap: Duration, factor: u32) -> Backoff {
        Backoff::with_jitter(first, cap, factor, None)
    }

    fn with_jitter(first: Duration, cap: Duration, factor: u32, rng: Option<SplitMix>) -> Backoff {
        let first = first.max(Duration::from_millis(1));
        Backoff {
            first,
            cap: cap.max(first),
            factor: factor.max(2),
            ceiling: first.saturating_mul(factor.max(2)).min(cap.max(first)),
            step: first,
            rng,
        }
    }

    /// The relay's reconnects to PostgreSQL and the rebuilds of its
    /// producer: 100 ms at first, at most 30 s (long enough not to hammer
    /// a server that is restarting, short enough to resume soon after it
    /// is back).
    pub fn reconnect() -> Backoff {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(30), 3)
    }

    /// The shortest delay: what any failure waits at least.
    pub fn first(&self) -> Duration {
        self.first
    }

    /// How long to wait before the next try.
    pub fn next_delay(&mut self) -> Duration {
        let delay = match &mut self.rng {
            Some(rng) => rng.between(self.first, self.ceiling),
            None => self.step,
        };
        self.step = self.ceiling;
        self.ceiling = self.ceiling.saturating_mul(self.factor).min(self.cap);
        delay
    }

    /// After a success: the next failure starts from the first delay again.
    pub fn reset(&mut self) {
        self.step = self.first;
        self.ceiling = self.first.saturating_mul(self.factor).min(self.cap);
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny generator, good enough
/// for jitter, and seedable so that tests are deterministic.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[low, high]` at microsecond grain.
    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let (low, high) = (micros(low), micros(high));
        if high <= low {
            return Duration::from_micros(low);
        }
        let span = high - low;
        // The modulo bias is below 2^-40 for spans of less than a day:
        // nothing a sleep can tell.
        let offset = if span == u64::MAX {
            self.next_u64()
        } else {
            self.next_u64() % (span + 1)
        };
        Duration::from_micros(low + offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn backoff(seed: u64) -> Backoff {
        Backoff::seeded(100 * MS, 30_000 * MS, 3, seed)
    }

    #[test]
    fn every_delay_stays_between_the_first_and_the_cap() {
        for seed in 0..200 {
            let mut b = backoff(seed);
            for n in 0..100u32 {
                let d = b.next_delay();
                assert!(d >= 100 * MS && d <= 30_000 * MS, "seed {seed}: {d:?}");
                // Never above the n-th ceiling: 100 ms × 3ⁿ.
                let ceiling = (100 * MS).saturating_mul(3u32.saturating_pow(n + 1));
                assert!(d <= ceiling, "seed {seed}: delay {n} is {d:?}");
            }
        }
    }

    #[test]
    fn delays_grow_to_the_cap() {
        // Averaged over seeds, the delays grow step by step and level off
        // at about half the cap; a loop that keeps failing ends up trying
        // seldom.
        let steps = 20;
        let mut mean = vec![0.0; steps];
        for seed in 0..500 {
            let mut b = backoff(seed);
            for m in &mut mean {
                *m += b.next_delay().as_secs_f64() / 500.0;
            }
        }
        for pair in mean[..5].windows(2) {
            assert!(pair[1] > pair[0] * 1.5, "{mean:?}");
        }
        assert!((12.0..18.0).contains(&mean[steps - 1]), "{mean:?}");
        // Ten failures in a row take seconds, not a burst.
        let total: f64 = mean[..10].iter().sum();
        assert!(total > 10.0, "{mean:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_delays_and_others_differ() {
        let draw = |seed| {
            let mut b = backoff(seed);
            (0..10).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        // Jittered: loops that failed together do not retry together.
        let firsts: std::collections::HashSet<Duration> =
            (0..50).map(|seed| backoff(seed).next_delay()).collect();
        assert!(firsts.len() > 40, "{firsts:?}");
    }

    #[test]
    fn reset_starts_over_from_the_first_delay() {
        let mut b = backoff(3);
        for _ in 0..30 {
            b.next_delay();
        }
        assert!(b.next_delay() > 1_000 * MS);
        b.reset();
        assert!(b.next_delay() <= 300 * MS, "at most factor × first again");
    }

    #[test]
    fn odd_parameters_are_made_safe() {
        // A zero first delay or a cap below it would let a loop spin.
        let mut b = Backoff::seeded(Duration::ZERO, Duration::ZERO, 0, 1);
        for _ in 0..10 {
            assert!(b.next_delay() >= MS);
        }
        let mut b = Backoff::seeded(500 * MS, 100 * MS, 1, 1);
        assert_eq!(
            b.next_delay(),
            500 * MS,
            "the cap is at least the first delay"
        );
        // Huge values saturate instead of overflowing.
        let mut b = Backoff::seeded(MS, Duration::MAX, u32::MAX, 9);
        for _ in 0..100 {
            b.next_delay();
        }
    }

    #[test]
    fn exact_delays_grow_by_the_factor_to_the_cap_and_start_over() {
        let mut b = Backoff::exact(10 * MS, 1_000 * MS, 2);
        let delays: Vec<u64> = (0..9).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 640, 1_000, 1_000]);
        b.reset();
        assert_eq!(b.next_delay(), 10 * MS);
        assert_eq!(b.next_delay(), 20 * MS);
        // Made safe like the jittered one.
        let mut b = Backoff::exact(Duration::ZERO, Duration::ZERO, 0);
        assert_eq!(b.next_delay(), MS);
        assert_eq!(b.next_delay(), MS);
    }

    /// A retry loop as the relay's are written, on tokio's paused clock:
    /// against a failure that lasts a minute it tries a handful of times,
    /// and it resumes soon after the failure ends.
    #[tokio::test(start_paused = true)]
    async fn a_retry_loop_backs_off_on_the_paused_clock() {
        let start = tokio::time::Instant::now();
        let heals_at = start + Duration::from_secs(60);
        let mut b = Backoff::seeded(200 * MS, 30_000 * MS, 3, 42);
        let mut tries = Vec::new();
        loop {
            let now = tokio::time::Instant::now();
            tries.push(now - start);
            if now >= heals_at {
                b.reset();
                break;
            }
            tokio::time::sleep(b.next_delay()).await;
        }
        let in_first_10s = tries
            .iter()
            .filter(|t| **t < Duration::from_secs(10))
            .count();
        assert!(
            (3..=10).contains(&in_first_10s),
            "tries in the first 10 s: {tries:?}"
        );
        assert!(tries.len() <= 15, "tries in a minute: {tries:?}");
        let last = *tries.last().unwrap();
        assert!(
            last <= Duration::from_secs(90),
            "resumed within a cap of the failure's end: {last:?}"
        );
    }
}
