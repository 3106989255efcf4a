//! The SQL of the delivery table (`sql/outbox_delivery.sql`), on a sink's
//! tokio-postgres sessions ([`Session`]).
//!
//! Every value is a typed parameter, never text spliced into a statement:
//! ids, routes and keys as text, the body as bytea (its exact bytes), the
//! headers as a JSON object's text that the server casts to jsonb, counts
//! and HTTP statuses as integers. The statements' text holds only the
//! table's name, quoted once ([`DeliveryTable::quoted`]), and the status
//! constants. Due times are the server's clock: a delay travels as
//! milliseconds and `next_attempt_at` is `clock_timestamp()` plus it, so
//! relays on hosts whose clocks disagree share one table.
//!
//! The statements a sink runs per event and per try are prepared once per
//! connection, on first use, and kept with it ([`Session`]): a look-up, an
//! insert and a try's record are one round trip each, the record's `COMMIT`
//! pipelined with it. The claim is planned for each run (its generic plan is
//! slow: see [`claim`]), its `BEGIN` pipelined with it. A
//! session whose statement failed is dropped by its user, never reused: its
//! transaction's state is unknown.
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

use tokio_postgres::types::{FromSql, ToSql};
use tokio_postgres::{GenericClient, Row, Statement};

use super::WebhookEvent;
use crate::pg::{ConnectSettings, PgClient, PgError};
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

/// [`AfterDeadLetter::Park`]'s text in the hold column, a literal in the
/// statements so that the `_dead` partial index's predicate matches.
const PARK: &str = "park";

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
             AND h.{HOLD_COLUMN} = '{PARK}')"
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

/// The statements a session prepares, once each, on first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prepared {
    LookUp,
    Insert,
    Claim,
    Sent,
    Dead,
    Again,
}

impl Prepared {
    const COUNT: usize = 6;

    /// The statement's text for the table `t` (quoted).
    fn sql(self, t: &str) -> String {
        match self {
            Prepared::LookUp => look_up_sql(t),
            Prepared::Insert => insert_sql(t),
            Prepared::Claim => claim_sql(t),
            Prepared::Sent | Prepared::Dead | Prepared::Again => finish_sql(t, self),
        }
    }

    fn action(self) -> &'static str {
        match self {
            Prepared::LookUp => "look up a webhook event",
            Prepared::Insert => "insert a webhook delivery",
            Prepared::Claim => "claim a webhook retry",
            Prepared::Sent | Prepared::Dead | Prepared::Again => "record a webhook retry",
        }
    }
}

/// One SQL connection of a sink, on its delivery table, with the
/// statements prepared on it so far.
pub struct Session {
    client: PgClient,
    table: DeliveryTable,
    prepared: [Option<Statement>; Prepared::COUNT],
}

impl Session {
    /// Opens an ordinary session (see [`PgClient::connect`]) for `table`.
    ///
    /// # Errors
    /// The connect's.
    pub async fn connect(
        settings: &ConnectSettings,
        table: &DeliveryTable,
    ) -> Result<Session, PgError> {
        Ok(Session::new(
            PgClient::connect(settings).await?,
            table.clone(),
        ))
    }

    /// A session on a connection already open; nothing is prepared yet.
    pub fn new(client: PgClient, table: DeliveryTable) -> Session {
        Session {
            client,
            table,
            prepared: Default::default(),
        }
    }

    /// The connection, for a statement of its own.
    pub fn client(&self) -> &PgClient {
        &self.client
    }

    /// The table this session's statements are about.
    pub fn table(&self) -> &DeliveryTable {
        &self.table
    }

    /// `which`, prepared on this connection the first time it is asked for.
    async fn statement(&mut self, which: Prepared) -> Result<Statement, PgError> {
        if let Some(statement) = &self.prepared[which as usize] {
            return Ok(statement.clone());
        }
        let statement = self
            .client
            .prepare(&which.sql(&self.table.quoted()))
            .await
            .map_err(|e| PgError::client(self.client.target(), which.action(), e))?;
        self.prepared[which as usize] = Some(statement.clone());
        Ok(statement)
    }

