//! `outbox-relay status`: how far behind the slot is, for the on-call
//! engineer: the lag in bytes, the slot's WAL status, who holds it, and,
//! when the outbox keeps its rows, how many rows may still wait and how old
//! the oldest of them is; and the aggregates parked behind a dead letter.
//!
//! Role: [`gather`] reads the slot (one query), the pending rows (one
//! scan of the outbox table), the webhook sinks' delivery table and the
//! parking table (a count each); [`render_text`] and [`render_json`]
//! format a [`StatusReport`].
//!
//! Parked aggregates are shown, never judged: parking is the relay working
//! as configured (`after_dead_letter = "park"`), and what releases them is
//! a person (`outbox-relay dead list`, then `dead retry` or `dead discard`),
//! whatever the slot's state.
//!
//! The pending rows, and why they are an upper bound: a row does not record
//! the LSN of the commit that inserted it, so "above the confirmed
//! position" cannot be read off a row. What PostgreSQL does keep is the
//! slot's `catalog_xmin`: the oldest transaction that was still running at
//! a point of the WAL the relay has confirmed (the last `xl_running_xacts`
//! record before the confirmed position that the slot has moved past). A
//! transaction older than it had finished before that point, so its rows
//! were relayed. Rows whose inserting transaction (`xmin`) is not older are
//! counted as possibly pending. The count never misses a pending row, and
//! overcounts by the rows committed between that running-xacts record (the
//! server logs one every 15 s while there is activity, and at checkpoints)
//! and the confirmed position, or since an older transaction that was open
//! at the time began. When the confirmed position has reached the end of
//! the WAL, nothing is pending and the table is not scanned.
//!
//! The age of the oldest possibly pending row is `now()` minus its commit
//! time: `pg_xact_commit_timestamp(xmin)` when `track_commit_timestamp` is
//! on (exact), otherwise the row's timestamp column (`postgres.columns.
//! timestamp`, usually the insert's `now()`: the transaction's start, so
//! the age reads a little high for long transactions) when the table has
//! it as a timestamp (Debezium's documented table has none). Without
//! either, only the count is shown.
//!
//! The verdict ([`judge`]), which the exit status follows: `fail` when the
//! relay cannot use the slot (it does not exist, is not a pgoutput slot of
//! this database, or is invalidated: the relay's own verdict), `warn` when
//! WAL piles up unread (nobody reads the slot while it holds WAL not
//! confirmed, or its WAL is due for removal), `ok` otherwise.
//!
//! The scan reads the whole outbox table: on a large one, prefer a longer
//! `--watch` interval.

use std::fmt::Write as _;
use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::parking::store::{self as parking_store, ParkedTable, Stats as ParkedStats};
use crate::pg::{AsText, ErrorKind, PgClient, PgError, qualified};
use crate::replication::evaluate_slot_json;
use postgres_protocol::escape::escape_identifier;

use super::pg_facts::{HOLDER_COLUMNS, HolderFacts};
use super::{AdminTarget, human_bytes, human_duration};

/// How the age of the oldest pending row was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgeMethod {
    /// `pg_xact_commit_timestamp(xmin)` (track_commit_timestamp = on).
    CommitTimestamp,
    /// The row's timestamp column.
    TimestampColumn,
    /// Neither is available.
    None,
}

impl AgeMethod {
    fn describe(self) -> &'static str {
        match self {
            AgeMethod::CommitTimestamp => "by commit timestamp",
            AgeMethod::TimestampColumn => "by the rows' timestamp column",
            AgeMethod::None => "",
        }
    }
}

/// The outbox rows that may not have been relayed yet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pending {
    pub method: AgeMethod,
    /// Whether the table holds any row (`None`: not read).
    pub keeps_rows: Option<bool>,
    /// Rows possibly not relayed yet: an upper bound (see the module doc).
    pub rows: Option<i64>,
    pub oldest_age_seconds: Option<f64>,
    /// Why the rows were not counted, when they were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The exit status of `status` on a warning (docs/operations.md lists it):
/// not 1, which says the slot cannot be used at all.
pub const EXIT_WARN: u8 = 6;

/// What the slot's state means for the relay, for scripts and alerts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    /// The relay can use the slot, but WAL piles up unread.
    Warn,
    /// The relay cannot use the slot.
    Fail,
}

