//! The release of a parked aggregate's queue: the SQL `outbox-relay dead
//! retry | discard <head id>` runs on the parking table, one batch per
//! transaction (the sending itself is the command's, `admin::dead::parked`).
//!
//! Each batch: [`lock_head`] takes the live HEAD row `FOR UPDATE` (the
//! relay's writer parks under `FOR SHARE` of the same row, so it waits),
//! [`next_batch`] reads the rows queued after it in commit order (by place:
//! commit LSN, position, compared as `pg_lsn` (the text of the LSN sorts
//! 0/C6AA2E0 after 0/130644B8); never by id, as a replay may queue a row
//! that comes before rows already there), the command sends the EVENT rows before the
//! first DEAD row, and only those the slot is confirmed past (a replay could
//! still park one it is not), [`delete`] removes them,
//! and the transaction ends with one of:
//! * the queue empty: [`release`] sets `released_at`: the aggregate is live
//!   again, and a writer waiting on the row then finds no live head and
//!   hands its event back to be sent normally, after everything released;
//! * a DEAD row reached: [`promote`] makes it the aggregate's head;
//! * neither: commit, and the next batch.
//!
//! Invariants:
//! * The live head keeps its row when a DEAD row becomes the head:
//!   [`promote`] moves the DEAD row's dead letter (event id, reason, place,
//!   parked_at) into the locked HEAD row and turns the DEAD row into the
//!   released tombstone of the old dead letter. A writer waiting on the
//!   HEAD row rechecks that same row once the release commits (READ
//!   COMMITTED), so it finds it live and parks behind the new head. Had
//!   the DEAD row become a new HEAD row instead, the writer's statement,
//!   whose snapshot predates the change, would find no live head at all
//!   and send its event ahead of the new head.
//! * A queue is the aggregate's EVENT and DEAD rows, in commit order; all
//!   come after the head (the earliest dead letter heads the aggregate).
//! * Values are typed parameters (LSNs as `pg_lsn`, bytes as `bytea`, ids
//!   as `bigint`); only the table's quoted name is in the SQL text.

use tokio_postgres::types::PgLsn;

use super::store::{DEAD, EVENT, HEAD, ParkedTable, shard};
use super::{Aggregate, Place};
use crate::pg::{PgClient, PgError};
use pgoutput::lsn::Lsn;

/// A live head, as `dead list` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveHead {
    /// The row's id (the lock the release and the writer share).
    #[serde(skip)]
    pub row: i64,
    pub aggregatetype: String,
    pub aggregateid: String,
    /// The dead letter's event id: what `dead retry | discard` is given.
    pub event_id: String,
    pub reason: String,
    /// EVENT and DEAD rows queued behind it.
    pub waiting: i64,
    /// Seconds since it was parked.
    pub age_seconds: f64,
}

impl LiveHead {
    pub fn aggregate(&self) -> Aggregate {
        Aggregate::new(&self.aggregatetype, &self.aggregateid)
    }
}

/// The error of a statement's `action`.
fn error(client: &PgClient, action: &'static str) -> impl Fn(tokio_postgres::Error) -> PgError {
    move |e| PgError::client(client.target(), action, e)
}