    fn error(&self, action: &'static str) -> impl Fn(tokio_postgres::Error) -> PgError + '_ {
        move |e| PgError::client(self.client.target(), action, e)
    }
}

/// Column `i` of `row` as `T`; a type that does not match is the
/// statement's error, not a panic.
fn column<'a, T: FromSql<'a>>(
    row: &'a Row,
    i: usize,
    target: &str,
    action: &'static str,
) -> Result<T, PgError> {
    row.try_get(i)
        .map_err(|e| PgError::client(target, action, e))
}

/// A count or an attempt number as the table's `integer`.
fn int4(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The table's `integer` back as a count (a negative one is 0).
fn uint(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// A delay as the milliseconds the statements add to `clock_timestamp()`.
fn millis(delay: Duration) -> i64 {
    i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)
}

/// What the table says about an event about to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    /// A row for this event exists: it was handled before (a replay).
    pub event: bool,
    /// A row holds its aggregate ([`holds`]): queue behind it.
    pub held: bool,
}

/// [`look_up`]'s statement: `$1` the event id, `$2` the route, `$3` the
/// aggregate key.
fn look_up_sql(t: &str) -> String {
    let [pending, parked] = holders_sql(t, "$2", "$3", None);
    format!("SELECT EXISTS (SELECT 1 FROM {t} WHERE event_id = $1), ({pending} OR {parked})")
}

/// See the module docs.
///
/// # Errors
/// The connection's.
pub async fn look_up(
    session: &mut Session,
    route: &str,
    event: &WebhookEvent,
) -> Result<Known, PgError> {
    let which = Prepared::LookUp;
    let statement = session.statement(which).await?;
    let row = session
        .client
        .query_one(&statement, &[&event.id, &route, &event.key])
        .await
        .map_err(session.error(which.action()))?;
    let target = session.client.target();
    Ok(Known {
        event: column(&row, 0, target, which.action())?,
        held: column::<Option<bool>>(&row, 1, target, which.action())?.unwrap_or(false),
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

impl NewRow<'_> {
    /// The event's headers as the JSON object the `headers` column holds.
    pub fn headers_json(&self) -> String {
        let headers: serde_json::Map<String, serde_json::Value> = self
            .event
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
            .collect();
        serde_json::Value::Object(headers).to_string()
    }
}

/// [`insert`]'s statement, its parameters in [`insert`]'s order.
fn insert_sql(t: &str) -> String {
    format!(
        "INSERT INTO {t} (event_id, route, aggregate_key, status, attempts, max_attempts, \
         next_attempt_at, last_error, last_status, headers, body, {HOLD_COLUMN}) \
         VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp() + $7::bigint * interval '1 millisecond', \
         $8, $9, $10::text::jsonb, $11, $12) \
         ON CONFLICT (event_id) DO NOTHING"
    )
}

/// A row's values as [`insert_sql`]'s parameters need them.
struct InsertValues {
    headers: String,
    last_error: Option<String>,
    last_status: Option<i32>,
    attempts: i32,
    max_attempts: i32,
    delay: i64,
    after_dead_letter: &'static str,
}

impl InsertValues {
    fn of(row: &NewRow<'_>) -> InsertValues {
        InsertValues {
            headers: row.headers_json(),
            last_error: row.last_error.as_deref().map(clip),
            last_status: row.last_status.map(i32::from),
            attempts: int4(row.attempts),
            max_attempts: int4(row.max_attempts),
            delay: millis(row.delay),
            after_dead_letter: row.event.after_dead_letter.as_str(),
        }
    }

    fn params<'a>(
        &'a self,
        row: &'a NewRow<'_>,
        body: &'a &'a [u8],
    ) -> [&'a (dyn ToSql + Sync); 12] {
        [
            &row.event.id,
            &row.route,
            &row.event.key,
            &row.status,
            &self.attempts,
            &self.max_attempts,
            &self.delay,
            &self.last_error,
            &self.last_status,
            &self.headers,
            body,
            &self.after_dead_letter,
        ]
    }
}

/// Inserts one row; a row for the same event already there wins (a replay).
///
/// # Errors
/// The connection's.
pub async fn insert(session: &mut Session, row: &NewRow<'_>) -> Result<(), PgError> {
    let which = Prepared::Insert;
    let statement = session.statement(which).await?;
    let values = InsertValues::of(row);
    let body = row.event.body.as_ref();
    session
        .client
        .execute(&statement, &values.params(row, &body))
        .await
        .map_err(session.error(which.action()))?;
    Ok(())
}

/// [`insert`] on any connection or open transaction (`target` names its
/// server in errors), for a caller whose own transaction must hold the
/// insert; prepared for this one statement.
///
/// # Errors
/// The connection's.
pub async fn insert_in(
    client: &impl GenericClient,
    target: &str,
    table: &DeliveryTable,
    row: &NewRow<'_>,
) -> Result<(), PgError> {
    let values = InsertValues::of(row);
    let body = row.event.body.as_ref();
    client
        .execute(&insert_sql(&table.quoted()), &values.params(row, &body))
        .await
        .map_err(|e| PgError::client(target, Prepared::Insert.action(), e))?;
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

/// How many due rows [`claim`] looks at first, oldest first.
pub const CLAIM_LOOK: i64 = 256;

/// [`claim`]'s first statement: `$1` the route. The due head of an
/// aggregate's queue among the [`CLAIM_LOOK`] rows due first.
///
/// Only the head of each aggregate's queue: no older row of the same key
/// that holds it (PENDING, or DEAD under `park`). A head another relay has
/// locked is skipped (SKIP LOCKED), and the rows behind it are not heads,
/// so nothing of that key is claimed meanwhile; nor while the head is DEAD
/// and parks its aggregate.
///
/// Bounded: the rows queued behind a head are due at once (they wait for
/// their head, not for a delay) while the head itself backs off, so while
/// an endpoint is down, the due rows are mostly rows no claim may take. An
/// unbounded scan of them in due order compared each with its key's queue:
/// 2.2–2.5 s per claim with 200,000 queued rows behind 1,000 heads, every
/// poll of every loop (docs/webhooks.md has the figures). The candidates come as an array, joined by position,
/// so that no plan can scan the due rows of the table instead.
pub fn claim_sql(t: &str) -> String {
    let [pending, parked] = holders_sql(t, "d.route", "d.aggregate_key", Some("d.id"));
    format!(
        "SELECT {CLAIMED_COLUMNS} \
         FROM unnest(ARRAY(SELECT c.id FROM {t} c \
                           WHERE c.status = '{PENDING}' AND c.route = $1 \
                             AND c.next_attempt_at <= now() \
                           ORDER BY c.next_attempt_at LIMIT {CLAIM_LOOK})) \
              WITH ORDINALITY AS due (id, n) \
         JOIN {t} d ON d.id = due.id \
         WHERE d.status = '{PENDING}' AND d.route = $1 AND d.next_attempt_at <= now() \
           AND NOT {pending} AND NOT {parked} \
         ORDER BY due.n \
         LIMIT 1 FOR UPDATE OF d SKIP LOCKED"
    )
}

/// Whether [`claim_sql`] saw all the due rows of route `$1`: fewer than
/// [`CLAIM_LOOK`] are due.
fn due_rows_sql(t: &str) -> String {
    format!(
        "SELECT count(*) FROM (SELECT 1 FROM {t} c \
         WHERE c.status = '{PENDING}' AND c.route = $1 AND c.next_attempt_at <= now() \
         LIMIT {CLAIM_LOOK}) due"
    )
}

/// [`claim`]'s second statement, when the first look found no head among
/// more due rows than it looks at: the heads of route `$1`, one per
/// aggregate, walked key by key on the `_key` index (a loose index scan:
/// one probe per aggregate with PENDING rows, however many rows each
/// holds), the due one first. Ordered by the head's own column, so that
/// no plan walks the due rows in their index's order instead.
pub fn claim_by_heads_sql(t: &str) -> String {
    let [_, parked] = holders_sql(t, "d.route", "d.aggregate_key", Some("d.id"));
    format!(
        "WITH RECURSIVE k (aggregate_key) AS ( \
           (SELECT h.aggregate_key FROM {t} h WHERE h.status = '{PENDING}' AND h.route = $1 \
            ORDER BY h.aggregate_key LIMIT 1) \
           UNION ALL \
           SELECT (SELECT h.aggregate_key FROM {t} h \
                   WHERE h.status = '{PENDING}' AND h.route = $1 \
                     AND h.aggregate_key > k.aggregate_key \
                   ORDER BY h.aggregate_key LIMIT 1) \
           FROM k WHERE k.aggregate_key IS NOT NULL) \
         SELECT {CLAIMED_COLUMNS} \
         FROM k CROSS JOIN LATERAL ( \
             SELECT h.id, h.next_attempt_at FROM {t} h \
             WHERE h.status = '{PENDING}' AND h.route = $1 AND h.aggregate_key = k.aggregate_key \
             ORDER BY h.id LIMIT 1) head \
         JOIN {t} d ON d.id = head.id \
         WHERE head.next_attempt_at <= now() \
           AND d.status = '{PENDING}' AND d.route = $1 AND d.next_attempt_at <= now() \
           AND NOT {parked} \
         ORDER BY head.next_attempt_at \
         LIMIT 1 FOR UPDATE OF d SKIP LOCKED"
    )
}

/// The columns of a claimed row, as [`claim`] reads them.
const CLAIMED_COLUMNS: &str = "d.id, d.attempts, d.max_attempts, d.event_id, d.aggregate_key, \
                               d.headers::text, d.body, d.after_dead_letter";

/// Opens a transaction and locks the due head of one aggregate's queue of
/// `route`, skipping rows another relay holds; `None` (transaction rolled
/// back) when nothing is due. On `Some`, the transaction stays open until
/// [`finish`].
///
/// # Errors
/// The connection's (the transaction is then abandoned with it).
pub async fn claim(session: &mut Session, route: &str) -> Result<Option<Claimed>, PgError> {
    let which = Prepared::Claim;
    // Planned for each run, never prepared once: a generic plan of this
    // statement (route unknown) scans the due rows with the anti-joins as
    // nested loops, minutes per claim on a table of 50,000 PENDING rows,
    // where the plan for the route at hand takes milliseconds.
    let statement = claim_sql(&session.table.quoted());
    let client = &session.client;
    // BEGIN and the claim in one round trip: both are sent before either
    // answer is read, in this order (tokio-postgres pipelines requests
    // polled together).
    let (_, row) = tokio::try_join!(
        async {
            client
                .batch_execute("BEGIN")
                .await
                .map_err(session.error("begin a webhook retry"))
        },
        async {
            client
                .query_opt(&statement, &[&route])
                .await
                .map_err(session.error(which.action()))
        },
    )?;
    let row = match row {
        Some(row) => Some(row),
        None => claim_behind_the_look(session, route).await?,
    };
    let client = &session.client;
    let Some(row) = row else {
        client
            .batch_execute("ROLLBACK")
            .await
            .map_err(session.error("end a webhook retry"))?;
        return Ok(None);
    };
    let (target, action) = (client.target(), which.action());
    let headers: String = column(&row, 5, target, action)?;
    let headers: Vec<(String, String)> =
        match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&headers) {
            Ok(map) => map
                .into_iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_owned())))
                .collect(),
            Err(_) => Vec::new(),
        };
    let body: Vec<u8> = column(&row, 6, target, action)?;
    let after: String = column(&row, 7, target, action)?;
    Ok(Some(Claimed {
        id: column(&row, 0, target, action)?,
        route: route.to_owned(),
        attempts: uint(column(&row, 1, target, action)?),
        max_attempts: uint(column(&row, 2, target, action)?),
        event: WebhookEvent {
            id: column(&row, 3, target, action)?,
            key: column(&row, 4, target, action)?,
            headers,
            body: body.into(),
            after_dead_letter: after_dead_letter_of(&after),
        },
    }))
}

