//! The outer loop's policy, without I/O: after each time round (the relay
//! lock tried, the stream connected, a session run), what the relay does
//! next, and what it says about it.
//!
//! [`Supervisor::decide`] takes the round's [`Outcome`] and returns an
//! [`Action`]: go round again after a back-off delay ([`Action::Retry`]),
//! stand by for the relay lock ([`Action::StandBy`]), end with
//! a fatal error ([`Action::Exit`], its exit code from [`RelayError::side`])
//! or after a graceful stop ([`Action::Stop`]). A retry carries its
//! [`Report`], the event that says it (`crate::events`: its counter and
//! reason label, what /health is told, its line); a stop carries the event
//! that says how it ended. The shell (`run_sessions` in `relay.rs`) carries
//! the action out and emits the events it is given.
//!
//! Invariants:
//! * every retry waits a delay of the one back-off (`Backoff::reconnect`):
//!   none goes round again at once, except to stand by after a lease that
//!   was healthy (or the first lost since), where the relay lock, not a
//!   back-off, decides who streams;
//! * a slot still read by another process while this relay holds the
//!   relay lock is waited for with a back-off of its own (the same
//!   policy), short at first (the previous reader was told to end and is
//!   normally on its way out), growing to the cap (a reader that does not
//!   end: a relay without `standby_lock`, a stopped process until
//!   `wal_sender_timeout`); said once at info, then at debug until
//!   something else happens. It does not step the failures' back-off;
//! * a relay lock lost again and again backs off between leases, so a
//!   flapping lock does not rebuild the producer and the stream at every
//!   lease; a lease held for [`HEALTHY_LEASE`] starts that back-off over;
//! * the back-off starts over only after a session that confirmed
//!   something new: a session that fails before confirming anything (the
//!   broker refusing every record, say) backs off further each time, so a
//!   persistent failure does not reconnect to PostgreSQL and build a
//!   producer (a new producer id on the broker) as fast as sessions start;
//! * a fatal error ends the relay whatever the back-off says.

use std::time::Duration;

use super::Stopped;
use super::error::{RelayError, SessionError};
use super::lock::LockError;
use crate::backoff::Backoff;
use crate::contracts::ResolveError;
use crate::events::{self, Retry};
use crate::pg::{ErrorKind, PgError};
use crate::sink::TxnFailure;
use pgoutput::lsn::Lsn;

/// A lease held this long was no flap: losing it afterwards stands by at
/// once, and starts the lease back-off over (longer than the back-off's
/// cap, so that a lock lost at the cap's pace still backs off).
pub(crate) const HEALTHY_LEASE: Duration = Duration::from_secs(60);

/// How one time round the outer loop ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Another relay holds the relay lock: this one looks again after
    /// `poll`.
    StandingBy { poll: Duration },
    /// The relay lock could not be tried.
    LockUntried(LockError),
    /// The stream could not connect; `holding_lock`: while this relay holds
    /// the relay lock.
    Unconnected { error: PgError, holding_lock: bool },
    /// Exactly-once: the Kafka transactions could not be started.
    Unprepared(SessionError),
    /// A session failed. `progressed`: it confirmed something past where it
    /// started; `confirmed`: the position confirmed now; `lock_lost`: the
    /// relay lock is lost (or may be); `lease`: how long the relay lock had
    /// been held (`None`: none was).
    Failed {
        error: SessionError,
        progressed: bool,
        confirmed: Lsn,
        lock_lost: bool,
        lease: Option<Duration>,
    },
    /// A session stopped gracefully (a stop was asked for) at `confirmed`.
    Stopped { stopped: Stopped, confirmed: Lsn },
    /// A fatal error before a session could start (the producer cannot be
    /// built, the dead-letter topic refused, the outbox table missing).
    Fatal(RelayError),
    /// The schemas of registry contracts could not be fetched before the
    /// first session: nothing is sent until they are.
    Unresolved(ResolveError),
}

