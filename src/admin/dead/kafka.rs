//! The dead letters of the Kafka sink: reading the dead-letter topic, what
//! a dead letter is called, and the record `dead retry` sends in its place.
//!
//! Role: [`read_topic`] reads a dead-letter topic from the beginning to the
//! end offsets it had when the command started (records written meanwhile
//! are for the next run), bounded by a deadline; [`publish`] sends the
//! republished records with an idempotent producer and `acks=all`. The rest
//! is pure: [`dead_letter_id`], [`location`] / [`parse_location`], and
//! [`republished`], the event rebuilt from a dead letter.
//!
//! Invariants:
//! * A dead letter's id is its event id (the `id` header) when it has a
//!   readable, non-empty one, else its location `topic/partition/offset`,
//!   which never changes and never looks like another location (a topic
//!   name has no `/`).
//! * The republished record has the dead letter's key and value byte for
//!   byte, the event id as `ce_id` and `id`, and none of the dead-letter
//!   bookkeeping headers; it goes to the event's own topic, partitioned
//!   like the relay partitions (murmur2 of the key), so it lands where the
//!   event would have.
//! * A dead letter whose payload was not kept (`dlq_truncated`) is never
//!   republished: an event without its data would be a lie. Nor is one
//!   whose payload is not JSON (`payload_not_json`, or any dead letter
//!   whose value does not parse): the republished event says
//!   `content-type: application/json`, and the relay never sends such a
//!   payload either.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::config::{Config, KafkaConfig};
use crate::contracts::Contracts;
use crate::deadletter::{
    AGGREGATE_ID_HEADER, AGGREGATE_TYPE_HEADER, ID_HEADER, LSN_HEADER, ORIGINAL_TOPIC_HEADER,
    PAYLOAD_SHA256_HEADER, PAYLOAD_SIZE_HEADER, REASON_CODE_HEADER, REASON_HEADER,
    SOURCE_TABLE_HEADER, TIMESTAMP_HEADER, TRUNCATED_HEADER, TYPE_HEADER,
};
use crate::envelope::{DATA_CONTENT_TYPE, format_time, render_topic, topic_name_problem};

/// Headers the relay adds to a dead letter to describe it; the
/// republished event carries none of them.
const BOOKKEEPING: &[&str] = &[
    REASON_HEADER,
    REASON_CODE_HEADER,
    LSN_HEADER,
    SOURCE_TABLE_HEADER,
    ORIGINAL_TOPIC_HEADER,
    TRUNCATED_HEADER,
    PAYLOAD_SIZE_HEADER,
    PAYLOAD_SHA256_HEADER,
    REPLAYED_FROM_HEADER,
];

/// Dead-letter headers whose content the republished event carries as
/// CloudEvents attributes instead (as the relay's own events do).
const ATTRIBUTES: &[&str] = &[
    AGGREGATE_TYPE_HEADER,
    AGGREGATE_ID_HEADER,
    TYPE_HEADER,
    TIMESTAMP_HEADER,
];

/// Header of a republished event: the location of the dead letter it was
/// rebuilt from.
pub const REPLAYED_FROM_HEADER: &str = "dlq_replayed_from";

/// One record of a dead-letter topic, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (when the relay produced it), if it has one.
    pub timestamp: Option<DateTime<Utc>>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// In record order; a null header value reads as empty.
    pub headers: Vec<(String, Bytes)>,
}

