//! The SQL of the parking table (`sql/outbox_parked.sql`), on the relay's
//! plain SQL connection (simple queries, values as quoted literals, as the
//! delivery table's: `escape_literal` is right whatever the session's
//! `standard_conforming_strings`).
//!
//! The relay's statements:
//! * [`heads`]: the live heads at session start, before the first event is
//!   decided;
//! * [`write`]: a batch of [`Request`]s in one transaction, in order, under
//!   the shared lock of each aggregate's live head;
//! * [`stats`]: the parked aggregates and events, for the gauges, `status`
//!   and /health.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use postgres_protocol::escape::escape_literal;

use super::{Aggregate, Head, Outcome, Parcel, Place, Request};
use crate::pg::{PgError, SqlConnection};
use pgoutput::lsn::Lsn;

/// Row kinds of the table.
pub const HEAD: &str = "HEAD";
pub const EVENT: &str = "EVENT";
pub const DEAD: &str = "DEAD";
/// The `sink` of an event bound for Kafka.
pub const KAFKA_SINK: &str = "kafka";

/// Longest `reason` kept.
const MAX_REASON_LEN: usize = 500;

/// The parking table, `(schema, name)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedTable {
    pub schema: String,
    pub name: String,
}

impl Default for ParkedTable {
    fn default() -> Self {
        ParkedTable {
            schema: "public".to_owned(),
            name: "outbox_parked".to_owned(),
        }
    }
}

impl ParkedTable {
    /// `"schema"."name"`, quoted for SQL text.
    pub fn quoted(&self) -> String {
        crate::pg::qualified(&self.schema, &self.name)
    }

    /// The table's SQL with its name: the file's `outbox_parked` (table and
    /// index name prefix) becomes this table's.
    pub fn create_sql(&self) -> String {
        crate::pg::renamed_table_sql(
            include_str!("../../sql/outbox_parked.sql"),
            "outbox_parked",
            &self.schema,
            &self.name,
        )
    }
}

/// The live heads of every aggregate: what is parked when a session starts.
/// Their number is that of parked aggregates (not of parked events).
///
/// # Errors
/// The connection's.
pub async fn heads(conn: &mut SqlConnection, table: &ParkedTable) -> Result<Vec<Head>, PgError> {
    let sql = format!(
        "SELECT aggregatetype, aggregateid, event_id, commit_lsn::text, position \
         FROM {t} WHERE kind = 'HEAD' AND released_at IS NULL",
        t = table.quoted()
    );
    let rows = conn.query(&sql, "read the parked aggregates").await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let text = |i: usize| r.get(i).cloned().flatten().unwrap_or_default();
            Some(Head {
                aggregate: Aggregate::new(text(0), text(1)),
                event_id: text(2),
                place: Place {
                    commit_lsn: text(3).parse::<Lsn>().ok()?,
                    position: text(4).parse().ok()?,
                },
            })
        })
        .collect())
}

/// Commits `requests`, in order, in one transaction, and says for each
/// whether it is parked or its aggregate was released (then the event goes
/// out now). `sinks`: the webhook sink names, by index.
///
/// # Errors
/// The connection's; the transaction is then rolled back whole (nothing
/// reported, the same batch goes again).
pub async fn write(
    conn: &mut SqlConnection,
    table: &ParkedTable,
    shard: u32,
    sinks: &[String],
    requests: &[Request],
) -> Result<Vec<Outcome>, PgError> {
    let t = table.quoted();
    let aggregates: HashSet<&Aggregate> = requests.iter().map(Request::aggregate).collect();
    let mut sql = format!(
        "BEGIN; SELECT aggregatetype, aggregateid, commit_lsn::text, position, id FROM {t} \
         WHERE kind = 'HEAD' AND released_at IS NULL AND (aggregatetype, aggregateid) IN ("
    );
    for (i, a) in aggregates.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        let _ = write!(
            sql,
            "({}, {})",
            escape_literal(&a.aggregate_type),
            escape_literal(&a.aggregate_id)
        );
    }
    sql.push_str(") FOR SHARE");
    let result = write_locked(conn, table, shard, sinks, requests, &sql).await;
    if result.is_err() {
        // The connection is dropped by the caller after an error; a
        // statement error leaves the transaction aborted until then.
        let _ = conn.query("ROLLBACK", "roll back a parking batch").await;
    }
    result
}

