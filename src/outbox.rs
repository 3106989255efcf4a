//! From a decoded outbox INSERT, or an outbox logical message
//! ([`message`]), to an [`OutboxRow`].
//!
//! The outbox contract (docs/design.md, "The outbox contract"): Debezium's outbox event router columns by
//! default (`id`, `aggregatetype`, `aggregateid`, `type`, `payload`, optional
//! `timestamp`, `tracingspancontext` and `tracestate`), names configurable, extra columns
//! mapped to headers. Column positions are resolved once per relation shape
//! and cached; a Relation message (ALTER TABLE) brings a new `Arc<Relation>`,
//! which invalidates the cached positions.
//!
//! A row that cannot become an event yields a [`RowError`] whose text is the
//! dead-letter reason; the relay dead-letters the row and goes on ("bad rows don't stop the stream" in docs/design.md).

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, NaiveDateTime, Utc};

use serde::Deserialize;

use pgoutput::assembler::Relation;
use pgoutput::{TupleData, TupleValue};

/// `pg_type.oid` of `jsonb` (fixed in PostgreSQL's catalog, `pg_type.dat`).
const JSONB_OID: u32 = 3802;

pub mod message;
pub mod shard;

/// Where the relay takes events from (`postgres.source`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Rows inserted into the outbox table.
    #[default]
    Table,
    /// Transactional logical messages (`outbox_emit`, `sql/outbox_emit.sql`):
    /// no table at all.
    Messages,
    /// Both, in commit order across them.
    Both,
}

impl Source {
    /// Whether inserts into the outbox table are events.
    pub fn table(self) -> bool {
        matches!(self, Source::Table | Source::Both)
    }

    /// Whether outbox logical messages are events.
    pub fn messages(self) -> bool {
        matches!(self, Source::Messages | Source::Both)
    }

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Table => "table",
            Source::Messages => "messages",
            Source::Both => "both",
        }
    }
}

/// Which column holds what. Defaults match Debezium's outbox event router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMap {
    pub id: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub payload: String,
    pub timestamp: Option<String>,
    pub tracing_span_context: Option<String>,
    /// The W3C `tracestate` column, optional.
    pub trace_state: Option<String>,
    pub source: Option<String>,
    /// `(column, header name)` pairs copied into Kafka headers.
    pub headers: Vec<(String, String)>,
}

impl Default for ColumnMap {
    fn default() -> Self {
        Self {
            id: "id".into(),
            aggregate_type: "aggregatetype".into(),
            aggregate_id: "aggregateid".into(),
            event_type: "type".into(),
            payload: "payload".into(),
            timestamp: Some("timestamp".into()),
            tracing_span_context: Some("tracingspancontext".into()),
            trace_state: Some("tracestate".into()),
            source: None,
            headers: Vec::new(),
        }
    }
}

/// One decoded outbox row, its columns by role: what the envelope turns
/// into a CloudEvent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// The event id (uuid text).
    pub id: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    /// Raw JSON text bytes as PostgreSQL sent them (jsonb text output).
    pub payload: Bytes,
    /// The payload is PostgreSQL's text output of a `jsonb` column: JSON by
    /// construction (jsonb accepts nothing else and prints what it parsed),
    /// so the envelope checks only that it is UTF-8 instead of parsing it.
    /// `false` for any other column type and for message payloads.
    pub payload_is_jsonb: bool,
    /// The row's timestamp column, if the table has one and it is not NULL.
    pub timestamp: Option<DateTime<Utc>>,
    /// The tracing span context column: a W3C `traceparent`, or the Java
    /// properties text Debezium's tracing writes (`traceparent=00-…`).
    pub trace_parent: Option<String>,
    /// The W3C `tracestate` that goes with it, when the row has one (a
    /// `tracestate` column, or a `tracestate=` line beside the traceparent
    /// in Debezium's properties text).
    pub trace_state: Option<String>,
    /// Extra columns mapped to Kafka headers, in config order.
    pub headers: Vec<(String, Bytes)>,
    /// Per-row CloudEvents `source`, if a source column is configured.
    pub source: Option<String>,
}

/// Why a row cannot become an event: the dead-letter reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    #[error(
        "column \"{column}\" ({role}) is missing from {table}; was it dropped or renamed? set postgres.columns.{role} to the new name"
    )]
    MissingColumn {
        table: String,
        column: String,
        role: &'static str,
    },
    #[error("column \"{column}\" ({role}) is NULL")]
    Null { column: String, role: &'static str },
    #[error("column \"{column}\" ({role}) is not valid UTF-8")]
    NotUtf8 { column: String, role: &'static str },
    #[error(
        "column \"{column}\" ({role}) holds an unchanged TOAST value, which an INSERT never carries"
    )]
    UnchangedToast { column: String, role: &'static str },
    /// An outbox logical message whose content is not the JSON object
    /// `outbox_emit` writes (not JSON, not UTF-8, a member of the wrong type).
    #[error(
        "the outbox message is not a JSON object of the form outbox_emit writes \
         (sql/outbox_emit.sql): {reason}"
    )]
    MessageInvalid { reason: String },
    #[error("row has {got} columns but relation {table} has {expected}")]
    ShapeMismatch {
        table: String,
        got: usize,
        expected: usize,
    },
}

