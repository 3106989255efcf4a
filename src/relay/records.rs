//! Records: what one outbox event, an inserted outbox row or an outbox
//! logical message, becomes, in one place.
//!
//! A row or message becomes its CloudEvent record, or, when it cannot (a
//! column that cannot be read, a message that is not the JSON object
//! `outbox_emit` writes, a payload that is not JSON, a topic Kafka would
//! refuse, a payload that breaks its event type's contract, a fate a
//! refused earlier attempt left in [`Refusals`]), its dead
//! letter: the payload (a broken message's whole content) and every
//! readable column or member, with the reason ("bad rows don't stop the
//! stream", docs/design.md). Both sources take the same path from the
//! extracted [`OutboxRow`] on. Pure: no I/O, no clock.
//!
//! Every record travels with a [`DeliveryTag`] (`delivery_tag.rs`): which transaction
//! it counts in, which row it stands for, and whether it is a dead letter.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};

pub use super::delivery_tag::{DeliveryTag, Origin};
use super::refusals::{EventFate, Refusals, anonymous_row_key};
use crate::ack::TxnId;
use crate::contracts::{CONTRACT_VIOLATION, Contracts};
use crate::deadletter::{self as dl, DeadLetter, dead_letter_record, row_columns};
use crate::envelope::{
    EnvelopeSettings, KafkaRecord, TopicCache, build_record_cached, render_topic,
};
use crate::outbox::{ColumnMap, OutboxRow, RowExtractor, message};
use pgoutput::TupleData;
use pgoutput::assembler::Relation;
use pgoutput::lsn::Lsn;

/// The dead-letter reason code of an event whose topic is the checkpoint
/// topic.
pub const CHECKPOINT_TOPIC: &str = "checkpoint_topic";

/// What could be read of a row or message that cannot become an event.
struct Unreadable {
    row_key: String,
    reason: String,
    reason_code: &'static str,
    key: Bytes,
    value: Bytes,
    columns: Vec<(String, Bytes)>,
}

/// The transaction a row was committed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    pub txn: TxnId,
    /// Its commit LSN (the dead-letter `lsn` header).
    pub lsn: Lsn,
    pub time: DateTime<Utc>,
}

/// What a row becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    /// Its event. `suspect`: a broker refused it in a batch before, so it is
    /// sent alone. `row` stays at hand in case the producer refuses the
    /// record on the spot and its dead letter takes its place.
    Event {
        record: KafkaRecord,
        tag: DeliveryTag,
        row: Box<OutboxRow>,
        origin: Origin,
        suspect: bool,
    },
    /// Its dead letter.
    DeadLetter {
        record: KafkaRecord,
        tag: DeliveryTag,
    },
}

/// Turns outbox rows into records.
#[derive(Debug)]
pub struct Router {
    extractor: RowExtractor,
    envelope: EnvelopeSettings,
    /// The rendered topics of `envelope.topic_template`.
    topics: TopicCache,
    dead_letter_topic: String,
    /// `schema.name` of the outbox, for the dead-letter `source_table`.
    source_table: String,
    /// The dead-letter `source_table` of a message: `message:<prefix>`.
    message_source: String,
    /// `kafka.checkpoint_topic`: no event goes there (see
    /// [`Router::with_checkpoint_topic`]).
    checkpoint_topic: Option<String>,
    /// `[[contracts]]`: the schema each event type's payload must satisfy.
    contracts: Contracts,
}

impl Router {
    pub fn new(
        columns: ColumnMap,
        envelope: EnvelopeSettings,
        dead_letter_topic: String,
        source_table: String,
    ) -> Self {
        Router {
            extractor: RowExtractor::new(columns),
            envelope,
            topics: TopicCache::default(),
            dead_letter_topic,
            source_table,
            message_source: format!("message:{}", message::DEFAULT_PREFIX),
            checkpoint_topic: None,
            contracts: Contracts::default(),
        }
    }

    /// Events are checked against these contracts before they are sent; one
    /// that breaks its contract becomes a dead letter.
    ///
    /// # Panics
    /// When a registry contract's schema was not fetched yet
    /// ([`Contracts::resolve`]).
    pub fn with_contracts(mut self, contracts: Contracts) -> Self {
        assert!(
            !contracts.needs_registry(),
            "the registry contracts are resolved before a session starts"
        );
        self.contracts = contracts;
        self
    }

