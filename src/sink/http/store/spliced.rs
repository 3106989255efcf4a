//! The delivery table's statements for callers that still run their SQL on
//! a simple-query [`SqlConnection`]: the parking release's insert of a
//! parked webhook event (inside the release's transaction, so it must run
//! on that connection) and `status`'s figures. The simple query protocol
//! has no parameters, so values are spliced in as quoted literals
//! (`escape_literal` is right whatever the session's
//! `standard_conforming_strings`), the body as hex. The same statements as
//! the parent module's, which the relay itself runs with typed parameters;
//! these go once their callers run on [`crate::pg::PgClient`].

use postgres_protocol::escape::escape_literal;

use super::{DeliveryTable, HOLD_COLUMN, NewRow, RouteStats, clip, stats_sql};
use crate::pg::{PgError, SqlConnection};

/// [`super::insert`] on a simple-query connection.
///
/// # Errors
/// The connection's.
pub async fn insert(
    conn: &mut SqlConnection,
    table: &DeliveryTable,
    row: &NewRow<'_>,
) -> Result<(), PgError> {
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
        headers = escape_literal(&row.headers_json()),
        body = escape_literal(&hex::encode(&row.event.body)),
    );
    conn.query(&sql, "insert a webhook delivery").await?;
    Ok(())
}

/// [`super::stats`] on a simple-query connection (its statement has no
/// value to splice).
///
/// # Errors
/// The connection's.
pub async fn stats(
    conn: &mut SqlConnection,
    table: &DeliveryTable,
) -> Result<Vec<RouteStats>, PgError> {
    let rows = conn
        .query(&stats_sql(&table.quoted()), "count webhook deliveries")
        .await?;
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