impl RowError {
    /// A short machine-readable label for metrics and the `dlq_reason_code` header.
    pub fn reason_code(&self) -> &'static str {
        match self {
            RowError::MissingColumn { .. } => "missing_column",
            RowError::Null {
                role: "aggregate_id",
                ..
            } => "null_key",
            RowError::Null { .. } => "null_column",
            RowError::NotUtf8 { .. } => "not_utf8",
            RowError::UnchangedToast { .. } => "unchanged_toast",
            RowError::ShapeMismatch { .. } => "shape_mismatch",
            RowError::MessageInvalid { .. } => "message_invalid",
        }
    }
}

/// Column positions for one relation shape; `Err` holds the missing column.
#[derive(Debug, Clone)]
struct Positions {
    id: usize,
    aggregate_type: usize,
    aggregate_id: usize,
    event_type: usize,
    payload: usize,
    /// The payload column's type is `jsonb`.
    payload_is_jsonb: bool,
    timestamp: Option<usize>,
    tracing_span_context: Option<usize>,
    trace_state: Option<usize>,
    source: Option<usize>,
    headers: Vec<(usize, String)>,
}

/// Turns outbox INSERT tuples into [`OutboxRow`]s, caching column positions
/// per relation shape.
#[derive(Debug)]
pub struct RowExtractor {
    columns: ColumnMap,
    cached: Option<(Arc<Relation>, Result<Positions, RowError>)>,
}

impl RowExtractor {
    pub fn new(columns: ColumnMap) -> Self {
        Self {
            columns,
            cached: None,
        }
    }