impl DlqRecord {
    /// The first header called `name`.
    pub fn header(&self, name: &str) -> Option<&Bytes> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// A header as text, when it is there and UTF-8.
    pub fn header_text(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Where the record is: `topic/partition/offset`.
    pub fn location(&self) -> String {
        location(&self.topic, self.partition, self.offset)
    }
}

/// `topic/partition/offset`.
pub fn location(topic: &str, partition: i32, offset: i64) -> String {
    format!("{topic}/{partition}/{offset}")
}

/// The `(topic, partition, offset)` of a [`location`], or `None` when `id`
/// is not one (a topic name Kafka would refuse, a negative or malformed
/// number).
pub fn parse_location(id: &str) -> Option<(String, i32, i64)> {
    let mut parts = id.rsplitn(3, '/');
    let offset = parts.next()?;
    let partition = parts.next()?;
    let topic = parts.next()?;
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if topic_name_problem(topic).is_some() || !number(partition) || !number(offset) {
        return None;
    }
    Some((
        topic.to_owned(),
        partition.parse().ok()?,
        offset.parse().ok()?,
    ))
}

/// The id a person uses for a dead letter: its event id, else its location.
pub fn dead_letter_id(record: &DlqRecord) -> String {
    match record.header_text(ID_HEADER) {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => record.location(),
    }
}

/// The topic the event was meant for: the `dlq_original_topic` header the
/// relay writes, else the topic template applied to the dead letter's
/// `aggregatetype` and `type` (dead letters written before the header
/// existed).
///
/// # Errors
/// Why no topic can be named.
pub fn original_topic(record: &DlqRecord, topic_template: &str) -> Result<String, String> {
    if let Some(topic) = record.header_text(ORIGINAL_TOPIC_HEADER)
        && topic_name_problem(topic).is_none()
    {
        return Ok(topic.to_owned());
    }
    let (Some(aggregate_type), Some(event_type)) = (
        record.header_text(AGGREGATE_TYPE_HEADER),
        record.header_text(TYPE_HEADER),
    ) else {
        return Err(
            "its topic is not known: the dead letter has no dlq_original_topic header \
             and lacks the aggregatetype or type the topic template needs"
                .to_owned(),
        );
    };
    render_topic(topic_template, aggregate_type, event_type).map_err(|e| e.to_string())
}

/// What an event is rebuilt from its dead letter with: the config's topic
/// template and `cloudevents.source`, and its `[[contracts]]`.
#[derive(Debug, Clone, Copy)]
pub struct Rebuild<'a> {
    pub topic_template: &'a str,
    pub source: &'a str,
    /// A dead letter whose event type has a contract is checked against it
    /// again: a retry never sends an event that breaks its contract.
    pub contracts: &'a Contracts,
}

impl<'a> Rebuild<'a> {
    /// The config's, with its compiled `contracts`.
    pub fn new(config: &'a Config, contracts: &'a Contracts) -> Self {
        Rebuild {
            topic_template: &config.kafka.topic,
            source: &config.cloudevents.source,
            contracts,
        }
    }
}

/// Why a dead letter cannot be republished, or `None` when it can.
pub fn not_retryable(record: &DlqRecord, rebuild: Rebuild<'_>) -> Option<String> {
    republished(record, rebuild).err()
}

/// A record ready for the producer (the key and value are kept absent when
/// the dead letter had none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Republished {
    pub topic: String,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
}

