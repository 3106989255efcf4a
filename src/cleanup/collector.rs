//! The collector: notes the outbox rows of each transaction and releases
//! them once confirmed. Pure: no I/O, no clock (see the module docs of
//! `cleanup` for the bounds).

use std::collections::VecDeque;

use serde::Deserialize;

use crate::metrics as m;
use pgoutput::lsn::Lsn;

/// What the relay does with outbox rows once their events are confirmed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cleanup {
    /// Nothing: the service deletes them (in the inserting transaction, or
    /// later), or a partitioned outbox drops old partitions.
    #[default]
    None,
    /// Delete them in batches once confirmed.
    DeleteAfterAck,
}

impl Cleanup {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Cleanup::None => "none",
            Cleanup::DeleteAfterAck => "delete-after-ack",
        }
    }
}

/// Ids held between their Commit and its confirmation, at most (a few MB).
pub const MAX_HELD_IDS: usize = 100_000;
/// Transactions waiting for their confirmation, at most.
pub const MAX_HELD_TXNS: usize = 100_000;

/// Rows that may be deleted: their transactions are confirmed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deletable {
    /// Values of the id column.
    pub ids: Vec<String>,
    /// Transactions whose rows are deleted by `xmin` (they outgrew
    /// [`MAX_HELD_IDS`]).
    pub xids: Vec<u32>,
    /// Ids the delete by `xmin` must spare: rows of those transactions left
    /// in the table on purpose ([`Collector::keep`], [`Collector::leave`]).
    /// One list for all of `xids`: a row belongs to one transaction, so
    /// sparing its id in the others' delete costs nothing.
    pub keep: Vec<String>,
}

impl Deletable {
    /// Nothing to delete (`keep` alone says nothing).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty() && self.xids.is_empty()
    }

    /// Adds `other`'s rows to these.
    pub fn extend(&mut self, other: Deletable) {
        self.ids.extend(other.ids);
        self.xids.extend(other.xids);
        self.keep.extend(other.keep);
    }

    /// Ids held: to delete, and to spare.
    pub fn held_ids(&self) -> usize {
        self.ids.len() + self.keep.len()
    }
}

/// One transaction's rows.
#[derive(Debug)]
struct Txn {
    xid: u32,
    /// Its Begin's final LSN: the transaction a kept row names.
    final_lsn: Lsn,
    ids: Vec<String>,
    /// Some ids did not fit, or could not be read: delete by `xmin` too.
    by_xmin: bool,
    /// Some id could not be read (a row whose key is then not its id).
    unreadable: bool,
    /// Ids of rows left in the table on purpose, which a delete by `xmin`
    /// must spare. Held from the first (the transaction may go by `xmin`
    /// only later); dropped at its Commit when it does not.
    spared: Vec<String>,
    /// A row left on purpose cannot be spared by its id (not readable, or
    /// no room to hold it): never delete by `xmin`.
    no_xmin: bool,
    /// Rows seen, for the skipped count.
    rows: u64,
    /// Rows left in the table on purpose ([`Collector::keep`],
    /// [`Collector::leave`]), counted as skipped when they were.
    kept: u64,
}

impl Txn {
    /// Whether its rows beyond the ids held go by `xmin`.
    fn deletes_by_xmin(&self) -> bool {
        self.by_xmin && !self.no_xmin
    }
}

/// Holds `id` among `txn`'s spared ids, within [`MAX_HELD_IDS`] ids held
/// in all (`held`): when they are all taken and `txn` goes by `xmin`, one of
/// its held ids makes room (its row is deleted by `xmin` all the same);
/// otherwise `txn` is not deleted by `xmin`.
fn spare(txn: &mut Txn, held: &mut usize, id: &str) {
    if *held < MAX_HELD_IDS {
        *held += 1;
    } else if txn.by_xmin && txn.ids.pop().is_some() {
        // Its slot goes to the spared id.
    } else {
        txn.no_xmin = true;
        return;
    }
    txn.spared.push(id.to_owned());
}

/// The session's side: notes rows per transaction, releases them once
/// confirmed. Pure. See the module docs for the bounds.
#[derive(Debug, Default)]
pub struct Collector {
    open: Option<Txn>,
    /// Closed transactions with rows, by ascending end LSN.
    waiting: VecDeque<(Lsn, Txn)>,
    held_ids: usize,
}

impl Collector {
    pub fn new() -> Self {
        Self::default()
    }

    /// A transaction whose events are being sent begins; `final_lsn` is
    /// its Begin's (the commit LSN its delivery tags carry).
    pub fn begin(&mut self, xid: u32, final_lsn: Lsn) {
        if let Some(open) = self.open.take() {
            self.held_ids -= open.ids.len() + open.spared.len();
        }
        self.open = Some(Txn {
            xid,
            final_lsn,
            ids: Vec::new(),
            by_xmin: false,
            unreadable: false,
            spared: Vec::new(),
            no_xmin: false,
            rows: 0,
            kept: 0,
        });
    }

