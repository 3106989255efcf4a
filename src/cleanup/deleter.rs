//! The deleter: a background task that deletes released rows in batches
//! on an ordinary SQL connection, looking again for rows not visible yet
//! and retrying through failures that pass.
//!
//! Its two DELETEs are prepared once per session and run with the ids and
//! xids as array parameters: the ids in text format, typed by the server as
//! the id column's array type (the column is the user's: `uuid`, `bigint`,
//! `text`...), so `id = ANY($1)` still goes through the column's index.

use std::collections::HashSet;
use std::time::Duration;

use postgres_protocol::escape::escape_identifier;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::Statement;
use tokio_postgres::error::SqlState;

use crate::backoff::{Backoff, Incident};
use crate::metrics as m;
use crate::outbox::shard::Shard;
use crate::pg::{ConnectSettings, ErrorKind, PgClient, PgError, TextArray, qualified};

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
/// Longest a DELETE may run (a `statement_timeout` value).
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
    connection: Option<Session>,
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
    // Dropping the session ends it (tokio-postgres says goodbye).
    drop(d.connection);
}

impl Deleting {
    /// Deletes `rows` in batches. What a DELETE did not find is looked for
    /// again (`before`: since when, and the waits between looks) until
    /// [`LOOK_AGAIN_FOR`] has passed, or not at all when `last` (the relay
    /// is stopping).
    async fn delete(&mut self, rows: Deletable, before: Option<(Instant, Backoff)>, last: bool) {
        let mut not_found = Deletable::default();
        for batch in rows.ids.chunks(BATCH_IDS) {
            let found = self.run_batch(Batch::Ids(batch)).await;
            not_found.ids.extend(not_deleted(batch, found));
        }
        if !rows.xids.is_empty() {
            let batch = Batch::Xids {
                xids: &rows.xids,
                keep: &rows.keep,
            };
            let found = self.run_batch(batch).await;
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
    /// table (the batch's keys, counted for the log). Each retry is counted
    /// (`outbox_relay_reconnects_total{reason="cleanup_delete"}`); a run of
    /// failures is logged when it starts, every [`Incident::LOG_EVERY`]
    /// while it lasts, when a batch is given up, and at info when it ends.
    async fn run_batch(&mut self, batch: Batch<'_>) -> Option<Vec<String>> {
        let rows = batch.len();
        let started = Instant::now();
        let mut backoff = Backoff::new(RETRY_FIRST_WAIT, RETRY_MAX_WAIT, 3);
        loop {
            let e = match run(&self.settings, &mut self.connection, batch).await {
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

/// One DELETE's rows: ids of the id column, or the transactions whose rows
/// go by `xmin`, sparing the ids in `keep`.
#[derive(Debug, Clone, Copy)]
enum Batch<'a> {
    Ids(&'a [String]),
    Xids { xids: &'a [u32], keep: &'a [String] },
}

impl Batch<'_> {
    /// Its keys (ids or xids), for the log.
    fn len(self) -> usize {
        match self {
            Batch::Ids(ids) => ids.len(),
            Batch::Xids { xids, .. } => xids.len(),
        }
    }
}

/// The deleter's session: its DELETEs prepared once.
struct Session {
    client: PgClient,
    by_ids: Statement,
    by_xids: Statement,
}

impl Session {
    async fn open(settings: &DeleterSettings) -> Result<Session, PgError> {
        let client = PgClient::connect(&settings.connection).await?;
        client
            .execute(
                "SELECT set_config('statement_timeout', $1, false)",
                &[&STATEMENT_TIMEOUT],
            )
            .await
            .map_err(|e| client.error("limiting the cleanup's statement time", e))?;
        let prepare = async |sql: String| {
            client
                .prepare(&sql)
                .await
                .map_err(|e| client.error("preparing the cleanup's DELETE", e))
        };
        let by_ids = prepare(delete_ids_sql(settings)).await?;
        let by_xids = prepare(delete_xids_sql(settings)).await?;
        Ok(Session {
            client,
            by_ids,
            by_xids,
        })
    }
}

/// Runs one DELETE; returns each key it reports with the rows deleted for it.
async fn run(
    settings: &DeleterSettings,
    connection: &mut Option<Session>,
    batch: Batch<'_>,
) -> Result<Vec<(String, u64)>, PgError> {
    let session = match connection {
        Some(session) => session,
        None => connection.insert(Session::open(settings).await?),
    };
    let action = "deleting confirmed outbox rows";
    let client = &session.client;
    match batch {
        Batch::Ids(ids) => {
            let rows = client
                .query(&session.by_ids, &[&TextArray(ids)])
                .await
                .map_err(|e| client.error(action, e))?;
            rows.iter()
                .map(|row| Ok((row.try_get::<_, String>(0)?, 1)))
                .collect::<Result<_, tokio_postgres::Error>>()
                .map_err(|e| client.error(action, e))
        }
        Batch::Xids { xids, keep } => {
            let xids: Vec<String> = xids.iter().map(u32::to_string).collect();
            let rows = client
                .query(&session.by_xids, &[&TextArray(&xids), &TextArray(keep)])
                .await
                .map_err(|e| client.error(action, e))?;
            rows.iter()
                .map(|row| {
                    let count: i64 = row.try_get(1)?;
                    Ok((row.try_get::<_, String>(0)?, count.unsigned_abs()))
                })
                .collect::<Result<_, tokio_postgres::Error>>()
                .map_err(|e| client.error(action, e))
        }
    }
}

fn table_name(settings: &DeleterSettings) -> String {
    qualified(&settings.table.0, &settings.table.1)
}

/// The statement that deletes the ids in `$1` (an array of the id column's
/// type) by the id column (through its index), returning the ids it deleted
/// as text (the form pgoutput sends them in).
pub fn delete_ids_sql(settings: &DeleterSettings) -> String {
    let id = escape_identifier(&settings.id_column);
    format!(
        "DELETE FROM {} WHERE {id} = ANY($1) RETURNING {id}::text",
        table_name(settings)
    )
}

/// The statement that deletes the rows inserted by the transactions in `$1`
/// (`xid[]`, by `xmin`) except those whose id is in `$2` (rows left in the
/// table on purpose; an empty array spares none), of this shard only when
/// the outbox is sharded (by the publication's own row filter, written as
/// in the publication: its shard numbers are the config's, not values the
/// statement is run with), returning each xid it deleted rows of with
/// their count.
pub fn delete_xids_sql(settings: &DeleterSettings) -> String {
    let shard = settings
        .shard
        .filter_sql(&settings.aggregate_id_column)
        .map(|filter| format!(" AND ({filter})"))
        .unwrap_or_default();
    // A row whose id is null is spared too while any is kept (`<> ALL` is
    // not true for it): it stays, which errs on the safe side.
    format!(
        "WITH d AS (DELETE FROM {} WHERE xmin = ANY($1::xid[]) AND {} <> ALL($2){shard} \
         RETURNING xmin::text AS x) SELECT x, count(*) FROM d GROUP BY x",
        table_name(settings),
        escape_identifier(&settings.id_column),
    )
}
