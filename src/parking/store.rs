//! The SQL of the parking table (`sql/outbox_parked.sql`), on a
//! [`PgClient`]: values travel as typed parameters (LSNs as `pg_lsn`, keys,
//! header values and bodies as `bytea`), never in the SQL text; only the
//! table's name is written into it, quoted once ([`ParkedTable::quoted`]).
//!
//! The relay's statements:
//! * [`heads`]: the live heads at session start, before the first event is
//!   decided;
//! * [`write`]: a batch of [`Request`]s in one transaction, in order, under
//!   the shared lock of each aggregate's live head; the events between two
//!   heads go in one `INSERT ... SELECT FROM unnest(...)` of arrays (one
//!   statement for up to a whole batch: faster than a prepared INSERT per
//!   row, see `parking::writer_batch_throughput` in the integration tests);
//! * [`stats`]: the parked aggregates and events, for the gauges, `status`
//!   and /health.

use std::collections::{HashMap, HashSet};

use tokio_postgres::Statement;
use tokio_postgres::types::{PgLsn, ToSql};

use super::{Aggregate, Head, Outcome, Parcel, Place, Request};
use crate::pg::{PgClient, PgError};
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
pub async fn heads(client: &PgClient, table: &ParkedTable) -> Result<Vec<Head>, PgError> {
    const ACTION: &str = "read the parked aggregates";
    let sql = format!(
        "SELECT aggregatetype, aggregateid, event_id, commit_lsn, position \
         FROM {t} WHERE kind = '{HEAD}' AND released_at IS NULL",
        t = table.quoted()
    );
    let rows = client
        .query(&sql, &[])
        .await
        .map_err(|e| PgError::client(client.target(), ACTION, e))?;
    rows.iter()
        .map(|r| {
            Ok(Head {
                aggregate: Aggregate::new(r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?),
                event_id: r.try_get(2)?,
                place: place(r.try_get(3)?, r.try_get(4)?),
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(|e| PgError::client(client.target(), ACTION, e))
}

/// A place as the table keeps it: the commit LSN, and the position as a
/// `bigint` (never negative outside a transaction that swaps two rows).
fn place(commit_lsn: PgLsn, position: i64) -> Place {
    Place {
        commit_lsn: Lsn(u64::from(commit_lsn)),
        position: u64::try_from(position).unwrap_or_default(),
    }
}

/// The `pg_lsn` of `lsn`.
pub fn pg_lsn(lsn: Lsn) -> PgLsn {
    PgLsn::from(lsn.as_u64())
}

/// The `bigint` of a position (a count of events in one transaction, far
/// below `i64::MAX`).
pub fn position(position: u64) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

/// The `integer` of a shard (the config keeps shards below 64).
pub fn shard(shard: u32) -> i32 {
    i32::try_from(shard).unwrap_or(i32::MAX)
}

/// The statements every batch runs, prepared once per connection: a batch
/// then costs the server no parsing, and each statement one round trip.
pub struct Prepared {
    statements: Statements,
    lock: Statement,
    dead_letter: Statement,
    events: Statement,
}

impl Prepared {
    /// Prepares the writer's statements on `client`, for `table`.
    ///
    /// # Errors
    /// The connection's (the table missing, a privilege revoked).
    pub async fn new(client: &PgClient, table: &ParkedTable) -> Result<Prepared, PgError> {
        let statements = Statements {
            table: table.quoted(),
        };
        let error = |e| PgError::client(client.target(), "prepare the parking statements", e);
        let lock = client.prepare(&statements.lock()).await.map_err(error)?;
        let dead_letter = client
            .prepare(&statements.dead_letter())
            .await
            .map_err(error)?;
        let events = client.prepare(&statements.events()).await.map_err(error)?;
        Ok(Prepared {
            statements,
            lock,
            dead_letter,
            events,
        })
    }
}

/// Commits `requests`, in order, in one transaction, and says for each
/// whether it is parked or its aggregate was released (then the event goes
/// out now). `sinks`: the webhook sink names, by index; `prepared`: the
/// statements, prepared on `client`.
///
/// # Errors
/// The connection's; the transaction is then rolled back whole (nothing
/// reported, the same batch goes again).
pub async fn write(
    client: &PgClient,
    prepared: &Prepared,
    shard: u32,
    sinks: &[String],
    requests: &[Request],
) -> Result<Vec<Outcome>, PgError> {
    let result = write_locked(client, prepared, self::shard(shard), sinks, requests).await;
    if result.is_err() {
        // The connection is dropped by the caller after an error; a
        // statement error leaves the transaction aborted until then.
        let _ = client.batch_execute("ROLLBACK").await;
    }
    result
}

/// The statements of one batch, on the table's name.
struct Statements {
    table: String,
}

impl Statements {
    /// The live heads of the aggregates `$1` (types) and `$2` (ids), held
    /// shared until the batch commits.
    fn lock(&self) -> String {
        format!(
            "SELECT aggregatetype, aggregateid, commit_lsn, position, id FROM {t} \
             WHERE kind = '{HEAD}' AND released_at IS NULL \
               AND (aggregatetype, aggregateid) IN \
                   (SELECT * FROM unnest($1::text[], $2::text[])) \
             FOR SHARE",
            t = self.table
        )
    }

    /// A HEAD or DEAD row: `$1` type, `$2` id, `$3` event id, `$4` kind,
    /// `$5` reason, `$6` shard, `$7` commit LSN, `$8` position; its id when
    /// it is new.
    fn dead_letter(&self) -> String {
        format!(
            "INSERT INTO {t} (aggregatetype, aggregateid, event_id, kind, reason, shard, \
             commit_lsn, position) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT DO NOTHING RETURNING id",
            t = self.table
        )
    }

    /// The head row `$1` takes the dead letter of the new DEAD row `$2`
    /// (event id `$3`, reason `$4`, commit LSN `$5`, position `$6`), which
    /// becomes the DEAD row of the head's: its place goes through a
    /// negative position, as a place is unique row by row.
    fn swap(&self) -> [String; 3] {
        let t = &self.table;
        [
            format!("UPDATE {t} SET position = -1 - position WHERE id = $1"),
            format!(
                "UPDATE {t} AS d SET event_id = h.event_id, reason = h.reason, \
                   commit_lsn = h.commit_lsn, position = -1 - h.position, \
                   parked_at = h.parked_at \
                 FROM {t} AS h WHERE d.id = $2 AND h.id = $1"
            ),
            format!(
                "UPDATE {t} SET event_id = $2, reason = $3, commit_lsn = $4, position = $5, \
                   parked_at = clock_timestamp() WHERE id = $1"
            ),
        ]
    }

    /// EVENT rows, one per element of the arrays: `$1` shard, then type,
    /// id, event id, commit LSN, position, sink, topic, key, body, and each
    /// row's headers as the slice `first..=last` (1-based; empty when
    /// `last < first`) of the names `$12` and values `$13`.
    fn events(&self) -> String {
        format!(
            "INSERT INTO {t} (aggregatetype, aggregateid, event_id, kind, shard, commit_lsn, \
               position, sink, topic, record_key, header_names, header_values, body) \
             SELECT r.aggregatetype, r.aggregateid, r.event_id, '{EVENT}', $1, r.commit_lsn, \
                    r.position, r.sink, r.topic, r.record_key, \
                    coalesce(($12::text[])[r.first:r.last], '{{}}'), \
                    coalesce(($13::bytea[])[r.first:r.last], '{{}}'), r.body \
             FROM unnest($2::text[], $3::text[], $4::text[], $5::pg_lsn[], $6::int8[], \
                         $7::text[], $8::text[], $9::bytea[], $10::bytea[], $11::int4[], \
                         $14::int4[]) \
                  AS r(aggregatetype, aggregateid, event_id, commit_lsn, position, sink, topic, \
                       record_key, body, first, last) \
             ON CONFLICT DO NOTHING",
            t = self.table
        )
    }
}

/// EVENT rows waiting to be inserted, as the columns of [`Statements::events`].
#[derive(Default)]
struct Events {
    aggregate_types: Vec<String>,
    aggregate_ids: Vec<String>,
    event_ids: Vec<String>,
    commit_lsns: Vec<PgLsn>,
    positions: Vec<i64>,
    sinks: Vec<String>,
    topics: Vec<Option<String>>,
    keys: Vec<Vec<u8>>,
    bodies: Vec<Vec<u8>>,
    firsts: Vec<i32>,
    lasts: Vec<i32>,
    header_names: Vec<String>,
    header_values: Vec<Vec<u8>>,
}

impl Events {
    fn is_empty(&self) -> bool {
        self.event_ids.is_empty()
    }

    fn push(
        &mut self,
        (aggregate, event_id, place): (&Aggregate, &str, Place),
        parcel: &Parcel,
        sinks: &[String],
    ) {
        let first = self.header_names.len() + 1;
        let (sink, topic, key, body) = match parcel {
            Parcel::Kafka(record) => {
                for (name, value) in &record.headers {
                    self.header_names.push(name.to_string());
                    self.header_values.push(value.to_vec());
                }
                (
                    KAFKA_SINK.to_owned(),
                    Some(record.topic.clone()),
                    record.key.to_vec(),
                    record.value.to_vec(),
                )
            }
            Parcel::Webhook { sink, event } => {
                for (name, value) in &event.headers {
                    self.header_names.push(name.clone());
                    self.header_values.push(value.as_bytes().to_vec());
                }
                (
                    sinks.get(*sink).cloned().unwrap_or_default(),
                    None,
                    event.key.as_bytes().to_vec(),
                    event.body.to_vec(),
                )
            }
        };
        // Array subscripts are `integer`: a batch holds far fewer headers.
        let index = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        self.firsts.push(index(first));
        self.lasts.push(index(self.header_names.len()));
        self.aggregate_types.push(aggregate.aggregate_type.clone());
        self.aggregate_ids.push(aggregate.aggregate_id.clone());
        self.event_ids.push(event_id.to_owned());
        self.commit_lsns.push(pg_lsn(place.commit_lsn));
        self.positions.push(position(place.position));
        self.sinks.push(sink);
        self.topics.push(topic);
        self.keys.push(key);
        self.bodies.push(body);
    }

    /// Inserts the rows held, and empties itself.
    async fn flush(
        &mut self,
        client: &PgClient,
        prepared: &Prepared,
        shard: i32,
    ) -> Result<(), PgError> {
        if self.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(self);
        let params: &[&(dyn ToSql + Sync)] = &[
            &shard,
            &rows.aggregate_types,
            &rows.aggregate_ids,
            &rows.event_ids,
            &rows.commit_lsns,
            &rows.positions,
            &rows.sinks,
            &rows.topics,
            &rows.keys,
            &rows.bodies,
            &rows.firsts,
            &rows.header_names,
            &rows.header_values,
            &rows.lasts,
        ];
        client
            .execute(&prepared.events, params)
            .await
            .map_err(|e| PgError::client(client.target(), "park events", e))?;
        Ok(())
    }
}
async fn write_locked(
    client: &PgClient,
    prepared: &Prepared,
    shard: i32,
    sinks: &[String],
    requests: &[Request],
) -> Result<Vec<Outcome>, PgError> {
    let error = |action| move |e| PgError::client(client.target(), action, e);
    let statements = &prepared.statements;
    let aggregates: HashSet<&Aggregate> = requests.iter().map(Request::aggregate).collect();
    let (types, ids): (Vec<&str>, Vec<&str>) = aggregates
        .iter()
        .map(|a| (a.aggregate_type.as_str(), a.aggregate_id.as_str()))
        .unzip();
    // BEGIN and the lock go out together (tokio-postgres pipelines
    // statements polled at once, in order): one round trip, not two.
    let lock_params: [&(dyn ToSql + Sync); 2] = [&types, &ids];
    let (begun, rows) = tokio::join!(
        client.batch_execute("BEGIN"),
        client.query(&prepared.lock, &lock_params)
    );
    begun.map_err(error("begin a parking batch"))?;
    let lock = error("lock the parked heads");
    let rows = rows.map_err(lock)?;
    // The live head of each aggregate of the batch: its place and row.
    let mut live: HashMap<Aggregate, (Place, i64)> = HashMap::with_capacity(rows.len());
    for r in &rows {
        let aggregate = Aggregate::new(
            r.try_get::<_, String>(0).map_err(lock)?,
            r.try_get::<_, String>(1).map_err(lock)?,
        );
        let place = place(r.try_get(2).map_err(lock)?, r.try_get(3).map_err(lock)?);
        live.insert(aggregate, (place, r.try_get(4).map_err(lock)?));
    }
    let mut outcomes = Vec::with_capacity(requests.len());
    let mut events = Events::default();
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
                events.flush(client, prepared, shard).await?;
                let head = live.get(aggregate).copied();
                let reason = clip(reason);
                let commit_lsn = pg_lsn(place.commit_lsn);
                let position = position(place.position);
                let insert = async |kind: &str, action: &'static str| {
                    let params: &[&(dyn ToSql + Sync)] = &[
                        &aggregate.aggregate_type,
                        &aggregate.aggregate_id,
                        event_id,
                        &kind,
                        &reason,
                        &shard,
                        &commit_lsn,
                        &position,
                    ];
                    let rows = client
                        .query(&prepared.dead_letter, params)
                        .await
                        .map_err(error(action))?;
                    rows.first()
                        .map(|r| r.try_get::<_, i64>(0))
                        .transpose()
                        .map_err(error(action))
                };
                let mut heads = false;
                match head {
                    // The head itself, replayed.
                    Some((head, _)) if *place == head => heads = true,
                    // Parked already: the dead letter waits in the queue.
                    Some((head, _)) if *place > head => {
                        insert(DEAD, "park a dead letter").await?;
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
                        if let Some(row) = insert(DEAD, "park a dead letter").await? {
                            const ACTION: &str = "park an aggregate behind an earlier dead letter";
                            let [negate, demote, take] = statements.swap();
                            client
                                .execute(&negate, &[&head_row])
                                .await
                                .map_err(error(ACTION))?;
                            client
                                .execute(&demote, &[&head_row, &row])
                                .await
                                .map_err(error(ACTION))?;
                            let params: &[&(dyn ToSql + Sync)] =
                                &[&head_row, event_id, &reason, &commit_lsn, &position];
                            client.execute(&take, params).await.map_err(error(ACTION))?;
                            live.insert(aggregate.clone(), (*place, head_row));
                            heads = true;
                        }
                    }
                    None => {
                        if let Some(row) = insert(HEAD, "park an aggregate").await? {
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
                events.push((aggregate, event_id, *place), parcel, sinks);
                outcomes.push(Outcome::Parked);
            }
        }
    }
    events.flush(client, prepared, shard).await?;
    client
        .batch_execute("COMMIT")
        .await
        .map_err(error("park events"))?;
    Ok(outcomes)
}

/// The parked figures (named in `metrics`, which shows them on /health).
pub use crate::metrics::ParkedStats as Stats;

/// See [`Stats`].
///
/// # Errors
/// The connection's.
pub async fn stats(client: &PgClient, table: &ParkedTable) -> Result<Stats, PgError> {
    let error = |e| PgError::client(client.target(), STATS_ACTION, e);
    let row = client
        .query_one(&stats_sql(table), &[&HEAD])
        .await
        .map_err(error)?;
    let count = |i: usize| {
        row.try_get::<_, i64>(i)
            .map(|n| u64::try_from(n).unwrap_or_default())
    };
    Ok(Stats {
        aggregates: count(0).map_err(error)?,
        events: count(1).map_err(error)?,
        oldest_head_secs: row.try_get(2).map_err(error)?,
    })
}

const STATS_ACTION: &str = "count parked events";

/// [`Stats`]' statement.
fn stats_sql(table: &ParkedTable) -> String {
    format!(
        "SELECT count(*) FILTER (WHERE kind = $1 AND released_at IS NULL), \
                count(*) FILTER (WHERE kind <> $1), \
                coalesce(extract(epoch FROM now() - min(parked_at) \
                         FILTER (WHERE kind = $1 AND released_at IS NULL)), 0)::float8 \
         FROM {t}",
        t = table.quoted()
    )
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
}
