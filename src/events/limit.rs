//! A burst limiter for an event that can come as fast as the data: at most
//! `burst` lines in a window that starts with the first one, then quiet
//! until the window is over; the next line says how many were left out
//! (the event's counter has them all). Owned by whoever emits the event:
//! each emitter limits its own lines, none shares a hidden global.
//!
//! Pure: the caller passes the time.

use std::time::{Duration, Instant};

/// See the module docs.
#[derive(Debug)]
pub struct Burst {
    burst: u32,
    window: Duration,
    window_start: Option<Instant>,
    logged: u32,
    /// Events not logged since the last line.
    not_logged: u64,
}

impl Burst {
    /// At most `burst` lines per `window`.
    pub const fn new(burst: u32, window: Duration) -> Burst {
        Burst {
            burst,
            window,
            window_start: None,
            logged: 0,
            not_logged: 0,
        }
    }

    /// An event at `now`: `Some(events not logged before it)` when it gets
    /// a line.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        let start = *self.window_start.get_or_insert(now);
        if now.saturating_duration_since(start) >= self.window {
            self.window_start = Some(now);
            self.logged = 0;
        }
        if self.logged >= self.burst {
            self.not_logged += 1;
            return None;
        }
        self.logged += 1;
        Some(std::mem::take(&mut self.not_logged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_in_bursts_and_say_how_many_were_left_out() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut lines = Burst::new(10, Duration::from_secs(30));
        // An event 100 times a second for a minute: ten lines in each
        // 30 s, not 6,000.
        let admitted: Vec<(u64, u64)> = (0..6_000u64)
            .filter_map(|i| lines.admit(at(i * 10)).map(|skipped| (i, skipped)))
            .collect();
        assert_eq!(admitted.len(), 20, "{admitted:?}");
        assert!(admitted[..10].iter().all(|&(_, skipped)| skipped == 0));
        // The first line of the next window counts the ones left out.
        assert_eq!(admitted[10], (3_000, 2_990));
        assert!(admitted[11..].iter().all(|&(_, skipped)| skipped == 0));
        // A lone event later gets its line, with the rest of the burst it
        // missed.
        assert_eq!(lines.admit(at(600_000)), Some(2_990));
        assert_eq!(lines.admit(at(600_001)), Some(0));
    }
}
