//! Cleanup of a table outbox (`postgres.cleanup = "delete-after-ack"`): the
//! relay deletes outbox rows once the broker holds their events, so the
//! table stays small without a cron job.
//!
//! Role: [`Collector`] (pure, inside the session machine) notes the ids of
//! the outbox rows of each transaction and releases them once the ack
//! tracker's confirmed position has passed the transaction's end LSN;
//! [`spawn_deleter`] runs a background task that deletes released rows in
//! batches on an ordinary SQL connection.
//!
//! Invariants:
//! * Never a row above the confirmed position: a transaction's rows are
//!   released only when [`Collector::release`] is given a confirmed
//!   position at or past its Commit's end LSN (the ack tracker's: every
//!   event of it and of every transaction before it acknowledged). What is
//!   not confirmed stays in the table, where `outbox-relay status` counts it
//!   and from where it can be re-published should the slot ever be lost.
//! * Bounded memory. Ids wait between their Commit and its confirmation:
//!   normally about `relay.channel_capacity` of them, but transactions whose
//!   events are all acknowledged keep arriving while an earlier one waits
//!   (a slow partition), and a single transaction may hold a million rows.
//!   So at most [`MAX_HELD_IDS`] ids are held in all. A transaction whose
//!   ids do not fit keeps its transaction id instead, and its rows are
//!   deleted by `xmin` (the inserting transaction; a scan, but only for
//!   transactions that outgrow the cap, like a backfill). The fallback
//!   never deletes another transaction's rows: a row's `xmin` is the
//!   transaction that inserted it. It misses rows inserted in a savepoint
//!   of such a transaction (their `xmin` is the subtransaction's, which
//!   pgoutput does not send): those stay, which errs on the safe side. With
//!   `postgres.shards`, it also keeps to this shard's rows (the
//!   publication's row filter, in the DELETE): the transaction may hold
//!   rows of other shards that their relays have not published yet. At
//!   most [`MAX_HELD_TXNS`] transactions wait; beyond that their rows are
//!   left in the table and counted (`outbox_relay_cleanup_skipped_rows_total`).
//! * Never slows the stream: released rows go to the deleter through a
//!   bounded channel with `try_send`; when the deleter lags they wait in
//!   the session for the next hand-over, up to [`MAX_HELD_IDS`] ids; beyond
//!   that (a slow or unreachable database) they are left in the table and
//!   counted, like rows the deleter could not delete. Rows left behind are safe to delete
//!   by hand once `outbox-relay status` shows the relay past them.
//! * Rows not visible yet are not given up. The walsender sends a
//!   transaction once its commit is flushed, a moment before other
//!   sessions see it, so a DELETE of confirmed rows can find nothing. Each
//!   DELETE returns what it deleted and what it did not find is looked for
//!   again, backing off, for [`LOOK_AGAIN_FOR`]; then it is taken as deleted
//!   by something else and counted (`outbox_relay_cleanup_not_found_rows_total`).
//! * A crash loses what was released and not yet deleted (at most a few
//!   batches): those rows stay, and are counted by nobody. Rows the relay
//!   had not confirmed come back with the replay and are deleted then.

use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backoff::{Backoff, Incident};
use crate::lsn::Lsn;
use crate::metrics as m;
use crate::outbox::shard::Shard;
use postgres_protocol::escape::{
    escape_identifier as quote_ident, escape_literal as quote_literal,
};

