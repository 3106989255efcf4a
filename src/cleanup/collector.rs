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
}

impl Deletable {
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty() && self.xids.is_empty()
    }
}

/// One transaction's rows.
#[derive(Debug)]
struct Txn {
    xid: u32,
    ids: Vec<String>,
    /// Some ids did not fit: delete by `xmin` instead.
    by_xmin: bool,
    /// Rows seen, for the skipped count.
    rows: u64,
    /// Rows left in the table on purpose ([`Collector::keep`],
    /// [`Collector::leave`]), counted as skipped when they were.
    kept: u64,
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

    /// A transaction whose events are being sent begins.
    pub fn begin(&mut self, xid: u32) {
        if let Some(open) = self.open.take() {
            self.held_ids -= open.ids.len();
        }
        self.open = Some(Txn {
            xid,
            ids: Vec::new(),
            by_xmin: false,
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
            }
        }
    }

    /// The row `id` of a transaction not yet released must stay in the
    /// table: its dead letter went out without its payload (too large for
    /// the dead-letter topic), so the table holds the only copy, which
    /// `outbox-relay dead retry` reads. Looked for in the open transaction
    /// first (where the decision is normally made: reading pauses while a
    /// record waits), then in the waiting ones. A transaction whose rows are
    /// deleted by `xmin` stops being: its rows beyond the ids held stay
    /// (counted as skipped), as the kept row might be among them.
    pub fn keep(&mut self, id: &str) {
        let txns = self
            .open
            .iter_mut()
            .chain(self.waiting.iter_mut().rev().map(|(_, txn)| txn));
        for txn in txns {
            if let Some(at) = txn.ids.iter().position(|held| held == id) {
                txn.ids.swap_remove(at);
                self.held_ids -= 1;
                txn.kept += 1;
                metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(1);
                return;
            }
        }
        if let Some(open) = &mut self.open
            && open.by_xmin
        {
            open.by_xmin = false;
            open.kept += 1;
            metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(1);
        }
    }

    /// An outbox row of the open transaction that this session does not
    /// delete (it was written to Kafka by an earlier session, whose fate
    /// for it is not known here): left in the table, counted as skipped.
    pub fn leave(&mut self) {
        if let Some(open) = &mut self.open {
            open.rows += 1;
            open.kept += 1;
            metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(1);
        }
    }

    /// The open transaction's Commit.
    pub fn commit(&mut self, end_lsn: Lsn) {
        let Some(txn) = self.open.take() else {
            return;
        };
        if txn.ids.is_empty() && !txn.by_xmin {
            return;
        }
        if self.waiting.len() >= MAX_HELD_TXNS {
            self.held_ids -= txn.ids.len();
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
            self.held_ids -= txn.ids.len();
            if txn.by_xmin {
                out.xids.push(txn.xid);
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