    /// Extracts the outbox fields of one inserted row.
    pub fn extract(
        &mut self,
        relation: &Arc<Relation>,
        tuple: &TupleData,
    ) -> Result<OutboxRow, RowError> {
        let stale = match &self.cached {
            Some((rel, _)) => !Arc::ptr_eq(rel, relation),
            None => true,
        };
        if stale {
            let positions = resolve_positions(&self.columns, relation);
            self.cached = Some((Arc::clone(relation), positions));
        }
        let positions = match &self.cached {
            Some((_, Ok(p))) => p,
            Some((_, Err(e))) => return Err(e.clone()),
            None => unreachable!("cache filled above"),
        };
        if tuple.columns.len() != relation.columns.len() {
            return Err(RowError::ShapeMismatch {
                table: relation.qualified_name(),
                got: tuple.columns.len(),
                expected: relation.columns.len(),
            });
        }
        let cols = &self.columns;
        let text =
            |pos: usize, column: &str, role: &'static str| -> Result<Option<&[u8]>, RowError> {
                match &tuple.columns[pos] {
                    TupleValue::Null => Ok(None),
                    TupleValue::Text(b) | TupleValue::Binary(b) => Ok(Some(b.as_ref())),
                    TupleValue::UnchangedToast => Err(RowError::UnchangedToast {
                        column: column.to_owned(),
                        role,
                    }),
                }
            };
        let required_str =
            |pos: usize, column: &str, role: &'static str| -> Result<String, RowError> {
                let bytes = text(pos, column, role)?.ok_or_else(|| RowError::Null {
                    column: column.to_owned(),
                    role,
                })?;
                utf8(bytes, column, role)
            };
        let optional_str = |pos: Option<usize>,
                            column: &Option<String>,
                            role: &'static str|
         -> Result<Option<String>, RowError> {
            match (pos, column) {
                (Some(pos), Some(column)) => match text(pos, column, role)? {
                    Some(bytes) => utf8(bytes, column, role).map(Some),
                    None => Ok(None),
                },
                _ => Ok(None),
            }
        };

        let id = required_str(positions.id, &cols.id, "id")?;
        let aggregate_type = required_str(
            positions.aggregate_type,
            &cols.aggregate_type,
            "aggregate_type",
        )?;
        let aggregate_id =
            required_str(positions.aggregate_id, &cols.aggregate_id, "aggregate_id")?;
        let event_type = required_str(positions.event_type, &cols.event_type, "event_type")?;
        let (payload, payload_is_jsonb) = match &tuple.columns[positions.payload] {
            TupleValue::Text(b) => (b.clone(), positions.payload_is_jsonb),
            // jsonb's binary format starts with a version byte: not JSON text.
            TupleValue::Binary(b) => (b.clone(), false),
            TupleValue::Null => {
                return Err(RowError::Null {
                    column: cols.payload.clone(),
                    role: "payload",
                });
            }
            TupleValue::UnchangedToast => {
                return Err(RowError::UnchangedToast {
                    column: cols.payload.clone(),
                    role: "payload",
                });
            }
        };
        let timestamp = optional_str(positions.timestamp, &cols.timestamp, "timestamp")?
            .and_then(|t| parse_pg_timestamp(&t));
        let trace_parent = optional_str(
            positions.tracing_span_context,
            &cols.tracing_span_context,
            "tracing_span_context",
        )?;
        let trace_state = optional_str(positions.trace_state, &cols.trace_state, "trace_state")?;
        let source = optional_str(positions.source, &cols.source, "source")?;
        let mut headers = Vec::with_capacity(positions.headers.len());
        for (pos, header) in &positions.headers {
            if let TupleValue::Text(b) | TupleValue::Binary(b) = &tuple.columns[*pos] {
                headers.push((header.clone(), b.clone()));
            }
        }
        Ok(OutboxRow {
            id,
            aggregate_type,
            aggregate_id,
            event_type,
            payload,
            payload_is_jsonb,
            timestamp,
            trace_parent,
            trace_state,
            headers,
            source,
        })
    }

    /// The event id of a row, when it can be read, for dead-letter headers.
    pub fn event_id(&self, relation: &Relation, tuple: &TupleData) -> Option<String> {
        let pos = relation.column_index(&self.columns.id)?;
        match tuple.columns.get(pos)? {
            TupleValue::Text(b) | TupleValue::Binary(b) => {
                std::str::from_utf8(b).ok().map(str::to_owned)
            }
            _ => None,
        }
    }

    /// The aggregate id (Kafka key) of a row, when it can be read.
    pub fn key(&self, relation: &Relation, tuple: &TupleData) -> Option<Bytes> {
        self.column(relation, tuple, &self.columns.aggregate_id)
    }

    /// What can be read of a row that cannot become an event, for its dead
    /// letter: the payload column's bytes, and the other mapped columns as
    /// `(header name, value)` pairs (see `crate::deadletter`). A column
    /// that is missing, NULL or an unchanged TOAST value is left out; the
    /// timestamp only when it parses, in RFC 3339 like an extracted row's.
    pub fn salvage(&self, relation: &Relation, tuple: &TupleData) -> Salvaged {
        use role_headers as dl;
        let cols = &self.columns;
        let mut columns = Vec::new();
        for (header, column) in [
            (dl::ID_HEADER, &cols.id),
            (dl::AGGREGATE_TYPE_HEADER, &cols.aggregate_type),
            (dl::AGGREGATE_ID_HEADER, &cols.aggregate_id),
            (dl::TYPE_HEADER, &cols.event_type),
        ] {
            if let Some(value) = self.column(relation, tuple, column) {
                columns.push((header.to_owned(), value));
            }
        }
        if let Some(column) = &cols.timestamp
            && let Some(value) = self.column(relation, tuple, column)
            && let Some(time) = std::str::from_utf8(&value)
                .ok()
                .and_then(parse_pg_timestamp)
        {
            columns.push((
                dl::TIMESTAMP_HEADER.to_owned(),
                Bytes::from(format_time(time)),
            ));
        }
        for (column, header) in &cols.headers {
            if let Some(value) = self.column(relation, tuple, column) {
                columns.push((header.clone(), value));
            }
        }
        Salvaged {
            payload: self.column(relation, tuple, &cols.payload),
            columns,
        }
    }

    /// The bytes of the column named `name`, if the row has a value there.
    fn column(&self, relation: &Relation, tuple: &TupleData, name: &str) -> Option<Bytes> {
        let pos = relation.column_index(name)?;
        match tuple.columns.get(pos)? {
            TupleValue::Text(b) | TupleValue::Binary(b) => Some(b.clone()),
            _ => None,
        }
    }
}

/// What [`RowExtractor::salvage`] could read of a row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Salvaged {
    /// The payload column's bytes, if it has a value.
    pub payload: Option<Bytes>,
    /// The other mapped columns, as `(header name, value)`.
    pub columns: Vec<(String, Bytes)>,
}

fn utf8(bytes: &[u8], column: &str, role: &'static str) -> Result<String, RowError> {
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| RowError::NotUtf8 {
            column: column.to_owned(),
            role,
        })
}

