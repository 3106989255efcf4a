//! The deleter: a background task that deletes released rows in batches
//! on an ordinary SQL connection, looking again for rows not visible yet
//! and retrying through failures that pass.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Duration;

use postgres_protocol::escape::{
    escape_identifier as quote_ident, escape_literal as quote_literal,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::error::SqlState;

use crate::backoff::{Backoff, Incident};
use crate::events;
use crate::metrics as m;
use crate::outbox::shard::Shard;
use crate::pg::{ConnectSettings, ErrorKind, SqlConnection};

use super::collector::{Deletable, MAX_HELD_IDS};

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

/// Where the deleter deletes.
#[derive(Debug, Clone)]
pub struct DeleterSettings {
    /// An ordinary session with the relay's conninfo (the role needs DELETE
    /// on the table).
    pub connection: ConnectSettings,
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
    pub(super) tx: mpsc::Sender<Deletable>,
    /// Released rows the deleter could not take yet (its queue was full):
    /// they go with the next hand-over.
    pub(super) pending: Deletable,
}

impl Deleter {
    /// Hands released rows over, with any that waited, never waiting
    /// itself: when the deleter's queue is full they wait for the next
    /// hand-over (every confirmed position, every status update). Only
    /// beyond [`MAX_HELD_IDS`] waiting ids, or once the deleter is gone,
    /// are rows left in the table and counted.
    pub fn hand_over(&mut self, rows: Option<Deletable>) {
        if let Some(rows) = rows {
            self.pending.extend(rows);
        }
        if self.pending.is_empty() {
            return;
        }
        match self.tx.try_send(std::mem::take(&mut self.pending)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(rows)) if rows.held_ids() <= MAX_HELD_IDS => {
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
                fresh.extend(rows);
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
            let sql = delete_xids_sql(&self.settings, &rows.xids, &rows.keep);
            let found = self.run_batch(&sql, rows.xids.len()).await;
            not_found.xids.extend(not_deleted(&rows.xids, found));
            if !not_found.xids.is_empty() {
                // Looked for again, sparing the same rows.
                not_found.keep = rows.keep;
            }
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
            || self.missed_count() + not_found.held_ids() + not_found.xids.len() > MAX_HELD_IDS;
        if gives_up {
            events::CleanupRowsNotFound { rows: count }.emit();
            return;
        }
        self.missed.push(Missed {
            rows: not_found,
            since,
            next: now + wait,
            backoff,
        });
    }

    /// Ids (to delete and to spare) and xids being looked for again.
    fn missed_count(&self) -> usize {
        self.missed
            .iter()
            .map(|m| m.rows.held_ids() + m.rows.xids.len())
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
                        events::CleanupWorks {
                            table: &table_name(&self.settings),
                            end,
                        }
                        .emit();
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
                    events::CleanupRefused {
                        table: &table,
                        error: &e,
                    }
                    .emit();
                } else if gives_up {
                    events::CleanupBatchSkipped {
                        table: &table,
                        error: &e,
                        rows,
                    }
                    .emit();
                } else {
                    events::CleanupRetrying {
                        table: &table,
                        error: &e,
                        failures: logs.map_or(0, |l| l.failures),
                        retry_for: RETRY_FOR,
                    }
                    .emit();
                }
            }
            if gives_up {
                return None;
            }
            events::CleanupRetrying::count();
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
) -> Result<Vec<(String, u64)>, crate::pg::PgError> {
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
    format!(
        "DELETE FROM {} WHERE {id} IN ({}) RETURNING {id}::text",
        table_name(settings),
        literals(ids)
    )
}

/// The statement that deletes the rows inserted by `xids` (by `xmin`)
/// except those whose id is in `keep` (rows left in the table on purpose),
/// of this shard only when the outbox is sharded (by the publication's own
/// row filter), returning each xid it deleted rows of with their count.
pub fn delete_xids_sql(settings: &DeleterSettings, xids: &[u32], keep: &[String]) -> String {
    let list: Vec<String> = xids.iter().map(|x| format!("'{x}'::xid")).collect();
    let shard = settings
        .shard
        .filter_sql(&settings.aggregate_id_column)
        .map(|filter| format!(" AND ({filter})"))
        .unwrap_or_default();
    // A row whose id is null is spared too while any is kept (NOT IN is
    // not true for it): it stays, which errs on the safe side.
    let spared = if keep.is_empty() {
        String::new()
    } else {
        format!(
            " AND {} NOT IN ({})",
            quote_ident(&settings.id_column),
            literals(keep)
        )
    };
    format!(
        "WITH d AS (DELETE FROM {} WHERE xmin IN ({}){spared}{shard} \
         RETURNING xmin::text AS x) SELECT x, count(*) FROM d GROUP BY x",
        table_name(settings),
        list.join(", ")
    )
}

/// `values` as a comma-separated list of SQL literals.
fn literals(values: &[String]) -> String {
    let mut list = String::new();
    for (i, value) in values.iter().enumerate() {
        let _ = write!(
            list,
            "{}{}",
            if i == 0 { "" } else { ", " },
            quote_literal(value)
        );
    }
    list
}