/// Every live head, oldest first, with how many rows wait behind it.
///
/// # Errors
/// The connection's.
pub async fn live_heads(client: &PgClient, table: &ParkedTable) -> Result<Vec<LiveHead>, PgError> {
    let error = error(client, "reading the parked aggregates");
    let t = table.quoted();
    let sql = format!(
        "SELECT h.id, h.aggregatetype, h.aggregateid, h.event_id, coalesce(h.reason, ''), \
                (SELECT count(*) FROM {t} q WHERE q.aggregatetype = h.aggregatetype \
                   AND q.aggregateid = h.aggregateid AND q.kind IN ('{EVENT}', '{DEAD}')), \
                coalesce(extract(epoch FROM now() - h.parked_at)::float8, 0) \
         FROM {t} h WHERE h.kind = '{HEAD}' AND h.released_at IS NULL \
         ORDER BY h.parked_at, h.id"
    );
    let rows = client.query(&sql, &[]).await.map_err(&error)?;
    rows.iter()
        .map(|row| {
            Ok(LiveHead {
                row: row.try_get(0)?,
                aggregatetype: row.try_get(1)?,
                aggregateid: row.try_get(2)?,
                event_id: row.try_get(3)?,
                reason: row.try_get(4)?,
                waiting: row.try_get(5)?,
                age_seconds: row.try_get(6)?,
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(error)
}

/// The locked head: where its dead letter stands, and whose shard it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locked {
    pub commit_lsn: Lsn,
    pub shard: u32,
}

/// Inside the caller's transaction: locks the HEAD row `row` if it is
/// still the live head of dead letter `event_id` (waiting for a writer
/// that holds it shared, or another release). `None` when it is not: it
/// was released, or its aggregate moved on to another head, meanwhile.
///
/// # Errors
/// The connection's.
pub async fn lock_head(
    client: &PgClient,
    table: &ParkedTable,
    row: i64,
    event_id: &str,
) -> Result<Option<Locked>, PgError> {
    let error = error(client, "locking a parked head");
    let sql = format!(
        "SELECT commit_lsn, shard FROM {t} WHERE id = $1 AND kind = '{HEAD}' \
         AND released_at IS NULL AND event_id = $2 FOR UPDATE",
        t = table.quoted(),
    );
    let Some(locked) = client
        .query_opt(&sql, &[&row, &event_id])
        .await
        .map_err(&error)?
    else {
        return Ok(None);
    };
    let commit_lsn: PgLsn = locked.try_get(0).map_err(&error)?;
    let shard: i32 = locked.try_get(1).map_err(&error)?;
    Ok(u32::try_from(shard).ok().map(|shard| Locked {
        commit_lsn: Lsn(u64::from(commit_lsn)),
        shard,
    }))
}

/// The slot's confirmed_flush_lsn: what the relay confirmed (`None` while
/// the slot does not exist).
///
/// # Errors
/// The connection's.
pub async fn slot_confirmed(client: &PgClient, slot: &str) -> Result<Option<Lsn>, PgError> {
    let error = error(client, "reading the slot's confirmed position");
    let row = client
        .query_opt(
            "SELECT confirmed_flush_lsn FROM pg_catalog.pg_replication_slots \
             WHERE slot_name = $1::text",
            &[&slot],
        )
        .await
        .map_err(&error)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let confirmed: Option<PgLsn> = row.try_get(0).map_err(error)?;
    Ok(confirmed.map(|lsn| Lsn(u64::from(lsn))))
}

/// What a queued row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Event,
    Dead,
}

/// A row queued behind a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub id: i64,
    /// Where its event stands in the stream: the queue's order.
    pub place: Place,
    pub kind: Kind,
    pub event_id: String,
    /// DEAD: why it was dead-lettered.
    pub reason: String,
    /// EVENT: `kafka` or a webhook sink's name.
    pub sink: String,
    pub topic: Option<String>,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// Up to `limit` rows queued behind the head of `aggregate`, in commit
/// order.
///
/// # Errors
/// The connection's; a row that does not read back.
pub async fn next_batch(
    client: &PgClient,
    table: &ParkedTable,
    aggregate: &Aggregate,
    limit: usize,
) -> Result<Vec<Queued>, PgError> {
    const ACTION: &str = "reading a parked queue";
    let sql = format!(
        "SELECT id, kind, event_id, coalesce(reason, ''), coalesce(sink, ''), topic, \
                record_key, coalesce(header_names, '{{}}'), coalesce(header_values, '{{}}'), \
                coalesce(body, ''::bytea), commit_lsn, position \
         FROM {t} q WHERE aggregatetype = $1 AND aggregateid = $2 \
           AND kind IN ('{EVENT}', '{DEAD}') ORDER BY q.commit_lsn, q.position LIMIT $3",
        t = table.quoted(),
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = client
        .query(
            &sql,
            &[&aggregate.aggregate_type, &aggregate.aggregate_id, &limit],
        )
        .await
        .map_err(error(client, ACTION))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let parsed = (|| {
            let kind = match row.try_get::<_, &str>(1).ok()? {
                EVENT => Kind::Event,
                DEAD => Kind::Dead,
                _ => return None,
            };
            let names: Vec<String> = row.try_get(7).ok()?;
            let values: Vec<Vec<u8>> = row.try_get(8).ok()?;
            if names.len() != values.len() {
                return None;
            }
            let commit_lsn: PgLsn = row.try_get(10).ok()?;
            Some(Queued {
                id: row.try_get(0).ok()?,
                place: Place {
                    commit_lsn: Lsn(u64::from(commit_lsn)),
                    position: u64::try_from(row.try_get::<_, i64>(11).ok()?).ok()?,
                },
                kind,
                event_id: row.try_get(2).ok()?,
                reason: row.try_get(3).ok()?,
                sink: row.try_get(4).ok()?,
                topic: row.try_get(5).ok()?,
                key: row.try_get(6).ok()?,
                headers: names.into_iter().zip(values).collect(),
                body: row.try_get(9).ok()?,
            })
        })();
        out.push(parsed.ok_or_else(|| crate::pg::sql::unexpected_shape(client.target(), ACTION))?);
    }
    Ok(out)
}

/// Deletes the rows `ids` (sent).
///
/// # Errors
/// The connection's.
pub async fn delete(client: &PgClient, table: &ParkedTable, ids: &[i64]) -> Result<(), PgError> {
    if ids.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "DELETE FROM {t} WHERE id = ANY($1::int8[])",
        t = table.quoted()
    );
    client
        .execute(&sql, &[&ids])
        .await
        .map_err(error(client, "deleting released rows"))?;
    Ok(())
}

/// Marks the head row `row` released: its aggregate is live again.
///
/// # Errors
/// The connection's.
pub async fn release(client: &PgClient, table: &ParkedTable, row: i64) -> Result<(), PgError> {
    let sql = format!(
        "UPDATE {t} SET released_at = now() WHERE id = $1",
        t = table.quoted()
    );
    client
        .execute(&sql, &[&row])
        .await
        .map_err(error(client, "releasing a parked head"))?;
    Ok(())
}

/// Makes the DEAD row `dead` the head of its aggregate, in place of the
/// locked head row `head` (see the module header): the head row takes the
/// DEAD row's dead letter, the DEAD row becomes the released tombstone of
/// the head's. The two rows swap their dead letters (event id, reason,
/// shard, place, parked_at) in one statement, each reading the other's as
/// it was before it, with the places negated: a place is unique, checked
/// row by row, so they pass through positions no event has, and the next
/// statement turns them back.
///
/// # Errors
/// The connection's; either row missing.
pub async fn promote(
    client: &PgClient,
    table: &ParkedTable,
    head: i64,
    dead: i64,
) -> Result<(), PgError> {
    const ACTION: &str = "making a DEAD row the head";
    let t = table.quoted();
    let error = error(client, ACTION);
    let swap = format!(
        "UPDATE {t} AS x SET event_id = o.event_id, reason = o.reason, shard = o.shard, \
                commit_lsn = o.commit_lsn, position = -1 - o.position, parked_at = o.parked_at \
         FROM {t} AS o \
         WHERE x.id IN ($1, $2) AND o.id IN ($1, $2) AND o.id <> x.id"
    );
    if client
        .execute(&swap, &[&head, &dead])
        .await
        .map_err(&error)?
        != 2
    {
        return Err(crate::pg::sql::unexpected_shape(client.target(), ACTION));
    }
    let restore = format!("UPDATE {t} SET position = -1 - position WHERE id IN ($1, $2)");
    client
        .execute(&restore, &[&head, &dead])
        .await
        .map_err(&error)?;
    let tombstone = format!(
        "UPDATE {t} SET kind = '{HEAD}', released_at = now(), sink = NULL, topic = NULL, \
                record_key = NULL, header_names = NULL, header_values = NULL, body = NULL \
         WHERE id = $1"
    );
    client.execute(&tombstone, &[&dead]).await.map_err(error)?;
    Ok(())
}

/// Deletes the released heads of shard `shard`, read through `slot`, that
/// can never be replayed (their commit is below the slot's
/// confirmed_flush_lsn); how many. None while the slot does not exist.
/// Only this shard's: another shard's slot may not have passed them yet.
///
/// # Errors
/// The connection's.
pub async fn forget_tombstones(
    client: &PgClient,
    table: &ParkedTable,
    (shard, slot): (u32, &str),
) -> Result<u64, PgError> {
    let sql = format!(
        "DELETE FROM {t} WHERE kind = '{HEAD}' AND released_at IS NOT NULL \
           AND shard = $1 \
           AND commit_lsn < (SELECT confirmed_flush_lsn FROM pg_catalog.pg_replication_slots \
                             WHERE slot_name = $2::text)",
        t = table.quoted(),
    );
    client
        .execute(&sql, &[&self::shard(shard), &slot])
        .await
        .map_err(error(client, "forgetting released heads"))
}