    /// An event whose topic renders to `topic` is dead-lettered: the
    /// checkpoint topic holds the relay's exactly-once positions, and the
    /// transactional producer takes whatever lands there for a checkpoint
    /// (its delivery report would reach no one, and the event's transaction
    /// would never be confirmed). In either delivery mode: the topic is
    /// reserved from the first start on.
    pub fn with_checkpoint_topic(mut self, topic: &str) -> Self {
        self.checkpoint_topic = Some(topic.to_owned());
        self
    }

    /// Messages with this prefix are the outbox's (their dead letters say so).
    pub fn with_message_prefix(mut self, prefix: &str) -> Self {
        self.message_source = format!("message:{prefix}");
        self
    }

    /// The `dataschema` of a row's event: its contract's schema, if one
    /// covers it (the Router checked the payload against it).
    pub fn dataschema(&self, row: &OutboxRow) -> Option<&str> {
        self.contracts
            .find(&row.aggregate_type, &row.event_type)
            .map(|s| s.dataschema())
    }

    /// The id column's text of an inserted row, when it can be read.
    pub fn event_id(&self, relation: &Relation, tuple: &TupleData) -> Option<String> {
        self.extractor.event_id(relation, tuple)
    }

    /// The record for one outbox logical message of `commit`. `lsn` is the
    /// message's own LSN: unique, it keys the refusals of a message whose
    /// id cannot be read.
    pub fn route_message(
        &mut self,
        content: &Bytes,
        lsn: Lsn,
        commit: &Commit,
        refusals: &Refusals,
    ) -> Routed {
        match message::parse(content) {
            Ok(row) => self.route_row(row, Origin::Message, commit, refusals),
            Err(failed) => {
                let (e, salvaged) = *failed;
                let member = |name: &str| {
                    salvaged
                        .columns
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                };
                let key = member(dl::AGGREGATE_ID_HEADER).unwrap_or_default();
                let value = salvaged.payload.unwrap_or_default();
                let row_key = member(dl::ID_HEADER)
                    .and_then(|id| String::from_utf8(id.to_vec()).ok())
                    .unwrap_or_else(|| anonymous_row_key(lsn, &key, &value));
                let unreadable = Unreadable {
                    row_key,
                    reason: e.to_string(),
                    reason_code: e.reason_code(),
                    key,
                    value,
                    columns: salvaged.columns,
                };
                self.unreadable(unreadable, Origin::Message, commit)
            }
        }
    }

    /// The dead-letter `source_table` of what came from `origin`.
    fn source_of(&self, origin: Origin) -> &str {
        match origin {
            Origin::Table => &self.source_table,
            Origin::Message => &self.message_source,
        }
    }

    /// The dead letter of a row or message that could not become an event,
    /// carrying what could be read of it.
    fn unreadable(&self, what: Unreadable, origin: Origin, commit: &Commit) -> Routed {
        let tag = DeliveryTag {
            txn: commit.txn,
            row_key: what.row_key,
            lsn: commit.lsn,
            key: what.key.clone(),
            dead_letter: true,
            span: None,
            held_bytes: 0,
        };
        let record = dead_letter_record(DeadLetter {
            topic: &self.dead_letter_topic,
            reason: what.reason,
            reason_code: what.reason_code,
            key: what.key,
            lsn: commit.lsn,
            source_table: self.source_of(origin),
            original_topic: None,
            value: what.value,
            columns: what.columns,
        });
        Routed::DeadLetter { record, tag }
    }

    /// The record for one inserted row of `commit`.
    pub fn route(
        &mut self,
        relation: &Arc<Relation>,
        tuple: &TupleData,
        commit: &Commit,
        refusals: &Refusals,
    ) -> Routed {
        let row = match self.extractor.extract(relation, tuple) {
            Ok(row) => row,
            Err(e) => {
                // Keep what can be read: the payload is often the only copy.
                let salvaged = self.extractor.salvage(relation, tuple);
                let key = self.extractor.key(relation, tuple).unwrap_or_default();
                let value = salvaged.payload.unwrap_or_default();
                let row_key = self
                    .extractor
                    .event_id(relation, tuple)
                    .unwrap_or_else(|| anonymous_row_key(commit.lsn, &key, &value));
                let unreadable = Unreadable {
                    row_key,
                    reason: e.to_string(),
                    reason_code: e.reason_code(),
                    key,
                    value,
                    columns: salvaged.columns,
                };
                return self.unreadable(unreadable, Origin::Table, commit);
            }
        };
        self.route_row(row, Origin::Table, commit, refusals)
    }

