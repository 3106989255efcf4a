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
use pgoutput::lsn::Lsn;

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

    /// The summary as its event, the rate to a tenth.
    pub fn event(&self) -> crate::events::Progress {
        crate::events::Progress {
            elapsed: self.elapsed,
            events: self.events,
            events_per_sec: (self.events_per_second() * 10.0).round() / 10.0,
            dead_lettered: self.dead_letters,
            in_flight: self.in_flight,
            slot_lag_bytes: self.lag_bytes,
            confirmed: self.confirmed,
        }
    }

    /// Emits the line at info (see [`crate::events::Progress`]).
    pub fn log(&self) {
        self.event().emit();
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

    /// A buffer the JSON formatter writes to.
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The line's fields as `log_format = "json"` writes them.
    fn json_fields(summary: &Summary) -> serde_json::Value {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || summary.log());
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
        line["fields"].clone()
    }

    #[test]
    fn a_json_log_shows_the_numbers_as_numbers() {
        let mut summary = Summary {
            elapsed: 30 * SEC,
            events: 620,
            dead_letters: 1,
            in_flight: 5,
            lag_bytes: Some(20_600),
            confirmed: Lsn(0x100),
        };
        let fields = json_fields(&summary);
        assert_eq!(fields["events"], serde_json::json!(620), "{fields}");
        assert_eq!(
            fields["events_per_sec"],
            serde_json::json!(20.7),
            "{fields}"
        );
        assert_eq!(fields["dead_lettered"], serde_json::json!(1), "{fields}");
        assert_eq!(fields["in_flight"], serde_json::json!(5), "{fields}");
        assert_eq!(
            fields["slot_lag_bytes"],
            serde_json::json!(20_600),
            "{fields}"
        );
        // An LSN is text in its own notation.
        assert_eq!(fields["confirmed"], serde_json::json!("0/100"), "{fields}");
        // Not sampled yet: no lag, rather than a word where a number goes.
        summary.lag_bytes = None;
        let fields = json_fields(&summary);
        assert!(fields.get("slot_lag_bytes").is_none(), "{fields}");
    }

    #[test]
    fn off_means_never() {
        let start = Instant::now();
        let mut progress = Progress::new(None, SlotLag::default(), start);
        progress.acknowledged(false);
        assert_eq!(progress.due(start + 3600 * SEC, 1, Lsn(1)), None);
    }
}
