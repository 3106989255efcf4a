//! CloudEvents 1.0 envelope: turns one [`OutboxRow`] into one [`KafkaRecord`]
//! following the CloudEvents Kafka protocol binding.
//!
//! Role: the pure step between the outbox row and the producer. No I/O, no
//! clock: the commit time comes from the transaction's Commit message.
//!
//! Invariants:
//! * The payload is never re-serialized. In binary content mode the record
//!   value *is* the payload bytes as PostgreSQL sent them; in structured mode
//!   they are embedded verbatim as the `data` member (a JSON value, not a JSON
//!   string holding JSON). Numbers keep their precision, key order and
//!   formatting survive, and 4-byte UTF-8, right-to-left text and combining
//!   marks round trip byte for byte.
//! * A row that cannot become a valid event (payload not JSON, empty `id` or
//!   `type`, topic name Kafka would refuse) is an [`EnvelopeError`], never a
//!   panic; the relay sends such rows to the dead-letter topic.
//! * The Kafka key is the aggregate id, so every event of one aggregate lands
//!   on one partition in commit order ("per-aggregate order" in docs/design.md).
//!
//! Mapping (docs/design.md, "CloudEvents mapping"): `id` ← id column, `source` ←
//! source column or config, `type` ← type column, `subject` and
//! `partitionkey` ← aggregate id, `time` ← timestamp column or commit time,
//! `traceparent` and `tracestate` (the distributed-tracing extension) ←
//! the tracing span context and tracestate columns, or the message's
//! members, unchanged.
//! Spec: <https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/bindings/kafka-protocol-binding.md>

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::outbox::OutboxRow;

mod trace;
pub use trace::{TraceContext, is_traceparent, is_tracestate, traceparent_from_span_context};

/// The CloudEvents version this relay emits.
pub const SPEC_VERSION: &str = "1.0";
/// `datacontenttype` of every event: outbox payloads are jsonb.
pub const DATA_CONTENT_TYPE: &str = "application/json";
/// Media type of a structured-mode record value (CloudEvents JSON format).
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";
/// Topic template used when the config names none; Debezium's outbox event
/// router routes to `outbox.event.<aggregatetype>` too.
pub const DEFAULT_TOPIC_TEMPLATE: &str = "outbox.event.{aggregatetype}";
/// Kafka's limit on topic name length (`Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_LEN: usize = 249;

/// Longest topic text kept in an [`EnvelopeError::InvalidTopic`]: the text
/// comes from row data and ends up in logs and dead-letter headers.
const MAX_TOPIC_IN_ERROR: usize = 256;

/// How the event travels in the Kafka record (CloudEvents Kafka binding §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentMode {
    /// Attributes in `ce_*` headers, value = the payload. Debezium-compatible
    /// consumers read the value unchanged.
    #[default]
    Binary,
    /// Value = a `application/cloudevents+json` object holding attributes and data.
    Structured,
}

impl ContentMode {
    /// The config spelling: `binary` or `structured`.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentMode::Binary => "binary",
            ContentMode::Structured => "structured",
        }
    }
}

/// The envelope's share of the validated config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeSettings {
    /// CloudEvents `source` for rows without a per-row source.
    pub source: String,
    pub mode: ContentMode,
    /// Topic name template; `{aggregatetype}` and `{type}` are substituted.
    pub topic_template: String,
}

/// A record header's name. The relay's own names (`ce_*`, `content-type`,
/// `id`, `dlq_*`) are static and cost no allocation per record; names from
/// the config's header columns or read back from a topic are owned.
pub type HeaderName = Cow<'static, str>;

/// One record for the producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecord {
    pub topic: String,
    pub key: Bytes,
    pub value: Bytes,
    pub headers: Vec<(HeaderName, Bytes)>,
}

impl KafkaRecord {
    /// The bytes the record puts on the wire before framing: key, value,
    /// header names and values (the `published_bytes` metric counts these).
    pub fn size(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.key.len() + self.value.len() + headers
    }
}

/// A CloudEvent built from an outbox row, before it is laid out in a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudEvent {
    pub id: String,
    pub source: String,
    pub specversion: &'static str,
    pub event_type: String,
    /// `None` when the aggregate id is empty: the spec forbids an empty subject.
    pub subject: Option<String>,
    /// RFC 3339, microseconds, `Z`.
    pub time: String,
    pub datacontenttype: &'static str,
    /// The schema the payload was checked against (`[[contracts]]`).
    pub dataschema: Option<String>,
    /// The payload, validated as JSON, bytes unchanged.
    pub data: Bytes,
    /// `None` when the aggregate id is empty (the partitioning extension
    /// requires a non-empty value); the Kafka key is still the aggregate id.
    pub partitionkey: Option<String>,
    pub traceparent: Option<String>,
    /// Only with a `traceparent`: a tracestate alone means nothing.
    pub tracestate: Option<String>,
}