    /// An outbox row of the open transaction (`None`: its id cannot be read).
    pub fn row(&mut self, id: Option<&str>) {
        let Some(open) = &mut self.open else {
            return;
        };
        open.rows += 1;
        match id {
            Some(id) if !open.by_xmin && self.held_ids < MAX_HELD_IDS => {
                open.ids.push(id.to_owned());
                self.held_ids += 1;
            }
            _ => {
                // Keep the ids held so far (they are deleted by id, cheaply
                // and with the same result) and fall back for the rest.
                open.by_xmin = true;
                open.unreadable |= id.is_none();
            }
        }
    }

    /// The row `id` of the transaction that began at `final_lsn`, not yet
    /// released, must stay in the table: its dead letter went out without
    /// its payload (too large for the dead-letter topic), so the table holds
    /// the only copy, which `outbox-relay dead retry` reads. The decision is
    /// normally made while the transaction is open (reading pauses while a
    /// record waits), but may come once it waits for its confirmation.
    /// Its id is no longer deleted, and is spared by the transaction's
    /// delete by `xmin`; when the row cannot be told by its id (the
    /// transaction has rows whose id cannot be read) or there is no room
    /// left to hold its id, the transaction is not deleted by `xmin` at
    /// all: its rows beyond the ids held stay (counted as skipped).
    pub fn keep(&mut self, final_lsn: Lsn, id: &str) {
        let Some(txn) = self
            .open
            .iter_mut()
            .chain(self.waiting.iter_mut().rev().map(|(_, txn)| txn))
            .find(|txn| txn.final_lsn == final_lsn)
        else {
            // Not held (replayed, or beyond MAX_HELD_TXNS): nothing of it
            // is deleted.
            return;
        };
        if let Some(at) = txn.ids.iter().position(|held| held == id) {
            txn.ids.swap_remove(at);
            txn.kept += 1;
            metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(1);
            // Its slot among the ids held goes to the spared one.
            txn.spared.push(id.to_owned());
            return;
        }
        if !txn.by_xmin {
            // Every row's id is held: this is no row of the transaction
            // (a logical message has none).
            return;
        }
        txn.kept += 1;
        metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(1);
        if txn.unreadable {
            // The key may be no id at all: a row whose id cannot be read
            // is keyed otherwise.
            txn.no_xmin = true;
        } else {
            spare(txn, &mut self.held_ids, id);
        }
    }

    /// An outbox row of the open transaction that this session does not
    /// delete (it was written to Kafka by an earlier session, whose fate
    /// for it is not known here): left in the table, counted as skipped.
    /// `id`: its id (`None`: it cannot be read), which a delete of the
    /// transaction by `xmin` spares; without it, or without room to hold
    /// it, the transaction is not deleted by `xmin`.
    pub fn leave(&mut self, id: Option<&str>) {
        let Some(open) = &mut self.open else {
            return;
        };
        open.rows += 1;
        open.kept += 1;
        metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(1);
        match id {
            Some(id) => spare(open, &mut self.held_ids, id),
            None => open.no_xmin = true,
        }
    }

    /// The open transaction's Commit.
    pub fn commit(&mut self, end_lsn: Lsn) {
        let Some(mut txn) = self.open.take() else {
            return;
        };
        if !txn.by_xmin {
            // Deleted by id alone: nothing to spare.
            self.held_ids -= txn.spared.len();
            txn.spared = Vec::new();
            if txn.ids.is_empty() {
                return;
            }
        }
        if self.waiting.len() >= MAX_HELD_TXNS {
            self.held_ids -= txn.ids.len() + txn.spared.len();
            metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(txn.rows - txn.kept);
            return;
        }
        self.waiting.push_back((end_lsn, txn));
    }

    /// The rows of every transaction confirmed at `confirmed`.
    pub fn release(&mut self, confirmed: Lsn) -> Option<Deletable> {
        let mut out = Deletable::default();
        while let Some((end_lsn, _)) = self.waiting.front() {
            if *end_lsn > confirmed {
                break;
            }
            let Some((_, txn)) = self.waiting.pop_front() else {
                break;
            };
            self.held_ids -= txn.ids.len() + txn.spared.len();
            if txn.deletes_by_xmin() {
                out.xids.push(txn.xid);
                out.keep.extend(txn.spared);
            } else if txn.by_xmin {
                // Its rows beyond the ids held stay.
                let unheld = txn.rows.saturating_sub(txn.kept + txn.ids.len() as u64);
                metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(unheld);
            }
            out.ids.extend(txn.ids);
        }
        (!out.is_empty()).then_some(out)
    }

    /// Ids held now.
    pub fn held_ids(&self) -> usize {
        self.held_ids
    }

    /// Transactions waiting for their confirmation.
    pub fn waiting_txns(&self) -> usize {
        self.waiting.len()
    }
}
