//! Exactly-once: when the open Kafka transaction commits, decided here
//! where the model test sees it; `exactly_once.rs` only carries the
//! commit out (checkpoint record, `commit_transaction`) and reports back
//! with [`SessionMachine::commit_done`] or
//! [`SessionMachine::transaction_ended`].
//!
//! A Kafka transaction commits at a PostgreSQL transaction boundary once a
//! bound of its [`Batch`] is reached (events, bytes, time open), or once
//! the stream has been quiet for `kafka.transaction_quiet_ms` (nothing more is
//! coming to batch: an event does not wait for the time bound), or with
//! nothing open once the position moved and [`IDLE_CHECKPOINT_EVERY`]
//! passed (an idle outbox on a busy database). Inside one PostgreSQL
//! transaction it commits only past the split bound and only where every
//! event handed over is in it, with a [`Partial`] checkpoint: the broker
//! would abort a Kafka transaction open longer than its timeout.

use std::time::{Duration, Instant};

use super::SessionMachine;
use crate::relay::exactly_once::checkpoint::{Batch, Bounds, Partial};
use pgoutput::lsn::Lsn;

/// With no event to send, a checkpoint still moves the slot past WAL the
/// relay had nothing to do with, at most this often.
pub const IDLE_CHECKPOINT_EVERY: Duration = Duration::from_secs(10);

/// The open Kafka transaction's bounds and the last committed checkpoint.
#[derive(Debug)]
pub(super) struct Commits {
    batch: Batch,
    /// The LSN of the last committed checkpoint (at start: where the
    /// session started). What the slot may be confirmed to.
    committed: Lsn,
    last_commit: Instant,
}

/// A commit the machine asks for: a checkpoint at `lsn`, `partial` when it
/// falls inside a PostgreSQL transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPlan {
    pub lsn: Lsn,
    pub partial: Option<Partial>,
}

impl Commits {
    pub(super) fn new(bounds: Bounds, start: Lsn, now: Instant) -> Self {
        Commits {
            batch: Batch::new(bounds),
            committed: start,
            last_commit: now,
        }
    }

    /// When the open transaction may commit because nothing more came:
    /// `quiet_since` (the stream quiet since then) plus the quiet bound.
    fn quiet_commit_at(&self, quiet_since: Option<Instant>) -> Option<Instant> {
        self.batch
            .open()
            .then_some(quiet_since?)
            .map(|since| since + self.batch.quiet_after())
    }

    pub(super) fn committed(&self) -> Lsn {
        self.committed
    }

    /// When the session must wake up to commit even if nothing arrives.
    /// Between two PostgreSQL transactions: the time bound; inside one, the
    /// split bound, and only where a commit can happen: a deadline past
    /// where none can would wake the loop for nothing, over and over.
    fn wake_at(
        &self,
        quiet_since: Option<Instant>,
        at_boundary: bool,
        can_split: bool,
        handed_off: Lsn,
    ) -> Option<Instant> {
        if !at_boundary {
            return can_split.then(|| self.batch.split_at()).flatten();
        }
        match self.batch.deadline() {
            Some(deadline) => Some(
                self.quiet_commit_at(quiet_since)
                    .map_or(deadline, |q| q.min(deadline)),
            ),
            None if handed_off > self.committed => Some(self.last_commit + IDLE_CHECKPOINT_EVERY),
            None => None,
        }
    }

    /// The commit due now, if any (`force`: a graceful stop commits what
    /// was handed over whole, bound or not).
    fn due(
        &self,
        quiet_since: Option<Instant>,
        now: Instant,
        force: bool,
        at_boundary: bool,
        split_point: Option<Option<Partial>>,
        handed_off: Lsn,
    ) -> Option<CommitPlan> {
        let lsn = handed_off.max(self.committed);
        if at_boundary {
            let due = if self.batch.open() {
                force
                    || self.batch.due(now)
                    || self
                        .quiet_commit_at(quiet_since)
                        .is_some_and(|at| now >= at)
            } else {
                lsn > self.committed
                    && (force
                        || now.saturating_duration_since(self.last_commit) >= IDLE_CHECKPOINT_EVERY)
            };
            return due.then_some(CommitPlan { lsn, partial: None });
        }
        if !self.batch.split_due(now) {
            return None;
        }
        split_point.map(|partial| CommitPlan { lsn, partial })
    }
}

