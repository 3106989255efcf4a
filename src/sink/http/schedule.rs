//! The retry schedule: the delay before each scheduled attempt, with
//! jitter so that the retries of many events failed together (an outage)
//! do not all arrive at once. Pure: the random draw is the caller's.
//!
//! A row of the delivery table carries `attempts` (tries so far) and
//! `max_attempts` (after which it is DEAD). An event whose quick tries in
//! line failed (`inline` of them, fewer when the receiver asked for a long
//! `Retry-After`) is moved there with `attempts` = those tries and
//! `max_attempts = attempts + schedule.len()`: its k-th scheduled try waits
//! `schedule[k]`. An event queued behind another of its aggregate was never
//! tried: it gets `attempts = 0`, `max_attempts = schedule.len() + 1`, is
//! tried as soon as it is the head of its aggregate's queue, and then
//! follows the same schedule. In both cases the delay before the next try
//! is `schedule[len - (max_attempts - attempts)]`.

use std::time::Duration;

/// Jitter: a delay `d` becomes a draw from `[d, d + d/5]`, never earlier
/// than the schedule says.
pub const JITTER_DIVISOR: u32 = 5;

/// The schedule of one sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Quick tries in line, before the event moves to the table.
    pub inline: u32,
    pub delays: Vec<Duration>,
}

impl Schedule {
    /// `max_attempts` of an event moved to the table after its in-line tries.
    pub fn max_attempts_after_inline(&self) -> u32 {
        self.inline + self.delays.len() as u32
    }

    /// `max_attempts` of an event queued behind another, never tried.
    pub fn max_attempts_queued(&self) -> u32 {
        self.delays.len() as u32 + 1
    }

    /// The delay before the next try of a row that has been tried
    /// `attempts` times out of `max_attempts`, with jitter from `unit` (a
    /// draw from `[0, 1)`); `None` when it has no try left (DEAD). A
    /// receiver's `Retry-After` longer than the schedule's delay wins.
    pub fn next_delay(
        &self,
        attempts: u32,
        max_attempts: u32,
        unit: f64,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        let left = max_attempts.checked_sub(attempts).filter(|&l| l > 0)? as usize;
        let k = self.delays.len().saturating_sub(left);
        let base = *self.delays.get(k)?;
        let jitter = (base / JITTER_DIVISOR).mul_f64(unit.clamp(0.0, 1.0));
        let delay = base + jitter;
        Some(retry_after.map_or(delay, |r| r.max(delay)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn schedule() -> Schedule {
        Schedule {
            inline: 3,
            delays: [60, 300, 1800, 7200, 86_400]
                .map(Duration::from_secs)
                .to_vec(),
        }
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    /// The default schedule's delays, then DEAD.
    fn default_delays_then_dead() -> [Option<Duration>; 6] {
        [
            secs(60),
            secs(300),
            secs(1800),
            secs(7200),
            secs(86_400),
            None,
        ]
    }

    #[test]
    fn moved_after_inline_tries_then_dead_after_the_last_delay() {
        let s = schedule();
        let max = s.max_attempts_after_inline();
        assert_eq!(max, 8);
        let delays: Vec<_> = (3..=8).map(|a| s.next_delay(a, max, 0.0, None)).collect();
        assert_eq!(delays, default_delays_then_dead());
    }

    #[test]
    fn queued_behind_another_follows_the_same_schedule() {
        let s = schedule();
        let max = s.max_attempts_queued();
        assert_eq!(max, 6);
        // Tried once as the head of its queue, then the schedule.
        let delays: Vec<_> = (1..=6).map(|a| s.next_delay(a, max, 0.0, None)).collect();
        assert_eq!(delays, default_delays_then_dead());
    }

    #[test]
    fn retry_after_only_lengthens() {
        let s = schedule();
        let long = Duration::from_secs(600);
        assert_eq!(s.next_delay(3, 8, 0.0, Some(long)), Some(long));
        assert_eq!(
            s.next_delay(3, 8, 0.0, Some(Duration::from_secs(1))),
            secs(60)
        );
    }

    proptest! {
        #[test]
        fn jitter_stays_within_bounds(attempt in 3u32..8, unit in 0.0f64..1.0) {
            let s = schedule();
            let base = s.delays[(attempt - 3) as usize];
            let d = s.next_delay(attempt, 8, unit, None).unwrap();
            prop_assert!(d >= base, "{d:?} < {base:?}");
            prop_assert!(d <= base + base / JITTER_DIVISOR, "{d:?} too long for {base:?}");
        }

        #[test]
        fn jitter_spreads(attempt in 3u32..8) {
            let s = schedule();
            prop_assert!(s.next_delay(attempt, 8, 0.0, None) < s.next_delay(attempt, 8, 0.99, None));
        }

        #[test]
        fn never_panics(attempts in any::<u32>(), max in any::<u32>(), unit in any::<f64>()) {
            let _ = schedule().next_delay(attempts, max, unit, None);
        }
    }
}