/// What `status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    pub slot: String,
    pub database: String,
    pub exists: bool,
    pub confirmed_flush_lsn: Option<String>,
    /// `pg_current_wal_lsn()` (the replay position on a standby).
    pub current_lsn: Option<String>,
    /// `pg_current_wal_lsn() - confirmed_flush_lsn`.
    pub lag_bytes: Option<i64>,
    pub wal_status: Option<String>,
    /// Bytes of WAL that may still be written before the slot is lost;
    /// `None` when unlimited (max_slot_wal_keep_size = -1).
    pub safe_wal_size: Option<i64>,
    pub active_pid: Option<i32>,
    /// PostgreSQL 17+: a failover slot (kept in step on standbys with
    /// `sync_replication_slots`); `None` before 17.
    pub failover: Option<bool>,
    /// PostgreSQL 17+: this server is a standby and the slot its
    /// synchronized copy.
    pub synced: Option<bool>,
    pub holder: Option<HolderFacts>,
    pub pending: Pending,
    /// Per webhook sink: its rows of the delivery table (none without a
    /// sink; a table that cannot be read leaves it empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<crate::sink::http::store::RouteStats>,
    /// The parking table's figures (`None`: it could not be read, and
    /// `parked_note` says why).
    pub parked: Option<ParkedStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked_note: Option<String>,
    /// Why the relay cannot use the slot (its own verdict), when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unusable: Option<String>,
    /// [`judge`]'s verdict, and why when not ok.
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The slot query's document.
#[derive(Debug, Deserialize)]
struct SlotDocument {
    database: String,
    current_lsn: Option<String>,
    insert_lsn: Option<String>,
    track_commit_timestamp: bool,
    slot: Option<SlotFields>,
    lag_bytes: Option<i64>,
    holder: Option<HolderFacts>,
    table_exists: bool,
    /// `format_type` of the configured timestamp column, when the table
    /// has it.
    timestamp_type: Option<String>,
    /// The slot's `pg_replication_slots` row, for the relay's own verdict.
    row: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct SlotFields {
    confirmed_flush_lsn: Option<String>,
    catalog_xmin: Option<String>,
    wal_status: Option<String>,
    safe_wal_size: Option<i64>,
    active_pid: Option<i32>,
    failover: Option<bool>,
    synced: Option<bool>,
}

/// The slot's document. Parameters: `$1` the slot, `$2` and `$3` the
/// outbox table's schema and name, `$4` its timestamp column (NULL when
/// none is configured).
fn slot_sql() -> String {
    let (slot, schema, name, column) = ("$1", "$2", "$3", "$4");
    format!(
        "WITH s AS (SELECT * FROM pg_catalog.pg_replication_slots WHERE slot_name = {slot}), \
         w AS (SELECT CASE WHEN pg_catalog.pg_is_in_recovery() \
             THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_lsn() END AS lsn, \
           CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL \
             ELSE pg_catalog.pg_current_wal_insert_lsn() END AS insert_lsn) \
         SELECT json_build_object( \
           'database', current_database(), \
           'current_lsn', (SELECT lsn::text FROM w), \
           'insert_lsn', (SELECT insert_lsn::text FROM w), \
           'track_commit_timestamp', current_setting('track_commit_timestamp') = 'on', \
           'slot', (SELECT json_build_object('confirmed_flush_lsn', s.confirmed_flush_lsn::text, \
              'catalog_xmin', s.catalog_xmin::text, 'wal_status', s.wal_status, \
              'safe_wal_size', s.safe_wal_size, 'active_pid', s.active_pid, \
              'failover', to_jsonb(s) -> 'failover', 'synced', to_jsonb(s) -> 'synced') FROM s), \
           'lag_bytes', (SELECT pg_catalog.pg_wal_lsn_diff(w.lsn, s.confirmed_flush_lsn)::bigint \
              FROM s, w), \
           'holder', (SELECT json_build_object({HOLDER_COLUMNS}) \
              FROM pg_catalog.pg_stat_activity a \
              LEFT JOIN pg_catalog.pg_stat_replication r ON r.pid = a.pid \
              WHERE a.pid = (SELECT active_pid FROM s)), \
           'table_exists', EXISTS (SELECT 1 FROM pg_catalog.pg_class c \
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = {schema} AND c.relname = {name}), \
           'timestamp_type', (SELECT pg_catalog.format_type(a.atttypid, NULL) \
              FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = {schema} AND c.relname = {name} AND a.attname = {column} \
              AND a.attnum > 0 AND NOT a.attisdropped), \
           'row', (SELECT to_jsonb(s) FROM s) \
         )::text"
    )
}

/// The scan for possibly pending rows: their count and the oldest one's age
/// in seconds (as text: `extract` is `double precision` before PostgreSQL
/// 14 and `numeric` since), given the commit-time expression; the slot's
/// `catalog_xmin` is parameter `$1` ([`AsText`]: an `xid`).
pub fn pending_sql(table: (&str, &str), time: Option<&str>) -> String {
    let time = time.unwrap_or("NULL::timestamptz");
    format!(
        "SELECT count(*)::text, extract(epoch FROM now() - min(ts))::text FROM \
         (SELECT {time} AS ts FROM {} t \
          WHERE pg_catalog.age(t.xmin) <= pg_catalog.age($1::xid)) pending",
        qualified(table.0, table.1),
    )
}

/// Runs [`pending_sql`]: the count and the oldest one's age.
///
/// # Errors
/// The server's.
pub async fn count_pending(
    client: &PgClient,
    table: (&str, &str),
    catalog_xmin: &str,
    time: Option<&str>,
) -> Result<(Option<i64>, Option<f64>), PgError> {
    let action = "counting pending outbox rows";
    let row = client
        .query_one(&pending_sql(table, time), &[&AsText(catalog_xmin)])
        .await
        .map_err(|e| client.error(action, e))?;
    let value = |i: usize| {
        row.try_get::<_, Option<String>>(i)
            .map_err(|e| client.error(action, e))
    };
    Ok((
        value(0)?.and_then(|v| v.parse().ok()),
        value(1)?.and_then(|v| v.parse().ok()),
    ))
}

/// The SQL expression for a row's commit time, and how it was chosen.
pub fn commit_time_expression(
    track_commit_timestamp: bool,
    timestamp_column: Option<&str>,
) -> (Option<String>, AgeMethod) {
    let column = timestamp_column.map(|c| format!("t.{}::timestamptz", escape_identifier(c)));
    match (track_commit_timestamp, column) {
        // Transactions from before the setting was turned on have no
        // commit timestamp: fall back to the column for those.
        (true, Some(column)) => (
            Some(format!(
                "coalesce(pg_catalog.pg_xact_commit_timestamp(t.xmin), {column})"
            )),
            AgeMethod::CommitTimestamp,
        ),
        (true, None) => (
            Some("pg_catalog.pg_xact_commit_timestamp(t.xmin)".to_owned()),
            AgeMethod::CommitTimestamp,
        ),
        (false, Some(column)) => (Some(column), AgeMethod::TimestampColumn),
        (false, None) => (None, AgeMethod::None),
    }
}

/// Whether the confirmed position has reached the end of the WAL: then no
/// committed row can be pending.
pub fn caught_up(confirmed: Option<&str>, insert: Option<&str>) -> bool {
    let parse = |t: Option<&str>| t.and_then(|t| t.parse::<pgoutput::lsn::Lsn>().ok());
    matches!((parse(confirmed), parse(insert)), (Some(c), Some(i)) if c >= i)
}

/// Reads the status once on `client`: the slot, the outbox, the delivery
/// and parking tables.
///
/// # Errors
/// The server refused a query or the connection failed.
pub async fn gather(client: &PgClient, config: &Config) -> Result<StatusReport, PgError> {
    let pg = &config.postgres;
    let (schema, name) = pg.table_parts();
    let action = "reading the slot's status";
    let json: String = client
        .query_one(
            &slot_sql(),
            &[&pg.slot, &schema, &name, &pg.columns.timestamp_column()],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| client.error(action, e))?;
    let document: SlotDocument = serde_json::from_str(&json).map_err(|e| PgError::Protocol {
        target: client.target().to_owned(),
        action,
        reason: format!("unexpected status document: {e}"),
    })?;
    // The configured column serves for the age only where the table has
    // it, as a timestamp: the default name (`timestamp`) is often absent.
    let timestamp_column = pg.columns.timestamp_column().filter(|_| {
        matches!(
            document.timestamp_type.as_deref(),
            Some("timestamp with time zone" | "timestamp without time zone")
        )
    });
    let (time, method) = commit_time_expression(document.track_commit_timestamp, timestamp_column);
    let mut pending = Pending {
        method,
        keeps_rows: None,
        rows: None,
        oldest_age_seconds: None,
        note: None,
    };
    let slot = document.slot.as_ref();
    if !document.table_exists {
        pending.note = Some(format!("the outbox table {schema}.{name} does not exist"));
    } else if let Some(slot) = slot {
        let any_row = format!(
            "SELECT EXISTS (SELECT 1 FROM {})",
            qualified(&schema, &name)
        );
        match client
            .query_one(&any_row, &[])
            .await
            .and_then(|row| row.try_get::<_, bool>(0))
            .map_err(|e| client.error("looking for outbox rows", e))
        {
            Err(e) => pending.note = Some(format!("the outbox table cannot be read: {e}")),
            Ok(keeps) => {
                pending.keeps_rows = Some(keeps);
                if !keeps {
                    pending.note = Some(
                        "the outbox table is empty (rows deleted after insert?): lag_bytes \
                         is the measure"
                            .into(),
                    );
                } else if caught_up(
                    slot.confirmed_flush_lsn.as_deref(),
                    document.insert_lsn.as_deref(),
                ) {
                    pending.rows = Some(0);
                } else if let Some(catalog_xmin) = &slot.catalog_xmin {
                    (pending.rows, pending.oldest_age_seconds) =
                        count_pending(client, (&schema, &name), catalog_xmin, time.as_deref())
                            .await?;
                } else {
                    pending.note = Some("the slot has no catalog_xmin".into());
                }
            }
        }
    }
    let unusable = document.row.as_ref().and_then(|row| {
        match evaluate_slot_json(&pg.slot, &document.database, &row.to_string()) {
            Err(e) if e.kind() != ErrorKind::SlotBusy => Some(e.to_string()),
            _ => None,
        }
    });
    let webhooks = webhook_stats(client, config).await;
    let (parked, parked_note) = parked_stats(client, config).await;
    let mut report = StatusReport {
        slot: pg.slot.clone(),
        database: document.database,
        exists: slot.is_some(),
        confirmed_flush_lsn: slot.and_then(|s| s.confirmed_flush_lsn.clone()),
        current_lsn: document.current_lsn,
        lag_bytes: document.lag_bytes,
        wal_status: slot.and_then(|s| s.wal_status.clone()),
        safe_wal_size: slot.and_then(|s| s.safe_wal_size),
        active_pid: slot.and_then(|s| s.active_pid),
        failover: slot.and_then(|s| s.failover),
        synced: slot.and_then(|s| s.synced),
        holder: document.holder.map(HolderFacts::with_hint),
        pending,
        webhooks,
        parked,
        parked_note,
        unusable,
        verdict: Verdict::Ok,
        problem: None,
    };
    (report.verdict, report.problem) = judge(&report);
    Ok(report)
}

/// The verdict on a reading, and why when it is not ok (see the module
/// doc): what an operator must act on, by how soon.
pub fn judge(report: &StatusReport) -> (Verdict, Option<String>) {
    if !report.exists {
        return (
            Verdict::Fail,
            Some("the slot does not exist: `outbox-relay check` says how to set it up".into()),
        );
    }
    if let Some(why) = &report.unusable {
        return (Verdict::Fail, Some(why.clone()));
    }
    if report.wal_status.as_deref() == Some("unreserved") {
        return (
            Verdict::Warn,
            Some(
                "WAL the slot needs is due for removal: the slot is lost at the next \
                 checkpoint unless its reader catches up"
                    .into(),
            ),
        );
    }
    let lag = report.lag_bytes.unwrap_or(0);
    // A standby's synchronized copy is read on the primary, not here.
    if report.active_pid.is_none() && lag > 0 && report.synced != Some(true) {
        return (
            Verdict::Warn,
            Some(format!(
                "nobody reads the slot, and it holds {} of WAL not confirmed, which the \
                 server keeps: start the relay (or drop the slot if no relay will read it)",
                human_bytes(u64::try_from(lag).unwrap_or(0))
            )),
        );
    }
    (Verdict::Ok, None)
}

/// The stuck-delivery figures of every configured sink, zeros included.
async fn webhook_stats(
    client: &PgClient,
    config: &Config,
) -> Vec<crate::sink::http::store::RouteStats> {
    use crate::sink::http::store;
    if config.sinks.is_empty() {
        return Vec::new();
    }
    let (schema, name) = config.postgres.delivery_table_parts();
    let table = store::DeliveryTable { schema, name };
    let Ok(stats) = store::stats_on(client, &table).await else {
        return Vec::new();
    };
    config
        .sinks
        .keys()
        .map(|route| {
            stats
                .iter()
                .find(|s| s.route == *route)
                .cloned()
                .unwrap_or_else(|| store::RouteStats {
                    route: route.clone(),
                    ..store::RouteStats::default()
                })
        })
        .collect()
}

/// The parking table's figures, or why they could not be read.
async fn parked_stats(client: &PgClient, config: &Config) -> (Option<ParkedStats>, Option<String>) {
    let (schema, name) = config.postgres.parked_table_parts();
    let table = ParkedTable { schema, name };
    match parking_store::stats(client, &table).await {
        Ok(stats) => (Some(stats), None),
        Err(e) if e.sqlstate() == Some("42P01") => (
            None,
            Some(format!(
                "the parking table {}.{} does not exist (`outbox-relay init` creates it)",
                table.schema, table.name
            )),
        ),
        Err(e) => (None, Some(format!("the parking table cannot be read: {e}"))),
    }
}

/// The `parked` row of the text report.
fn parked_text(report: &StatusReport) -> String {
    match (&report.parked, &report.parked_note) {
        (Some(p), _) if p.aggregates == 0 && p.events == 0 => "none".to_owned(),
        (Some(p), _) => format!(
            "{} aggregates behind a dead letter, {} events waiting behind them; the oldest \
             parked {} ago: `outbox-relay dead list` shows them",
            p.aggregates,
            p.events,
            human_duration(p.oldest_head_secs)
        ),
        (None, note) => note.clone().unwrap_or_else(|| "unknown".to_owned()),
    }
}

/// The report for people.
pub fn render_text(report: &StatusReport) -> String {
    let mut rows: Vec<(&str, String)> = vec![(
        "slot",
        format!("{:?} in database {:?}", report.slot, report.database),
    )];
    if !report.exists {
        rows.push((
            "",
            "does not exist: `outbox-relay check` says how to set it up".to_owned(),
        ));
        return table(&rows);
    }
    let dash = || "-".to_owned();
    rows.push((
        "confirmed flush",
        report.confirmed_flush_lsn.clone().unwrap_or_else(dash),
    ));
    rows.push((
        "current WAL",
        report.current_lsn.clone().unwrap_or_else(dash),
    ));
    rows.push((
        "lag",
        report.lag_bytes.map_or_else(dash, |b| {
            let bytes = u64::try_from(b).unwrap_or(0);
            if bytes < 1024 {
                human_bytes(bytes)
            } else {
                format!("{} ({bytes} bytes)", human_bytes(bytes))
            }
        }),
    ));
    let safe = match report.safe_wal_size {
        Some(bytes) => format!(
            "{} more WAL before the slot is lost",
            human_bytes(u64::try_from(bytes).unwrap_or(0))
        ),
        None => "no limit (max_slot_wal_keep_size = -1)".to_owned(),
    };
    rows.push((
        "wal_status",
        format!(
            "{} ({safe})",
            report.wal_status.as_deref().unwrap_or("unknown")
        ),
    ));
    if let Some(failover) = report.failover {
        rows.push((
            "failover",
            match (failover, report.synced.unwrap_or(false)) {
                (true, true) => {
                    "yes; this server is a standby and the slot its synchronized copy".to_owned()
                }
                (true, false) => {
                    "yes: standbys with sync_replication_slots keep a copy in step".to_owned()
                }
                (false, _) => "no: after a failover the new primary has no such slot".to_owned(),
            },
        ));
    }
    rows.push((
        "held by",
        match (&report.holder, report.active_pid) {
            (Some(h), _) => h.describe(),
            (None, Some(pid)) => format!("pid {pid}"),
            (None, None) => "nobody: no relay is reading the slot".to_owned(),
        },
    ));
    let p = &report.pending;
    rows.push((
        "pending rows",
        match (p.rows, p.oldest_age_seconds) {
            (Some(0), _) => "none".to_owned(),
            (Some(n), Some(age)) => format!(
                "{n} at most; the oldest is {} old ({})",
                human_duration(age),
                p.method.describe()
            ),
            (Some(n), None) => format!(
                "{n} at most (their age is unknown: no timestamp column and \
                 track_commit_timestamp is off)"
            ),
            (None, _) => p.note.clone().unwrap_or_else(|| "unknown".to_owned()),
        },
    ));
    let webhook_rows: Vec<(String, String)> = report
        .webhooks
        .iter()
        .map(|w| {
            let oldest = if w.pending > 0 {
                format!(", the oldest {} old", human_duration(w.oldest_pending_secs))
            } else {
                String::new()
            };
            (
                format!("webhook {}", w.route),
                format!(
                    "{} pending ({} for over 10 min{oldest}), {} dead",
                    w.pending, w.pending_over_10m, w.dead
                ),
            )
        })
        .collect();
    rows.extend(webhook_rows.iter().map(|(k, v)| (k.as_str(), v.clone())));
    rows.push(("parked", parked_text(report)));
    rows.push((
        "verdict",
        match (report.verdict, &report.problem) {
            (Verdict::Ok, _) => "ok".to_owned(),
            (Verdict::Warn, why) => format!("WARN: {}", why.as_deref().unwrap_or("")),
            (Verdict::Fail, why) => format!("FAIL: {}", why.as_deref().unwrap_or("")),
        },
    ));
    table(&rows)
}

fn table(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in rows {
        let _ = writeln!(out, "{key:<width$}  {value}");
    }
    out
}

/// The report for scripts: one JSON object (one line, so `--watch` gives
/// JSON lines).
pub fn render_json(report: &StatusReport) -> String {
    serde_json::to_string(report).unwrap_or_else(|_| "{}".to_owned())
}

/// Prints the status once, or every `watch` interval until `stop`
/// resolves. Returns the verdict of the last reading (`Fail` when the last
/// reading under `watch` failed).
///
/// # Errors
/// Without `watch`: the connection or a query failed. With `watch`, a
/// failure is printed and the next reading reconnects.
pub async fn run(
    target: &AdminTarget,
    config: &Config,
    json: bool,
    watch: Option<Duration>,
    stop: impl Future<Output = ()>,
    out: &mut dyn std::io::Write,
) -> Result<Verdict, PgError> {
    let Some(interval) = watch else {
        let client = target.client().await?;
        let report = gather(&client, config).await?;
        let _ = write_report(out, &report, json);
        return Ok(report.verdict);
    };
    tokio::pin!(stop);
    let mut connection: Option<PgClient> = None;
    let mut verdict;
    loop {
        let reading = async {
            let client = match connection.take() {
                Some(client) => client,
                None => target.client().await?,
            };
            let report = gather(&client, config).await;
            if report.is_ok() {
                connection = Some(client);
            }
            report
        }
        .await;
        if !json {
            let _ = writeln!(
                out,
                "--- {} (every {}; Ctrl-C stops)",
                chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC"),
                human_duration(interval.as_secs_f64())
            );
        }
        match reading {
            Ok(report) => {
                verdict = report.verdict;
                let _ = write_report(out, &report, json);
            }
            Err(e) if json => {
                verdict = Verdict::Fail;
                let _ = writeln!(out, "{}", serde_json::json!({ "error": e.to_string() }));
            }
            Err(e) => {
                verdict = Verdict::Fail;
                let _ = writeln!(out, "error: {e}");
            }
        }
        let _ = out.flush();
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(interval) => {}
        }
    }
    Ok(verdict)
}

fn write_report(
    out: &mut dyn std::io::Write,
    report: &StatusReport,
    json: bool,
) -> std::io::Result<()> {
    if json {
        writeln!(out, "{}", render_json(report))
    } else {
        write!(out, "{}", render_text(report))
    }
}

#[cfg(test)]
mod tests;