impl SessionMachine<'_> {
    /// Exactly-once: when the session must wake to commit even if nothing
    /// arrives; `None` in at-least-once mode or with nothing to commit.
    pub fn commit_wake_at(&self) -> Option<Instant> {
        let commits = self.commits.as_ref()?;
        if self.parks_waiting() > 0 {
            // The writer's answer wakes the session, and the commit waits
            // for it (below).
            return None;
        }
        commits.wake_at(
            self.pace.quiet_since(),
            self.at_boundary(),
            self.split_point().is_some(),
            self.handed_off,
        )
    }

    /// Exactly-once: the commit due at `now`, if any.
    pub fn commit_due(&self, now: Instant, force: bool) -> Option<CommitPlan> {
        if self.parks_waiting() > 0 {
            // A checkpoint past an event that is neither in this Kafka
            // transaction nor committed to the parking table would lose it
            // in a crash: the writer answers within milliseconds.
            return None;
        }
        let plan = self.commits.as_ref()?.due(
            self.pace.quiet_since(),
            now,
            force,
            self.at_boundary(),
            self.split_point(),
            self.handed_off,
        )?;
        Some(self.carry_resume(plan))
    }

    /// A commit below the transaction an earlier session's checkpoint
    /// split keeps that split: until this session reaches the transaction,
    /// its first events are in Kafka only by that checkpoint's word, and a
    /// checkpoint without it would make the next session write them again
    /// (a heartbeat message written during a long transaction arrives
    /// before it, and moves the position a commit may take).
    fn carry_resume(&self, plan: CommitPlan) -> CommitPlan {
        match (plan.partial, self.resume) {
            (None, Some(resume)) if resume.commit_lsn > plan.lsn => CommitPlan {
                partial: Some(resume),
                ..plan
            },
            _ => plan,
        }
    }

    /// Exactly-once: whether a Kafka transaction is open (a record went
    /// into it since the last commit or abort).
    pub fn transaction_open(&self) -> bool {
        self.commits.as_ref().is_some_and(|c| c.batch.open())
    }

    /// Exactly-once: when the open Kafka transaction took its first record.
    pub fn transaction_opened_at(&self) -> Option<Instant> {
        self.commits.as_ref()?.batch.opened_at()
    }

    /// Exactly-once: how long the open Kafka transaction had been open at
    /// `now`, when that is `timeout` (`transaction.timeout.ms`) or more. A
    /// fence met then is explained without another producer: the
    /// coordinator aborted the transaction because the relay was paused
    /// (SIGSTOP, a frozen VM: the monotonic clock runs on), so the session
    /// replays from the last committed checkpoint instead of stopping. A
    /// failed commit leaves the transaction open here until the session
    /// abandons it, so that this still sees it.
    pub fn transaction_outlived(&self, now: Instant, timeout: Duration) -> Option<Duration> {
        outlived(self.transaction_opened_at(), now, timeout)
    }

    /// Exactly-once: the open Kafka transaction ended without a commit
    /// (aborted, or its commit failed): the next record opens a new one.
    pub fn transaction_ended(&mut self) {
        if let Some(commits) = &mut self.commits {
            commits.batch.reset();
        }
    }

    /// Exactly-once: a Kafka transaction committed with a checkpoint at
    /// `lsn` at `now`: everything up to it is confirmable, and the rows up
    /// to it may be deleted.
    pub fn commit_done(&mut self, lsn: Lsn, now: Instant) {
        if let Some(commits) = &mut self.commits {
            commits.batch.reset();
            commits.committed = commits.committed.max(lsn);
            commits.last_commit = now;
            super::forget_confirmed(self.refusals, commits.committed);
        }
    }

    /// Exactly-once: a record of `bytes` goes into the Kafka transaction;
    /// true when it opens one (the producer must begin it first).
    pub(super) fn record_in_transaction(&mut self, bytes: usize, now: Instant) -> bool {
        let Some(commits) = &mut self.commits else {
            return false;
        };
        let opens = !commits.batch.open();
        commits.batch.record(bytes, now);
        opens
    }
}