use crate::replication::{ErrorKind, ReplicationSettings, SqlConnection};
use tokio_postgres::error::SqlState;

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
/// Ids per DELETE statement, at most.
const BATCH_IDS: usize = 1_000;
/// Released batches waiting for the deleter, at most.
const QUEUE: usize = 256;
/// First wait before trying a failed DELETE again.
const RETRY_FIRST_WAIT: Duration = Duration::from_millis(200);
/// Longest wait between tries (the waits grow up to it, [`Backoff`]).
const RETRY_MAX_WAIT: Duration = Duration::from_secs(5);
/// How long one batch is tried through failures that pass (a restart or
/// failover of the server, its connection slots full, a terminated
/// session, a statement timeout) before its rows are left in the table. A
/// failure that does not pass by itself (no DELETE privilege, the table
/// gone) leaves them at once.
const RETRY_FOR: Duration = Duration::from_secs(120);
/// First wait before looking again for confirmed rows a DELETE did not
/// find. PostgreSQL sends a transaction to the slot once its commit is
/// flushed, a moment before the transaction is visible to other sessions;
/// a relay that publishes and confirms within that moment deletes rows its
/// DELETE cannot see yet. So rows not found are looked for again.
const LOOK_AGAIN_FIRST_WAIT: Duration = Duration::from_millis(50);
/// How long rows not found are looked for (the waits grow up to
/// [`RETRY_MAX_WAIT`]) before they are taken as deleted by something else.
const LOOK_AGAIN_FOR: Duration = Duration::from_secs(30);
/// Longest a DELETE may run.
const STATEMENT_TIMEOUT: &str = "30s";

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

/// Where the deleter deletes.
#[derive(Debug, Clone)]
pub struct DeleterSettings {
    /// An ordinary session with the relay's conninfo (the role needs DELETE
    /// on the table).
    pub connection: ReplicationSettings,
    /// The outbox table, `(schema, name)`.
    pub table: (String, String),
    /// Its id column.
    pub id_column: String,
    /// Its aggregate id column, which the shards split the table by.
    pub aggregate_id_column: String,
    /// This relay's shard: a delete by `xmin` keeps to its rows, since the
    /// inserting transaction may also hold rows that another shard's relay
    /// has not published yet.
    pub shard: Shard,
}

/// The session's hand-off to the deleter.
#[derive(Debug, Clone)]
pub struct Deleter {
    tx: mpsc::Sender<Deletable>,
    /// Released rows the deleter could not take yet (its queue was full):
    /// they go with the next hand-over.
    pending: Deletable,
}

impl Deleter {
    /// Hands released rows over, with any that waited, never waiting
    /// itself: when the deleter's queue is full they wait for the next
    /// hand-over (every confirmed position, every status update). Only
    /// beyond [`MAX_HELD_IDS`] waiting ids, or once the deleter is gone,
    /// are rows left in the table and counted.
    pub fn hand_over(&mut self, rows: Option<Deletable>) {
        if let Some(rows) = rows {
            self.pending.ids.extend(rows.ids);
            self.pending.xids.extend(rows.xids);
        }
        if self.pending.is_empty() {
            return;
        }
        match self.tx.try_send(std::mem::take(&mut self.pending)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(rows)) if rows.ids.len() <= MAX_HELD_IDS => {
                self.pending = rows;
            }
            Err(
                mpsc::error::TrySendError::Full(rows) | mpsc::error::TrySendError::Closed(rows),
            ) => {
                metrics::counter!(m::CLEANUP_SKIPPED_ROWS)
                    .increment(rows.ids.len() as u64 + rows.xids.len() as u64);
            }
        }
    }
}

impl Drop for Deleter {
    /// A session that ends hands over what waited, once more.
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.hand_over(None);
        }
        let left = self.pending.ids.len() as u64 + self.pending.xids.len() as u64;
        if left > 0 {
            metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(left);
        }
    }
}

/// Starts the deleter. It ends, after deleting what it was handed, once
/// every [`Deleter`] clone is dropped.
pub fn spawn_deleter(settings: DeleterSettings) -> (Deleter, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let deleter = Deleter {
        tx,
        pending: Deletable::default(),
    };
    (deleter, tokio::spawn(delete_loop(settings, rx)))
}

/// Confirmed rows a DELETE did not find, looked for again.
#[derive(Debug)]
struct Missed {
    rows: Deletable,
    /// First not found.
    since: Instant,
    /// Next look.
    next: Instant,
    /// The waits between looks.
    backoff: Backoff,
}

