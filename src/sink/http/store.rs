//! The SQL of the delivery table (`sql/outbox_delivery.sql`), on the
//! relay's plain SQL connection (simple queries, values as quoted
//! literals: `escape_literal` is right whatever the session's
//! `standard_conforming_strings`).
//!
//! The statements:
//! * [`look_up`]: whether an event is known already (a replay after a crash
//!   must not send it again) and whether a row holds its aggregate (then it
//!   is queued behind instead of sent);
//! * [`insert`]: one event as PENDING or DEAD, in one statement (one
//!   transaction), idempotent on `event_id`;
//! * [`claim`] / [`finish`]: the retry worker's transaction, holding the
//!   row lock while its request is in flight, so two relays never send one
//!   row at the same time;
//! * [`stats`]: the gauges of stuck deliveries, per route.
//!
//! A row holds its aggregate ([`holds`], and [`holders_sql`] for the same
//! rule in SQL): PENDING, or DEAD with `after_dead_letter = 'park'`. The look-up
//! queues an event behind such a row, and the claim takes only rows with no
//! older such row of their (route, aggregate): a DEAD row under `park` is a
//! head that is never due, so nothing behind it is sent until `dead retry`
//! makes it PENDING (it is then the due head, sent first) or `dead discard`
//! deletes it (the next row becomes the head).

use std::time::Duration;

use postgres_protocol::escape::escape_literal;

use super::WebhookEvent;
use crate::pg::{PgError, SqlConnection};
use crate::routes::AfterDeadLetter;

/// The delivery table, `(schema, name)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryTable {
    pub schema: String,
    pub name: String,
}

impl Default for DeliveryTable {
    fn default() -> Self {
        DeliveryTable {
            schema: "public".to_owned(),
            name: "outbox_delivery".to_owned(),
        }
    }
}

impl DeliveryTable {
    /// `"schema"."name"`, quoted for SQL text.
    pub fn quoted(&self) -> String {
        crate::pg::qualified(&self.schema, &self.name)
    }

    /// The table's SQL with its name: the file's `outbox_delivery` (table
    /// and index name prefix) becomes this table's.
    pub fn create_sql(&self) -> String {
        crate::pg::renamed_table_sql(
            include_str!("../../../sql/outbox_delivery.sql"),
            "outbox_delivery",
            &self.schema,
            &self.name,
        )
    }
}

/// Status values of the table.
pub const PENDING: &str = "PENDING";
pub const SENT: &str = "SENT";
pub const DEAD: &str = "DEAD";

/// The column that says whether a DEAD row holds its aggregate; tables
/// made before it lack it until `outbox-relay init` runs again.
pub const HOLD_COLUMN: &str = "after_dead_letter";

/// Whether a row of this status and `after_dead_letter` holds its
/// aggregate's later events: the rule [`holders_sql`] writes in SQL.
pub fn holds(status: &str, after_dead_letter: AfterDeadLetter) -> bool {
    match status {
        PENDING => true,
        DEAD => after_dead_letter == AfterDeadLetter::Park,
        _ => false,
    }
}

/// [`holds`] in SQL: whether a row of `t` (quoted) of this route and key
/// (SQL expressions), older than row id `older_than` if given, holds the
/// aggregate; one `EXISTS` per kind of holder, PENDING and DEAD under park,
/// each answered by its partial index (`_key`, `_dead`). Kept apart rather
/// than one `OR`: under `NOT`, each becomes an anti-join on its index,
/// where an `OR` makes the claim compare every due row with every PENDING
/// row of the table.
pub fn holders_sql(t: &str, route: &str, key: &str, older_than: Option<&str>) -> [String; 2] {
    let older = older_than.map_or_else(String::new, |id| format!(" AND h.id < {id}"));
    let of = format!("h.route = {route} AND h.aggregate_key = {key}{older}");
    [
        format!("EXISTS (SELECT 1 FROM {t} h WHERE h.status = '{PENDING}' AND {of})"),
        format!(
            "EXISTS (SELECT 1 FROM {t} h WHERE h.status = '{DEAD}' AND {of} \
             AND h.{HOLD_COLUMN} = '{park}')",
            park = AfterDeadLetter::Park.as_str()
        ),
    ]
}