/// What the shell does next.
#[derive(Debug)]
pub(crate) enum Action {
    /// Report, then go round again after `after`; a stop asked for
    /// meanwhile ends the wait, and the relay, at once.
    Retry { after: Duration, report: Report },
    /// Let go of the relay lock (if held), report, and go round again after
    /// `after` (zero, or the lease back-off's delay after leases lost again
    /// and again: otherwise the lock decides who streams). A stop asked
    /// for meanwhile ends the relay.
    StandBy {
        after: Duration,
        report: Option<Report>,
    },
    /// End with this error (its side gives the exit code).
    Exit(RelayError),
    /// End after a graceful stop, emitting `said`.
    Stop {
        stopped: Stopped,
        said: events::Stopped,
    },
}

/// What a retry counts, tells /health and logs: the event that says it.
pub(crate) type Report = Retry;

/// The outer loop's state: the back-offs and the tries since progress.
#[derive(Debug)]
pub(crate) struct Supervisor {
    /// Between failures.
    backoff: Backoff,
    /// Times round since the last session that made progress (logged).
    attempt: u32,
    /// While the relay lock is held and the slot is still read by another
    /// process: the waits, and whether the wait was said (at info).
    slot_wait: Backoff,
    waiting_for_slot: bool,
    /// Between leases of a relay lock lost again and again, and the leases
    /// lost since one was healthy.
    lease_wait: Backoff,
    leases_lost: u32,
    /// The replication slot, named by a lock-lost error.
    slot: String,
}

impl Supervisor {
    /// The policy with `backoff` between failures; the busy slot's and the
    /// lost leases' waits follow the same policy, each on its own.
    pub fn new(slot: impl Into<String>, backoff: Backoff) -> Supervisor {
        let mut fresh = backoff.clone();
        fresh.reset();
        Supervisor {
            backoff,
            attempt: 0,
            slot_wait: fresh.clone(),
            waiting_for_slot: false,
            lease_wait: fresh,
            leases_lost: 0,
            slot: slot.into(),
        }
    }

    /// What to do after a round that ended with `outcome`.
    pub fn decide(&mut self, outcome: Outcome) -> Action {
        let slot_busy = matches!(
            &outcome,
            Outcome::Unconnected { error, holding_lock: true } if error.kind() == ErrorKind::SlotBusy
        );
        if !slot_busy && self.waiting_for_slot {
            // Something else happened: a later busy slot is a new wait.
            self.waiting_for_slot = false;
            self.slot_wait.reset();
        }
        match outcome {
            Outcome::StandingBy { poll } => Action::StandBy {
                after: poll,
                report: None,
            },
            Outcome::LockUntried(e) if e.is_fatal() => Action::Exit(e.into()),
            Outcome::LockUntried(e) => {
                let said = Retry::RelayLockUntried(events::RelayLockUntried {
                    error: e.to_string(),
                    attempt: self.attempt,
                });
                self.retry(said)
            }
            Outcome::Unconnected {
                error,
                holding_lock,
            } => self.unconnected(error, holding_lock),
            Outcome::Unresolved(e) if !e.is_retryable() => Action::Exit(e.into()),
            Outcome::Unresolved(e) => {
                let said = Retry::SchemaRegistryUnreachable(events::SchemaRegistryUnreachable {
                    error: e.to_string(),
                    attempt: self.attempt,
                });
                self.retry(said)
            }
            Outcome::Unprepared(e) if e.is_fatal() => Action::Exit(e.into()),
            Outcome::Unprepared(e) => {
                let said = Retry::TransactionsUnprepared(events::TransactionsUnprepared {
                    error: e.to_string(),
                    attempt: self.attempt,
                });
                self.retry(said)
            }
            Outcome::Failed {
                error,
                progressed,
                confirmed,
                lock_lost,
                lease,
            } => self.failed(error, (progressed, confirmed), lock_lost, lease),
            Outcome::Stopped { stopped, confirmed } => {
                let said = match stopped {
                    Stopped::Drained => {
                        events::Stopped::Drained(events::StoppedDrained { confirmed })
                    }
                    Stopped::Undrained { pending } => {
                        events::Stopped::Undrained(events::StoppedUndrained { pending, confirmed })
                    }
                };
                Action::Stop { stopped, said }
            }
            Outcome::Fatal(e) => Action::Exit(e),
        }
    }