/// The deleter's state across batches.
struct Deleting {
    settings: DeleterSettings,
    connection: Option<SqlConnection>,
    /// The failing DELETEs since the last success, for the log.
    incident: Incident,
    missed: Vec<Missed>,
}

async fn delete_loop(settings: DeleterSettings, mut rx: mpsc::Receiver<Deletable>) {
    let mut d = Deleting {
        settings,
        connection: None,
        incident: Incident::default(),
        missed: Vec::new(),
    };
    let mut open = true;
    while open || !d.missed.is_empty() {
        let mut fresh = Deletable::default();
        if open {
            let next_look = d.missed.iter().map(|m| m.next).min();
            let got = match next_look {
                None => rx.recv().await,
                Some(at) => tokio::select! {
                    got = rx.recv() => got,
                    () = tokio::time::sleep_until(at) => Some(Deletable::default()),
                },
            };
            match got {
                Some(rows) => fresh = rows,
                None => open = false,
            }
            // Whatever else is waiting joins this batch.
            while fresh.ids.len() < BATCH_IDS
                && let Ok(rows) = rx.try_recv()
            {
                fresh.ids.extend(rows.ids);
                fresh.xids.extend(rows.xids);
            }
        }
        // Rows not found before whose next look is due; once the session
        // is gone, every one gets its last look now.
        let now = Instant::now();
        let (due, later): (Vec<Missed>, Vec<Missed>) = std::mem::take(&mut d.missed)
            .into_iter()
            .partition(|m| !open || m.next <= now);
        d.missed = later;
        for m in due {
            d.delete(m.rows, Some((m.since, m.backoff)), !open).await;
        }
        d.delete(fresh, None, !open).await;
    }
    if let Some(connection) = d.connection {
        connection.close().await;
    }
}

impl Deleting {
    /// Deletes `rows` in batches. What a DELETE did not find is looked for
    /// again (`before`: since when, and the waits between looks) until
    /// [`LOOK_AGAIN_FOR`] has passed, or not at all when `last` (the relay
    /// is stopping).
    async fn delete(&mut self, rows: Deletable, before: Option<(Instant, Backoff)>, last: bool) {
        let mut not_found = Deletable::default();
        for batch in rows.ids.chunks(BATCH_IDS) {
            let sql = delete_ids_sql(&self.settings, batch);
            let found = self.run_batch(&sql, batch.len()).await;
            not_found.ids.extend(not_deleted(batch, found));
        }
        if !rows.xids.is_empty() {
            let sql = delete_xids_sql(&self.settings, &rows.xids);
            let found = self.run_batch(&sql, rows.xids.len()).await;
            not_found.xids.extend(not_deleted(&rows.xids, found));
        }
        if not_found.is_empty() {
            return;
        }
        let count = not_found.ids.len() + not_found.xids.len();
        let now = Instant::now();
        let (since, mut backoff) =
            before.unwrap_or_else(|| (now, Backoff::new(LOOK_AGAIN_FIRST_WAIT, RETRY_MAX_WAIT, 3)));
        let wait = backoff.next_delay();
        let gives_up = last
            || now.duration_since(since) + wait > LOOK_AGAIN_FOR
            || self.missed_count() + count > MAX_HELD_IDS;
        if gives_up {
            metrics::counter!(m::CLEANUP_NOT_FOUND_ROWS).increment(count as u64);
            tracing::info!(
                rows = count,
                "confirmed outbox rows not found for deletion (deleted by something else, \
                 or by this relay before a restart replayed them); no longer looked for"
            );
            return;
        }
        self.missed.push(Missed {
            rows: not_found,
            since,
            next: now + wait,
            backoff,
        });
    }

    /// Ids and xids being looked for again.
    fn missed_count(&self) -> usize {
        self.missed
            .iter()
            .map(|m| m.rows.ids.len() + m.rows.xids.len())
            .sum()
    }

