//! The PostgreSQL side of the dead-letter commands: the delivery table's
//! DEAD rows (HTTP routes), and the replay record of the Kafka dead
//! letters.
//!
//! Role: the SQL text (pure, so unit tests read it) and the few statements
//! that run it on a [`PgClient`]. The delivery table is the contract of
//! `sql/outbox_delivery.sql`:
//! `dead retry` turns a DEAD row into PENDING with no attempts and due now
//! (the relay's retry worker picks it up), `dead discard` deletes it. A DEAD
//! row whose `after_dead_letter` is `park` holds its aggregate's later rows:
//! retried, it is again the head of that queue, sent before them; discarded,
//! the next of them is the head. Neither statement needs to touch them.
//!
//! The replay record, [`REPLAY_TABLE`] in the outbox table's schema, has one
//! row per dead letter of a Kafka dead-letter topic (`dlq_topic`,
//! `partition`, `offset`) that was republished or discarded, and one per
//! DEAD row of the delivery table that was retried or discarded (`dlq_topic`
//! the delivery table's `schema.name`, `partition` [`ROW_PARTITION`],
//! `offset` the row's `id`). `outbox-relay init` creates it and grants the
//! relay role [`REPLAY_PRIVILEGES`] on it; the commands never do. It is kept in
//! PostgreSQL rather than in a compacted topic because the commands need
//! PostgreSQL anyway (the delivery table), a row is written and read in one
//! transaction, it is queryable by hand, and it needs no topic or ACL of its
//! own.
//!
//! Invariants:
//! * Values (ids and routes come from people and from rows) are typed
//!   parameters, never in the SQL text; only table names are, quoted once
//!   ([`TableName::sql`]).
//! * A statement only touches rows whose status is DEAD, so a row the
//!   relay is working on (PENDING, SENT) is never changed.
//! * The commands never create the replay table (a role that may create
//!   tables is init's); listing never writes at all.
//! * A Kafka dead letter keeps its first record; a delivery-table row's
//!   record is its latest action (a retried row may go DEAD again, be
//!   retried or discarded again).

use tokio_postgres::types::ToSql;

use crate::pg::{PgClient, PgError};

/// The delivery table's name when the config names none.
pub const DEFAULT_DELIVERY_TABLE: &str = "outbox_delivery";
/// The table that records republished and discarded Kafka dead letters,
/// and retried and discarded DEAD rows.
pub const REPLAY_TABLE: &str = "outbox_dead_replay";
/// The `partition` of a delivery-table row in the replay record (no Kafka
/// partition is negative).
pub const ROW_PARTITION: i32 = -1;
/// What the `dead` commands do with the replay record, so what init grants
/// the relay role and check asks for: read it, record, and overwrite a
/// row's record.
pub const REPLAY_PRIVILEGES: [&str; 3] = ["SELECT", "INSERT", "UPDATE"];

/// A table as `(schema, name)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    /// `"schema"."name"` for SQL text.
    pub fn sql(&self) -> String {
        crate::pg::qualified(&self.schema, &self.name)
    }

    /// `schema.name` for people.
    pub fn shown(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// The delivery table: `configured` (`schema.name`, or a name in the outbox
/// table's schema), else [`DEFAULT_DELIVERY_TABLE`] in the outbox table's
/// schema.
pub fn delivery_table(outbox_schema: &str, configured: Option<&str>) -> TableName {
    match configured.filter(|c| !c.is_empty()) {
        Some(name) => match name.split_once('.') {
            Some((schema, name)) => TableName {
                schema: schema.to_owned(),
                name: name.to_owned(),
            },
            None => TableName {
                schema: outbox_schema.to_owned(),
                name: name.to_owned(),
            },
        },
        None => TableName {
            schema: outbox_schema.to_owned(),
            name: DEFAULT_DELIVERY_TABLE.to_owned(),
        },
    }
}

/// The replay record, in the outbox table's schema.
pub fn replay_table(outbox_schema: &str) -> TableName {
    TableName {
        schema: outbox_schema.to_owned(),
        name: REPLAY_TABLE.to_owned(),
    }
}

/// Whether a table exists (as a table, view or partitioned table): `$1`
/// its schema, `$2` its name.
pub const EXISTS_SQL: &str = "SELECT count(*) FROM pg_catalog.pg_class c \
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE n.nspname = $1::text AND c.relname = $2::text AND c.relkind IN ('r', 'p', 'v')";

/// Creates the replay record if it is missing.
pub fn create_replay_sql(table: &TableName) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n    \
             dlq_topic   text        NOT NULL,\n    \
             \"partition\" integer     NOT NULL,\n    \
             \"offset\"    bigint      NOT NULL,\n    \
             event_id    text        NOT NULL,\n    \
             action      text        NOT NULL CHECK (action IN ('replayed', 'discarded')),\n    \
             at          timestamptz NOT NULL DEFAULT now(),\n    \
             PRIMARY KEY (dlq_topic, \"partition\", \"offset\")\n)",
        table.sql()
    )
}