fn resolve_positions(cols: &ColumnMap, relation: &Relation) -> Result<Positions, RowError> {
    let required = |column: &str, role: &'static str| {
        relation
            .column_index(column)
            .ok_or_else(|| RowError::MissingColumn {
                table: relation.qualified_name(),
                column: column.to_owned(),
                role,
            })
    };
    // Optional columns may be absent from the table altogether.
    let optional =
        |column: &Option<String>| column.as_deref().and_then(|c| relation.column_index(c));
    let payload = required(&cols.payload, "payload")?;
    Ok(Positions {
        id: required(&cols.id, "id")?,
        aggregate_type: required(&cols.aggregate_type, "aggregate_type")?,
        aggregate_id: required(&cols.aggregate_id, "aggregate_id")?,
        event_type: required(&cols.event_type, "event_type")?,
        payload,
        payload_is_jsonb: relation.columns[payload].type_oid == JSONB_OID,
        timestamp: optional(&cols.timestamp),
        tracing_span_context: optional(&cols.tracing_span_context),
        trace_state: optional(&cols.trace_state),
        source: optional(&cols.source),
        headers: cols
            .headers
            .iter()
            .filter_map(|(column, header)| {
                relation.column_index(column).map(|p| (p, header.clone()))
            })
            .collect(),
    })
}

/// The names a row's role columns go by where they are salvaged for a dead
/// letter (its headers, see `crate::deadletter`) and in an outbox message.
pub mod role_headers {
    pub const ID_HEADER: &str = "id";
    pub const AGGREGATE_TYPE_HEADER: &str = "aggregatetype";
    pub const AGGREGATE_ID_HEADER: &str = "aggregateid";
    pub const TYPE_HEADER: &str = "type";
    pub const TIMESTAMP_HEADER: &str = "timestamp";
}

/// RFC 3339 with microseconds and `Z`: PostgreSQL timestamps have
/// microsecond resolution, so nothing is lost and nothing is invented.
pub fn format_time(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Parses PostgreSQL's text output of `timestamptz` (`2026-11-29 12:00:00.123456+00`)
/// or `timestamp` (taken as UTC). An unparseable value yields `None`, and the
/// event's time falls back to the commit time.
pub fn parse_pg_timestamp(text: &str) -> Option<DateTime<Utc>> {
    // Every event carries one: the common shapes are read by hand (chrono's
    // format-string parser cost more than the rest of the row's extraction),
    // everything else by chrono as before.
    parse_iso_timestamp(text.as_bytes()).or_else(|| parse_pg_timestamp_general(text))
}

/// PostgreSQL's own output with DateStyle ISO, the shapes it prints for
/// years 1 to 9999: `YYYY-MM-DD HH:MM:SS`, a fraction of 1 to 6 digits or
/// none, then an offset `±HH` or `±HH:MM` or none (`timestamp`, taken as UTC).
/// `None` for anything else (another shape, an impossible date, a leap
/// second): [`parse_pg_timestamp_general`] decides those, so this fast path
/// never yields a value the general parser would not.
fn parse_iso_timestamp(b: &[u8]) -> Option<DateTime<Utc>> {
    fn number(digits: &[u8]) -> Option<u32> {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(digits.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    }
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b' '
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let year = i32::try_from(number(&b[0..4])?).ok()?;
    let (month, day) = (number(&b[5..7])?, number(&b[8..10])?);
    let (hour, minute, second) = (
        number(&b[11..13])?,
        number(&b[14..16])?,
        number(&b[17..19])?,
    );
    let mut rest = &b[19..];
    let mut nanos = 0;
    if let Some(fraction) = rest.strip_prefix(b".") {
        let len = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=6).contains(&len) {
            return None;
        }
        nanos = number(&fraction[..len])? * 10u32.pow(9 - len as u32);
        rest = &fraction[len..];
    }
    let offset_secs = match rest {
        [] => 0,
        [sign @ (b'+' | b'-'), hh @ ..] if hh.len() == 2 || (hh.len() == 5 && hh[2] == b':') => {
            let hours = number(&hh[0..2])?;
            let minutes = if hh.len() == 5 { number(&hh[3..5])? } else { 0 };
            if hours > 23 || minutes > 59 {
                return None;
            }
            let secs = i64::from(hours * 3600 + minutes * 60);
            if *sign == b'-' { -secs } else { secs }
        }
        _ => return None,
    };
    let local = chrono::NaiveDate::from_ymd_opt(year, month, day)?
        .and_hms_nano_opt(hour, minute, second, nanos)?;
    // Local time = UTC + offset.
    Some(
        local
            .checked_sub_signed(chrono::TimeDelta::seconds(offset_secs))?
            .and_utc(),
    )
}

/// [`parse_pg_timestamp`] for the shapes the fast path leaves alone (public
/// so the decode bench can set it beside the fast path).
pub fn parse_pg_timestamp_general(text: &str) -> Option<DateTime<Utc>> {
    // timestamptz prints the offset as +HH, +HH:MM or +HH:MM:SS.
    for fmt in ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%d %H:%M:%S%.f%:z"] {
        if let Ok(t) = DateTime::parse_from_str(text, fmt) {
            return Some(t.with_timezone(&Utc));
        }
    }
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc())
}

#[cfg(test)]
mod tests;