    /// Runs one batch's DELETE, trying again through failures that pass for
    /// up to [`RETRY_FOR`], backing off; the keys it deleted (ids, or xids
    /// with a row deleted), or `None` when the batch's rows are left in the
    /// table (`rows` of them, for the log). Each retry is counted
    /// (`outbox_relay_reconnects_total{reason="cleanup_delete"}`); a run of
    /// failures is logged when it starts, every [`Incident::LOG_EVERY`]
    /// while it lasts, when a batch is given up, and at info when it ends.
    async fn run_batch(&mut self, sql: &str, rows: usize) -> Option<Vec<String>> {
        let started = Instant::now();
        let mut backoff = Backoff::new(RETRY_FIRST_WAIT, RETRY_MAX_WAIT, 3);
        loop {
            let e = match run(&self.settings, &mut self.connection, sql).await {
                Ok(result) => {
                    if let Some(end) = self.incident.recovered(Instant::now()) {
                        tracing::info!(
                            table = %table_name(&self.settings),
                            failures = end.failures,
                            lasted_secs = end.lasted.as_secs(),
                            "deleting confirmed outbox rows works again"
                        );
                    }
                    let deleted: u64 = result.iter().map(|(_, n)| n).sum();
                    metrics::counter!(m::CLEANUP_DELETED_ROWS).increment(deleted);
                    return Some(result.into_iter().map(|(key, _)| key).collect());
                }
                Err(e) => e,
            };
            self.connection = None;
            let wait = backoff.next_delay();
            let passes = e.kind() == ErrorKind::Transient;
            let gives_up = !passes || started.elapsed() + wait > RETRY_FOR;
            let logs = self.incident.failed(Instant::now());
            // A failure that does not pass (no privilege, the table gone)
            // fails every batch: logged once per incident like the rest.
            // A batch given up after retrying is always said.
            if logs.is_some() || (gives_up && passes) {
                let table = table_name(&self.settings);
                let privilege = e.sqlstate() == Some(SqlState::INSUFFICIENT_PRIVILEGE.code());
                if privilege {
                    tracing::warn!(
                        table = %table,
                        error = %e,
                        "cannot delete confirmed outbox rows; they stay in the table. The relay's \
                         role needs DELETE on it: GRANT DELETE ON {table} TO <relay role>"
                    );
                } else if gives_up {
                    tracing::warn!(
                        table = %table,
                        error = %e,
                        rows,
                        "cannot delete confirmed outbox rows; this batch stays in the table \
                         (outbox_relay_cleanup_skipped_rows_total counts it; rows `outbox-relay \
                         status` shows the relay past are safe to delete by hand)"
                    );
                } else {
                    tracing::warn!(
                        reason = m::reason::CLEANUP_DELETE,
                        table = %table,
                        error = %e,
                        failures = logs.map_or(0, |l| l.failures),
                        retry_for_secs = RETRY_FOR.as_secs(),
                        "cannot delete confirmed outbox rows yet; trying again, backing off"
                    );
                }
            }
            if gives_up {
                return None;
            }
            metrics::counter!(m::RECONNECTS, "reason" => m::reason::CLEANUP_DELETE).increment(1);
            tokio::time::sleep(wait).await;
        }
    }
}

/// The keys of a batch its DELETE did not find, given the keys it reported
/// deleted (as text); none when the batch was given up (`found` is `None`:
/// its rows are left in the table, and counted as skipped here).
fn not_deleted<T>(batch: &[T], found: Option<Vec<String>>) -> Vec<T>
where
    T: Clone + Eq + std::hash::Hash + std::str::FromStr,
{
    let Some(found) = found else {
        metrics::counter!(m::CLEANUP_SKIPPED_ROWS).increment(batch.len() as u64);
        return Vec::new();
    };
    let found: HashSet<T> = found.iter().filter_map(|key| key.parse().ok()).collect();
    batch
        .iter()
        .filter(|key| !found.contains(*key))
        .cloned()
        .collect()
}