/// Why a row cannot become an event. Each maps to a dead-letter reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The payload column does not hold JSON text (the message never quotes
    /// the payload: logs never carry payloads).
    #[error("payload is not valid JSON: {reason}")]
    PayloadNotJson { reason: String },
    /// A required CloudEvents attribute would be empty.
    #[error(
        "CloudEvents attribute `{attribute}` is empty: the spec requires a non-empty value (check the outbox row's column or the config)"
    )]
    MissingAttribute { attribute: &'static str },
    /// The rendered topic is not a name Kafka accepts.
    #[error(
        "topic {topic:?} is not a valid Kafka topic name: {reason} (names are 1 to 249 of [a-zA-Z0-9._-], not \".\" or \"..\")"
    )]
    InvalidTopic { topic: String, reason: &'static str },
}

impl EnvelopeError {
    /// A stable, short reason code for dead-letter headers and metric labels.
    pub fn reason_code(&self) -> &'static str {
        match self {
            EnvelopeError::PayloadNotJson { .. } => "payload_not_json",
            EnvelopeError::MissingAttribute { .. } => "missing_attribute",
            EnvelopeError::InvalidTopic { .. } => "invalid_topic",
        }
    }
}

impl CloudEvent {
    /// Applies the CloudEvents mapping to `row`.
    ///
    /// # Errors
    /// [`EnvelopeError::PayloadNotJson`] or [`EnvelopeError::MissingAttribute`].
    pub fn from_row(
        row: &OutboxRow,
        commit_time: DateTime<Utc>,
        default_source: &str,
    ) -> Result<CloudEvent, EnvelopeError> {
        if row.payload_is_jsonb {
            validate_utf8(&row.payload)?;
        } else {
            validate_json(&row.payload)?;
        }
        let source = match row.source.as_deref() {
            Some(s) if !s.is_empty() => s,
            _ => default_source,
        };
        for (attribute, value) in [
            ("id", &*row.id),
            ("type", &*row.event_type),
            ("source", source),
        ] {
            if value.is_empty() {
                return Err(EnvelopeError::MissingAttribute { attribute });
            }
        }
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let trace = TraceContext::of_row(row);
        Ok(CloudEvent {
            id: row.id.clone(),
            source: source.to_owned(),
            specversion: SPEC_VERSION,
            event_type: row.event_type.clone(),
            subject: non_empty(&row.aggregate_id),
            time: format_time(row.timestamp.unwrap_or(commit_time)),
            datacontenttype: DATA_CONTENT_TYPE,
            data: row.payload.clone(),
            partitionkey: non_empty(&row.aggregate_id),
            tracestate: trace.as_ref().and_then(|t| t.tracestate.clone()),
            dataschema: None,
            traceparent: trace.map(|t| t.traceparent),
        })
    }

    /// Binary content mode: attributes as `ce_*` headers (and the `id`
    /// header Debezium sets), value = data.
    /// Takes the event apart: its strings become the header values without
    /// a copy, and the constant attributes are static.
    fn into_binary(self) -> (Bytes, Vec<(HeaderName, Bytes)>) {
        let mut headers = Vec::with_capacity(12);
        let mut push =
            |name: &'static str, value: Bytes| headers.push((Cow::Borrowed(name), value));
        push(
            "ce_specversion",
            Bytes::from_static(self.specversion.as_bytes()),
        );
        let id = Bytes::from(self.id);
        push("ce_id", id.clone());
        push("ce_source", Bytes::from(self.source));
        push("ce_type", Bytes::from(self.event_type));
        if let Some(subject) = self.subject {
            push("ce_subject", Bytes::from(subject));
        }
        push("ce_time", Bytes::from(self.time));
        if let Some(key) = self.partitionkey {
            push("ce_partitionkey", Bytes::from(key));
        }
        if let Some(tp) = self.traceparent {
            push("ce_traceparent", Bytes::from(tp));
        }
        if let Some(ts) = self.tracestate {
            push("ce_tracestate", Bytes::from(ts));
        }
        if let Some(schema) = self.dataschema {
            push("ce_dataschema", Bytes::from(schema));
        }
        // The Kafka binding carries `datacontenttype` in `content-type`, not `ce_`.
        push(
            "content-type",
            Bytes::from_static(self.datacontenttype.as_bytes()),
        );
        // Debezium's outbox router adds the event id as an `id` header;
        // consumers written against it deduplicate on that header.
        push("id", id);
        (self.data, headers)
    }

