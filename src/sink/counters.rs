//! The counters of what the broker acknowledged, kept where a delivery
//! report has the record at hand: events published, bytes by topic, dead
//! letters by the reason code in their header. Counted in the producer's
//! delivery callback, on librdkafka's one callback thread.
//!
//! Each dead letter the broker acknowledged is also logged, at warn (the
//! stream goes on, but someone has to look at the row): the dead-letter
//! topic, partition and offset, the event id, the reason code, the topic
//! it was meant for and its transaction's LSN, never the payload nor any
//! other column. At most [`DeadLetterLines::BURST`] lines per
//! [`DeadLetterLines::WINDOW`]: a writer that breaks every row must not
//! flood the log; the next line after a quiet spell says how many were
//! not logged (the counter has them all).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::deadletter::{ID_HEADER, LSN_HEADER, ORIGINAL_TOPIC_HEADER, REASON_CODE_HEADER};
use crate::metrics as m;

/// The counters of acknowledged records. Per-topic and per-reason handles
/// are made on first use and kept, so counting a record allocates nothing
/// once its topic is known; delivery callbacks run on one thread, so the
/// locks are never contended.
pub(super) struct AckCounters {
    events: metrics::Counter,
    bytes_by_topic: Mutex<HashMap<String, metrics::Counter>>,
    dead_letters_by_reason: Mutex<HashMap<String, metrics::Counter>>,
    dead_letter_lines: Mutex<DeadLetterLines>,
}

impl AckCounters {
    /// The counters of a producer whose dead letters go to
    /// `dead_letter_topic`: that topic's bytes are at 0 from the start
    /// (the event topics' series appear with their first record, as the
    /// topic template names them).
    pub(super) fn new(dead_letter_topic: &str) -> Self {
        let counters = AckCounters {
            events: metrics::counter!(m::EVENTS_PUBLISHED),
            bytes_by_topic: Mutex::default(),
            dead_letters_by_reason: Mutex::default(),
            dead_letter_lines: Mutex::default(),
        };
        counter_for(
            &counters.bytes_by_topic,
            dead_letter_topic,
            |topic| metrics::counter!(m::PUBLISHED_BYTES, "topic" => topic),
        )
        .increment(0);
        counters
    }

    /// Counts one acknowledged record of `bytes` (its size as sent: key,
    /// value, header names and values).
    pub(super) fn count(&self, msg: &BorrowedMessage<'_>, bytes: usize, dead_letter: bool) {
        counter_for(
            &self.bytes_by_topic,
            msg.topic(),
            |topic| metrics::counter!(m::PUBLISHED_BYTES, "topic" => topic),
        )
        .increment(bytes as u64);
        if dead_letter {
            let reason = header(msg, REASON_CODE_HEADER).unwrap_or("unknown");
            counter_for(
                &self.dead_letters_by_reason,
                reason,
                |reason| metrics::counter!(m::EVENTS_DEAD_LETTERED, "reason" => reason),
            )
            .increment(1);
            let admitted = self
                .dead_letter_lines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .admit(Instant::now());
            if let Some(not_logged) = admitted {
                log_dead_letter(msg, reason, not_logged);
            }
        } else {
            self.events.increment(1);
        }
    }
}

/// The text of header `name` of `msg`, if it has one.
fn header<'a>(msg: &'a BorrowedMessage<'_>, name: &str) -> Option<&'a str> {
    let headers = msg.headers()?;
    let value = headers.iter().find(|h| h.key == name)?.value?;
    std::str::from_utf8(value).ok()
}

/// The line of one dead letter: where it is and why, no payload.
fn log_dead_letter(msg: &BorrowedMessage<'_>, reason: &str, not_logged: u64) {
    let event_id = header(msg, ID_HEADER);
    let original_topic = header(msg, ORIGINAL_TOPIC_HEADER);
    let lsn = header(msg, LSN_HEADER);
    let (topic, partition, offset) = (msg.topic(), msg.partition(), msg.offset());
    if not_logged == 0 {
        tracing::warn!(
            topic,
            partition,
            offset,
            event_id,
            reason,
            original_topic,
            lsn,
            "an outbox event went to the dead-letter topic; the stream goes on \
             (outbox-relay dead list shows it with its reason)"
        );
    } else {
        tracing::warn!(
            topic,
            partition,
            offset,
            event_id,
            reason,
            original_topic,
            lsn,
            not_logged,
            "an outbox event went to the dead-letter topic; the stream goes on \
             (outbox-relay dead list shows it with its reason; {not_logged} dead letters \
             before it were not logged, outbox_relay_events_dead_lettered_total counts them)"
        );
    }
}

/// How many dead-letter lines may be written now: at most [`Self::BURST`]
/// in a [`Self::WINDOW`] that starts with the first line.
#[derive(Debug, Default)]
struct DeadLetterLines {
    window_start: Option<Instant>,
    logged: u32,
    /// Dead letters not logged since the last line.
    not_logged: u64,
}

impl DeadLetterLines {
    const BURST: u32 = 10;
    const WINDOW: Duration = Duration::from_secs(30);

    /// A dead letter at `now`: `Some(dead letters not logged before it)`
    /// when it gets a line.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        let start = *self.window_start.get_or_insert(now);
        if now.saturating_duration_since(start) >= Self::WINDOW {
            self.window_start = Some(now);
            self.logged = 0;
        }
        if self.logged >= Self::BURST {
            self.not_logged += 1;
            return None;
        }
        self.logged += 1;
        Some(std::mem::take(&mut self.not_logged))
    }
}

/// The counter kept under `label` in `counters`, made by `make` on first use.
fn counter_for(
    counters: &Mutex<HashMap<String, metrics::Counter>>,
    label: &str,
    make: impl FnOnce(String) -> metrics::Counter,
) -> metrics::Counter {
    let mut counters = counters.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(counter) = counters.get(label) {
        return counter.clone();
    }
    let counter = make(label.to_owned());
    counters.insert(label.to_owned(), counter.clone());
    counter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letter_lines_come_in_bursts_and_say_how_many_were_left_out() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut lines = DeadLetterLines::default();
        // A writer that breaks 100 rows a second for a minute: ten lines
        // in each 30 s, not 6,000.
        let admitted: Vec<(u64, u64)> = (0..6_000u64)
            .filter_map(|i| lines.admit(at(i * 10)).map(|skipped| (i, skipped)))
            .collect();
        assert_eq!(admitted.len(), 20, "{admitted:?}");
        assert!(admitted[..10].iter().all(|&(_, skipped)| skipped == 0));
        // The first line of the next window counts the ones left out.
        assert_eq!(admitted[10], (3_000, 2_990));
        assert!(admitted[11..].iter().all(|&(_, skipped)| skipped == 0));
        // A lone dead letter later gets its line, with the rest of the
        // burst it missed.
        assert_eq!(lines.admit(at(600_000)), Some(2_990));
        assert_eq!(lines.admit(at(600_001)), Some(0));
    }
}