/// The columns a statement on the replay record returns.
const REPLAY_COLUMNS: &str = "dlq_topic, \"partition\", \"offset\", event_id, action, at::text";

/// The replay record's rows of the dead-letter topic `$1` and of the
/// delivery table `$2` (its `schema.name`): dlq_topic, partition, offset,
/// event_id, action, at.
pub fn replays_sql(table: &TableName) -> String {
    format!(
        "SELECT {REPLAY_COLUMNS} FROM {} \
         WHERE dlq_topic = $1 OR (dlq_topic = $2 AND \"partition\" = {ROW_PARTITION})",
        table.sql(),
    )
}

/// Records dead letters as `$5` (`replayed` or `discarded`), one per
/// element of `$1` (dlq_topic), `$2` (partition), `$3` (offset), `$4`
/// (event id): a Kafka dead letter already recorded keeps its first
/// record, a delivery-table row ([`ROW_PARTITION`]) gets this one
/// (`rows_only`: every letter is one).
pub fn record_sql(table: &TableName, rows_only: bool) -> String {
    let conflict = if rows_only {
        "ON CONFLICT (dlq_topic, \"partition\", \"offset\") DO UPDATE SET \
         event_id = excluded.event_id, action = excluded.action, at = excluded.at"
    } else {
        "ON CONFLICT DO NOTHING"
    };
    format!(
        "INSERT INTO {} (dlq_topic, \"partition\", \"offset\", event_id, action) \
         SELECT u.dlq_topic, u.p, u.o, u.event_id, $5 \
         FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[]) AS u(dlq_topic, p, o, event_id) \
         {conflict}",
        table.sql(),
    )
}

/// A place in the replay record: `(dlq_topic, partition, offset)`.
pub type Place = (String, i32, i64);

/// The first key of the advisory locks of dead letters: one of the relay's
/// own, so they never wait on another program's locks ("outr").
pub const LOCK_CLASS: i32 = 0x6f75_7472;

/// The second key of a dead letter's advisory lock: FNV-1a of its place.
/// Two places may share one (a needless wait, never a wrong answer).
pub fn lock_key(place: &Place) -> i32 {
    let (topic, partition, offset) = place;
    let text = format!("{topic}/{partition}/{offset}");
    let hash = text.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    i32::from_ne_bytes(hash.to_ne_bytes())
}

/// The second keys of the advisory locks of `places`, in the one order
/// they are taken in (ascending), each once, whatever order the places
/// were given in: two commands locking overlapping sets then wait for each
/// other instead of deadlocking.
pub fn lock_keys(places: &[Place]) -> Vec<i32> {
    let mut keys: Vec<i32> = places.iter().map(lock_key).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Takes the transaction-scoped advisory locks `($1, key)` ([`LOCK_CLASS`])
/// of the keys `$2`, in the array's order ([`lock_keys`]): `unnest` yields the
/// elements in order, and the function scan calls the lock per row as it
/// yields it.
///
/// Held until the transaction ends (commit, rollback, or the session's
/// end), they are `dead`'s claim: a second command locking a place waits,
/// then reads the record the first one committed, or none.
pub const LOCK_SQL: &str = "SELECT pg_catalog.pg_advisory_xact_lock($1::int4, u.key) \
     FROM unnest($2::int4[]) AS u(key)";

/// The records of the places of `$1` (dlq_topic), `$2` (partition), `$3`
/// (offset): dlq_topic, partition, offset, event_id, action, at.
pub fn recorded_sql(table: &TableName) -> String {
    format!(
        "SELECT {REPLAY_COLUMNS} FROM {} \
         WHERE (dlq_topic, \"partition\", \"offset\") IN \
               (SELECT * FROM unnest($1::text[], $2::int4[], $3::int8[]))",
        table.sql(),
    )
}

/// The DEAD rows, and the rows of the ids `$1` whatever their status (rows
/// the replay record says were retried), oldest first: event_id, route,
/// last_error, attempts, max_attempts, last_status, age in seconds, id,
/// status.
pub fn list_sql(table: &TableName) -> String {
    format!(
        "SELECT event_id, route, coalesce(last_error, ''), attempts::int8, max_attempts::int8, \
         last_status::int8, coalesce(extract(epoch FROM now() - created_at)::float8, 0), id, \
         status \
         FROM {} WHERE status = 'DEAD' OR id = ANY($1::int8[]) ORDER BY created_at, id",
        table.sql(),
    )
}

/// Whether the table `$1`.`$2` exists, and whether the role `$3` has each
/// of `privileges` on it (NULL when the table or the role does not
/// exist), one column each, in their order: `$4`, `$5`...
pub fn facts_sql(privileges: usize) -> String {
    // By name in the catalog, not `to_regclass`, which needs USAGE on the
    // schema: check asks as the relay role.
    let privileges: Vec<String> = (0..privileges)
        .map(|i| {
            format!(
                "(SELECT pg_catalog.has_table_privilege(r.oid, t.oid, ${}::text) \
                 FROM pg_catalog.pg_roles r, t WHERE r.rolname = $3::text)",
                i + 4
            )
        })
        .collect();
    format!(
        "WITH t AS (SELECT c.oid FROM pg_catalog.pg_class c \
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
           WHERE n.nspname = $1::text AND c.relname = $2::text AND c.relkind IN ('r', 'p')) \
         SELECT EXISTS (SELECT 1 FROM t){}{}",
        if privileges.is_empty() { "" } else { ", " },
        privileges.join(", ")
    )
}