    /// Structured content mode: the CloudEvents JSON format document.
    fn to_structured_json(&self) -> Result<Vec<u8>, EnvelopeError> {
        #[derive(Serialize)]
        struct Structured<'a> {
            specversion: &'a str,
            id: &'a str,
            source: &'a str,
            #[serde(rename = "type")]
            event_type: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            subject: Option<&'a str>,
            time: &'a str,
            datacontenttype: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            dataschema: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            partitionkey: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            traceparent: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            tracestate: Option<&'a str>,
            data: &'a RawValue,
        }
        let data = parse_raw(&self.data)?;
        let doc = Structured {
            specversion: self.specversion,
            id: &self.id,
            source: &self.source,
            event_type: &self.event_type,
            subject: self.subject.as_deref(),
            time: &self.time,
            datacontenttype: self.datacontenttype,
            dataschema: self.dataschema.as_deref(),
            partitionkey: self.partitionkey.as_deref(),
            traceparent: self.traceparent.as_deref(),
            tracestate: self.tracestate.as_deref(),
            data,
        };
        // Serializing borrowed strings and a RawValue cannot fail; map anyway
        // rather than unwrap, so no input can panic here.
        serde_json::to_vec(&doc).map_err(|e| EnvelopeError::PayloadNotJson {
            reason: e.to_string(),
        })
    }
}

/// Builds the Kafka record for one outbox row.
///
/// # Errors
/// Any [`EnvelopeError`]; the relay dead-letters the row with its reason.
pub fn build_record(
    row: &OutboxRow,
    commit_time: DateTime<Utc>,
    settings: &EnvelopeSettings,
) -> Result<KafkaRecord, EnvelopeError> {
    let topic = render_topic(
        &settings.topic_template,
        &row.aggregate_type,
        &row.event_type,
    )?;
    record_for(row, topic, commit_time, settings, None)
}

/// [`build_record`], with the topic taken from `topics` when a row of the
/// same aggregate type (and event type, if the template uses it) was seen,
/// and `dataschema` (the schema the payload was checked against) as the
/// event's attribute.
///
/// # Errors
/// As [`build_record`].
pub fn build_record_cached(
    row: &OutboxRow,
    commit_time: DateTime<Utc>,
    settings: &EnvelopeSettings,
    topics: &mut TopicCache,
    dataschema: Option<&str>,
) -> Result<KafkaRecord, EnvelopeError> {
    let topic = topics.topic(
        &settings.topic_template,
        &row.aggregate_type,
        &row.event_type,
    )?;
    record_for(row, topic, commit_time, settings, dataschema)
}

fn record_for(
    row: &OutboxRow,
    topic: String,
    commit_time: DateTime<Utc>,
    settings: &EnvelopeSettings,
    dataschema: Option<&str>,
) -> Result<KafkaRecord, EnvelopeError> {
    let mut event = CloudEvent::from_row(row, commit_time, &settings.source)?;
    event.dataschema = dataschema.map(str::to_owned);
    let (value, mut headers) = match settings.mode {
        ContentMode::Binary => event.into_binary(),
        ContentMode::Structured => {
            let value = Bytes::from(event.to_structured_json()?);
            let headers = vec![
                (
                    Cow::Borrowed("content-type"),
                    Bytes::from_static(STRUCTURED_CONTENT_TYPE.as_bytes()),
                ),
                // As in binary mode: Debezium's `id` header.
                (
                    Cow::Borrowed("id"),
                    Bytes::copy_from_slice(row.id.as_bytes()),
                ),
            ];
            (value, headers)
        }
    };
    headers.extend(
        row.headers
            .iter()
            .map(|(name, value)| (Cow::Owned(name.clone()), value.clone())),
    );
    Ok(KafkaRecord {
        topic,
        key: Bytes::copy_from_slice(row.aggregate_id.as_bytes()),
        value,
        headers,
    })
}