/// The `after_dead_letter` column's text back as the setting; anything but
/// `park` (the column allows only `park` and `skip`) holds nothing.
pub fn after_dead_letter_of(text: &str) -> AfterDeadLetter {
    if text == AfterDeadLetter::Park.as_str() {
        AfterDeadLetter::Park
    } else {
        AfterDeadLetter::Skip
    }
}

/// Longest `last_error` kept.
const MAX_ERROR_LEN: usize = 500;

/// What the table says about an event about to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    /// A row for this event exists: it was handled before (a replay).
    pub event: bool,
    /// A row holds its aggregate ([`holds`]): queue behind it.
    pub held: bool,
}

/// See the module docs.
///
/// # Errors
/// The connection's.
pub async fn look_up(
    conn: &mut SqlConnection,
    table: &DeliveryTable,
    route: &str,
    event: &WebhookEvent,
) -> Result<Known, PgError> {
    let t = table.quoted();
    let [pending, parked] = holders_sql(
        &t,
        &escape_literal(route),
        &escape_literal(&event.key),
        None,
    );
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM {t} WHERE event_id = {id}), ({pending} OR {parked})",
        id = escape_literal(&event.id),
    );
    let rows = conn.query(&sql, "look up a webhook event").await?;
    let flag = |i: usize| {
        rows.first()
            .and_then(|r| r.get(i))
            .and_then(|v| v.as_deref())
            == Some("t")
    };
    Ok(Known {
        event: flag(0),
        held: flag(1),
    })
}

/// How a row enters the table.
#[derive(Debug, Clone)]
pub struct NewRow<'a> {
    pub route: &'a str,
    pub event: &'a WebhookEvent,
    pub status: &'static str,
    pub attempts: u32,
    pub max_attempts: u32,
    /// From now; ignored for DEAD.
    pub delay: Duration,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
}

/// Inserts one row; a row for the same event already there wins (a replay).
///
/// # Errors
/// The connection's.
pub async fn insert(
    conn: &mut SqlConnection,
    table: &DeliveryTable,
    row: &NewRow<'_>,
) -> Result<(), PgError> {
    let headers: serde_json::Map<String, serde_json::Value> = row
        .event
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let headers = serde_json::Value::Object(headers).to_string();
    let sql = format!(
        "INSERT INTO {t} (event_id, route, aggregate_key, status, attempts, max_attempts, \
         next_attempt_at, last_error, last_status, headers, body, {HOLD_COLUMN}) VALUES ({id}, \
         {route}, {key}, {status}, {attempts}, {max}, \
         clock_timestamp() + {delay} * interval '1 millisecond', {error}, \
         {last_status}, {headers}::jsonb, decode({body}, 'hex'), {after}) \
         ON CONFLICT (event_id) DO NOTHING",
        after = escape_literal(row.event.after_dead_letter.as_str()),
        t = table.quoted(),
        id = escape_literal(&row.event.id),
        route = escape_literal(row.route),
        key = escape_literal(&row.event.key),
        status = escape_literal(row.status),
        attempts = row.attempts,
        max = row.max_attempts,
        delay = row.delay.as_millis(),
        error = row
            .last_error
            .as_deref()
            .map_or_else(|| "NULL".to_owned(), |e| escape_literal(&clip(e))),
        last_status = row
            .last_status
            .map_or_else(|| "NULL".to_owned(), |s| s.to_string()),
        headers = escape_literal(&headers),
        body = escape_literal(&hex::encode(&row.event.body)),
    );
    conn.query(&sql, "insert a webhook delivery").await?;
    Ok(())
}

/// A row claimed by the retry worker.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub route: String,
    pub attempts: u32,
    pub max_attempts: u32,
    pub event: WebhookEvent,
}

