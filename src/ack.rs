//! Ack tracker: the only source of the flush LSN the relay confirms.
//!
//! Role: holds the in-flight transactions in commit order. A transaction is
//! opened at Begin, gets one pending event per record handed to the producer
//! (while the transaction is still arriving: a 1M-row transaction streams
//! through), loses one per broker or dead-letter acknowledgement, in any
//! order across partitions, and is closed with its Commit's end LSN.
//!
//! Invariants (design.md 1, 5, 6; house style 4):
//! * [`AckTracker::confirmed`] is the end LSN of the last transaction that,
//!   like every transaction before it, is closed with all events acked: the
//!   acknowledged prefix, never what was merely received. It never moves
//!   backwards.
//! * It is the Commit's *end* LSN that is confirmed, never the commit LSN
//!   (confirming the commit LSN makes the server re-send the transaction).
//! * [`AckTracker::idle_advance`] moves the position to a keepalive's WAL end
//!   only when nothing at all is in flight.
//! * After a failed delivery, [`AckTracker::reset`] forgets everything in
//!   flight and keeps the confirmed position: the stream rewinds to it.
//! * Misuse is a typed [`AckError`], never a panic. Every operation is O(1)
//!   amortized: finished transactions leave the front of a `VecDeque`.
//!
//! Transactions must be opened in commit order. pgoutput without streaming
//! (protocol version 1) sends each transaction whole, at commit time, so Begin
//! order is commit order.

use std::collections::VecDeque;
use std::fmt;

use crate::lsn::Lsn;

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

/// One in-flight transaction.
#[derive(Debug, Clone, Copy)]
struct Txn {
    /// Events handed to the producer and not yet acknowledged.
    unacked: u64,
    /// The Commit's end LSN, once the Commit arrived.
    end_lsn: Option<Lsn>,
}

impl Txn {
    fn is_done(&self) -> bool {
        self.unacked == 0 && self.end_lsn.is_some()
    }
}

/// The acknowledged prefix of in-flight transactions. See the module docs.
#[derive(Debug, Clone)]
pub struct AckTracker {
    confirmed: Lsn,
    /// In-flight transactions in commit order; `queue[i]` has id `front_id + i`.
    queue: VecDeque<Txn>,
    /// Id of `queue[0]`, or of the next transaction to open when empty.
    /// Ids below it (and at or above `reset_floor`) are finished and released.
    front_id: u64,
    /// Ids below this were forgotten by [`AckTracker::reset`].
    reset_floor: u64,
    /// Number of transactions at the front of `queue` that are closed.
    /// Closing is in order, so the closed ones are always a prefix.
    closed_prefix: usize,
    /// End LSN of the most recent close since the last reset.
    last_end_lsn: Option<Lsn>,
    pending_events: u64,
}

impl AckTracker {
    /// Starts from the slot's confirmed position.
    pub fn new(confirmed: Lsn) -> Self {
        AckTracker {
            confirmed,
            queue: VecDeque::new(),
            front_id: 0,
            reset_floor: 0,
            closed_prefix: 0,
            last_end_lsn: None,
            pending_events: 0,
        }
    }

    /// Opens the next transaction (at Begin).
    pub fn open(&mut self) -> TxnId {
        self.queue.push_back(Txn {
            unacked: 0,
            end_lsn: None,
        });
        TxnId(self.front_id + self.queue.len() as u64 - 1)
    }

    /// Records that one event of `txn` was handed to the producer.
    ///
    /// # Errors
    /// [`AckError::EventAfterClose`] once `txn` is closed; [`AckError::UnknownTxn`]
    /// or [`AckError::Stale`] for an id this tracker does not hold.
    pub fn add_event(&mut self, txn: TxnId) -> Result<(), AckError> {
        let Some(entry) = self.lookup(txn)? else {
            return Err(AckError::EventAfterClose(txn));
        };
        if entry.end_lsn.is_some() {
            return Err(AckError::EventAfterClose(txn));
        }
        entry.unacked += 1;
        self.pending_events += 1;
        Ok(())
    }