    fn unconnected(&mut self, error: PgError, holding_lock: bool) -> Action {
        let said = match error.kind() {
            ErrorKind::Fatal => return Action::Exit(error.into()),
            ErrorKind::SlotBusy if holding_lock => {
                // The reader was told to end when the lock was taken; it is
                // normally on its way out: a short first wait, and no step
                // of the failures' back-off. One that stays (no relay lock
                // of its own, or stopped until wal_sender_timeout) is waited
                // for longer and longer, quietly after the first line.
                self.attempt = self.attempt.saturating_add(1);
                let after = self.slot_wait.next_delay();
                let error = error.to_string();
                let report = if self.waiting_for_slot {
                    Retry::StillWaitingForSlotReader(events::StillWaitingForSlotReader {
                        error,
                        attempt: self.attempt,
                    })
                } else {
                    self.waiting_for_slot = true;
                    Retry::WaitingForSlotReader(events::WaitingForSlotReader { error })
                };
                return Action::Retry { after, report };
            }
            ErrorKind::SlotBusy => Retry::SlotInUse(events::SlotInUse {
                error: error.to_string(),
            }),
            ErrorKind::Transient => Retry::ConnectFailed(events::ConnectFailed {
                error: error.to_string(),
                attempt: self.attempt,
            }),
        };
        self.retry(said)
    }

    fn failed(
        &mut self,
        error: SessionError,
        (progressed, confirmed): (bool, Lsn),
        lock_lost: bool,
        lease: Option<Duration>,
    ) -> Action {
        // Fenced while the relay lock is lost: the relay that took over
        // fenced this producer. Stand by, like any lost lock.
        let error = match error {
            SessionError::Transaction(TxnFailure::Fenced { .. }) if lock_lost => {
                SessionError::LockLost {
                    slot: self.slot.clone(),
                }
            }
            error => error,
        };
        if error.is_fatal() {
            return Action::Exit(error.into());
        }
        let said = match &error {
            SessionError::LockLost { .. } => {
                let report = Retry::RelayLockLost(events::RelayLockLost {
                    error: error.to_string(),
                    confirmed,
                });
                return Action::StandBy {
                    after: self.after_lease(lease),
                    report: Some(report),
                };
            }
            SessionError::Delivery { reason, error } => {
                Retry::DeliveryFailed(events::DeliveryFailed {
                    reason,
                    error: error.to_string(),
                    confirmed,
                })
            }
            SessionError::Transaction(_) | SessionError::Checkpoint(_) => {
                Retry::TransactionFailed(events::TransactionFailed {
                    error: error.to_string(),
                    checkpoint: confirmed,
                })
            }
            other => Retry::StreamBroke(events::StreamBroke {
                error: other.to_string(),
                confirmed,
            }),
        };
        // A failure right after a good run (something new confirmed)
        // starts the back-off over; see the module docs.
        if progressed {
            self.attempt = 0;
            self.backoff.reset();
        }
        self.retry(said)
    }

    /// The wait after a lost lease of `lease`: none after a healthy one, or
    /// the first lost since (the lock decides who goes on); after leases
    /// lost again and again, the lease back-off's next delay, during which
    /// another relay may take the lock.
    fn after_lease(&mut self, lease: Option<Duration>) -> Duration {
        if lease.is_none_or(|held| held >= HEALTHY_LEASE) {
            self.leases_lost = 0;
            self.lease_wait.reset();
        }
        self.leases_lost = self.leases_lost.saturating_add(1);
        if self.leases_lost == 1 {
            Duration::ZERO
        } else {
            self.lease_wait.next_delay()
        }
    }

    /// A retry after the back-off's next delay, said by `report`.
    fn retry(&mut self, report: Report) -> Action {
        self.attempt = self.attempt.saturating_add(1);
        Action::Retry {
            after: self.backoff.next_delay(),
            report,
        }
    }
}

#[cfg(test)]
mod tests;