/// Opens a transaction and locks the due head of one aggregate's queue of
/// `route`, skipping rows another relay holds; `None` (transaction rolled
/// back) when nothing is due. On `Some`, the transaction stays open until
/// [`finish`].
///
/// # Errors
/// The connection's (the transaction is then abandoned with it).
pub async fn claim(
    conn: &mut SqlConnection,
    table: &DeliveryTable,
    route: &str,
) -> Result<Option<Claimed>, PgError> {
    let t = table.quoted();
    conn.query("BEGIN", "begin a webhook retry").await?;
    // Only the head of each aggregate's queue: no older row of the same key
    // that holds it (PENDING, or DEAD under `park`). A head another relay
    // has locked is skipped (SKIP LOCKED), and the rows behind it are not
    // heads, so nothing of that key is claimed meanwhile; nor while the
    // head is DEAD and parks its aggregate.
    let [pending, parked] = holders_sql(&t, "d.route", "d.aggregate_key", Some("d.id"));
    let sql = format!(
        "SELECT d.id, d.attempts, d.max_attempts, d.event_id, d.aggregate_key, d.headers::text, \
                encode(d.body, 'hex'), d.{HOLD_COLUMN} \
         FROM {t} d \
         WHERE d.status = 'PENDING' AND d.route = {route} AND d.next_attempt_at <= now() \
           AND NOT {pending} AND NOT {parked} \
         ORDER BY d.next_attempt_at \
         LIMIT 1 FOR UPDATE OF d SKIP LOCKED",
        route = escape_literal(route),
    );
    let rows = conn.query(&sql, "claim a webhook retry").await?;
    let Some(row) = rows.into_iter().next() else {
        conn.query("ROLLBACK", "end a webhook retry").await?;
        return Ok(None);
    };
    let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
    let headers: Vec<(String, String)> =
        match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&text(5)) {
            Ok(map) => map
                .into_iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_owned())))
                .collect(),
            Err(_) => Vec::new(),
        };
    Ok(Some(Claimed {
        id: text(0).parse().unwrap_or_default(),
        route: route.to_owned(),
        attempts: text(1).parse().unwrap_or_default(),
        max_attempts: text(2).parse().unwrap_or_default(),
        event: WebhookEvent {
            id: text(3),
            key: text(4),
            headers,
            body: hex::decode(text(6)).unwrap_or_default().into(),
            after_dead_letter: after_dead_letter_of(&text(7)),
        },
    }))
}

/// How a claimed row's try ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    Sent {
        status: u16,
    },
    Dead {
        status: Option<u16>,
        error: String,
    },
    Again {
        delay: Duration,
        status: Option<u16>,
        error: String,
    },
}

/// Records the try of a claimed row and commits, releasing its lock.
///
/// # Errors
/// The connection's (the transaction, and the try's record, are lost with
/// it; the row stays as it was, to be tried again).
pub async fn finish(
    conn: &mut SqlConnection,
    table: &DeliveryTable,
    id: i64,
    how: &Finish,
) -> Result<(), PgError> {
    let status = |s: Option<u16>| s.map_or_else(|| "NULL".to_owned(), |s| s.to_string());
    let set = match how {
        Finish::Sent { status: s } => format!(
            "status = 'SENT', sent_at = clock_timestamp(), last_status = {}, last_error = NULL",
            s
        ),
        Finish::Dead { status: s, error } => format!(
            "status = 'DEAD', last_status = {}, last_error = {}",
            status(*s),
            escape_literal(&clip(error))
        ),
        Finish::Again {
            delay,
            status: s,
            error,
        } => format!(
            "next_attempt_at = clock_timestamp() + {} * interval '1 millisecond', \
             last_status = {}, \
             last_error = {}",
            delay.as_millis(),
            status(*s),
            escape_literal(&clip(error))
        ),
    };
    let sql = format!(
        "UPDATE {t} SET attempts = attempts + 1, {set} WHERE id = {id}; COMMIT",
        t = table.quoted()
    );
    conn.query(&sql, "record a webhook retry").await?;
    Ok(())
}