    /// The record for an extracted row, whichever its source.
    fn route_row(
        &mut self,
        row: OutboxRow,
        origin: Origin,
        commit: &Commit,
        refusals: &Refusals,
    ) -> Routed {
        let tag = DeliveryTag {
            txn: commit.txn,
            row_key: row.id.clone(),
            lsn: commit.lsn,
            key: Bytes::copy_from_slice(row.aggregate_id.as_bytes()),
            dead_letter: false,
            span: None,
            held_bytes: 0,
        };
        // Almost always empty: skip hashing the id on the hot path.
        let fate = if refusals.is_empty() {
            EventFate::Send
        } else {
            refusals
                .get(&row.id)
                .map_or(EventFate::Send, |f| f.event.clone())
        };
        if let EventFate::DeadLetter { reason, code } = fate {
            let (record, tag) = self.dead_letter(&row, origin, reason, code, tag);
            return Routed::DeadLetter { record, tag };
        }
        let schema = self.contracts.find(&row.aggregate_type, &row.event_type);
        let built = build_record_cached(
            &row,
            commit.time,
            &self.envelope,
            &mut self.topics,
            schema.map(|s| s.dataschema()),
        );
        // Checked once the envelope took the payload for JSON, so a payload
        // that is not JSON keeps its own reason.
        let built = match (built, schema) {
            (Ok(mut record), Some(schema)) => match schema.encode(&row.payload) {
                Ok(encoded) => {
                    if let Some(value) = encoded {
                        record.value = value;
                    }
                    if let Some(content_type) = schema.content_type() {
                        set_content_type(&mut record, content_type);
                    }
                    Ok(record)
                }
                Err(violation) => {
                    let (record, tag) = self.dead_letter(
                        &row,
                        origin,
                        violation.to_string(),
                        CONTRACT_VIOLATION,
                        tag,
                    );
                    return Routed::DeadLetter { record, tag };
                }
            },
            (built, _) => built,
        };
        match built {
            Ok(record) if self.checkpoint_topic.as_deref() == Some(record.topic.as_str()) => {
                let reason = format!(
                    "topic {:?} is kafka.checkpoint_topic, the relay's own topic of exactly-once \
                     checkpoints: no event goes there (change kafka.topic or \
                     kafka.checkpoint_topic, or the row's aggregate type or event type)",
                    record.topic
                );
                let (record, tag) = self.dead_letter(&row, origin, reason, CHECKPOINT_TOPIC, tag);
                Routed::DeadLetter { record, tag }
            }
            Ok(record) => Routed::Event {
                record,
                tag,
                row: Box::new(row),
                origin,
                suspect: fate == EventFate::Suspect,
            },
            Err(e) => {
                let (record, tag) =
                    self.dead_letter(&row, origin, e.to_string(), e.reason_code(), tag);
                Routed::DeadLetter { record, tag }
            }
        }
    }

    /// The dead letter of an extracted row, in place of its event: its
    /// payload as the value, its columns as headers. The event's produce
    /// span, if any, is the caller's to end: the dead letter has none.
    pub fn dead_letter(
        &self,
        row: &OutboxRow,
        origin: Origin,
        reason: String,
        reason_code: &'static str,
        tag: DeliveryTag,
    ) -> (KafkaRecord, DeliveryTag) {
        let record = dead_letter_record(DeadLetter {
            topic: &self.dead_letter_topic,
            reason,
            reason_code,
            key: tag.key.clone(),
            lsn: tag.lsn,
            source_table: self.source_of(origin),
            original_topic: render_topic(
                &self.envelope.topic_template,
                &row.aggregate_type,
                &row.event_type,
            )
            .ok(),
            value: row.payload.clone(),
            columns: row_columns(row),
        });
        let tag = DeliveryTag {
            dead_letter: true,
            span: None,
            // Still the bytes counted for the row's record: the dead
            // letter takes its place under the same acknowledgement.
            ..tag
        };
        (record, tag)
    }
}

/// The binary-mode `content-type` header of `record`, replaced.
fn set_content_type(record: &mut KafkaRecord, content_type: &'static str) {
    let value = Bytes::from_static(content_type.as_bytes());
    match record.headers.iter_mut().find(|(n, _)| n == "content-type") {
        Some((_, v)) => *v = value,
        None => record
            .headers
            .push((std::borrow::Cow::Borrowed("content-type"), value)),
    }
}

#[cfg(test)]
mod tests;
