//! The progress summary: one info line per interval (30 s by default,
//! `relay.progress_interval_secs`) while the relay has work, none while it
//! is idle, so that a log read after an incident shows the rate, the lag
//! and what waited, without a line per event.
//!
//! Role: counts what the broker acknowledged since the last line, and
//! decides at each tick whether a line is due. Pure: the caller passes the
//! time, what is in flight and the confirmed position; the slot's lag comes
//! from the background sampler ([`SlotLag`]).
//!
//! "Work" is an event or dead letter acknowledged during the interval, or
//! events still waiting for the broker at its end. A relay that is stuck
//! with events in flight keeps printing (with 0 events/s); an idle outbox
//! prints nothing.

use std::time::{Duration, Instant};

use super::monitor::SlotLag;
use crate::lsn::Lsn;

/// Default interval between progress lines.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// What happened during one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub elapsed: Duration,
    pub events: u64,
    pub dead_letters: u64,
    pub in_flight: u64,
    pub lag_bytes: Option<u64>,
    pub confirmed: Lsn,
}

impl Summary {
    pub fn events_per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.events as f64 / secs
        } else {
            0.0
        }
    }

    /// Logs the line at info.
    pub fn log(&self) {
        let lag = self
            .lag_bytes
            .map_or_else(|| "unknown".to_owned(), |b| b.to_string());
        tracing::info!(
            events = self.events,
            events_per_sec = %format_args!("{:.1}", self.events_per_second()),
            dead_lettered = self.dead_letters,
            in_flight = self.in_flight,
            slot_lag_bytes = %lag,
            confirmed = %self.confirmed,
            "progress over the last {} s",
            self.elapsed.as_secs()
        );
    }
}

/// Counts acknowledgements between progress lines. See the module docs.
#[derive(Debug)]
pub struct Progress {
    interval: Option<Duration>,
    since: Instant,
    events: u64,
    dead_letters: u64,
    lag: SlotLag,
}

impl Progress {
    /// `interval`: `None` turns the lines off.
    pub fn new(interval: Option<Duration>, lag: SlotLag, now: Instant) -> Self {
        Progress {
            interval,
            since: now,
            events: 0,
            dead_letters: 0,
            lag,
        }
    }

    /// The broker acknowledged one record (an event, or a dead letter).
    pub fn acknowledged(&mut self, dead_letter: bool) {
        if dead_letter {
            self.dead_letters += 1;
        } else {
            self.events += 1;
        }
    }

    /// At a tick: the summary of the interval that ended, when one ended
    /// and there was work in it; starts the next interval either way.
    pub fn due(&mut self, now: Instant, in_flight: u64, confirmed: Lsn) -> Option<Summary> {
        let interval = self.interval?;
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed < interval {
            return None;
        }
        let summary = Summary {
            elapsed,
            events: self.events,
            dead_letters: self.dead_letters,
            in_flight,
            lag_bytes: self.lag.bytes(),
            confirmed,
        };
        self.since = now;
        self.events = 0;
        self.dead_letters = 0;
        let worked = summary.events > 0 || summary.dead_letters > 0 || summary.in_flight > 0;
        worked.then_some(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn a_line_per_interval_while_there_is_work_and_none_while_idle() {
        let start = Instant::now();
        let mut progress = Progress::new(Some(30 * SEC), SlotLag::default(), start);
        for _ in 0..600 {
            progress.acknowledged(false);
        }
        progress.acknowledged(true);
        // Not yet: the interval has not ended.
        assert_eq!(progress.due(start + 29 * SEC, 5, Lsn(1)), None);
        let summary = progress
            .due(start + 30 * SEC, 5, Lsn(0x100))
            .expect("work in the interval");
        assert_eq!(
            (summary.events, summary.dead_letters, summary.in_flight),
            (600, 1, 5)
        );
        assert_eq!(summary.events_per_second(), 20.0);
        assert_eq!(summary.confirmed, Lsn(0x100));
        assert_eq!(summary.lag_bytes, None, "not sampled yet");

        // The next interval starts from zero; nothing acknowledged and
        // nothing waiting: idle, no line.
        assert_eq!(progress.due(start + 60 * SEC, 0, Lsn(0x100)), None);
        // Stuck: nothing acknowledged, but events wait: a line, 0/s.
        let stuck = progress.due(start + 90 * SEC, 3, Lsn(0x100)).unwrap();
        assert_eq!((stuck.events, stuck.in_flight), (0, 3));
        assert_eq!(stuck.events_per_second(), 0.0);
    }

    #[test]
    fn off_means_never() {
        let start = Instant::now();
        let mut progress = Progress::new(None, SlotLag::default(), start);
        progress.acknowledged(false);
        assert_eq!(progress.due(start + 3600 * SEC, 1, Lsn(1)), None);
    }
}