/// The stuck-delivery figures of one route.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RouteStats {
    pub route: String,
    pub pending: u64,
    pub pending_over_10m: u64,
    pub dead: u64,
    /// Seconds since the oldest PENDING row was created; 0 without one.
    pub oldest_pending_secs: f64,
}

/// Per route with any PENDING or DEAD row.
///
/// # Errors
/// The connection's.
pub async fn stats(
    conn: &mut SqlConnection,
    table: &DeliveryTable,
) -> Result<Vec<RouteStats>, PgError> {
    let sql = format!(
        "SELECT route, count(*) FILTER (WHERE status = 'PENDING'), \
                count(*) FILTER (WHERE status = 'PENDING' AND created_at < now() - interval '10 minutes'), \
                count(*) FILTER (WHERE status = 'DEAD'), \
                coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'PENDING')), 0) \
         FROM {t} WHERE status <> 'SENT' GROUP BY route ORDER BY route",
        t = table.quoted()
    );
    let rows = conn.query(&sql, "count webhook deliveries").await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let text = |i: usize| r.get(i).cloned().flatten().unwrap_or_default();
            RouteStats {
                route: text(0),
                pending: text(1).parse().unwrap_or_default(),
                pending_over_10m: text(2).parse().unwrap_or_default(),
                dead: text(3).parse().unwrap_or_default(),
                oldest_pending_secs: text(4).parse().unwrap_or_default(),
            }
        })
        .collect())
}

fn clip(text: &str) -> String {
    crate::pg::clip(text, MAX_ERROR_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_sql_names_the_configured_table() {
        let table = DeliveryTable {
            schema: "billing".into(),
            name: "hook_rows".into(),
        };
        let sql = table.create_sql();
        assert!(
            sql.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"hook_rows\""),
            "{sql}"
        );
        assert!(
            sql.contains("INDEX IF NOT EXISTS \"hook_rows_due\""),
            "{sql}"
        );
        assert!(
            sql.contains("INDEX IF NOT EXISTS \"hook_rows_key\""),
            "{sql}"
        );
        assert!(
            sql.contains("ON \"billing\".\"hook_rows\" (next_attempt_at)"),
            "{sql}"
        );
        assert!(
            sql.contains("INDEX IF NOT EXISTS \"hook_rows_dead\""),
            "{sql}"
        );
        // An older table gets the column when init runs again.
        assert!(
            sql.contains(&format!(
                "ALTER TABLE \"billing\".\"hook_rows\" ADD COLUMN IF NOT EXISTS {HOLD_COLUMN} "
            )),
            "{sql}"
        );
        let statements: String = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect();
        assert!(!statements.contains("outbox_delivery"), "{statements}");
    }

    #[test]
    fn which_rows_hold_their_aggregate() {
        use AfterDeadLetter::{Park, Skip};
        // A PENDING row always holds (order while it is retried); a DEAD
        // one only under park; a SENT one never.
        assert!(holds(PENDING, Park) && holds(PENDING, Skip));
        assert!(holds(DEAD, Park));
        assert!(!holds(DEAD, Skip));
        assert!(!holds(SENT, Park) && !holds(SENT, Skip));
        // The column's text reads back as what was written.
        for after in [Park, Skip] {
            assert_eq!(after_dead_letter_of(after.as_str()), after);
        }
        // The SQL asks the same: PENDING rows, and DEAD ones under park
        // only, of the aggregate, older than the row when one is given.
        let [pending, parked] = holders_sql("t", "'r'", "'k'", Some("d.id"));
        assert!(
            pending.contains("h.status = 'PENDING'")
                && pending.contains("h.aggregate_key = 'k'")
                && pending.contains("h.id < d.id")
                && !pending.contains(HOLD_COLUMN),
            "{pending}"
        );
        assert!(
            parked.contains("h.status = 'DEAD'")
                && parked.contains("h.after_dead_letter = 'park'")
                && parked.contains("h.route = 'r'"),
            "{parked}"
        );
        let [pending, _] = holders_sql("t", "'r'", "'k'", None);
        assert!(!pending.contains("h.id <"), "{pending}");
    }
}