async fn write_locked(
    conn: &mut SqlConnection,
    table: &ParkedTable,
    shard: u32,
    sinks: &[String],
    requests: &[Request],
    lock_sql: &str,
) -> Result<Vec<Outcome>, PgError> {
    let t = table.quoted();
    let rows = conn.query(lock_sql, "lock the parked heads").await?;
    // The live head of each aggregate of the batch: its place and row.
    let mut live: HashMap<Aggregate, (Place, i64)> = rows
        .into_iter()
        .filter_map(|r| {
            let text = |i: usize| r.get(i).cloned().flatten().unwrap_or_default();
            let place = Place {
                commit_lsn: text(2).parse::<Lsn>().ok()?,
                position: text(3).parse().ok()?,
            };
            Some((
                Aggregate::new(text(0), text(1)),
                (place, text(4).parse().ok()?),
            ))
        })
        .collect();
    let mut outcomes = Vec::with_capacity(requests.len());
    let mut inserts = String::new();
    for request in requests {
        match request {
            Request::Head {
                aggregate,
                event_id,
                reason,
                place,
            } => {
                // Flush what is pending first: a head's insert is decided
                // from its answer.
                if !inserts.is_empty() {
                    conn.query(&std::mem::take(&mut inserts), "park events")
                        .await?;
                }
                let head = live.get(aggregate).copied();
                let insert = |kind: &str| {
                    format!(
                        "INSERT INTO {t} (aggregatetype, aggregateid, event_id, kind, reason, \
                         shard, commit_lsn, position) VALUES ({}, {}, {}, {}, {}, {shard}, \
                         {}::pg_lsn, {}) ON CONFLICT DO NOTHING RETURNING id",
                        escape_literal(&aggregate.aggregate_type),
                        escape_literal(&aggregate.aggregate_id),
                        escape_literal(event_id),
                        escape_literal(kind),
                        escape_literal(&clip(reason)),
                        escape_literal(&place.commit_lsn.to_string()),
                        place.position,
                    )
                };
                let mut heads = false;
                match head {
                    // The head itself, replayed.
                    Some((head, _)) if *place == head => heads = true,
                    // Parked already: the dead letter waits in the queue.
                    Some((head, _)) if *place > head => {
                        conn.query(&insert(DEAD), "park a dead letter").await?;
                    }
                    // Before the live head (a replay dead-letters what the
                    // broker refused only after that head was decided):
                    // the earliest dead letter heads the aggregate.
                    // The head keeps its row (a release waiting on its
                    // lock finds it still live): it takes this dead
                    // letter, and the one it held becomes a DEAD row in
                    // the queue. (A row already at this place, a head
                    // released since, stays as it is.)
                    Some((_, head_row)) => {
                        let inserted = conn.query(&insert(DEAD), "park a dead letter").await?;
                        let row = inserted
                            .first()
                            .and_then(|r| r.first().cloned().flatten())
                            .and_then(|id| id.parse::<i64>().ok());
                        if let Some(row) = row {
                            let sql = format!(
                                "UPDATE {t} SET position = -1 - position WHERE id = {head_row}; \
                                 UPDATE {t} AS d SET event_id = h.event_id, reason = h.reason, \
                                   commit_lsn = h.commit_lsn, position = -1 - h.position, \
                                   parked_at = h.parked_at \
                                   FROM {t} AS h WHERE d.id = {row} AND h.id = {head_row}; \
                                 UPDATE {t} SET event_id = {}, reason = {}, \
                                   commit_lsn = {}::pg_lsn, position = {}, \
                                   parked_at = clock_timestamp() WHERE id = {head_row}",
                                escape_literal(event_id),
                                escape_literal(&clip(reason)),
                                escape_literal(&place.commit_lsn.to_string()),
                                place.position,
                            );
                            conn.query(&sql, "park an aggregate behind an earlier dead letter")
                                .await?;
                            live.insert(aggregate.clone(), (*place, head_row));
                            heads = true;
                        }
                    }
                    None => {
                        let inserted = conn.query(&insert(HEAD), "park an aggregate").await?;
                        if let Some(row) = inserted
                            .first()
                            .and_then(|r| r.first().cloned().flatten())
                            .and_then(|id| id.parse::<i64>().ok())
                        {
                            live.insert(aggregate.clone(), (*place, row));
                            heads = true;
                        }
                    }
                }
                outcomes.push(if heads {
                    Outcome::Head
                } else {
                    Outcome::Parked
                });
            }
            Request::Event {
                aggregate,
                event_id,
                place,
                parcel,
            } => {
                if !live.contains_key(aggregate) {
                    outcomes.push(Outcome::Released(parcel.clone()));
                    continue;
                }
                let (sink, topic, key, headers, body) = match parcel {
                    Parcel::Kafka(record) => (
                        KAFKA_SINK.to_owned(),
                        Some(record.topic.clone()),
                        Some(record.key.to_vec()),
                        record
                            .headers
                            .iter()
                            .map(|(n, v)| (n.to_string(), v.to_vec()))
                            .collect::<Vec<_>>(),
                        record.value.to_vec(),
                    ),
                    Parcel::Webhook { sink, event } => (
                        sinks.get(*sink).cloned().unwrap_or_default(),
                        None,
                        Some(event.key.as_bytes().to_vec()),
                        event
                            .headers
                            .iter()
                            .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()))
                            .collect(),
                        event.body.to_vec(),
                    ),
                };
                let names: Vec<String> = headers.iter().map(|(n, _)| escape_literal(n)).collect();
                let values: Vec<String> = headers.iter().map(|(_, v)| bytea(v)).collect();
                let _ = write!(
                    inserts,
                    "INSERT INTO {t} (aggregatetype, aggregateid, event_id, kind, shard, commit_lsn, \
                     position, sink, topic, record_key, header_names, header_values, body) VALUES \
                     ({}, {}, {}, 'EVENT', {shard}, {}::pg_lsn, {}, {}, {}, {}, ARRAY[{}]::text[], \
                     ARRAY[{}]::bytea[], {}) ON CONFLICT DO NOTHING;",
                    escape_literal(&aggregate.aggregate_type),
                    escape_literal(&aggregate.aggregate_id),
                    escape_literal(event_id),
                    escape_literal(&place.commit_lsn.to_string()),
                    place.position,
                    escape_literal(&sink),
                    topic
                        .as_deref()
                        .map_or_else(|| "NULL".to_owned(), escape_literal),
                    key.as_deref().map_or_else(|| "NULL".to_owned(), bytea),
                    names.join(", "),
                    values.join(", "),
                    bytea(&body),
                );
                outcomes.push(Outcome::Parked);
            }
        }
    }
    inserts.push_str("COMMIT");
    conn.query(&inserts, "park events").await?;
    Ok(outcomes)
}