/// Topics already rendered and validated, by aggregate type and event type.
/// An outbox usually carries a handful of each, and rendering then checking
/// the name for every row showed in the W3 profile (benches/cpu-notes.md).
/// Only valid names are kept (a row with an invalid one is rendered again and
/// dead-lettered each time), and at most [`TopicCache::CAPACITY`] of them:
/// past that the cache starts over, so row data cannot grow it without bound.
#[derive(Debug, Default)]
pub struct TopicCache {
    by_aggregate: HashMap<String, HashMap<String, String>>,
    len: usize,
}

impl TopicCache {
    /// Most topics kept at once.
    pub const CAPACITY: usize = 4096;

    /// The topic of a row: `render_topic(template, aggregate_type,
    /// event_type)`, from the cache when it holds it. `template` must be the
    /// same on every call (one cache per envelope setting).
    ///
    /// # Errors
    /// [`EnvelopeError::InvalidTopic`], as [`render_topic`].
    pub fn topic(
        &mut self,
        template: &str,
        aggregate_type: &str,
        event_type: &str,
    ) -> Result<String, EnvelopeError> {
        // A template without `{type}` gives every event type the same topic.
        let event_key = if template.contains("{type}") {
            event_type
        } else {
            ""
        };
        if let Some(topic) = self
            .by_aggregate
            .get(aggregate_type)
            .and_then(|by_type| by_type.get(event_key))
        {
            return Ok(topic.clone());
        }
        let topic = render_topic(template, aggregate_type, event_type)?;
        if self.len >= Self::CAPACITY {
            self.by_aggregate.clear();
            self.len = 0;
        }
        self.by_aggregate
            .entry(aggregate_type.to_owned())
            .or_default()
            .insert(event_key.to_owned(), topic.clone());
        self.len += 1;
        Ok(topic)
    }

    /// How many topics are kept.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Substitutes `{aggregatetype}` and `{type}` in `template` and checks the
/// result is a topic name Kafka accepts. Any other `{…}` is left in place and
/// so rejected (braces are not legal in topic names).
///
/// # Errors
/// [`EnvelopeError::InvalidTopic`].
pub fn render_topic(
    template: &str,
    aggregate_type: &str,
    event_type: &str,
) -> Result<String, EnvelopeError> {
    // Only the placeholders the template holds: `str::replace` copies the
    // whole string even when the pattern is absent.
    let mut topic = template.to_owned();
    if topic.contains("{aggregatetype}") {
        topic = topic.replace("{aggregatetype}", aggregate_type);
    }
    if topic.contains("{type}") {
        topic = topic.replace("{type}", event_type);
    }
    match topic_name_problem(&topic) {
        None => Ok(topic),
        Some(reason) => {
            let mut shown = topic;
            if shown.len() > MAX_TOPIC_IN_ERROR {
                let mut cut = MAX_TOPIC_IN_ERROR;
                while !shown.is_char_boundary(cut) {
                    cut -= 1;
                }
                shown.truncate(cut);
                shown.push('…');
            }
            Err(EnvelopeError::InvalidTopic {
                topic: shown,
                reason,
            })
        }
    }
}

/// Why Kafka would refuse `name` as a topic, or `None` if it is valid
/// (Kafka's `Topic.validate`: length 1..=249, `[a-zA-Z0-9._-]`, not `.`/`..`).
pub fn topic_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_TOPIC_LEN {
        Some("longer than 249 characters")
    } else if name == "." || name == ".." {
        Some("\".\" and \"..\" are reserved")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("contains a character outside [a-zA-Z0-9._-]")
    } else {
        None
    }
}

pub use crate::outbox::format_time;

fn validate_json(payload: &[u8]) -> Result<(), EnvelopeError> {
    parse_raw(payload).map(|_| ())
}

/// The check a `jsonb` payload still needs: PostgreSQL printed it as JSON,
/// but a `SQL_ASCII` database stores and sends bytes unchecked.
fn validate_utf8(payload: &[u8]) -> Result<&str, EnvelopeError> {
    std::str::from_utf8(payload).map_err(|e| EnvelopeError::PayloadNotJson {
        reason: format!("not UTF-8 at byte {}", e.valid_up_to()),
    })
}

/// Validates `payload` as one JSON value without building it: serde_json
/// skips a raw value iteratively, so deeply nested jsonb (PostgreSQL allows
/// far more than serde_json's recursion limit of 128) is accepted.
fn parse_raw(payload: &[u8]) -> Result<&RawValue, EnvelopeError> {
    let text = validate_utf8(payload)?;
    serde_json::from_str::<&RawValue>(text).map_err(|e| EnvelopeError::PayloadNotJson {
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