/// [`claim`]'s second try, in its open transaction: when more rows are
/// due than the first look took, a due head may wait behind them; walk
/// the heads instead.
async fn claim_behind_the_look(session: &Session, route: &str) -> Result<Option<Row>, PgError> {
    let t = session.table.quoted();
    let action = Prepared::Claim.action();
    let row = session
        .client
        .query_one(&due_rows_sql(&t), &[&route])
        .await
        .map_err(session.error(action))?;
    let due: i64 = column(&row, 0, session.client.target(), action)?;
    if due < CLAIM_LOOK {
        return Ok(None);
    }
    session
        .client
        .query_opt(&claim_by_heads_sql(&t), &[&route])
        .await
        .map_err(session.error(action))
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

/// [`finish`]'s statement of one outcome: `$1` the row id, `$2` the HTTP
/// status; `$3` the error (DEAD, again); `$4` the delay in milliseconds
/// (again).
fn finish_sql(t: &str, how: Prepared) -> String {
    let set = match how {
        Prepared::Dead => format!("status = '{DEAD}', last_status = $2, last_error = $3"),
        Prepared::Again => "next_attempt_at = clock_timestamp() + $4::bigint * interval \
                            '1 millisecond', last_status = $2, last_error = $3"
            .to_owned(),
        _ => format!(
            "status = '{SENT}', sent_at = clock_timestamp(), last_status = $2, last_error = NULL"
        ),
    };
    format!("UPDATE {t} SET attempts = attempts + 1, {set} WHERE id = $1")
}

/// Records the try of a claimed row and commits, releasing its lock.
///
/// # Errors
/// The connection's (the transaction, and the try's record, are lost with
/// it; the row stays as it was, to be tried again).
pub async fn finish(session: &mut Session, id: i64, how: &Finish) -> Result<(), PgError> {
    let (which, status, error, delay) = match how {
        Finish::Sent { status } => (Prepared::Sent, Some(*status), None, None),
        Finish::Dead { status, error } => (Prepared::Dead, *status, Some(clip(error)), None),
        Finish::Again {
            delay,
            status,
            error,
        } => (
            Prepared::Again,
            *status,
            Some(clip(error)),
            Some(millis(*delay)),
        ),
    };
    let statement = session.statement(which).await?;
    let status = status.map(i32::from);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&id, &status];
    if let Some(error) = &error {
        params.push(error);
    }
    if let Some(delay) = &delay {
        params.push(delay);
    }
    let client = &session.client;
    // The record and COMMIT in one round trip, as for the claim.
    tokio::try_join!(
        async {
            client
                .execute(&statement, &params)
                .await
                .map_err(session.error(which.action()))
        },
        async {
            client
                .batch_execute("COMMIT")
                .await
                .map_err(session.error(which.action()))
        },
    )?;
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

/// [`stats`]'s statement: no parameter.
pub fn stats_sql(t: &str) -> String {
    format!(
        "SELECT route, count(*) FILTER (WHERE status = '{PENDING}'), \
                count(*) FILTER (WHERE status = '{PENDING}' \
                                 AND created_at < now() - interval '10 minutes'), \
                count(*) FILTER (WHERE status = '{DEAD}'), \
                coalesce(extract(epoch FROM now() - min(created_at) \
                                 FILTER (WHERE status = '{PENDING}')), 0)::float8 \
         FROM {t} WHERE status <> '{SENT}' GROUP BY route ORDER BY route"
    )
}

/// Per route with any PENDING or DEAD row. Sampled every few seconds, on
/// a connection of its own: not prepared ahead.
///
/// # Errors
/// The connection's.
pub async fn stats(session: &mut Session) -> Result<Vec<RouteStats>, PgError> {
    stats_on(&session.client, &session.table).await
}

/// [`stats`] on any ordinary session (`status` reads it on its own).
///
/// # Errors
/// The connection's.
pub async fn stats_on(
    client: &PgClient,
    table: &DeliveryTable,
) -> Result<Vec<RouteStats>, PgError> {
    let action = "count webhook deliveries";
    let rows = client
        .query(&stats_sql(&table.quoted()), &[])
        .await
        .map_err(|e| PgError::client(client.target(), action, e))?;
    let target = client.target();
    let count = |row: &Row, i: usize| -> Result<u64, PgError> {
        Ok(u64::try_from(column::<i64>(row, i, target, action)?).unwrap_or(0))
    };
    rows.iter()
        .map(|row| {
            Ok(RouteStats {
                route: column(row, 0, target, action)?,
                pending: count(row, 1)?,
                pending_over_10m: count(row, 2)?,
                dead: count(row, 3)?,
                oldest_pending_secs: column(row, 4, target, action)?,
            })
        })
        .collect()
}

fn clip(text: &str) -> String {
    crate::pg::clip(text, MAX_ERROR_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_park_literal_is_the_settings_text() {
        assert_eq!(PARK, AfterDeadLetter::Park.as_str());
    }

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
    fn every_value_is_a_parameter() {
        let t = DeliveryTable::default().quoted();
        let look_up = look_up_sql(&t);
        assert!(
            look_up.contains("event_id = $1")
                && look_up.contains("h.route = $2")
                && look_up.contains("h.aggregate_key = $3"),
            "{look_up}"
        );
        // Twelve columns, twelve parameters; the body as bytea, not text.
        let insert = insert_sql(&t);
        assert!(
            (1..=12).all(|i| insert.contains(&format!("${i}"))) && !insert.contains("$13"),
            "{insert}"
        );
        assert!(!insert.contains("decode("), "{insert}");
        let claim = claim_sql(&t);
        assert!(
            claim.contains("d.route = $1") && !claim.contains("encode("),
            "{claim}"
        );
        let [sent, dead, again] =
            [Prepared::Sent, Prepared::Dead, Prepared::Again].map(|how| finish_sql(&t, how));
        assert!(sent.contains("'SENT'") && !sent.contains("$3"), "{sent}");
        assert!(
            dead.contains("'DEAD'") && dead.contains("last_error = $3"),
            "{dead}"
        );
        assert!(
            again.contains("$4::bigint") && !again.contains("status = '"),
            "{again}"
        );
        for sql in [&look_up, &insert, &claim, &sent, &dead, &again] {
            assert!(
                sql.contains("WHERE id = $1") || !sql.starts_with("UPDATE"),
                "{sql}"
            );
        }
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