/// A bytea value, from hex text (right whatever
/// `standard_conforming_strings` says about backslashes).
fn bytea(bytes: &[u8]) -> String {
    format!("decode('{}', 'hex')", hex::encode(bytes))
}

/// The parked figures (named in `metrics`, which shows them on /health).
pub use crate::metrics::ParkedStats as Stats;

/// See [`Stats`].
///
/// # Errors
/// The connection's.
pub async fn stats(conn: &mut SqlConnection, table: &ParkedTable) -> Result<Stats, PgError> {
    let sql = format!(
        "SELECT count(*) FILTER (WHERE kind = 'HEAD' AND released_at IS NULL), \
                count(*) FILTER (WHERE kind <> 'HEAD'), \
                coalesce(extract(epoch FROM now() - min(parked_at) \
                         FILTER (WHERE kind = 'HEAD' AND released_at IS NULL)), 0) \
         FROM {t}",
        t = table.quoted()
    );
    let rows = conn.query(&sql, "count parked events").await?;
    let row = rows.into_iter().next().unwrap_or_default();
    let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
    Ok(Stats {
        aggregates: text(0).parse().unwrap_or_default(),
        events: text(1).parse().unwrap_or_default(),
        oldest_head_secs: text(2).parse().unwrap_or_default(),
    })
}

fn clip(text: &str) -> String {
    crate::pg::clip(text, MAX_REASON_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_sql_names_the_configured_table() {
        let table = ParkedTable {
            schema: "billing".into(),
            name: "held".into(),
        };
        let sql = table.create_sql();
        assert!(
            sql.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"held\""),
            "{sql}"
        );
        assert!(sql.contains("INDEX IF NOT EXISTS \"held_queue\""), "{sql}");
        assert!(sql.contains("INDEX IF NOT EXISTS \"held_heads\""), "{sql}");
        let statements: String = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect();
        assert!(!statements.contains("outbox_parked"), "{statements}");
    }

    #[test]
    fn a_bytea_literal_holds_every_byte() {
        assert_eq!(bytea(&[0, 0xff, b'\'']), "decode('00ff27', 'hex')");
    }
}
