//! The Kafka producer: the one place that talks to the broker.
//!
//! An idempotent producer (`enable.idempotence=true`, hence `acks=all` and at
//! most five requests in flight per partition, which keeps per-partition order
//! across retries) with the Java client's partitioner (`murmur2_random`), so
//! that keys land on the partition any other producer of the topic would pick
//! (design invariant 7).
//!
//! Sending never blocks: [`KafkaSink::send`] hands the record to librdkafka's
//! queue and returns; the broker's answer arrives later as a
//! [`DeliveryReport`] on the channel returned by [`KafkaSink::new`]. The relay
//! feeds those reports to the ack tracker: a record counts as delivered only
//! when the broker acknowledged it (invariant 1). A full local queue is
//! returned to the caller ([`SendError::QueueFull`]) so the relay stops
//! reading the slot instead of buffering (invariant 9).

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafka;
use tokio::sync::mpsc;

use crate::ack::TxnId;
use crate::envelope::KafkaRecord;
use crate::lsn::Lsn;

/// Producer properties the relay sets itself; the config refuses overrides.
pub const RELAY_OWNED_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "acks",
    "partitioner",
    "linger.ms",
    "message.timeout.ms",
    "queue.buffering.max.messages",
];

/// What the relay needs to know about a record when its delivery report
/// comes back: which transaction it belongs to, and enough to dead-letter it.
#[derive(Debug, Clone)]
pub struct DeliveryTag {
    pub txn: TxnId,
    /// Outbox id of the event (for dead-letter headers and log lines).
    pub event_id: String,
    /// Commit LSN of the transaction the row belongs to.
    pub lsn: Lsn,
    /// Aggregate id, the record's key (to keep a dead-lettered record keyed).
    pub key: Bytes,
    /// True for a record written to the dead-letter topic.
    pub dead_letter: bool,
}

/// The broker's answer for one record.
#[derive(Debug)]
pub struct DeliveryReport {
    pub tag: DeliveryTag,
    pub result: Result<(), DeliveryError>,
}

/// Why the broker did not take a record.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeliveryError {
    /// The record is larger than the broker or topic accepts: it goes to the
    /// dead-letter topic instead; nothing else is wrong.
    #[error("record too large for the broker ({0})")]
    TooLarge(KafkaError),
    /// Anything else (timeout, fatal idempotence error, authorization...):
    /// the relay stops confirming, rebuilds the producer and replays from
    /// the last confirmed LSN (invariant 6).
    #[error("delivery failed: {0}")]
    Failed(KafkaError),
    /// The producer hit a fatal error (`rd_kafka_fatal_error`: say, an
    /// idempotence sequence it can no longer vouch for) and refuses every
    /// record from now on. Carries librdkafka's reason, which the bare
    /// `_FATAL` code of the refused record does not tell.
    #[error("the producer hit a fatal error: {0}")]
    ProducerFatal(String),
}

/// Errors from [`KafkaSink::send`].
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// librdkafka's local queue is full: wait for delivery reports, then retry.
    #[error("producer queue full")]
    QueueFull(Box<(KafkaRecord, DeliveryTag)>),
    /// The record exceeds `message.max.bytes` before it even left.
    #[error("record too large: {0}")]
    TooLarge(KafkaError, Box<DeliveryTag>),
    /// Any other immediate error (e.g. the producer hit a fatal error:
    /// [`KafkaSink::explain`] tells which).
    #[error("producer refused the record: {0}")]
    Failed(KafkaError),
}

/// Errors building the producer.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("could not create the Kafka producer: {0} (check kafka.brokers and kafka.properties)")]
    Create(KafkaError),
}

/// Plain settings for the producer, taken from the validated config.
/// `Debug` shows `***` for every property whose name marks a secret
/// ([`crate::config::is_secret_property`]).
#[derive(Clone)]
pub struct SinkSettings {
    pub brokers: String,
    pub linger_ms: u64,
    pub message_timeout_ms: u64,
    pub queue_max_messages: u64,
    /// Any other librdkafka property, already checked against
    /// [`RELAY_OWNED_PROPERTIES`].
    pub properties: Vec<(String, String)>,
}

