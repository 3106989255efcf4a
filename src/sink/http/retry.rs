//! The tries in line of one webhook event, decided without I/O: from what
//! a POST brought back and the time it came, what follows. The dispatcher
//! (`dispatch.rs`) posts, waits until the time this says, counts, logs and
//! writes the row this says; nothing here posts, sleeps or reads a clock,
//! so its tests run on plain instants.
//!
//! Per event, up to `inline` tries: a 2xx delivers it; a permanent refusal
//! makes it DEAD after the tries made; anything else is tried again after
//! a pause (100 ms, 200 ms, 400 ms, then 800 ms), or after the receiver's
//! `Retry-After` when that is longer, up to [`MAX_INLINE_RETRY_AFTER`]. A
//! longer `Retry-After`, or the last try failing, moves the event to the
//! delivery table (PENDING) with what its last try said.

use std::time::{Duration, Instant};

use super::status::{Outcome, classify};
use crate::backoff::Backoff;

/// The longest `Retry-After` waited in line; a longer one moves the event
/// to the delivery table at once.
pub const MAX_INLINE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What a POST brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The receiver answered with `code`, maybe asking for a delay.
    Status {
        code: u16,
        retry_after: Option<Duration>,
    },
    /// No answer (connect, TLS, timeout): why.
    Failed(String),
}

/// The last failed try: its status (none without an answer), its error
/// text, and the receiver's `Retry-After`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LastTry {
    pub status: Option<u16>,
    pub error: String,
    pub retry_after: Option<Duration>,
}

/// What the dispatcher does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// POST (again) now.
    Post,
    /// The last try failed: POST again at this time.
    RetryAt(Instant),
    /// A 2xx: the event is delivered.
    Delivered,
    /// Refused for good by status `status` at try `attempts`: a DEAD row.
    Dead { attempts: u32, status: u16 },
    /// No try left in line (or none waited for): a PENDING row, after
    /// `tried` tries, the last one's answer in `last`.
    Park { tried: u32, last: LastTry },
}

/// The tries in line of one event.
#[derive(Debug)]
pub struct InlineTries {
    inline: u32,
    tried: u32,
    pauses: Backoff,
}

impl InlineTries {
    /// Up to `inline` tries.
    pub fn new(inline: u32) -> Self {
        InlineTries {
            inline,
            tried: 0,
            // 100 ms, 200 ms, 400 ms, then 800 ms between the tries in line.
            pauses: Backoff::exact(Duration::from_millis(100), Duration::from_millis(800), 2),
        }
    }

    /// What to do first: POST, or, with no try in line, straight to the
    /// delivery table.
    pub fn start(&self) -> Next {
        if self.inline == 0 {
            Next::Park {
                tried: 0,
                last: LastTry::default(),
            }
        } else {
            Next::Post
        }
    }

    /// A try's `answer`, come at `now`: what follows.
    pub fn answered(&mut self, answer: Answer, now: Instant) -> Next {
        self.tried += 1;
        let last = match answer {
            Answer::Status { code, retry_after } => match classify(code) {
                Outcome::Delivered => return Next::Delivered,
                Outcome::Permanent => {
                    return Next::Dead {
                        attempts: self.tried,
                        status: code,
                    };
                }
                Outcome::Retry => LastTry {
                    status: Some(code),
                    error: format!("HTTP {code}"),
                    retry_after,
                },
            },
            Answer::Failed(error) => LastTry {
                status: None,
                error,
                retry_after: None,
            },
        };
        if self.tried >= self.inline {
            return Next::Park {
                tried: self.tried,
                last,
            };
        }
        let pause = self.pauses.next_delay();
        match last.retry_after {
            // The receiver asks for more time than the slot should wait in
            // line: straight to the table, due after it.
            Some(wait) if wait > MAX_INLINE_RETRY_AFTER => Next::Park {
                tried: self.tried,
                last,
            },
            Some(wait) => Next::RetryAt(now + wait.max(pause)),
            None => Next::RetryAt(now + pause),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Answer {
        Answer::Status {
            code,
            retry_after: None,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_2xx_delivers_and_a_permanent_refusal_is_dead_at_the_try_it_came() {
        let now = Instant::now();
        let mut tries = InlineTries::new(3);
        assert_eq!(tries.start(), Next::Post);
        assert_eq!(tries.answered(status(204), now), Next::Delivered);
        let mut tries = InlineTries::new(3);
        assert_eq!(
            tries.answered(status(503), now),
            Next::RetryAt(now + ms(100))
        );
        assert_eq!(
            tries.answered(status(410), now),
            Next::Dead {
                attempts: 2,
                status: 410
            }
        );
    }

    #[test]
    fn failures_are_tried_again_after_growing_pauses_then_parked_with_the_last_answer() {
        let now = Instant::now();
        let mut tries = InlineTries::new(6);
        let mut waits = Vec::new();
        for _ in 0..5 {
            match tries.answered(Answer::Failed("refused".into()), now) {
                Next::RetryAt(at) => waits.push(at - now),
                other => panic!("tried again expected, got {other:?}"),
            }
        }
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(800), ms(800)]);
        assert_eq!(
            tries.answered(status(500), now),
            Next::Park {
                tried: 6,
                last: LastTry {
                    status: Some(500),
                    error: "HTTP 500".into(),
                    retry_after: None
                }
            }
        );
    }

    #[test]
    fn retry_after_is_waited_in_line_up_to_a_second_and_a_longer_one_parks_at_once() {
        let now = Instant::now();
        let asks = |secs: u64| Answer::Status {
            code: 429,
            retry_after: Some(Duration::from_secs(secs)),
        };
        let mut tries = InlineTries::new(3);
        assert_eq!(
            tries.answered(asks(1), now),
            Next::RetryAt(now + Duration::from_secs(1)),
            "a second: longer than the pause, waited"
        );
        let short = Answer::Status {
            code: 503,
            retry_after: Some(ms(10)),
        };
        assert_eq!(
            tries.answered(short, now),
            Next::RetryAt(now + ms(200)),
            "shorter than the pause: the pause"
        );
        let mut tries = InlineTries::new(3);
        assert_eq!(
            tries.answered(asks(30), now),
            Next::Park {
                tried: 1,
                last: LastTry {
                    status: Some(429),
                    error: "HTTP 429".into(),
                    retry_after: Some(Duration::from_secs(30))
                }
            }
        );
    }

    #[test]
    fn with_no_try_in_line_the_event_goes_to_the_table_untried() {
        assert_eq!(
            InlineTries::new(0).start(),
            Next::Park {
                tried: 0,
                last: LastTry::default()
            }
        );
    }
}
