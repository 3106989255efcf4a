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
//! * Values are quoted literals; bytes travel as hex, arrays as JSON.

use postgres_protocol::escape::escape_literal;

use super::store::{DEAD, EVENT, ParkedTable};
use super::{Aggregate, Place};
use crate::pg::{PgError, SqlConnection};
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

fn shape(conn: &SqlConnection, action: &'static str) -> PgError {
    PgError::Protocol {
        target: conn.target().to_owned(),
        action,
        reason: "unexpected result shape".into(),
    }
}

/// Every live head, oldest first, with how many rows wait behind it.
///
/// # Errors
/// The connection's.
pub async fn live_heads(
    conn: &mut SqlConnection,
    table: &ParkedTable,
) -> Result<Vec<LiveHead>, PgError> {
    const ACTION: &str = "reading the parked aggregates";
    let t = table.quoted();
    let sql = format!(
        "SELECT h.id, h.aggregatetype, h.aggregateid, h.event_id, coalesce(h.reason, ''), \
                (SELECT count(*) FROM {t} q WHERE q.aggregatetype = h.aggregatetype \
                   AND q.aggregateid = h.aggregateid AND q.kind IN ('{EVENT}', '{DEAD}')), \
                extract(epoch FROM now() - h.parked_at)::float8 \
         FROM {t} h WHERE h.kind = 'HEAD' AND h.released_at IS NULL \
         ORDER BY h.parked_at, h.id"
    );
    let rows = conn.query(&sql, ACTION).await?;
    let mut heads = Vec::with_capacity(rows.len());
    for row in rows {
        let text = |i: usize| row.get(i).cloned().flatten();
        let (Some(id), Some(aggregatetype), Some(aggregateid), Some(event_id), Some(waiting)) = (
            text(0).and_then(|v| v.parse().ok()),
            text(1),
            text(2),
            text(3),
            text(5).and_then(|v| v.parse().ok()),
        ) else {
            return Err(shape(conn, ACTION));
        };
        heads.push(LiveHead {
            row: id,
            aggregatetype,
            aggregateid,
            event_id,
            reason: text(4).unwrap_or_default(),
            waiting,
            age_seconds: text(6).and_then(|v| v.parse().ok()).unwrap_or(0.0),
        });
    }
    Ok(heads)
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
    conn: &mut SqlConnection,
    table: &ParkedTable,
    row: i64,
    event_id: &str,
) -> Result<Option<Locked>, PgError> {
    let sql = format!(
        "SELECT commit_lsn::text, shard FROM {t} WHERE id = {row} AND kind = 'HEAD' \
         AND released_at IS NULL AND event_id = {id} FOR UPDATE",
        t = table.quoted(),
        id = escape_literal(event_id)
    );
    let rows = conn.query(&sql, "locking a parked head").await?;
    Ok(rows.first().and_then(|r| {
        Some(Locked {
            commit_lsn: r.first()?.as_deref()?.parse().ok()?,
            shard: r.get(1)?.as_deref()?.parse().ok()?,
        })
    }))
}

/// The slot's confirmed_flush_lsn: what the relay confirmed (`None` while
/// the slot does not exist).
///
/// # Errors
/// The connection's.
pub async fn slot_confirmed(conn: &mut SqlConnection, slot: &str) -> Result<Option<Lsn>, PgError> {
    let sql = format!(
        "SELECT confirmed_flush_lsn::text FROM pg_catalog.pg_replication_slots \
         WHERE slot_name = {}",
        escape_literal(slot)
    );
    let rows = conn
        .query(&sql, "reading the slot's confirmed position")
        .await?;
    Ok(rows
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .and_then(|v| v.parse().ok()))
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
    conn: &mut SqlConnection,
    table: &ParkedTable,
    aggregate: &Aggregate,
    limit: usize,
) -> Result<Vec<Queued>, PgError> {
    const ACTION: &str = "reading a parked queue";
    let sql = format!(
        "SELECT id, kind, event_id, coalesce(reason, ''), coalesce(sink, ''), topic, \
                encode(record_key, 'hex'), array_to_json(coalesce(header_names, '{{}}'))::text, \
                (SELECT coalesce(json_agg(encode(v, 'hex') ORDER BY o), '[]')::text \
                   FROM unnest(header_values) WITH ORDINALITY u(v, o)), \
                encode(coalesce(body, ''::bytea), 'hex'), commit_lsn::text AS lsn_text, position \
         FROM {t} q WHERE aggregatetype = {at} AND aggregateid = {ai} \
           AND kind IN ('{EVENT}', '{DEAD}') ORDER BY q.commit_lsn, q.position LIMIT {limit}",
        t = table.quoted(),
        at = escape_literal(&aggregate.aggregate_type),
        ai = escape_literal(&aggregate.aggregate_id),
    );
    let rows = conn.query(&sql, ACTION).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let text = |i: usize| row.get(i).cloned().flatten();
        let parsed = (|| {
            let id: i64 = text(0)?.parse().ok()?;
            let kind = match text(1)?.as_str() {
                EVENT => Kind::Event,
                DEAD => Kind::Dead,
                _ => return None,
            };
            let names: Vec<String> = serde_json::from_str(&text(7)?).ok()?;
            let values: Vec<String> = serde_json::from_str(&text(8)?).ok()?;
            if names.len() != values.len() {
                return None;
            }
            let headers = names
                .into_iter()
                .zip(values)
                .map(|(n, v)| Some((n, hex::decode(v).ok()?)))
                .collect::<Option<Vec<_>>>()?;
            Some(Queued {
                id,
                place: Place {
                    commit_lsn: text(10)?.parse().ok()?,
                    position: text(11)?.parse().ok()?,
                },
                kind,
                event_id: text(2)?,
                reason: text(3).unwrap_or_default(),
                sink: text(4).unwrap_or_default(),
                topic: text(5),
                key: match text(6) {
                    Some(k) => Some(hex::decode(k).ok()?),
                    None => None,
                },
                headers,
                body: hex::decode(text(9)?).ok()?,
            })
        })();
        out.push(parsed.ok_or_else(|| shape(conn, ACTION))?);
    }
    Ok(out)
}