impl std::fmt::Debug for SinkSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: Vec<(&str, &str)> = self
            .properties
            .iter()
            .map(|(name, value)| {
                let shown = if crate::config::is_secret_property(name) {
                    "***"
                } else {
                    value.as_str()
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("SinkSettings")
            .field("brokers", &self.brokers)
            .field("linger_ms", &self.linger_ms)
            .field("message_timeout_ms", &self.message_timeout_ms)
            .field("queue_max_messages", &self.queue_max_messages)
            .field("properties", &properties)
            .finish()
    }
}

struct ReportingContext {
    reports: mpsc::UnboundedSender<DeliveryReport>,
    /// The producer's own librdkafka handle, set right after creation, so a
    /// failed delivery can stop everything queued behind it (see
    /// [`ReportingContext::purge_behind_failure`]).
    handle: AtomicPtr<RDKafka>,
    purged: AtomicBool,
}

impl ReportingContext {
    /// A record failed for good: the relay will replay from the confirmed
    /// LSN, so no later record of this producer may reach the broker, or it
    /// would land before the failed one's replay and break per-aggregate
    /// order (invariant 7). After a non-fatal permanent error librdkafka
    /// bumps the producer epoch and goes on with the queue; purging here, on
    /// the poll thread that serves this report, wins against that epoch bump
    /// (a broker round trip), where a purge from the relay's task would race
    /// it. Once per producer; the purged records report `_PURGE_*` errors.
    fn purge_behind_failure(&self) {
        if self.purged.swap(true, Ordering::AcqRel) {
            return;
        }
        let rk = self.handle.load(Ordering::Acquire);
        if rk.is_null() {
            return;
        }
        // SAFETY: `rk` is the handle of the client that owns this context
        // (stored by `KafkaSink::new` right after creating it); delivery
        // callbacks run only while that client exists, and librdkafka
        // allows rd_kafka_purge from any thread, NON_BLOCKING so it never
        // waits on the broker threads from inside a callback.
        unsafe {
            rdkafka::bindings::rd_kafka_purge(
                rk,
                rdkafka::bindings::RD_KAFKA_PURGE_F_QUEUE
                    | rdkafka::bindings::RD_KAFKA_PURGE_F_INFLIGHT
                    | rdkafka::bindings::RD_KAFKA_PURGE_F_NON_BLOCKING,
            );
        }
    }
}

impl ClientContext for ReportingContext {}

impl ProducerContext for ReportingContext {
    type DeliveryOpaque = Box<DeliveryTag>;

    fn delivery(&self, result: &DeliveryResult<'_>, tag: Self::DeliveryOpaque) {
        let result = match result {
            Ok(_) => Ok(()),
            Err((err, _msg)) => {
                self.purge_behind_failure();
                Err(classify_delivery_error(err.clone()))
            }
        };
        // The receiver is gone only when the relay dropped the sink after a
        // failure; the reports of a discarded producer no longer matter.
        let _ = self.reports.send(DeliveryReport { tag: *tag, result });
    }
}

fn is_too_large(err: &KafkaError) -> bool {
    matches!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::MessageSizeTooLarge)
    )
}

fn classify_delivery_error(err: KafkaError) -> DeliveryError {
    if is_too_large(&err) {
        DeliveryError::TooLarge(err)
    } else {
        DeliveryError::Failed(err)
    }
}

/// The idempotent producer and its delivery-report channel.
pub struct KafkaSink {
    producer: ThreadedProducer<ReportingContext>,
}