/// Runs one DELETE; returns each key it reports with the rows deleted for it.
async fn run(
    settings: &DeleterSettings,
    connection: &mut Option<SqlConnection>,
    sql: &str,
) -> Result<Vec<(String, u64)>, crate::replication::ReplicationError> {
    let conn = match connection {
        Some(conn) => conn,
        None => {
            let mut conn = SqlConnection::connect_normal(&settings.connection).await?;
            conn.query(
                &format!("SET statement_timeout = '{STATEMENT_TIMEOUT}'"),
                "limiting the cleanup's statement time",
            )
            .await?;
            connection.insert(conn)
        }
    };
    let rows = conn.query(sql, "deleting confirmed outbox rows").await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let mut row = row.into_iter();
            let key = row.next()??;
            let n = row
                .next()
                .flatten()
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            Some((key, n))
        })
        .collect())
}

fn table_name(settings: &DeleterSettings) -> String {
    format!(
        "{}.{}",
        quote_ident(&settings.table.0),
        quote_ident(&settings.table.1)
    )
}

/// The statement that deletes `ids` by the id column (through its index),
/// returning the ids it deleted as text (the form pgoutput sends them in).
pub fn delete_ids_sql(settings: &DeleterSettings, ids: &[String]) -> String {
    let id = quote_ident(&settings.id_column);
    let mut list = String::new();
    for (i, value) in ids.iter().enumerate() {
        let _ = write!(
            list,
            "{}{}",
            if i == 0 { "" } else { ", " },
            quote_literal(value)
        );
    }
    format!(
        "DELETE FROM {} WHERE {id} IN ({list}) RETURNING {id}::text",
        table_name(settings)
    )
}

