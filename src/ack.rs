//! Ack tracker: the only source of the flush LSN the relay confirms.
//!
//! Role: holds the in-flight transactions in commit order. A transaction is
//! opened at Begin, gets one pending event per record handed to the producer
//! (while the transaction is still arriving: a 1M-row transaction streams
//! through), loses one per broker or dead-letter acknowledgement, in any
//! order across partitions, and is closed with its Commit's end LSN.
//!
//! Invariants (docs/design.md: "confirm only what the broker holds",
//! "keepalives answered, progress reported promptly", "a failed delivery
//! rewinds, it never skips"):
//! * [`AckTracker::confirmed`] is the end LSN of the last transaction that,
//!   like every transaction before it, is closed with all events acked: the
//!   acknowledged prefix, never what was merely received. It never moves
//!   backwards.
//! * It is the Commit's *end* LSN that is confirmed, never the commit LSN
//!   (confirming the commit LSN makes the server re-send the transaction).
//! * [`AckTracker::idle_advance`] moves the position to a keepalive's WAL end
//!   only when nothing at all is in flight.
//! * A failed delivery ends the session; the next session starts a new
//!   tracker at the confirmed position (`SessionMachine::new` in
//!   `relay::machine`), and the stream rewinds to it.
//!   [`AckTracker::reset`] does the same to a tracker in place (forgets
//!   everything in flight, keeps the confirmed position); the relay itself
//!   does not call it.
//! * Misuse is a typed [`AckError`], never a panic.
//! * Memory is bounded by what is in flight, not by how long the oldest
//!   event waits: consecutive done transactions (closed, every event acked)
//!   collapse into one entry with the later end LSN, so thousands of empty
//!   transactions (a busy database writing to other tables) behind one slow
//!   acknowledgement take one entry. Every operation is O(log n) in the
//!   entries held (a `BTreeMap` keyed by the first id of each run).
//!
//! Beside the events, the tracker counts the bytes of the records in
//! flight ([`AckTracker::hold_bytes`], [`AckTracker::release_bytes`]): the
//! caller says how many bytes each record it hands over holds, and gives
//! them back with its acknowledgement, so the relay can bound what it holds
//! unacknowledged by bytes as well as by events ("bounded memory" in
//! docs/design.md). They are not tied to a transaction: an acknowledgement
//! frees its record's bytes whatever else its transaction waits for.
//!
//! For the metrics, each transaction may carry its commit time
//! ([`AckTracker::open_at`]): [`AckTracker::commit_time`] gives it back when
//! one of its events is acknowledged (commit-to-ack latency), and
//! [`AckTracker::oldest_unacked_commit_time`] names the oldest transaction
//! still waiting for the broker. Runs of done transactions drop it with
//! everything else about them.
//!
//! Transactions must be opened in commit order. pgoutput without streaming
//! (protocol version 1) sends each transaction whole, at commit time, so Begin
//! order is commit order.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};

use pgoutput::lsn::Lsn;

/// Identifies one transaction inside one [`AckTracker`]. Opaque and
/// monotonic: ids are never reused, not even across [`AckTracker::reset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId(u64);

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "txn#{}", self.0)
    }
}

/// A misuse of the tracker. Each one is a bug in the caller, except
/// [`AckError::Stale`], which a late delivery report from a producer that was
/// replaced after a failure legitimately causes and the caller may ignore.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    #[error("{0} was never opened by this ack tracker")]
    UnknownTxn(TxnId),
    #[error("{0} was forgotten by a reset after a failed delivery; its report is stale")]
    Stale(TxnId),
    #[error("{0} got more acknowledgements than events handed to the producer")]
    TooManyAcks(TxnId),
    #[error("{0} is already closed")]
    AlreadyClosed(TxnId),
    #[error("{0} is closed: no event can be added after its Commit")]
    EventAfterClose(TxnId),
    #[error("{txn} closed before {earlier}: transactions must close in the order they were opened")]
    CloseOutOfOrder { txn: TxnId, earlier: TxnId },
    #[error("{txn} closed at end LSN {end_lsn}, below the previous transaction's {previous}")]
    EndLsnBackwards {
        txn: TxnId,
        end_lsn: Lsn,
        previous: Lsn,
    },
}