/// What the catalog says of the replay record (or of another table:
/// [`table_facts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayFacts {
    pub exists: bool,
    /// Of [`REPLAY_PRIVILEGES`], those the role lacks (all of them when the
    /// table does not exist).
    pub missing: Vec<&'static str>,
}

/// Reads [`ReplayFacts`] for `role`.
///
/// # Errors
/// The query fails.
pub async fn replay_facts(
    client: &PgClient,
    table: &TableName,
    role: &str,
) -> Result<ReplayFacts, PgError> {
    table_facts(client, table, role, &REPLAY_PRIVILEGES).await
}

/// Whether `table` exists, and which of `privileges` `role` lacks on it
/// (all when it does not exist), as [`ReplayFacts`].
///
/// # Errors
/// The query fails.
pub async fn table_facts(
    client: &PgClient,
    table: &TableName,
    role: &str,
    privileges: &[&'static str],
) -> Result<ReplayFacts, PgError> {
    let error = error(client, "looking a table up");
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&table.schema, &table.name, &role];
    params.extend(privileges.iter().map(|p| p as &(dyn ToSql + Sync)));
    let row = client
        .query_one(&facts_sql(privileges.len()), &params)
        .await
        .map_err(&error)?;
    let yes = |i: usize| row.try_get::<_, Option<bool>>(i).map(|v| v == Some(true));
    let exists = yes(0).map_err(&error)?;
    let mut missing = Vec::new();
    for (i, privilege) in privileges.iter().enumerate() {
        if !yes(i + 1).map_err(&error)? {
            missing.push(*privilege);
        }
    }
    Ok(ReplayFacts { exists, missing })
}

/// Whether `role` has USAGE on `schema` (false when either is missing).
///
/// # Errors
/// The query fails.
pub async fn schema_usage(client: &PgClient, schema: &str, role: &str) -> Result<bool, PgError> {
    let error = error(client, "looking a schema's privileges up");
    let row = client
        .query_opt(
            "SELECT pg_catalog.has_schema_privilege(r.oid, n.oid, 'USAGE') \
             FROM pg_catalog.pg_roles r, pg_catalog.pg_namespace n \
             WHERE r.rolname = $1::text AND n.nspname = $2::text",
            &[&role, &schema],
        )
        .await
        .map_err(&error)?;
    match row {
        None => Ok(false),
        Some(row) => Ok(row.try_get::<_, Option<bool>>(0).map_err(error)? == Some(true)),
    }
}

/// Turns the DEAD rows with the event ids `$1` back into due PENDING rows
/// with no attempts; returns the event ids changed.
pub fn retry_sql(table: &TableName) -> String {
    format!(
        "UPDATE {} SET status = 'PENDING', attempts = 0, next_attempt_at = now() \
         WHERE status = 'DEAD' AND event_id = ANY($1::text[]) RETURNING event_id",
        table.sql(),
    )
}

/// Deletes the DEAD rows with the event ids `$1`; returns the event ids
/// deleted.
pub fn discard_sql(table: &TableName) -> String {
    format!(
        "DELETE FROM {} WHERE status = 'DEAD' AND event_id = ANY($1::text[]) RETURNING event_id",
        table.sql(),
    )
}