/// The statement that deletes the rows inserted by `xids` (by `xmin`), of
/// this shard only when the outbox is sharded (by the publication's own
/// row filter), returning each xid it deleted rows of with their count.
pub fn delete_xids_sql(settings: &DeleterSettings, xids: &[u32]) -> String {
    let list: Vec<String> = xids.iter().map(|x| format!("'{x}'::xid")).collect();
    let shard = settings
        .shard
        .filter_sql(&settings.aggregate_id_column)
        .map(|filter| format!(" AND ({filter})"))
        .unwrap_or_default();
    format!(
        "WITH d AS (DELETE FROM {} WHERE xmin IN ({}){shard} RETURNING xmin::text AS x) \
         SELECT x, count(*) FROM d GROUP BY x",
        table_name(settings),
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(d: &Deletable) -> Vec<&str> {
        d.ids.iter().map(String::as_str).collect()
    }

    #[test]
    fn rows_are_released_only_once_confirmed_past_their_commit() {
        let mut c = Collector::new();
        c.begin(10);
        c.row(Some("a"));
        c.row(Some("b"));
        c.commit(Lsn(0x200));
        c.begin(11);
        c.commit(Lsn(0x300)); // no outbox rows: nothing to hold
        c.begin(12);
        c.row(Some("c"));
        c.commit(Lsn(0x400));
        c.begin(13);
        c.row(Some("open"));
        assert_eq!(c.waiting_txns(), 2);
        assert_eq!(c.release(Lsn(0x1ff)), None, "below the first end LSN");
        assert_eq!(ids(&c.release(Lsn(0x200)).unwrap()), ["a", "b"]);
        assert_eq!(c.release(Lsn(0x3ff)), None);
        // Far past everything closed: the open transaction still waits.
        assert_eq!(ids(&c.release(Lsn(0x10_000)).unwrap()), ["c"]);
        assert_eq!(c.release(Lsn(u64::MAX)), None);
        assert_eq!(c.held_ids(), 1);
        c.commit(Lsn(0x500));
        assert_eq!(ids(&c.release(Lsn(0x500)).unwrap()), ["open"]);
        assert_eq!(c.held_ids(), 0);
    }

    #[test]
    fn a_transaction_that_outgrows_the_cap_falls_back_to_its_xid() {
        let mut c = Collector::new();
        c.begin(7);
        for i in 0..MAX_HELD_IDS + 10 {
            c.row(Some(&i.to_string()));
        }
        assert_eq!(c.held_ids(), MAX_HELD_IDS);
        c.commit(Lsn(0x100));
        // The next transaction's ids do not fit either while those wait.
        c.begin(8);
        c.row(Some("x"));
        c.commit(Lsn(0x200));
        assert_eq!(c.held_ids(), MAX_HELD_IDS);
        let d = c.release(Lsn(0x100)).unwrap();
        assert_eq!((d.ids.len(), d.xids.as_slice()), (MAX_HELD_IDS, &[7][..]));
        let d = c.release(Lsn(0x200)).unwrap();
        assert_eq!((d.ids.len(), d.xids.as_slice()), (0, &[8][..]));
        // An unreadable id also falls back.
        c.begin(9);
        c.row(None);
        c.commit(Lsn(0x300));
        assert_eq!(c.release(Lsn(0x300)).unwrap().xids, [9]);
        assert_eq!(c.held_ids(), 0);
    }

    #[test]
    fn waiting_transactions_are_bounded() {
        let mut c = Collector::new();
        for i in 0..MAX_HELD_TXNS as u64 + 5 {
            c.begin(i as u32);
            c.row(Some("r"));
            c.commit(Lsn(0x100 + i));
        }
        assert_eq!(c.waiting_txns(), MAX_HELD_TXNS);
        assert_eq!(c.held_ids(), MAX_HELD_TXNS);
        let d = c.release(Lsn(u64::MAX)).unwrap();
        assert_eq!(d.ids.len(), MAX_HELD_TXNS);
        assert_eq!(c.held_ids(), 0);
    }

    #[test]
    fn a_begin_without_commit_forgets_the_open_rows() {
        // The replay after a failed session starts a new machine; within one
        // session a Begin always follows a Commit, but the count stays right.
        let mut c = Collector::new();
        c.begin(1);
        c.row(Some("a"));
        c.begin(2);
        assert_eq!(c.held_ids(), 0);
    }

    /// A row whose dead letter lost its payload is never released, in the
    /// open transaction or in one waiting for its confirmation; its
    /// transaction-mates are.
    #[test]
    fn a_kept_row_is_never_released() {
        let mut c = Collector::new();
        c.begin(1);
        c.row(Some("a"));
        c.row(Some("big"));
        c.row(Some("b"));
        c.keep("big");
        c.commit(Lsn(100));
        c.begin(2);
        c.row(Some("c"));
        c.row(Some("big2"));
        c.commit(Lsn(200));
        c.keep("big2");
        let released = c.release(Lsn(200)).expect("rows released");
        let mut ids = ids(&released);
        ids.sort_unstable();
        assert_eq!(ids, ["a", "b", "c"]);
        assert!(released.xids.is_empty());
        assert_eq!(c.held_ids(), 0);
    }

    /// Keeping a row of a transaction deleted by `xmin` (its id not among
    /// those held, or not readable) turns the `xmin` delete off: the kept
    /// row may be one of those it would delete.
    #[test]
    fn keeping_a_row_not_held_by_id_turns_off_the_xmin_delete() {
        let mut c = Collector::new();
        c.begin(7);
        c.row(Some("a"));
        c.row(None);
        c.keep("@0/0/anonymous");
        c.commit(Lsn(100));
        let released = c.release(Lsn(100)).expect("the held id is released");
        assert_eq!(ids(&released), ["a"]);
        assert!(released.xids.is_empty(), "{released:?}");
        // Without the keep, the same transaction goes by xmin.
        c.begin(8);
        c.row(Some("b"));
        c.row(None);
        c.commit(Lsn(200));
        assert_eq!(c.release(Lsn(200)).unwrap().xids, [8]);
    }

    /// Rows left on purpose (written by an earlier session) are not
    /// deleted; a transaction with nothing else is not held at all.
    #[test]
    fn rows_left_are_not_held() {
        let mut c = Collector::new();
        c.begin(1);
        c.leave();
        c.leave();
        c.commit(Lsn(100));
        assert_eq!(c.waiting_txns(), 0);
        assert_eq!(c.release(Lsn(100)), None);
    }

    #[test]
    fn the_delete_names_ids_as_literals_and_xids_by_xmin() {
        let settings = DeleterSettings {
            connection: ReplicationSettings::new(
                crate::replication::Conninfo::parse("host=h user=u").unwrap(),
                "",
                "",
            ),
            table: ("app".into(), "Out box".into()),
            id_column: "id".into(),
            aggregate_id_column: "Agg Id".into(),
            shard: Shard::default(),
        };
        let sql = delete_ids_sql(&settings, &["a'b".into(), "c".into()]);
        assert_eq!(
            sql,
            "DELETE FROM \"app\".\"Out box\" WHERE \"id\" IN ('a''b', 'c') RETURNING \"id\"::text"
        );
        let sql = delete_xids_sql(&settings, &[42, 7]);
        assert!(sql.contains("DELETE FROM \"app\".\"Out box\""), "{sql}");
        assert!(sql.contains("xmin IN ('42'::xid, '7'::xid)"), "{sql}");
        assert!(sql.contains("GROUP BY"), "{sql}");
        assert!(!sql.contains("hashtext"), "not sharded: every row: {sql}");
    }

    #[test]
    fn a_sharded_delete_by_xmin_keeps_to_the_shards_rows() {
        let settings = DeleterSettings {
            connection: ReplicationSettings::new(
                crate::replication::Conninfo::parse("host=h user=u").unwrap(),
                "",
                "",
            ),
            table: ("public".into(), "outbox".into()),
            id_column: "id".into(),
            aggregate_id_column: "aggregateid".into(),
            shard: Shard {
                shards: 2,
                shard: 1,
            },
        };
        assert_eq!(
            delete_xids_sql(&settings, &[42]),
            "WITH d AS (DELETE FROM \"public\".\"outbox\" WHERE xmin IN ('42'::xid) \
             AND (coalesce(abs(hashtext(\"aggregateid\")::bigint) % 2, 0) = 1) \
             RETURNING xmin::text AS x) SELECT x, count(*) FROM d GROUP BY x"
        );
        // The publication's filter, character for character.
        assert!(
            delete_xids_sql(&settings, &[42]).contains(&crate::admin::shards::filter_sql(
                "aggregateid",
                2,
                1
            ))
        );
        // By id, the rows are the shard's already: they came through its slot.
        assert!(!delete_ids_sql(&settings, &["a".into()]).contains("hashtext"));
    }

    #[test]
    fn rows_the_deleter_cannot_take_yet_wait_for_the_next_hand_over() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut deleter = Deleter {
            tx,
            pending: Deletable::default(),
        };
        let rows = |id: &str| Deletable {
            ids: vec![id.to_owned()],
            xids: Vec::new(),
        };
        deleter.hand_over(Some(rows("a")));
        // The queue is full: "b" waits, it is not left in the table.
        deleter.hand_over(Some(rows("b")));
        deleter.hand_over(Some(rows("c")));
        assert_eq!(rx.try_recv().unwrap().ids, ["a"]);
        assert!(rx.try_recv().is_err());
        // The next hand-over, with or without new rows, sends what waited.
        deleter.hand_over(None);
        assert_eq!(rx.try_recv().unwrap().ids, ["b", "c"]);
        deleter.hand_over(None);
        assert!(rx.try_recv().is_err(), "nothing twice");
    }
}
