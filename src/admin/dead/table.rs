//! The PostgreSQL side of the dead-letter commands: the delivery table's
//! DEAD rows (HTTP routes), and the replay record of the Kafka dead
//! letters.
//!
//! Role: the SQL text (pure, so unit tests read it) and the few statements
//! that run it. The delivery table is the contract of `sql/outbox_delivery.sql`:
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
//! * Every name and value in the SQL text is quoted (`escape_identifier`,
//!   `escape_literal`): ids and routes come from people and from rows.
//! * A statement only touches rows whose status is DEAD, so a row the
//!   relay is working on (PENDING, SENT) is never changed.
//! * The commands never create the replay table (a role that may create
//!   tables is init's); listing never writes at all.
//! * A Kafka dead letter keeps its first record; a delivery-table row's
//!   record is its latest action (a retried row may go DEAD again, be
//!   retried or discarded again).

use postgres_protocol::escape::escape_literal;

use crate::pg::{PgError, SqlConnection};

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

/// Whether `table` exists (as a table, view or partitioned table).
pub fn exists_sql(table: &TableName) -> String {
    format!(
        "SELECT count(*) FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = {} AND c.relname = {} AND c.relkind IN ('r', 'p', 'v')",
        escape_literal(&table.schema),
        escape_literal(&table.name)
    )
}

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

/// The replay record's rows of `dlq_topic` and of the delivery table
/// (`delivery`, its `schema.name`): dlq_topic, partition, offset, event_id,
/// action, at.
pub fn replays_sql(table: &TableName, dlq_topic: &str, delivery: &str) -> String {
    format!(
        "SELECT dlq_topic, \"partition\", \"offset\", event_id, action, at FROM {} \
         WHERE dlq_topic = {} OR (dlq_topic = {} AND \"partition\" = {ROW_PARTITION})",
        table.sql(),
        escape_literal(dlq_topic),
        escape_literal(delivery)
    )
}