impl KafkaSink {
    /// Builds the producer. Reports for every record sent arrive on the
    /// returned receiver; its length is bounded by the records in flight,
    /// which the relay bounds.
    pub fn new(
        settings: &SinkSettings,
    ) -> Result<(Self, mpsc::UnboundedReceiver<DeliveryReport>), SinkError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut cfg = ClientConfig::new();
        for (k, v) in &settings.properties {
            cfg.set(k, v);
        }
        cfg.set("bootstrap.servers", &settings.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // Without it librdkafka keeps writing a partition after one of
            // its records failed for good (it bumps the epoch and goes on),
            // and the replay from the confirmed LSN would put the failed
            // record after its successors (invariant 7). With it, such a
            // failure is fatal: the relay rebuilds the producer and replays.
            // (Records that hit message.timeout.ms are not covered by
            // librdkafka's guarantee; the relay treats them as failed too.)
            .set("enable.gapless.guarantee", "true")
            // The Java client's default partitioner: same key, same partition
            // as every other producer of the topic.
            .set("partitioner", "murmur2_random")
            .set("linger.ms", settings.linger_ms.to_string())
            .set(
                "message.timeout.ms",
                settings.message_timeout_ms.to_string(),
            )
            .set(
                "queue.buffering.max.messages",
                settings.queue_max_messages.to_string(),
            );
        let producer: ThreadedProducer<ReportingContext> = cfg
            .create_with_context(ReportingContext {
                reports: tx,
                handle: AtomicPtr::new(std::ptr::null_mut()),
                purged: AtomicBool::new(false),
            })
            .map_err(SinkError::Create)?;
        let client = producer.client();
        client
            .context()
            .handle
            .store(client.native_ptr(), Ordering::Release);
        Ok((Self { producer }, rx))
    }

    /// Hands a record to the producer. Returns at once; the outcome arrives
    /// as a [`DeliveryReport`].
    pub fn send(&self, record: KafkaRecord, tag: DeliveryTag) -> Result<(), SendError> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (k, v) in &record.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(v.as_ref()),
            });
        }
        let base = BaseRecord::with_opaque_to(&record.topic, Box::new(tag))
            .key(record.key.as_ref())
            .payload(record.value.as_ref())
            .headers(headers);
        match self.producer.send(base) {
            Ok(()) => Ok(()),
            Err((err, base)) => {
                let tag = base.delivery_opaque;
                match err.rdkafka_error_code() {
                    Some(RDKafkaErrorCode::QueueFull) => {
                        Err(SendError::QueueFull(Box::new((record, *tag))))
                    }
                    _ if is_too_large(&err) => Err(SendError::TooLarge(err, tag)),
                    _ => Err(SendError::Failed(err)),
                }
            }
        }
    }

    /// `err`, or the producer's fatal error if it has one. After a fatal
    /// error librdkafka fails records with codes that do not say why
    /// (`_FATAL` for those sent since, `_PURGE_QUEUE` for those it purged),
    /// and their reports may arrive before the one of the record that
    /// caused it; the fatal error's own text names the cause.
    pub fn explain(&self, err: DeliveryError) -> DeliveryError {
        match self.producer.client().fatal_error() {
            Some((code, why)) => DeliveryError::ProducerFatal(format!("{code:?}: {why}")),
            None => err,
        }
    }

    /// Records handed over but not yet answered by the broker.
    pub fn in_flight(&self) -> i32 {
        self.producer.in_flight_count()
    }

    /// Discards everything queued or in flight (their reports arrive as
    /// purged errors). Used when a failed session abandons the producer:
    /// the slot replays those records into the next one.
    pub fn purge(&self) {
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
    }

    /// Waits (blocking, up to `timeout`) for everything in flight. Used on
    /// shutdown, off the async runtime's worker threads.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.flush(timeout)
    }
}

#[cfg(test)]
mod settings_tests {
    use super::SinkSettings;

    #[test]
    fn debug_hides_every_secret_property() {
        let canary = "Kc4n4ry/?@#:%='\" x";
        let properties = [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "SASL.PASSWORD",
            "sasl.oauthbearer.client.secret",
            "sasl.jaas.config",
        ];
        let settings = SinkSettings {
            brokers: "b:9092".into(),
            linger_ms: 5,
            message_timeout_ms: 30_000,
            queue_max_messages: 10,
            properties: properties
                .iter()
                .map(|name| ((*name).to_owned(), canary.to_owned()))
                .chain([("sasl.username".to_owned(), "relay-user".to_owned())])
                .collect(),
        };
        for shown in [format!("{settings:?}"), format!("{settings:#?}")] {
            assert!(!shown.contains("Kc4n4ry"), "{shown}");
            for name in properties {
                assert!(shown.contains(name), "names {name}: {shown}");
            }
            assert!(
                shown.contains("relay-user"),
                "harmless values stay: {shown}"
            );
        }
    }
}