/// The event rebuilt from its dead letter, in binary content mode: the
/// CloudEvents attributes as `ce_*` headers (`ce_source` is `source`, the
/// config's `cloudevents.source`, since a dead letter does not keep a
/// per-row source; `ce_time` is the row's timestamp, else the dead letter's
/// own time), `content-type`, `id`, the row's header columns, and
/// `dlq_replayed_from`; key and value unchanged.
///
/// A checked event also carries `ce_dataschema`, its contract's schema.
///
/// # Errors
/// The dead letter lacks its payload, its id or type, or a topic other
/// than the dead-letter topic, or its payload breaks its contract.
pub fn republished(record: &DlqRecord, rebuild: Rebuild<'_>) -> Result<Republished, String> {
    let Rebuild {
        topic_template,
        source,
        contracts,
    } = rebuild;
    if record.header(TRUNCATED_HEADER).is_some() {
        let size = record.header_text(PAYLOAD_SIZE_HEADER).unwrap_or("?");
        let sha = record.header_text(PAYLOAD_SHA256_HEADER).unwrap_or("?");
        return Err(format!(
            "its payload was not kept (too large: {size} bytes, SHA-256 {sha}), only its \
             headers: write the event to the outbox again, then `dead discard` this one"
        ));
    }
    let text = |name: &str| record.header_text(name).filter(|v| !v.is_empty());
    let Some(id) = text(ID_HEADER) else {
        return Err("it has no readable event id, so it cannot become an event".to_owned());
    };
    let Some(event_type) = text(TYPE_HEADER) else {
        return Err("it has no readable event type, so it cannot become an event".to_owned());
    };
    if let Some(why) = not_json(record.value.as_deref()) {
        return Err(format!(
            "its payload is not valid JSON ({why}), and the event would say `content-type: \
             {DATA_CONTENT_TYPE}`: insert the row again with a JSON payload (same id, so \
             consumers see one event) and `dead discard` this one, or just discard it"
        ));
    }
    if source.is_empty() {
        return Err("cloudevents.source is not set".to_owned());
    }
    let topic = original_topic(record, topic_template)?;
    if topic == record.topic {
        return Err(format!(
            "its topic {topic:?} is the dead-letter topic itself: it would come back as a \
             dead letter of itself; fix kafka.topic, then retry"
        ));
    }
    let schema = contracts.find(text(AGGREGATE_TYPE_HEADER).unwrap_or(""), event_type);
    let encoded = match schema {
        Some(schema) => schema
            .encode(record.value.as_deref().unwrap_or_default())
            .map_err(|violation| {
                format!(
                    "{violation}: fix the schema (or write the event to the outbox again, \
                     then `dead discard` this one)"
                )
            })?,
        None => None,
    };
    let time = text(TIMESTAMP_HEADER)
        .map(str::to_owned)
        .or_else(|| record.timestamp.map(format_time));
    let mut headers: Vec<(String, Bytes)> = Vec::with_capacity(record.headers.len() + 8);
    let mut push = |name: &str, value: &[u8]| {
        headers.push((name.to_owned(), Bytes::copy_from_slice(value)));
    };
    push("ce_specversion", b"1.0");
    push("ce_id", id.as_bytes());
    push("ce_source", source.as_bytes());
    push("ce_type", event_type.as_bytes());
    let subject = text(AGGREGATE_ID_HEADER);
    if let Some(subject) = subject {
        push("ce_subject", subject.as_bytes());
    }
    if let Some(time) = &time {
        push("ce_time", time.as_bytes());
    }
    if let Some(subject) = subject {
        push("ce_partitionkey", subject.as_bytes());
    }
    if let Some(schema) = schema {
        push("ce_dataschema", schema.dataschema().as_bytes());
    }
    let content_type = schema
        .and_then(|s| s.content_type())
        .unwrap_or(DATA_CONTENT_TYPE);
    push("content-type", content_type.as_bytes());
    push(ID_HEADER, id.as_bytes());
    for (name, value) in &record.headers {
        let relay_made = BOOKKEEPING.contains(&name.as_str())
            || ATTRIBUTES.contains(&name.as_str())
            || name == ID_HEADER;
        if !relay_made {
            headers.push((name.clone(), value.clone()));
        }
    }
    headers.push((
        REPLAYED_FROM_HEADER.to_owned(),
        Bytes::from(record.location()),
    ));
    Ok(Republished {
        topic,
        key: record.key.clone(),
        value: encoded.or_else(|| record.value.clone()),
        headers,
    })
}

/// Why `value` is not one JSON text, as the relay checks a payload (UTF-8,
/// then one JSON value, never quoting the bytes), or `None` when it is.
fn not_json(value: Option<&[u8]>) -> Option<String> {
    let text = match std::str::from_utf8(value.unwrap_or_default()) {
        Ok(text) => text,
        Err(e) => return Some(format!("not UTF-8 at byte {}", e.valid_up_to())),
    };
    // A raw value is skipped without being built: no recursion limit on
    // deeply nested payloads, as in the relay's own check.
    serde_json::from_str::<&serde_json::value::RawValue>(text)
        .err()
        .map(|e| e.to_string())
}

