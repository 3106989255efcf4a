//! The counters of what the broker acknowledged, kept where a delivery
//! report has the record at hand: events published, bytes by topic, dead
//! letters by the reason code in their header. Counted in the producer's
//! delivery callback, on librdkafka's one callback thread.

use std::collections::HashMap;
use std::sync::Mutex;

use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::deadletter::REASON_CODE_HEADER;
use crate::metrics as m;

/// The counters of acknowledged records. Per-topic and per-reason handles
/// are made on first use and kept, so counting a record allocates nothing
/// once its topic is known; delivery callbacks run on one thread, so the
/// locks are never contended.
pub(super) struct AckCounters {
    events: metrics::Counter,
    bytes_by_topic: Mutex<HashMap<String, metrics::Counter>>,
    dead_letters_by_reason: Mutex<HashMap<String, metrics::Counter>>,
}

impl AckCounters {
    pub(super) fn new() -> Self {
        AckCounters {
            events: metrics::counter!(m::EVENTS_PUBLISHED),
            bytes_by_topic: Mutex::default(),
            dead_letters_by_reason: Mutex::default(),
        }
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
            let reason = msg
                .headers()
                .and_then(|headers| {
                    headers
                        .iter()
                        .find(|h| h.key == REASON_CODE_HEADER)
                        .and_then(|h| h.value)
                })
                .and_then(|value| std::str::from_utf8(value).ok())
                .unwrap_or("unknown");
            counter_for(
                &self.dead_letters_by_reason,
                reason,
                |reason| metrics::counter!(m::EVENTS_DEAD_LETTERED, "reason" => reason),
            )
            .increment(1);
        } else {
            self.events.increment(1);
        }
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
