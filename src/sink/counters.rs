//! The counters of what the broker acknowledged, kept where a delivery
//! report has the record at hand: events published, bytes by topic, dead
//! letters by the reason code in their header. Counted in the producer's
//! delivery callback, on librdkafka's one callback thread.
//!
//! Each dead letter the broker acknowledged is also logged, at warn (the
//! stream goes on, but someone has to look at the row): the dead-letter
//! topic, partition and offset, the event id, the reason code, the topic
//! it was meant for and its transaction's LSN, never the payload nor any
//! other column (`events::DeadLettered`). At most ten lines per 30 s (an
//! [`events::Burst`] of its own): a writer that breaks every row must not
//! flood the log; the next line after a quiet spell says how many were
//! not logged (the counter has them all).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::deadletter::{ID_HEADER, LSN_HEADER, ORIGINAL_TOPIC_HEADER, REASON_CODE_HEADER};
use crate::events::{self, Burst};
use crate::metrics as m;

/// The counters of acknowledged records. Per-topic and per-reason handles
/// are made on first use and kept, so counting a record allocates nothing
/// once its topic is known; delivery callbacks run on one thread, so the
/// locks are never contended.
pub(super) struct AckCounters {
    events: metrics::Counter,
    bytes_by_topic: Mutex<HashMap<String, metrics::Counter>>,
    dead_letters_by_reason: Mutex<HashMap<String, metrics::Counter>>,
    dead_letter_lines: Mutex<Burst>,
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
            dead_letter_lines: Mutex::new(dead_letter_lines()),
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
    events::DeadLettered {
        topic: msg.topic(),
        partition: msg.partition(),
        offset: msg.offset(),
        event_id: header(msg, ID_HEADER),
        reason,
        original_topic: header(msg, ORIGINAL_TOPIC_HEADER),
        lsn: header(msg, LSN_HEADER),
        not_logged,
    }
    .emit();
}

/// At most ten dead-letter lines in 30 s (see the module docs).
fn dead_letter_lines() -> Burst {
    Burst::new(10, Duration::from_secs(30))
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