/// How long a transaction opened at `opened_at` has been open at `now`,
/// when that is `timeout` or more.
fn outlived(opened_at: Option<Instant>, now: Instant, timeout: Duration) -> Option<Duration> {
    let open = now.saturating_duration_since(opened_at?);
    (open >= timeout).then_some(open)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kafka.transaction_quiet_ms`'s default.
    const QUIET_COMMIT_AFTER: Duration = Duration::from_millis(1);

    fn commits() -> Commits {
        commits_quiet_after(QUIET_COMMIT_AFTER)
    }

    fn commits_quiet_after(quiet_after: Duration) -> Commits {
        Commits::new(
            Bounds {
                max_events: 100,
                max_bytes: 1 << 20,
                max_open: Duration::from_millis(100),
                quiet_after,
                split_after: Duration::from_secs(30),
            },
            Lsn(1000),
            Instant::now(),
        )
    }

    /// A fence after a pause is the coordinator's abort only when the open
    /// transaction outlived the transaction timeout; with nothing open, or
    /// open for less, it is another producer's.
    #[test]
    fn a_transaction_open_past_the_timeout_explains_a_fence() {
        let start = Instant::now();
        let timeout = Duration::from_secs(60);
        let second = Duration::from_secs(1);
        assert_eq!(outlived(None, start + timeout * 2, timeout), None);
        assert_eq!(outlived(Some(start), start + timeout / 2, timeout), None);
        assert_eq!(
            outlived(Some(start), start + timeout + second, timeout),
            Some(timeout + second)
        );
        let mut c = commits();
        c.batch.record(10, start);
        assert_eq!(
            outlived(c.batch.opened_at(), start + timeout, timeout),
            Some(timeout)
        );
        c.batch.reset();
        assert_eq!(
            outlived(c.batch.opened_at(), start + timeout, timeout),
            None
        );
    }

    /// Inside a PostgreSQL transaction the session wakes only for the
    /// split bound, and only where a commit can happen: a wake-up where
    /// none can (its deadline long past) would spin the session's loop
    /// until the Commit arrives.
    #[test]
    fn the_session_wakes_for_the_time_bound_between_transactions_and_the_split_inside() {
        let mut c = commits();
        let q = None;
        assert_eq!(
            c.wake_at(q, true, true, Lsn(1000)),
            None,
            "nothing to commit"
        );
        let opened = Instant::now() - Duration::from_secs(5);
        c.batch.record(10, opened);
        assert_eq!(
            c.wake_at(q, false, true, Lsn(2000)),
            Some(opened + Duration::from_secs(30)),
            "mid-transaction: the split bound"
        );
        assert_eq!(
            c.wake_at(q, false, false, Lsn(2000)),
            None,
            "mid-transaction, a record held back"
        );
        assert_eq!(
            c.wake_at(q, true, true, Lsn(2000)),
            Some(opened + Duration::from_millis(100))
        );
        c.batch.reset();
        // Nothing open, the position moved (an idle advance): a checkpoint
        // a while after the last commit.
        assert_eq!(
            c.wake_at(q, true, true, Lsn(2000)),
            Some(c.last_commit + IDLE_CHECKPOINT_EVERY)
        );
        assert_eq!(c.wake_at(q, false, true, Lsn(2000)), None);
    }

    /// A quiet stream commits an open transaction at a boundary once
    /// `kafka.transaction_quiet_ms` passed, and wakes the session for it; WAL
    /// arriving makes it wait for its bounds again; inside a PostgreSQL
    /// transaction quiet changes nothing.
    #[test]
    fn a_quiet_stream_commits_the_open_transaction_at_a_boundary() {
        let start = Instant::now();
        let mut c = commits();
        let mut q = Some(start);
        assert_eq!(c.wake_at(q, true, true, Lsn(1000)), None, "nothing open");
        c.batch.record(10, start);
        assert_eq!(
            c.wake_at(q, true, true, Lsn(2000)),
            Some(start + QUIET_COMMIT_AFTER)
        );
        let soon = start + QUIET_COMMIT_AFTER / 2;
        assert_eq!(c.due(q, soon, false, true, Some(None), Lsn(2000)), None);
        let quiet = start + QUIET_COMMIT_AFTER;
        assert_eq!(
            c.due(q, quiet, false, true, Some(None), Lsn(2000)),
            Some(CommitPlan {
                lsn: Lsn(2000),
                partial: None
            })
        );
        assert_eq!(
            c.due(q, quiet, false, false, Some(None), Lsn(2000)),
            None,
            "mid-transaction: only the split bound commits"
        );
        q = None;
        assert_eq!(c.due(q, quiet, false, true, Some(None), Lsn(2000)), None);
        assert_eq!(
            c.wake_at(q, true, true, Lsn(2000)),
            Some(start + Duration::from_millis(100)),
            "busy: the time bound"
        );
    }

    /// With `kafka.transaction_quiet_ms = 0` the open transaction commits
    /// at the boundary the moment the stream is quiet, and not while it is
    /// busy.
    #[test]
    fn with_no_quiet_wait_a_quiet_stream_commits_at_once() {
        let start = Instant::now();
        let mut c = commits_quiet_after(Duration::ZERO);
        c.batch.record(10, start);
        assert_eq!(c.wake_at(Some(start), true, true, Lsn(2000)), Some(start));
        assert_eq!(
            c.due(Some(start), start, false, true, Some(None), Lsn(2000)),
            Some(CommitPlan {
                lsn: Lsn(2000),
                partial: None
            })
        );
        assert_eq!(c.due(None, start, false, true, Some(None), Lsn(2000)), None);
    }

    /// The commit decision at each kind of point: a bound reached at a
    /// boundary commits whole; inside a transaction only past the split
    /// bound and only where every event handed over is in it; a forced
    /// commit (graceful stop) ignores the bounds but not the boundary.
    #[test]
    fn a_commit_is_due_at_a_bound_or_a_split_and_never_where_an_event_is_held_back() {
        let start = Instant::now();
        let mut c = commits();
        let q = None;
        let later = start + Duration::from_secs(1);
        assert_eq!(
            c.due(q, later, false, true, Some(None), Lsn(1000)),
            None,
            "nothing handed over"
        );
        c.batch.record(10, start);
        assert_eq!(
            c.due(q, start, false, true, Some(None), Lsn(2000)),
            None,
            "open, no bound reached"
        );
        assert_eq!(
            c.due(q, start, true, true, Some(None), Lsn(2000)),
            Some(CommitPlan {
                lsn: Lsn(2000),
                partial: None
            }),
            "forced at a boundary"
        );
        assert_eq!(
            c.due(q, later, false, true, Some(None), Lsn(2000)),
            Some(CommitPlan {
                lsn: Lsn(2000),
                partial: None
            }),
            "past max_open at a boundary"
        );
        let part = Partial {
            commit_lsn: Lsn(3000),
            events: 4,
        };
        assert_eq!(
            c.due(q, later, true, false, Some(Some(part)), Lsn(2000)),
            None,
            "inside a transaction, before the split bound, even forced"
        );
        let split = start + Duration::from_secs(31);
        assert_eq!(
            c.due(q, split, false, false, None, Lsn(2000)),
            None,
            "past the split bound, but a record is held back"
        );
        assert_eq!(
            c.due(q, split, false, false, Some(Some(part)), Lsn(2000)),
            Some(CommitPlan {
                lsn: Lsn(2000),
                partial: Some(part)
            })
        );
        c.batch.reset();
        assert_eq!(
            c.due(q, start, false, true, Some(None), Lsn(2000)),
            None,
            "idle advance, too soon"
        );
        assert_eq!(
            c.due(
                q,
                c.last_commit + IDLE_CHECKPOINT_EVERY,
                false,
                true,
                Some(None),
                Lsn(2000)
            ),
            Some(CommitPlan {
                lsn: Lsn(2000),
                partial: None
            }),
            "idle advance"
        );
    }
}