/// Why a dead-letter topic could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("cannot create a Kafka client: {0}")]
    Client(String),
    #[error("no answer from the brokers {brokers} within {timeout:?}: {detail}")]
    NoAnswer {
        brokers: String,
        timeout: Duration,
        detail: String,
    },
    #[error(
        "the dead-letter topic {topic:?} does not exist: the relay creates it when it starts \
         (or create it yourself); check kafka.dlq_topic"
    )]
    TopicMissing { topic: String },
    #[error(
        "read {read} of the {expected} records of the dead-letter topic {topic:?} within \
         {timeout:?}: run again with a longer --timeout"
    )]
    Deadline {
        topic: String,
        read: usize,
        expected: i64,
        timeout: Duration,
    },
    #[error("reading the dead-letter topic {topic:?}: {detail}")]
    Consume { topic: String, detail: String },
}

fn client_config(kafka: &KafkaConfig) -> ClientConfig {
    crate::sink::client_config(&kafka.brokers, &kafka.properties)
}

/// A producer that writes as the relay does (idempotent, acks from every
/// replica, the Java client's partitioner, the relay's timeout): what
/// `retry` and a release send.
pub(super) fn republishing(kafka: &KafkaConfig) -> ClientConfig {
    let mut config = client_config(kafka);
    config
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", kafka.message_timeout_ms.to_string());
    config
}

/// Reads `topic` from the beginning up to the end offsets it has now,
/// within `timeout`.
///
/// # Errors
/// See [`ReadError`].
pub async fn read_topic(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<DlqRecord>, ReadError> {
    let mut config = client_config(kafka);
    // Only the consumer's own settings: the relay's properties are a
    // producer's, and librdkafka warns about (but accepts) those.
    config
        .set("group.id", "outbox-relay-dead-letters")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("allow.auto.create.topics", "false")
        .set("isolation.level", "read_committed");
    let brokers = kafka.brokers.clone();
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || read_blocking(&config, &brokers, &topic, timeout))
        .await
        .map_err(|e| ReadError::Client(e.to_string()))?
}