/// Deletes the rows `ids` (sent).
///
/// # Errors
/// The connection's.
pub async fn delete(
    conn: &mut SqlConnection,
    table: &ParkedTable,
    ids: &[i64],
) -> Result<(), PgError> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
    let sql = format!(
        "DELETE FROM {t} WHERE id = ANY(ARRAY[{}]::bigint[])",
        ids.join(", "),
        t = table.quoted()
    );
    conn.query(&sql, "deleting released rows").await.map(|_| ())
}

/// Marks the head row `row` released: its aggregate is live again.
///
/// # Errors
/// The connection's.
pub async fn release(
    conn: &mut SqlConnection,
    table: &ParkedTable,
    row: i64,
) -> Result<(), PgError> {
    let sql = format!(
        "UPDATE {t} SET released_at = now() WHERE id = {row}",
        t = table.quoted()
    );
    conn.query(&sql, "releasing a parked head")
        .await
        .map(|_| ())
}

/// Makes the DEAD row `dead` the head of its aggregate, in place of the
/// locked head row `head` (see the module header): the head row takes the
/// DEAD row's dead letter, the DEAD row becomes the released tombstone of
/// the head's. The head's place goes through a negative position first: a
/// place is unique, checked row by row.
///
/// # Errors
/// The connection's; either row missing.
pub async fn promote(
    conn: &mut SqlConnection,
    table: &ParkedTable,
    head: i64,
    dead: i64,
) -> Result<(), PgError> {
    const ACTION: &str = "making a DEAD row the head";
    let t = table.quoted();
    let read = format!(
        "SELECT id, event_id, coalesce(reason, ''), shard, commit_lsn::text, position, \
                parked_at::text FROM {t} WHERE id IN ({head}, {dead})"
    );
    let rows = conn.query(&read, ACTION).await?;
    let values = |id: i64| -> Option<String> {
        let row = rows
            .iter()
            .find(|r| r.first().cloned().flatten() == Some(id.to_string()))?;
        let text = |i: usize| row.get(i).cloned().flatten();
        Some(format!(
            "event_id = {}, reason = {}, shard = {}, commit_lsn = {}::pg_lsn, position = {}, \
             parked_at = {}::timestamptz",
            escape_literal(&text(1)?),
            escape_literal(&text(2)?),
            text(3)?.parse::<i64>().ok()?,
            escape_literal(&text(4)?),
            text(5)?.parse::<i64>().ok()?,
            escape_literal(&text(6)?),
        ))
    };
    let (Some(of_head), Some(of_dead)) = (values(head), values(dead)) else {
        return Err(shape(conn, ACTION));
    };
    let steps = format!(
        "UPDATE {t} SET position = -1 - position WHERE id = {head}; \
         UPDATE {t} SET kind = 'HEAD', released_at = now(), {of_head}, sink = NULL, \
                topic = NULL, record_key = NULL, header_names = NULL, header_values = NULL, \
                body = NULL WHERE id = {dead}; \
         UPDATE {t} SET {of_dead} WHERE id = {head}"
    );
    conn.query(&steps, ACTION).await.map(|_| ())
}

/// Deletes the released heads of shard `shard`, read through `slot`, that
/// can never be replayed (their commit is below the slot's
/// confirmed_flush_lsn); how many. None while the slot does not exist.
/// Only this shard's: another shard's slot may not have passed them yet.
///
/// # Errors
/// The connection's.
pub async fn forget_tombstones(
    conn: &mut SqlConnection,
    table: &ParkedTable,
    (shard, slot): (u32, &str),
) -> Result<u64, PgError> {
    let sql = format!(
        "WITH gone AS (DELETE FROM {t} WHERE kind = 'HEAD' AND released_at IS NOT NULL \
           AND shard = {shard} \
           AND commit_lsn < (SELECT confirmed_flush_lsn FROM pg_catalog.pg_replication_slots \
                             WHERE slot_name = {slot}) RETURNING 1) \
         SELECT count(*) FROM gone",
        t = table.quoted(),
        slot = escape_literal(slot)
    );
    let rows = conn.query(&sql, "forgetting released heads").await?;
    Ok(rows
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}