/// A run of consecutive transactions, held as one entry.
///
/// A run of more than one transaction is always *done*: closed, with every
/// event acknowledged. Nothing about a done transaction matters any more
/// except that it is done and where the last of them ends, so adjacent done
/// transactions collapse into one entry carrying the later end LSN.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// How many transactions (consecutive ids) this entry stands for.
    len: u64,
    /// Events handed to the producer and not yet acknowledged.
    unacked: u64,
    /// The Commit's end LSN (of the last transaction of the run), once the
    /// Commit arrived.
    end_lsn: Option<Lsn>,
    /// The commit time given to [`AckTracker::open_at`], of a run of one.
    commit_time: Option<DateTime<Utc>>,
}

impl Run {
    fn is_done(&self) -> bool {
        self.unacked == 0 && self.end_lsn.is_some()
    }
}

/// The acknowledged prefix of in-flight transactions. See the module docs.
#[derive(Debug, Clone)]
pub struct AckTracker {
    confirmed: Lsn,
    /// In-flight transactions in commit order, keyed by the first id of each
    /// run. The runs cover `front..next_id` without gaps, where `front` is
    /// the first key (`next_id` when empty); two adjacent runs are never
    /// both done, and the first run is never done (it is released at once).
    queue: BTreeMap<u64, Run>,
    /// Id of the next transaction to open.
    next_id: u64,
    /// Ids below this were forgotten by [`AckTracker::reset`].
    reset_floor: u64,
    /// Id of the oldest transaction not yet closed (`next_id` when all are).
    /// Closing is in order, so every id below it is closed.
    next_to_close: u64,
    /// End LSN of the most recent close since the last reset.
    last_end_lsn: Option<Lsn>,
    pending_events: u64,
    /// Bytes of the records handed to the producer and not yet
    /// acknowledged, as the caller counted them.
    pending_bytes: u64,
}

impl AckTracker {
    /// Starts from the slot's confirmed position.
    pub fn new(confirmed: Lsn) -> Self {
        AckTracker {
            confirmed,
            queue: BTreeMap::new(),
            next_id: 0,
            reset_floor: 0,
            next_to_close: 0,
            last_end_lsn: None,
            pending_events: 0,
            pending_bytes: 0,
        }
    }

    /// Opens the next transaction (at Begin).
    pub fn open(&mut self) -> TxnId {
        self.open_with(None)
    }

    /// Opens the next transaction (at Begin), remembering its commit time
    /// for [`AckTracker::commit_time`] and
    /// [`AckTracker::oldest_unacked_commit_time`].
    pub fn open_at(&mut self, commit_time: DateTime<Utc>) -> TxnId {
        self.open_with(Some(commit_time))
    }

    fn open_with(&mut self, commit_time: Option<DateTime<Utc>>) -> TxnId {
        let id = self.next_id;
        self.next_id += 1;
        self.queue.insert(
            id,
            Run {
                len: 1,
                unacked: 0,
                end_lsn: None,
                commit_time,
            },
        );
        TxnId(id)
    }

    /// The commit time `txn` was opened with, while it has events in flight
    /// (that is when its acknowledgements arrive); `None` once it is done,
    /// or when it was opened without one.
    pub fn commit_time(&self, txn: TxnId) -> Option<DateTime<Utc>> {
        let id = self.known(txn).ok()?;
        let (&first, run) = self.queue.range(..=id).next_back()?;
        (first == id && run.len == 1)
            .then_some(run.commit_time)
            .flatten()
    }

