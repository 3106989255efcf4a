//! The PostgreSQL side of the dead-letter commands: the delivery table's
//! DEAD rows (HTTP routes), and the replay record of the Kafka dead
//! letters.
//!
//! Role: the SQL text (pure, so unit tests read it) and the few statements
//! that run it. The delivery table is the contract of `sql/outbox_delivery.sql`:
//! `dead retry` turns a DEAD row into PENDING with no attempts and due now
//! (the relay's retry worker picks it up), `dead discard` deletes it.
//!
//! The replay record, [`REPLAY_TABLE`] in the outbox table's schema, has one
//! row per dead letter of a Kafka dead-letter topic (`dlq_topic`,
//! `partition`, `offset`) that was republished or discarded. It is kept in
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
//! * Listing never writes: the replay table is created by the commands that
//!   record something, not by `dead list`.

use postgres_protocol::escape::{escape_identifier, escape_literal};

use crate::replication::{ReplicationError, SqlConnection};

/// The delivery table's name when the config names none.
pub const DEFAULT_DELIVERY_TABLE: &str = "outbox_delivery";
/// The table that records republished and discarded Kafka dead letters.
pub const REPLAY_TABLE: &str = "outbox_dead_replay";

/// A table as `(schema, name)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    /// `"schema"."name"` for SQL text.
    pub fn sql(&self) -> String {
        format!(
            "{}.{}",
            escape_identifier(&self.schema),
            escape_identifier(&self.name)
        )
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

/// The replay record's rows of `dlq_topic`: partition, offset, action, at.
pub fn replays_sql(table: &TableName, dlq_topic: &str) -> String {
    format!(
        "SELECT \"partition\", \"offset\", action, at FROM {} WHERE dlq_topic = {}",
        table.sql(),
        escape_literal(dlq_topic)
    )
}

/// Records dead letters as `action` (`replayed` or `discarded`); a dead
/// letter already recorded keeps its first record.
pub fn record_sql(
    table: &TableName,
    action: &str,
    letters: &[(String, i32, i64, String)],
) -> String {
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
         ON CONFLICT DO NOTHING",
        table.sql(),
        rows.join(", ")
    )
}

/// A literal `ARRAY[...]::text[]` of `values`.
fn text_array(values: &[String]) -> String {
    let items: Vec<String> = values.iter().map(|v| escape_literal(v)).collect();
    format!("ARRAY[{}]::text[]", items.join(", "))
}

/// The DEAD rows, oldest first: event_id, route, last_error, attempts,
/// max_attempts, last_status, age in seconds, id.
pub fn list_sql(table: &TableName) -> String {
    format!(
        "SELECT event_id, route, coalesce(last_error, ''), attempts, max_attempts, \
         last_status, extract(epoch FROM now() - created_at)::float8, id \
         FROM {} WHERE status = 'DEAD' ORDER BY created_at, id",
        table.sql()
    )
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
}

/// One row of the replay record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub partition: i32,
    pub offset: i64,
    pub action: String,
    pub at: String,
}

fn shape(connection: &SqlConnection, action: &'static str) -> ReplicationError {
    ReplicationError::Protocol {
        target: connection.target().to_owned(),
        action,
        reason: "unexpected result shape".into(),
    }
}

/// Whether `table` exists.
///
/// # Errors
/// The query fails.
pub async fn exists(
    connection: &mut SqlConnection,
    table: &TableName,
) -> Result<bool, ReplicationError> {
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
) -> Result<Vec<DeadRow>, ReplicationError> {
    const ACTION: &str = "reading the DEAD rows of the delivery table";
    let rows = connection.query(&list_sql(table), ACTION).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let text = |i: usize| row.get(i).cloned().flatten();
        let number = |i: usize| text(i).and_then(|v| v.parse::<i64>().ok());
        let (Some(event_id), Some(route), Some(attempts), Some(max_attempts), Some(id)) =
            (text(0), text(1), number(3), number(4), number(7))
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
        });
    }
    Ok(out)
}

/// The replay record of `dlq_topic`.
///
/// # Errors
/// The query fails.
pub async fn replays(
    connection: &mut SqlConnection,
    table: &TableName,
    dlq_topic: &str,
) -> Result<Vec<Replay>, ReplicationError> {
    const ACTION: &str = "reading the replay record";
    let rows = connection
        .query(&replays_sql(table, dlq_topic), ACTION)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let text = |i: usize| row.get(i).cloned().flatten();
        let (Some(partition), Some(offset), Some(action), Some(at)) = (
            text(0).and_then(|v| v.parse().ok()),
            text(1).and_then(|v| v.parse().ok()),
            text(2),
            text(3),
        ) else {
            return Err(shape(connection, ACTION));
        };
        out.push(Replay {
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
) -> Result<Vec<String>, ReplicationError> {
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
    }
}