/// One DEAD row of the delivery table.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadRow {
    pub event_id: String,
    pub route: String,
    pub last_error: String,
    pub attempts: i64,
    pub max_attempts: i64,
    pub last_status: Option<i64>,
    pub age_seconds: f64,
    pub id: i64,
    /// `DEAD`, or another status for a row the replay record names.
    pub status: String,
}

/// One row of the replay record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub dlq_topic: String,
    pub event_id: String,
    pub partition: i32,
    pub offset: i64,
    pub action: String,
    pub at: String,
}

/// The error of a statement's `action` on `client`.
fn error(client: &PgClient, action: &'static str) -> impl Fn(tokio_postgres::Error) -> PgError {
    move |e| PgError::client(client.target(), action, e)
}

/// Whether `table` exists.
///
/// # Errors
/// The query fails.
pub async fn exists(client: &PgClient, table: &TableName) -> Result<bool, PgError> {
    let error = error(client, "looking a table up");
    let row = client
        .query_one(EXISTS_SQL, &[&table.schema, &table.name])
        .await
        .map_err(&error)?;
    Ok(row.try_get::<_, i64>(0).map_err(error)? != 0)
}

/// The DEAD rows of the delivery table.
///
/// # Errors
/// The query fails.
pub async fn dead_rows(
    client: &PgClient,
    table: &TableName,
    also: &[i64],
) -> Result<Vec<DeadRow>, PgError> {
    let error = error(client, "reading the DEAD rows of the delivery table");
    let rows = client
        .query(&list_sql(table), &[&also])
        .await
        .map_err(&error)?;
    rows.iter()
        .map(|row| {
            Ok(DeadRow {
                event_id: row.try_get(0)?,
                route: row.try_get(1)?,
                last_error: row.try_get(2)?,
                attempts: row.try_get(3)?,
                max_attempts: row.try_get(4)?,
                last_status: row.try_get(5)?,
                age_seconds: row.try_get(6)?,
                id: row.try_get(7)?,
                status: row.try_get(8)?,
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(error)
}

/// The replay record of `dlq_topic` and of the delivery table `delivery`.
///
/// # Errors
/// The query fails.
pub async fn replays(
    client: &PgClient,
    table: &TableName,
    dlq_topic: &str,
    delivery: &TableName,
) -> Result<Vec<Replay>, PgError> {
    let error = error(client, "reading the replay record");
    let rows = client
        .query(&replays_sql(table), &[&dlq_topic, &delivery.shown()])
        .await
        .map_err(&error)?;
    replay_rows(&rows).map_err(error)
}

/// The records of `places`, as they stand now.
///
/// # Errors
/// The query fails.
pub async fn recorded(
    client: &PgClient,
    table: &TableName,
    places: &[Place],
) -> Result<Vec<Replay>, PgError> {
    if places.is_empty() {
        return Ok(Vec::new());
    }
    let error = error(client, "reading what another command recorded");
    let topics: Vec<&str> = places.iter().map(|(t, _, _)| t.as_str()).collect();
    let partitions: Vec<i32> = places.iter().map(|(_, p, _)| *p).collect();
    let offsets: Vec<i64> = places.iter().map(|(_, _, o)| *o).collect();
    let rows = client
        .query(&recorded_sql(table), &[&topics, &partitions, &offsets])
        .await
        .map_err(&error)?;
    replay_rows(&rows).map_err(error)
}

/// Records `letters` (place and event id) as `action` (`replayed` or
/// `discarded`), as [`record_sql`] says.
///
/// # Errors
/// The statement fails.
pub async fn record(
    client: &PgClient,
    table: &TableName,
    action: &str,
    letters: &[(String, i32, i64, String)],
) -> Result<(), PgError> {
    if letters.is_empty() {
        return Ok(());
    }
    let rows_only = letters.iter().all(|(_, p, _, _)| *p == ROW_PARTITION);
    let topics: Vec<&str> = letters.iter().map(|(t, _, _, _)| t.as_str()).collect();
    let partitions: Vec<i32> = letters.iter().map(|(_, p, _, _)| *p).collect();
    let offsets: Vec<i64> = letters.iter().map(|(_, _, o, _)| *o).collect();
    let ids: Vec<&str> = letters.iter().map(|(_, _, _, id)| id.as_str()).collect();
    client
        .execute(
            &record_sql(table, rows_only),
            &[&topics, &partitions, &offsets, &ids, &action],
        )
        .await
        .map_err(error(client, "recording dead letters"))?;
    Ok(())
}

/// Takes the advisory locks of `places` ([`LOCK_SQL`], [`lock_keys`]),
/// waiting for another command that holds one.
///
/// # Errors
/// The statement fails.
pub async fn lock(client: &PgClient, places: &[Place]) -> Result<(), PgError> {
    if places.is_empty() {
        return Ok(());
    }
    client
        .execute(LOCK_SQL, &[&LOCK_CLASS, &lock_keys(places)])
        .await
        .map_err(error(client, "locking dead letters"))?;
    Ok(())
}

/// Rows of `SELECT dlq_topic, partition, offset, event_id, action, at`.
fn replay_rows(rows: &[tokio_postgres::Row]) -> Result<Vec<Replay>, tokio_postgres::Error> {
    rows.iter()
        .map(|row| {
            Ok(Replay {
                dlq_topic: row.try_get(0)?,
                partition: row.try_get(1)?,
                offset: row.try_get(2)?,
                event_id: row.try_get(3)?,
                action: row.try_get(4)?,
                at: row.try_get(5)?,
            })
        })
        .collect()
}

/// Changes the delivery table's DEAD rows with `event_ids` by `sql`
/// ([`retry_sql`] or [`discard_sql`]); the event ids changed.
///
/// # Errors
/// The statement fails.
pub async fn change_dead_rows(
    client: &PgClient,
    sql: &str,
    event_ids: &[String],
) -> Result<Vec<String>, PgError> {
    let error = error(client, "changing DEAD rows of the delivery table");
    let rows = client.query(sql, &[&event_ids]).await.map_err(&error)?;
    rows.iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_table_defaults_to_the_outbox_schema() {
        let shown = |t: TableName| t.shown();
        assert_eq!(shown(delivery_table("app", None)), "app.outbox_delivery");
        assert_eq!(
            shown(delivery_table("app", Some(""))),
            "app.outbox_delivery"
        );
        assert_eq!(
            shown(delivery_table("app", Some("webhooks"))),
            "app.webhooks"
        );
        assert_eq!(
            shown(delivery_table("app", Some("ops.webhooks"))),
            "ops.webhooks"
        );
        assert_eq!(shown(replay_table("app")), "app.outbox_dead_replay");
    }

    /// Names are quoted once into the text; every value is a parameter.
    #[test]
    fn names_are_quoted_and_values_are_parameters() {
        let table = TableName {
            schema: "we\"ird".into(),
            name: "t'%".into(),
        };
        assert_eq!(table.sql(), "\"we\"\"ird\".\"t'%\"");
        let sql = retry_sql(&table);
        assert!(
            sql.starts_with("UPDATE \"we\"\"ird\".\"t'%\" SET status = 'PENDING'"),
            "{sql}"
        );
        assert!(
            sql.contains("WHERE status = 'DEAD' AND event_id = ANY($1::text[])"),
            "{sql}"
        );
        let sql = discard_sql(&table);
        assert!(
            sql.starts_with("DELETE FROM \"we\"\"ird\".\"t'%\" WHERE status = 'DEAD'"),
            "{sql}"
        );
        for sql in [
            record_sql(&table, true),
            record_sql(&table, false),
            recorded_sql(&table),
            replays_sql(&table),
            list_sql(&table),
        ] {
            assert!(sql.contains("\"we\"\"ird\".\"t'%\""), "{sql}");
            assert!(sql.contains("$1"), "{sql}");
        }
        assert!(record_sql(&table, false).ends_with("ON CONFLICT DO NOTHING"));
        assert!(record_sql(&table, true).contains("DO UPDATE SET"));
        let facts = facts_sql(3);
        assert!(facts.contains("$6::text"), "{facts}");
        assert!(!facts.contains("$7"), "{facts}");
    }

    #[test]
    fn locks_are_taken_in_one_order_whatever_order_they_are_given_in() {
        let places: Vec<Place> = (0..50)
            .map(|i| (format!("dlq{}", i % 2), i % 3, i64::from(i)))
            .collect();
        let mut reversed = places.clone();
        reversed.reverse();
        reversed.extend(places.iter().take(5).cloned());
        let keys = lock_keys(&places);
        assert_eq!(keys, lock_keys(&reversed), "same locks, same order");
        assert_eq!(keys.len(), 50, "{keys:?}");
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert_eq!(
            lock_key(&("dlq".into(), 0, 1)),
            lock_key(&("dlq".into(), 0, 1))
        );
        assert_ne!(
            lock_key(&("dlq".into(), 0, 1)),
            lock_key(&("dlq".into(), 1, 0))
        );
    }
}