    /// The commit time of the oldest transaction with events handed to the
    /// producer and not yet acknowledged; `None` when no event waits.
    /// Usually the first entry; at worst a scan of what is in flight.
    pub fn oldest_unacked_commit_time(&self) -> Option<DateTime<Utc>> {
        self.queue
            .values()
            .find(|run| run.unacked > 0)
            .and_then(|run| run.commit_time)
    }

    /// Records that one event of `txn` was handed to the producer.
    ///
    /// # Errors
    /// [`AckError::EventAfterClose`] once `txn` is closed; [`AckError::UnknownTxn`]
    /// or [`AckError::Stale`] for an id this tracker does not hold.
    pub fn add_event(&mut self, txn: TxnId) -> Result<(), AckError> {
        let id = self.known(txn)?;
        let Some((_, run)) = self.queue.range_mut(..=id).next_back() else {
            return Err(AckError::EventAfterClose(txn));
        };
        if run.end_lsn.is_some() {
            return Err(AckError::EventAfterClose(txn));
        }
        run.unacked += 1;
        self.pending_events += 1;
        Ok(())
    }

    /// Records that the broker (or the dead-letter write) acknowledged one
    /// event of `txn`. Acks may arrive in any order across transactions.
    ///
    /// # Errors
    /// [`AckError::TooManyAcks`], [`AckError::UnknownTxn`], [`AckError::Stale`].
    pub fn ack_event(&mut self, txn: TxnId) -> Result<(), AckError> {
        let id = self.known(txn)?;
        let Some((&first, run)) = self.queue.range_mut(..=id).next_back() else {
            return Err(AckError::TooManyAcks(txn));
        };
        if run.unacked == 0 {
            return Err(AckError::TooManyAcks(txn));
        }
        run.unacked -= 1;
        self.pending_events -= 1;
        if run.is_done() {
            self.finish(first);
        }
        Ok(())
    }

    /// Closes `txn` with its Commit's end LSN. Transactions without events
    /// are closed too, so that they can be confirmed.
    ///
    /// # Errors
    /// [`AckError::AlreadyClosed`], [`AckError::CloseOutOfOrder`],
    /// [`AckError::EndLsnBackwards`], [`AckError::UnknownTxn`], [`AckError::Stale`].
    pub fn close(&mut self, txn: TxnId, end_lsn: Lsn) -> Result<(), AckError> {
        let id = self.known(txn)?;
        if id < self.next_to_close {
            return Err(AckError::AlreadyClosed(txn));
        }
        if id > self.next_to_close {
            let earlier = TxnId(self.next_to_close);
            return Err(AckError::CloseOutOfOrder { txn, earlier });
        }
        if let Some(previous) = self.last_end_lsn.filter(|&p| end_lsn < p) {
            return Err(AckError::EndLsnBackwards {
                txn,
                end_lsn,
                previous,
            });
        }
        // Not closed yet, so `id` is queued with a run of its own.
        let Some(run) = self.queue.get_mut(&id) else {
            return Err(AckError::AlreadyClosed(txn));
        };
        run.end_lsn = Some(end_lsn);
        let done = run.is_done();
        self.next_to_close += 1;
        self.last_end_lsn = Some(end_lsn);
        if done {
            self.finish(id);
        }
        Ok(())
    }

    /// The flush LSN to confirm to PostgreSQL.
    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// On a keepalive (or any idle point): moves the confirmed position to
    /// the server's `wal_end` when nothing is in flight, so an idle outbox on
    /// a busy database does not pin WAL. The keepalive carries the last LSN
    /// *sent*, so with nothing open or unacknowledged everything up to it has
    /// been handled. Returns whether the position moved.
    pub fn idle_advance(&mut self, wal_end: Lsn) -> bool {
        if self.in_flight() || wal_end <= self.confirmed {
            return false;
        }
        self.confirmed = wal_end;
        true
    }