    /// Records that the broker (or the dead-letter write) acknowledged one
    /// event of `txn`. Acks may arrive in any order across transactions.
    ///
    /// # Errors
    /// [`AckError::TooManyAcks`], [`AckError::UnknownTxn`], [`AckError::Stale`].
    pub fn ack_event(&mut self, txn: TxnId) -> Result<(), AckError> {
        let Some(entry) = self.lookup(txn)? else {
            return Err(AckError::TooManyAcks(txn));
        };
        if entry.unacked == 0 {
            return Err(AckError::TooManyAcks(txn));
        }
        entry.unacked -= 1;
        self.pending_events -= 1;
        self.release_done();
        Ok(())
    }

    /// Closes `txn` with its Commit's end LSN. Transactions without events
    /// are closed too, so that they can be confirmed.
    ///
    /// # Errors
    /// [`AckError::AlreadyClosed`], [`AckError::CloseOutOfOrder`],
    /// [`AckError::EndLsnBackwards`], [`AckError::UnknownTxn`], [`AckError::Stale`].
    pub fn close(&mut self, txn: TxnId, end_lsn: Lsn) -> Result<(), AckError> {
        let index = match self.index_of(txn)? {
            Some(index) => index,
            None => return Err(AckError::AlreadyClosed(txn)),
        };
        if index < self.closed_prefix {
            return Err(AckError::AlreadyClosed(txn));
        }
        if index > self.closed_prefix {
            let earlier = TxnId(self.front_id + self.closed_prefix as u64);
            return Err(AckError::CloseOutOfOrder { txn, earlier });
        }
        if let Some(previous) = self.last_end_lsn.filter(|&p| end_lsn < p) {
            return Err(AckError::EndLsnBackwards {
                txn,
                end_lsn,
                previous,
            });
        }
        self.queue[index].end_lsn = Some(end_lsn);
        self.closed_prefix += 1;
        self.last_end_lsn = Some(end_lsn);
        self.release_done();
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
        // Finished transactions are released at once, so whatever is queued
        // is still in flight.
        !self.queue.is_empty()
    }

    /// Events handed to the producer and not yet acknowledged.
    pub fn pending_events(&self) -> u64 {
        self.pending_events
    }

    /// After a failed delivery: forgets every in-flight transaction. The
    /// confirmed position stays; the stream restarts from it, and ids issued
    /// before the reset now answer [`AckError::Stale`].
    pub fn reset(&mut self) {
        self.front_id += self.queue.len() as u64;
        self.reset_floor = self.front_id;
        self.queue.clear();
        self.closed_prefix = 0;
        // The server re-sends from the confirmed position, so end LSNs start
        // over from there.
        self.last_end_lsn = None;
        self.pending_events = 0;
    }

    /// Pops finished transactions off the front, advancing `confirmed`.
    fn release_done(&mut self) {
        while let Some(front) = self.queue.front() {
            if !front.is_done() {
                break;
            }
            if let Some(end) = front.end_lsn {
                // A transaction re-sent after a rewind may end at or below a
                // position confirmed earlier: never move backwards.
                self.confirmed = self.confirmed.max(end);
            }
            self.queue.pop_front();
            self.front_id += 1;
            self.closed_prefix -= 1;
        }
    }

    /// The queue index of `txn`, `None` if it was finished and released, or
    /// an error if it never existed or was forgotten by a reset.
    fn index_of(&self, txn: TxnId) -> Result<Option<usize>, AckError> {
        let TxnId(id) = txn;
        if id < self.reset_floor {
            return Err(AckError::Stale(txn));
        }
        if id < self.front_id {
            return Ok(None);
        }
        let index = id - self.front_id;
        if index >= self.queue.len() as u64 {
            return Err(AckError::UnknownTxn(txn));
        }
        Ok(Some(index as usize))
    }

    fn lookup(&mut self, txn: TxnId) -> Result<Option<&mut Txn>, AckError> {
        Ok(self.index_of(txn)?.map(|index| &mut self.queue[index]))
    }
}

#[cfg(test)]
mod tests;