/// Records dead letters as `action` (`replayed` or `discarded`): a Kafka
/// dead letter already recorded keeps its first record, a delivery-table
/// row ([`ROW_PARTITION`]) gets this one.
pub fn record_sql(
    table: &TableName,
    action: &str,
    letters: &[(String, i32, i64, String)],
) -> String {
    let conflict = if letters.iter().all(|(_, p, _, _)| *p == ROW_PARTITION) {
        "ON CONFLICT (dlq_topic, \"partition\", \"offset\") DO UPDATE SET \
         event_id = excluded.event_id, action = excluded.action, at = excluded.at"
    } else {
        "ON CONFLICT DO NOTHING"
    };
    let rows: Vec<String> = letters
        .iter()
        .map(|(topic, partition, offset, id)| {
            format!(
                "({}, {partition}, {offset}, {}, {})",
                escape_literal(topic),
                escape_literal(id),
                escape_literal(action)
            )
        })
        .collect();
    format!(
        "INSERT INTO {} (dlq_topic, \"partition\", \"offset\", event_id, action) VALUES {} \
         {conflict}",
        table.sql(),
        rows.join(", ")
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

/// Takes the transaction-scoped advisory locks of `places`, in one order
/// (by key) whatever order they were given in, so two commands locking
/// overlapping sets wait for each other instead of deadlocking. Target
/// entries are evaluated left to right.
///
/// Held until the transaction ends (commit, rollback, or the session's
/// end), they are `dead`'s claim: a second command locking a place waits,
/// then reads the record the first one committed, or none.
pub fn lock_sql(places: &[Place]) -> String {
    let mut keys: Vec<i32> = places.iter().map(lock_key).collect();
    keys.sort_unstable();
    keys.dedup();
    let calls: Vec<String> = keys
        .iter()
        .map(|key| format!("pg_catalog.pg_advisory_xact_lock({LOCK_CLASS}, {key})"))
        .collect();
    format!("SELECT {}", calls.join(", "))
}

/// `(dlq_topic, "partition", "offset") IN (...)` of `places`.
fn places_in(places: &[Place]) -> String {
    let items: Vec<String> = places
        .iter()
        .map(|(topic, partition, offset)| {
            format!("({}, {partition}, {offset})", escape_literal(topic))
        })
        .collect();
    format!(
        "(dlq_topic, \"partition\", \"offset\") IN ({})",
        items.join(", ")
    )
}

/// The records of `places`: dlq_topic, partition, offset, event_id,
/// action, at.
pub fn recorded_sql(table: &TableName, places: &[Place]) -> String {
    format!(
        "SELECT dlq_topic, \"partition\", \"offset\", event_id, action, at FROM {} WHERE {}",
        table.sql(),
        places_in(places)
    )
}

/// A literal `ARRAY[...]::text[]` of `values`.
fn text_array(values: &[String]) -> String {
    let items: Vec<String> = values.iter().map(|v| escape_literal(v)).collect();
    format!("ARRAY[{}]::text[]", items.join(", "))
}

/// The DEAD rows, and the rows of ids `also` whatever their status (rows
/// the replay record says were retried), oldest first: event_id, route,
/// last_error, attempts, max_attempts, last_status, age in seconds, id,
/// status.
pub fn list_sql(table: &TableName, also: &[i64]) -> String {
    let also: Vec<String> = also.iter().map(i64::to_string).collect();
    format!(
        "SELECT event_id, route, coalesce(last_error, ''), attempts, max_attempts, \
         last_status, extract(epoch FROM now() - created_at)::float8, id, status \
         FROM {} WHERE status = 'DEAD' OR id = ANY(ARRAY[{}]::bigint[]) ORDER BY created_at, id",
        table.sql(),
        also.join(", ")
    )
}

/// Whether the replay record exists, and the privileges `role` has on it
/// (`None` each when the table or the role does not exist), in the order
/// of [`REPLAY_PRIVILEGES`].
pub fn replay_facts_sql(table: &TableName, role: &str) -> String {
    facts_sql(table, role, &REPLAY_PRIVILEGES)
}

/// Whether `table` exists, and which of `privileges` `role` has on it, in
/// their order.
pub fn facts_sql(table: &TableName, role: &str, privileges: &[&str]) -> String {
    // By name in the catalog, not `to_regclass`, which needs USAGE on the
    // schema: check asks as the relay role.
    let privileges: Vec<String> = privileges
        .iter()
        .map(|p| {
            format!(
                "(SELECT pg_catalog.has_table_privilege(r.oid, t.oid, '{p}') \
                 FROM pg_catalog.pg_roles r, t WHERE r.rolname = {})",
                escape_literal(role)
            )
        })
        .collect();
    format!(
        "WITH t AS (SELECT c.oid FROM pg_catalog.pg_class c \
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
           WHERE n.nspname = {} AND c.relname = {} AND c.relkind IN ('r', 'p')) \
         SELECT EXISTS (SELECT 1 FROM t), {}",
        escape_literal(&table.schema),
        escape_literal(&table.name),
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
    connection: &mut SqlConnection,
    table: &TableName,
    role: &str,
) -> Result<ReplayFacts, PgError> {
    table_facts(connection, table, role, &REPLAY_PRIVILEGES).await
}

/// Whether `table` exists, and which of `privileges` `role` lacks on it
/// (all when it does not exist), as [`ReplayFacts`].
///
/// # Errors
/// The query fails.
pub async fn table_facts(
    connection: &mut SqlConnection,
    table: &TableName,
    role: &str,
    privileges: &[&'static str],
) -> Result<ReplayFacts, PgError> {
    const ACTION: &str = "looking a table up";
    let rows = connection
        .query(&facts_sql(table, role, privileges), ACTION)
        .await?;
    let Some(row) = rows.first() else {
        return Err(shape(connection, ACTION));
    };
    let yes = |i: usize| row.get(i).cloned().flatten().as_deref() == Some("t");
    Ok(ReplayFacts {
        exists: yes(0),
        missing: privileges
            .iter()
            .enumerate()
            .filter(|(i, _)| !yes(i + 1))
            .map(|(_, p)| *p)
            .collect(),
    })
}

/// Whether `role` has USAGE on `schema` (false when either is missing).
///
/// # Errors
/// The query fails.
pub async fn schema_usage(
    connection: &mut SqlConnection,
    schema: &str,
    role: &str,
) -> Result<bool, PgError> {
    let sql = format!(
        "SELECT pg_catalog.has_schema_privilege(r.oid, n.oid, 'USAGE') \
         FROM pg_catalog.pg_roles r, pg_catalog.pg_namespace n \
         WHERE r.rolname = {} AND n.nspname = {}",
        escape_literal(role),
        escape_literal(schema)
    );
    let rows = connection
        .query(&sql, "looking a schema's privileges up")
        .await?;
    Ok(rows
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .as_deref()
        == Some("t"))
}

/// Turns the DEAD rows with these event ids back into due PENDING rows
/// with no attempts; returns the event ids changed.
pub fn retry_sql(table: &TableName, event_ids: &[String]) -> String {
    format!(
        "UPDATE {} SET status = 'PENDING', attempts = 0, next_attempt_at = now() \
         WHERE status = 'DEAD' AND event_id = ANY({}) RETURNING event_id",
        table.sql(),
        text_array(event_ids)
    )
}

/// Deletes the DEAD rows with these event ids; returns the event ids
/// deleted.
pub fn discard_sql(table: &TableName, event_ids: &[String]) -> String {
    format!(
        "DELETE FROM {} WHERE status = 'DEAD' AND event_id = ANY({}) RETURNING event_id",
        table.sql(),
        text_array(event_ids)
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

fn shape(connection: &SqlConnection, action: &'static str) -> PgError {
    PgError::Protocol {
        target: connection.target().to_owned(),
        action,
        reason: "unexpected result shape".into(),
    }
}

/// Whether `table` exists.
///
/// # Errors
/// The query fails.
pub async fn exists(connection: &mut SqlConnection, table: &TableName) -> Result<bool, PgError> {
    const ACTION: &str = "looking a table up";
    let rows = connection.query(&exists_sql(table), ACTION).await?;
    match rows.first().and_then(|r| r.first()).cloned().flatten() {
        Some(count) => Ok(count != "0"),
        None => Err(shape(connection, ACTION)),
    }
}

/// The DEAD rows of the delivery table.
///
/// # Errors
/// The query fails.
pub async fn dead_rows(
    connection: &mut SqlConnection,
    table: &TableName,
    also: &[i64],
) -> Result<Vec<DeadRow>, PgError> {
    const ACTION: &str = "reading the DEAD rows of the delivery table";
    let rows = connection.query(&list_sql(table, also), ACTION).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let text = |i: usize| row.get(i).cloned().flatten();
        let number = |i: usize| text(i).and_then(|v| v.parse::<i64>().ok());
        let (
            Some(event_id),
            Some(route),
            Some(attempts),
            Some(max_attempts),
            Some(id),
            Some(status),
        ) = (text(0), text(1), number(3), number(4), number(7), text(8))
        else {
            return Err(shape(connection, ACTION));
        };
        out.push(DeadRow {
            event_id,
            route,
            last_error: text(2).unwrap_or_default(),
            attempts,
            max_attempts,
            last_status: number(5),
            age_seconds: text(6).and_then(|v| v.parse().ok()).unwrap_or(0.0),
            id,
            status,
        });
    }
    Ok(out)
}

/// The replay record of `dlq_topic` and of the delivery table `delivery`.
///
/// # Errors
/// The query fails.
pub async fn replays(
    connection: &mut SqlConnection,
    table: &TableName,
    dlq_topic: &str,
    delivery: &TableName,
) -> Result<Vec<Replay>, PgError> {
    const ACTION: &str = "reading the replay record";
    let sql = replays_sql(table, dlq_topic, &delivery.shown());
    let rows = connection.query(&sql, ACTION).await?;
    replay_rows(connection, rows, ACTION)
}

/// The records of `places`, as they stand now.
///
/// # Errors
/// The query fails.
pub async fn recorded(
    connection: &mut SqlConnection,
    table: &TableName,
    places: &[Place],
) -> Result<Vec<Replay>, PgError> {
    const ACTION: &str = "reading what another command recorded";
    if places.is_empty() {
        return Ok(Vec::new());
    }
    let rows = connection
        .query(&recorded_sql(table, places), ACTION)
        .await?;
    replay_rows(connection, rows, ACTION)
}

/// Takes the advisory locks of `places` ([`lock_sql`]), waiting for
/// another command that holds one.
///
/// # Errors
/// The statement fails.
pub async fn lock(connection: &mut SqlConnection, places: &[Place]) -> Result<(), PgError> {
    if places.is_empty() {
        return Ok(());
    }
    connection
        .query(&lock_sql(places), "locking dead letters")
        .await
        .map(|_| ())
}

/// Rows of `SELECT dlq_topic, partition, offset, event_id, action, at`.
fn replay_rows(
    connection: &SqlConnection,
    rows: Vec<Vec<Option<String>>>,
    what: &'static str,
) -> Result<Vec<Replay>, PgError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let text = |i: usize| row.get(i).cloned().flatten();
        let (
            Some(dlq_topic),
            Some(partition),
            Some(offset),
            Some(event_id),
            Some(action),
            Some(at),
        ) = (
            text(0),
            text(1).and_then(|v| v.parse().ok()),
            text(2).and_then(|v| v.parse().ok()),
            text(3),
            text(4),
            text(5),
        )
        else {
            return Err(shape(connection, what));
        };
        out.push(Replay {
            dlq_topic,
            event_id,
            partition,
            offset,
            action,
            at,
        });
    }
    Ok(out)
}

/// Runs a statement that returns one text column; its values.
///
/// # Errors
/// The statement fails.
pub async fn returning(
    connection: &mut SqlConnection,
    sql: &str,
    action: &'static str,
) -> Result<Vec<String>, PgError> {
    let rows = connection.query(sql, action).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| row.into_iter().next().flatten())
        .collect())
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

    #[test]
    fn names_and_values_are_quoted_whatever_they_hold() {
        let table = TableName {
            schema: "we\"ird".into(),
            name: "t'%".into(),
        };
        assert_eq!(table.sql(), "\"we\"\"ird\".\"t'%\"");
        let ids = vec!["a'b".to_owned(), "c\\d".to_owned(), "é%_".to_owned()];
        let sql = retry_sql(&table, &ids);
        assert!(
            sql.contains("ARRAY['a''b',  E'c\\\\d', 'é%_']::text[]"),
            "{sql}"
        );
        assert!(sql.contains("WHERE status = 'DEAD'"), "{sql}");
        let sql = discard_sql(&table, &ids);
        assert!(
            sql.starts_with("DELETE FROM \"we\"\"ird\".\"t'%\" WHERE status = 'DEAD'"),
            "{sql}"
        );
        let sql = record_sql(&table, "replayed", &[("dlq".into(), 0, 7, "x'y".into())]);
        assert!(sql.contains("('dlq', 0, 7, 'x''y', 'replayed')"), "{sql}");
        assert!(exists_sql(&table).contains("n.nspname = 'we\"ird' AND c.relname = 't''%'"));
        let sql = recorded_sql(&table, &[("d'q".into(), 0, 7)]);
        assert!(sql.ends_with("IN (('d''q', 0, 7))"), "{sql}");
    }

    #[test]
    fn locks_are_taken_in_one_order_whatever_order_they_are_given_in() {
        let places: Vec<Place> = (0..50)
            .map(|i| (format!("dlq{}", i % 2), i % 3, i64::from(i)))
            .collect();
        let mut reversed = places.clone();
        reversed.reverse();
        reversed.extend(places.iter().take(5).cloned());
        let sql = lock_sql(&places);
        assert_eq!(sql, lock_sql(&reversed), "same locks, same order");
        let keys: Vec<i32> = sql
            .split("pg_catalog.pg_advisory_xact_lock(")
            .skip(1)
            .map(|call| {
                let (class, rest) = call.split_once(", ").unwrap();
                assert_eq!(class, LOCK_CLASS.to_string());
                rest.split(')').next().unwrap().parse().unwrap()
            })
            .collect();
        assert_eq!(keys.len(), 50, "{sql}");
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