fn read_blocking(
    config: &ClientConfig,
    brokers: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<DlqRecord>, ReadError> {
    let started = Instant::now();
    let consumer: BaseConsumer = config
        .create()
        .map_err(|e| ReadError::Client(e.to_string()))?;
    let no_answer = |e: rdkafka::error::KafkaError| ReadError::NoAnswer {
        brokers: brokers.to_owned(),
        timeout,
        detail: e.to_string(),
    };
    // All topics, never one by name: asking for a missing topic by name
    // makes a broker with auto-creation create it.
    let metadata = consumer.fetch_metadata(None, timeout).map_err(no_answer)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .ok_or_else(|| ReadError::TopicMissing {
            topic: topic.to_owned(),
        })?;
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    let mut expected = 0;
    for partition in partitions {
        let left = timeout.saturating_sub(started.elapsed());
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, left)
            .map_err(no_answer)?;
        if high > low {
            ends.insert(partition, high);
            expected += high - low;
            assignment
                .add_partition_offset(topic, partition, Offset::Offset(low))
                .map_err(|e| ReadError::Consume {
                    topic: topic.to_owned(),
                    detail: e.to_string(),
                })?;
        }
    }
    let mut records = Vec::new();
    if ends.is_empty() {
        return Ok(records);
    }
    consumer
        .assign(&assignment)
        .map_err(|e| ReadError::Consume {
            topic: topic.to_owned(),
            detail: e.to_string(),
        })?;
    while !ends.is_empty() {
        if started.elapsed() >= timeout {
            return Err(ReadError::Deadline {
                topic: topic.to_owned(),
                read: records.len(),
                expected,
                timeout,
            });
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                let partition = message.partition();
                let offset = message.offset();
                let Some(&end) = ends.get(&partition) else {
                    continue;
                };
                if offset >= end {
                    ends.remove(&partition);
                    continue;
                }
                records.push(DlqRecord {
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    timestamp: message
                        .timestamp()
                        .to_millis()
                        .and_then(DateTime::from_timestamp_millis),
                    key: message.key().map(Bytes::copy_from_slice),
                    value: message.payload().map(Bytes::copy_from_slice),
                    headers: message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .map(|h| {
                                    let value = h.value.map(Bytes::copy_from_slice);
                                    (h.key.to_owned(), value.unwrap_or_default())
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                });
                if offset + 1 >= end {
                    ends.remove(&partition);
                }
            }
            Some(Err(e)) => {
                return Err(ReadError::Consume {
                    topic: topic.to_owned(),
                    detail: e.to_string(),
                });
            }
            None => {
                // Positions move past records a consumer never sees
                // (transaction markers): a partition whose position reached
                // its end is done even if its last offset was not a record.
                if let Ok(positions) = consumer.position() {
                    for element in positions.elements() {
                        if let Offset::Offset(at) = element.offset()
                            && ends.get(&element.partition()).is_some_and(|end| at >= *end)
                        {
                            ends.remove(&element.partition());
                        }
                    }
                }
            }
        }
    }
    Ok(records)
}

/// Sends `records` with an idempotent producer and `acks=all`, partitioned
/// like the relay's (murmur2 of the key); one outcome per record, in order.
///
/// # Errors
/// The producer cannot be built.
pub async fn publish(
    kafka: &KafkaConfig,
    records: &[Republished],
) -> Result<Vec<Result<(), String>>, String> {
    let producer: FutureProducer = republishing(kafka)
        .create()
        .map_err(|e| format!("cannot create a Kafka producer: {e}"))?;
    // The first record of each topic goes alone, acknowledged before the
    // rest: until the producer knows a topic's partitions, librdkafka holds
    // its records in an unassigned queue, and records produced once it
    // knows them can land ahead of that queue's (a released aggregate's
    // first events were seen after its later ones).
    let mut outcomes: Vec<Option<Result<(), String>>> = vec![None; records.len()];
    let mut known: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (i, record) in records.iter().enumerate() {
        if known.insert(record.topic.as_str()) {
            let sent = producer.send_result(future_record(record));
            outcomes[i] = Some(delivered(sent).await);
        }
    }
    let mut pending = Vec::with_capacity(records.len());
    for (i, record) in records.iter().enumerate() {
        if outcomes[i].is_none() {
            pending.push((i, producer.send_result(future_record(record))));
        }
    }
    for (i, sent) in pending {
        outcomes[i] = Some(delivered(sent).await);
    }
    Ok(outcomes.into_iter().flatten().collect())
}

/// `record` as librdkafka takes it.
pub(super) fn future_record(record: &Republished) -> FutureRecord<'_, [u8], [u8]> {
    let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
    for (name, value) in &record.headers {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_ref()),
        });
    }
    let mut future: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&record.topic).headers(headers);
    if let Some(key) = &record.key {
        future = future.key(key.as_ref());
    }
    if let Some(value) = &record.value {
        future = future.payload(value.as_ref());
    }
    future
}

type Enqueued<'a> = Result<
    rdkafka::producer::DeliveryFuture,
    (rdkafka::error::KafkaError, FutureRecord<'a, [u8], [u8]>),
>;

/// What the broker said about a record handed over.
async fn delivered(sent: Enqueued<'_>) -> Result<(), String> {
    match sent {
        Err((e, _)) => Err(e.to_string()),
        Ok(delivery) => match delivery.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((e, _))) => Err(e.to_string()),
            Err(_) => Err("the producer went away before the broker answered".to_owned()),
        },
    }
}

#[cfg(test)]
mod tests;