    /// Whether any transaction is open or has unacknowledged events.
    pub fn in_flight(&self) -> bool {
        // A done run at the front is released at once, so whatever is
        // queued is, or waits behind, something still in flight.
        !self.queue.is_empty()
    }

    /// Entries held: each open transaction, each closed one with
    /// unacknowledged events, and one per run of done transactions between
    /// them. Since two done runs are never adjacent, this is at most twice
    /// the number of transactions still in flight, however many done ones
    /// wait behind a slow acknowledgement.
    #[doc(hidden)]
    pub fn queued_transactions(&self) -> usize {
        self.queue.len()
    }

    /// Events handed to the producer and not yet acknowledged.
    pub fn pending_events(&self) -> u64 {
        self.pending_events
    }

    /// Bytes of the records handed to the producer and not yet
    /// acknowledged.
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }

    /// A record in flight now holds `to` bytes instead of `from` (0 when it
    /// was not counted yet): it was handed over, or replaced by a smaller
    /// stand-in under the same acknowledgement.
    pub fn hold_bytes(&mut self, from: u64, to: u64) {
        self.pending_bytes = self.pending_bytes.saturating_sub(from) + to;
    }

    /// A record holding `bytes` was acknowledged (or is no longer held).
    pub fn release_bytes(&mut self, bytes: u64) {
        // Saturating: the caller's count is the caller's; a miscount must
        // not wrap into a bound that never lets reading resume.
        self.pending_bytes = self.pending_bytes.saturating_sub(bytes);
    }

    /// Forgets every in-flight transaction, as after a failed delivery. The
    /// confirmed position stays; the stream would restart from it, and ids
    /// issued before the reset now answer [`AckError::Stale`]. The relay does
    /// not call it: a failed delivery ends the session, and the next one
    /// starts a new tracker at the confirmed position.
    pub fn reset(&mut self) {
        self.reset_floor = self.next_id;
        self.next_to_close = self.next_id;
        self.queue.clear();
        // The server re-sends from the confirmed position, so end LSNs start
        // over from there.
        self.last_end_lsn = None;
        self.pending_events = 0;
        self.pending_bytes = 0;
    }

    /// The run starting at `first` just became done: merges it with a done
    /// neighbour on either side (keeping the later end LSN), then releases
    /// the front if it is done, advancing `confirmed`. O(log n).
    fn finish(&mut self, mut first: u64) {
        let Some(mut run) = self.queue.get(&first).copied() else {
            return;
        };
        if let Some((&prev_first, prev)) = self.queue.range_mut(..first).next_back()
            && prev.is_done()
        {
            prev.len += run.len;
            prev.end_lsn = prev.end_lsn.max(run.end_lsn);
            run = *prev;
            self.queue.remove(&first);
            first = prev_first;
        }
        let next_first = first + run.len;
        if let Some(next) = self.queue.get(&next_first).copied()
            && next.is_done()
        {
            self.queue.remove(&next_first);
            if let Some(merged) = self.queue.get_mut(&first) {
                merged.len += next.len;
                merged.end_lsn = merged.end_lsn.max(next.end_lsn);
            }
        }
        // Two done runs are never adjacent, so at most one is released.
        if let Some(front) = self.queue.first_entry()
            && front.get().is_done()
        {
            let released = front.remove();
            if let Some(end) = released.end_lsn {
                // A transaction re-sent after a rewind may end at or below a
                // position confirmed earlier: never move backwards.
                self.confirmed = self.confirmed.max(end);
            }
        }
    }

    /// The id of `txn` if this tracker issued it since the last reset, or
    /// the error for an id it never issued or forgot. A known id below the
    /// first queued run was finished and released; any other is held by
    /// the last run starting at or below it (the runs have no gaps).
    fn known(&self, txn: TxnId) -> Result<u64, AckError> {
        let TxnId(id) = txn;
        if id < self.reset_floor {
            return Err(AckError::Stale(txn));
        }
        if id >= self.next_id {
            return Err(AckError::UnknownTxn(txn));
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests;
