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
//!
//! Every error the broker or librdkafka gives for a record (or the client:
//! SASL) is classified once, by [`classify`]: too large (dead-lettered),
//! unauthorized (always fatal: nothing gets through until someone fixes
//! credentials or ACLs), unroutable (the topic is missing, a policy or the
//! broker's validation refuses the record: `kafka.on_unroutable` decides), or
//! anything else, which the relay meets by rebuilding the producer and
//! replaying from the confirmed LSN. A refusal carries its topic and the fix
//! ([`Refused`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafka;
use serde::Deserialize;
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
    /// The row's key in the relay's record of refusals: the outbox id, or,
    /// for a dead-lettered row whose id cannot be read, a key derived from
    /// its commit LSN, key and payload.
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

/// What a refusal means for the relay; see [`classify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// Larger than the producer's `message.max.bytes` or the topic's
    /// `max.message.bytes`.
    TooLarge,
    /// The topic does not exist and the broker does not create it.
    TopicMissing,
    /// A broker or topic policy refused the record.
    PolicyViolation,
    /// The broker's validation refused the record (e.g. no key on a
    /// compacted topic).
    InvalidRecord,
    /// The relay's principal may not write to the topic.
    TopicUnauthorized,
    /// The relay's principal lacks a cluster permission (IDEMPOTENT_WRITE on
    /// brokers before Kafka 2.8).
    ClusterUnauthorized,
    /// The broker refused the relay's SASL credentials.
    AuthenticationFailed,
}

/// How the relay meets a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalClass {
    /// The record goes to the dead-letter topic (or, if it is a dead letter,
    /// goes there without its payload).
    TooLarge,
    /// No record of this kind can reach its topic until someone acts;
    /// [`OnUnroutable`] decides between stopping and dead-lettering.
    Unroutable,
    /// Credentials or permissions: always fatal, since retrying only hides
    /// the problem and nothing gets through.
    Unauthorized,
}

impl RefusalKind {
    pub fn class(self) -> RefusalClass {
        match self {
            RefusalKind::TooLarge => RefusalClass::TooLarge,
            RefusalKind::TopicMissing
            | RefusalKind::PolicyViolation
            | RefusalKind::InvalidRecord => RefusalClass::Unroutable,
            RefusalKind::TopicUnauthorized
            | RefusalKind::ClusterUnauthorized
            | RefusalKind::AuthenticationFailed => RefusalClass::Unauthorized,
        }
    }

    /// A stable label for the `dlq_reason_code` header.
    pub fn reason_code(self) -> &'static str {
        match self {
            RefusalKind::TooLarge => "too_large",
            RefusalKind::TopicMissing => "topic_missing",
            RefusalKind::PolicyViolation => "policy_violation",
            RefusalKind::InvalidRecord => "invalid_record",
            RefusalKind::TopicUnauthorized => "topic_unauthorized",
            RefusalKind::ClusterUnauthorized => "cluster_unauthorized",
            RefusalKind::AuthenticationFailed => "authentication_failed",
        }
    }
}

/// Classifies an error librdkafka reports for a record (delivery report or
/// refused `send`), for the producer as a whole (its fatal error) or for the
/// client (the error callback). `None`: transient or unknown; the relay
/// rebuilds the producer and replays (invariant 6).
///
/// Left out on purpose: `UNKNOWN_TOPIC_OR_PART` answered to a Produce request
/// (librdkafka refreshes metadata and retries it; a topic that really is
/// missing then fails records with the local `_UNKNOWN_TOPIC`, classified
/// here) and `CORRUPT_MESSAGE` (a checksum failure in transit, retried).
pub fn classify(code: RDKafkaErrorCode) -> Option<RefusalKind> {
    use RDKafkaErrorCode as C;
    Some(match code {
        C::MessageSizeTooLarge => RefusalKind::TooLarge,
        C::UnknownTopic | C::UnknownTopicOrPartition => RefusalKind::TopicMissing,
        C::PolicyViolation => RefusalKind::PolicyViolation,
        C::InvalidRecord => RefusalKind::InvalidRecord,
        C::TopicAuthorizationFailed => RefusalKind::TopicUnauthorized,
        C::ClusterAuthorizationFailed => RefusalKind::ClusterUnauthorized,
        C::Authentication | C::SaslAuthenticationFailed => RefusalKind::AuthenticationFailed,
        _ => return None,
    })
}

/// [`classify`] for a [`KafkaError`] that carries a code.
pub fn classify_error(err: &KafkaError) -> Option<RefusalKind> {
    err.rdkafka_error_code().and_then(classify)
}

/// `kafka.on_unroutable`: what to do with an event no broker will take for
/// its topic (topic missing with auto-creation off, policy violation,
/// invalid record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnUnroutable {
    /// Stop with an error naming the topic and the fix: nothing goes where
    /// nobody looks, and the slot keeps the event.
    #[default]
    Stop,
    /// Send the event to the dead-letter topic with the reason and go on.
    DeadLetter,
}

impl OnUnroutable {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnUnroutable::Stop => "stop",
            OnUnroutable::DeadLetter => "dead-letter",
        }
    }
}

/// A refusal, with what the relay knows about it. Its `Display` says what
/// happened and how to fix it; [`Refused::reason`] only what happened (the
/// dead-letter reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub kind: RefusalKind,
    /// The refused record's topic, when there is one.
    pub topic: Option<String>,
    /// True when the topic is the dead-letter topic: there is nowhere else
    /// to send the record, so no refusal of it is ever dead-lettered.
    pub dead_letter_topic: bool,
    /// librdkafka's or the broker's words.
    pub detail: String,
}

impl Refused {
    /// What happened, without the fix.
    pub fn reason(&self) -> String {
        let topic = match (&self.topic, self.dead_letter_topic) {
            (Some(t), true) => format!("the dead-letter topic \"{t}\""),
            (Some(t), false) => format!("topic \"{t}\""),
            (None, _) => "its topic".to_owned(),
        };
        let detail = &self.detail;
        match self.kind {
            RefusalKind::TooLarge => format!("the record is too large for {topic} ({detail})"),
            RefusalKind::TopicMissing => format!(
                "{topic} does not exist and the broker does not create topics automatically ({detail})"
            ),
            RefusalKind::PolicyViolation => {
                format!("a broker policy refused the record for {topic} ({detail})")
            }
            RefusalKind::InvalidRecord => {
                format!("the broker refused the record for {topic} as invalid ({detail})")
            }
            RefusalKind::TopicUnauthorized => {
                format!("the relay is not authorized to write to {topic} ({detail})")
            }
            RefusalKind::ClusterUnauthorized => match &self.topic {
                Some(_) => format!(
                    "the broker refused the relay a cluster permission writing to {topic} ({detail})"
                ),
                None => format!("the broker refused the relay a cluster permission ({detail})"),
            },
            RefusalKind::AuthenticationFailed => {
                format!("Kafka refused the relay's SASL credentials ({detail})")
            }
        }
    }

    /// How to fix it.
    fn fix(&self) -> String {
        let topic = self.topic.as_deref().unwrap_or("<topic>");
        let or_dead_letter = if self.dead_letter_topic {
            ""
        } else {
            " (or set kafka.on_unroutable = \"dead-letter\" to send such events to the dead-letter topic and go on)"
        };
        match self.kind {
            RefusalKind::TooLarge => {
                "raise the topic's max.message.bytes or the producer's message.max.bytes".to_owned()
            }
            RefusalKind::TopicMissing => format!(
                "create it: kafka-topics.sh --bootstrap-server <broker> --create --topic {topic}{or_dead_letter}"
            ),
            RefusalKind::PolicyViolation => format!(
                "change the topic's configuration or the broker's policy{or_dead_letter}"
            ),
            RefusalKind::InvalidRecord => format!(
                "check the topic's configuration (a compacted topic needs a key, for one){or_dead_letter}"
            ),
            RefusalKind::TopicUnauthorized => format!(
                "grant the relay's principal WRITE and DESCRIBE on it: kafka-acls.sh --bootstrap-server <broker> --add --allow-principal User:<relay> --operation Write --operation Describe --topic {topic}"
            ),
            RefusalKind::ClusterUnauthorized => "brokers before Kafka 2.8 require IDEMPOTENT_WRITE on the cluster for the idempotent producer: kafka-acls.sh --bootstrap-server <broker> --add --allow-principal User:<relay> --operation IdempotentWrite --cluster".to_owned(),
            RefusalKind::AuthenticationFailed => "check security.protocol, sasl.mechanisms, sasl.username and sasl.password under [kafka.properties] against the broker's listener".to_owned(),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.reason(), self.fix())
    }
}

impl std::error::Error for Refused {}

/// Why the broker did not take a record.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeliveryError {
    /// Refused for a reason retrying cannot cure ([`classify`]): too large,
    /// unroutable or unauthorized.
    #[error("{0}")]
    Refused(Refused),
    /// Anything else (timeout, fatal idempotence error...): the relay stops
    /// confirming, rebuilds the producer and replays from the last confirmed
    /// LSN (invariant 6).
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
    /// Refused before it left ([`classify`]): larger than
    /// `message.max.bytes`, or its topic is known not to exist. The record
    /// comes back with the refusal.
    #[error("{0}")]
    Refused(Refused, Box<(KafkaRecord, DeliveryTag)>),
    /// Any other immediate error (e.g. the producer hit a fatal error:
    /// [`KafkaSink::explain`] tells which).
    #[error("producer refused the record: {0}")]
    Failed(KafkaError),
}

/// Errors building the producer or checking the cluster before streaming.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("could not create the Kafka producer: {0} (check kafka.brokers and kafka.properties)")]
    Create(KafkaError),
    /// Kafka refuses the relay in a way retrying cannot cure.
    #[error(transparent)]
    Refused(#[from] Refused),
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
    /// Client-level refusals (SASL): they fail no record (records wait for
    /// a broker until they time out), so they come through here. Only the
    /// first is sent.
    alarms: mpsc::UnboundedSender<Refused>,
    alarmed: AtomicBool,
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

impl ClientContext for ReportingContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(kind) = classify_error(&error)
            && kind.class() == RefusalClass::Unauthorized
            && !self.alarmed.swap(true, Ordering::AcqRel)
        {
            let _ = self.alarms.send(Refused {
                kind,
                topic: None,
                dead_letter_topic: false,
                detail: reason.to_owned(),
            });
        }
        // As rdkafka's default: librdkafka's words at error level.
        tracing::error!("librdkafka: {error}: {reason}");
    }
}

impl ProducerContext for ReportingContext {
    type DeliveryOpaque = Box<DeliveryTag>;

    fn delivery(&self, result: &DeliveryResult<'_>, tag: Self::DeliveryOpaque) {
        let result = match result {
            Ok(_) => Ok(()),
            Err((err, msg)) => {
                self.purge_behind_failure();
                Err(match refusal(err, msg.topic(), tag.dead_letter) {
                    Some(refused) => DeliveryError::Refused(refused),
                    None => DeliveryError::Failed(err.clone()),
                })
            }
        };
        // The receiver is gone only when the relay dropped the sink after a
        // failure; the reports of a discarded producer no longer matter.
        let _ = self.reports.send(DeliveryReport { tag: *tag, result });
    }
}

/// The refusal a record's error stands for, if [`classify`] finds one.
fn refusal(err: &KafkaError, topic: &str, dead_letter: bool) -> Option<Refused> {
    classify_error(err).map(|kind| Refused {
        kind,
        topic: Some(topic.to_owned()),
        dead_letter_topic: dead_letter,
        detail: err.to_string(),
    })
}

/// How long [`KafkaSink::check_topic`] keeps asking while the broker says a
/// topic is missing, in case it is creating it.
pub const CREATION_GRACE: Duration = Duration::from_secs(3);

/// What a metadata request says about one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicCheck {
    /// It exists (or the broker is creating it on request).
    Exists,
    /// The broker answered with a refusal: missing (no auto-creation) or
    /// not authorized.
    Refused(Refused),
    /// No answer in time, or an answer the relay does not act on.
    Unknown(String),
}

/// The idempotent producer and its delivery-report channel.
pub struct KafkaSink {
    /// Shared only with a metadata request in flight on a blocking thread.
    producer: Arc<ThreadedProducer<ReportingContext>>,
    alarms: mpsc::UnboundedReceiver<Refused>,
}

impl KafkaSink {
    /// Builds the producer. Reports for every record sent arrive on the
    /// returned receiver; its length is bounded by the records in flight,
    /// which the relay bounds.
    pub fn new(
        settings: &SinkSettings,
    ) -> Result<(Self, mpsc::UnboundedReceiver<DeliveryReport>), SinkError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (alarm_tx, alarms) = mpsc::unbounded_channel();
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
                alarms: alarm_tx,
                alarmed: AtomicBool::new(false),
            })
            .map_err(SinkError::Create)?;
        let client = producer.client();
        client
            .context()
            .handle
            .store(client.native_ptr(), Ordering::Release);
        Ok((
            Self {
                producer: Arc::new(producer),
                alarms,
            },
            rx,
        ))
    }

    /// Resolves once the client met a refusal that fails no record (SASL
    /// authentication refused): the relay stops with it.
    pub async fn unauthorized(&mut self) -> Refused {
        match self.alarms.recv().await {
            Some(refused) => refused,
            // The sender lives in the producer, as long as `self`.
            None => std::future::pending().await,
        }
    }

    /// Asks the cluster about `topic` (a metadata request, waiting at most
    /// `timeout`). With the producer's `allow.auto.create.topics` (on by
    /// default) a broker that creates topics creates it now; one that does
    /// not answers that it is missing. A client-level refusal met meanwhile
    /// (SASL) is the answer too.
    ///
    /// A broker that creates topics may answer "unknown topic" while the
    /// creation it just started is under way (Kafka 4 does), so a "missing"
    /// answer is only believed once it held for [`CREATION_GRACE`].
    pub async fn check_topic(
        &mut self,
        topic: &str,
        dead_letter_topic: bool,
        timeout: Duration,
    ) -> TopicCheck {
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            let answer = self
                .check_topic_once(topic, dead_letter_topic, timeout)
                .await;
            let missing =
                matches!(&answer, TopicCheck::Refused(r) if r.kind == RefusalKind::TopicMissing);
            if !missing || started.elapsed() >= CREATION_GRACE {
                return answer;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    async fn check_topic_once(
        &mut self,
        topic: &str,
        dead_letter_topic: bool,
        timeout: Duration,
    ) -> TopicCheck {
        let producer = Arc::clone(&self.producer);
        let name = topic.to_owned();
        let request = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(Some(&name), timeout)
                .map(|md| {
                    md.topics()
                        .iter()
                        .find(|t| t.name() == name)
                        .map(|t| t.error().map(RDKafkaErrorCode::from))
                })
        });
        let answer = tokio::select! {
            refused = self.unauthorized() => return TopicCheck::Refused(refused),
            answer = request => answer,
        };
        let refused = |code: RDKafkaErrorCode, kind: RefusalKind| {
            TopicCheck::Refused(Refused {
                kind,
                topic: Some(topic.to_owned()),
                dead_letter_topic,
                detail: format!("metadata request: {code}"),
            })
        };
        match answer {
            Ok(Ok(Some(None))) => TopicCheck::Exists,
            // Being created on this very request.
            Ok(Ok(Some(Some(RDKafkaErrorCode::LeaderNotAvailable)))) => TopicCheck::Exists,
            Ok(Ok(Some(Some(code)))) => match classify(code) {
                Some(kind) if kind.class() != RefusalClass::TooLarge => refused(code, kind),
                _ => TopicCheck::Unknown(format!("the broker answered {code}")),
            },
            Ok(Ok(None)) => TopicCheck::Unknown("the broker's answer does not list it".into()),
            Ok(Err(e)) => match self.alarms.try_recv() {
                Ok(refused) => TopicCheck::Refused(refused),
                Err(_) => TopicCheck::Unknown(e.to_string()),
            },
            Err(e) => TopicCheck::Unknown(format!("metadata request task: {e}")),
        }
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
                let tag = *base.delivery_opaque;
                if err.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) {
                    return Err(SendError::QueueFull(Box::new((record, tag))));
                }
                match refusal(&err, &record.topic, tag.dead_letter) {
                    Some(refused) => Err(SendError::Refused(refused, Box::new((record, tag)))),
                    None => Err(SendError::Failed(err)),
                }
            }
        }
    }

    /// `err`, or the producer's fatal error if it has one. After a fatal
    /// error librdkafka fails records with codes that do not say why
    /// (`_FATAL` for those sent since, `_PURGE_QUEUE` for those it purged),
    /// and their reports may arrive before the one of the record that
    /// caused it; the fatal error's own text names the cause. A fatal error
    /// that is itself a refusal (cluster authorization refused when the
    /// producer asked for its id) comes back as one.
    pub fn explain(&self, err: DeliveryError) -> DeliveryError {
        match self.producer.client().fatal_error() {
            Some((code, why)) => match classify(code) {
                Some(kind) if kind.class() == RefusalClass::Unauthorized => {
                    DeliveryError::Refused(Refused {
                        kind,
                        topic: None,
                        dead_letter_topic: false,
                        detail: why,
                    })
                }
                _ => DeliveryError::ProducerFatal(format!("{code:?}: {why}")),
            },
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
mod tests {
    use super::*;
    use RDKafkaErrorCode as C;

    #[test]
    fn classify_sorts_refusals_from_what_retrying_cures() {
        let cases = [
            (C::MessageSizeTooLarge, Some(RefusalKind::TooLarge)),
            (C::UnknownTopic, Some(RefusalKind::TopicMissing)),
            (C::UnknownTopicOrPartition, Some(RefusalKind::TopicMissing)),
            (C::PolicyViolation, Some(RefusalKind::PolicyViolation)),
            (C::InvalidRecord, Some(RefusalKind::InvalidRecord)),
            (
                C::TopicAuthorizationFailed,
                Some(RefusalKind::TopicUnauthorized),
            ),
            (
                C::ClusterAuthorizationFailed,
                Some(RefusalKind::ClusterUnauthorized),
            ),
            (C::Authentication, Some(RefusalKind::AuthenticationFailed)),
            (
                C::SaslAuthenticationFailed,
                Some(RefusalKind::AuthenticationFailed),
            ),
            // What librdkafka retries, or the relay meets with a replay.
            (C::MessageTimedOut, None),
            (C::NotLeaderForPartition, None),
            (C::LeaderNotAvailable, None),
            (C::RequestTimedOut, None),
            (C::NotEnoughReplicas, None),
            (C::InvalidMessage, None),
            (C::OutOfOrderSequenceNumber, None),
            (C::InvalidProducerEpoch, None),
            (C::NetworkException, None),
            (C::BrokerTransportFailure, None),
            (C::AllBrokersDown, None),
            (C::Fatal, None),
            (C::GaplessGuarantee, None),
            (C::PurgeQueue, None),
            (C::PurgeInflight, None),
            (C::QueueFull, None),
        ];
        for (code, want) in cases {
            assert_eq!(classify(code), want, "{code:?}");
        }
        let class = |c| classify(c).map(RefusalKind::class);
        assert_eq!(
            class(C::SaslAuthenticationFailed),
            Some(RefusalClass::Unauthorized)
        );
        assert_eq!(
            class(C::ClusterAuthorizationFailed),
            Some(RefusalClass::Unauthorized)
        );
        assert_eq!(
            class(C::TopicAuthorizationFailed),
            Some(RefusalClass::Unauthorized)
        );
        assert_eq!(class(C::UnknownTopic), Some(RefusalClass::Unroutable));
        assert_eq!(class(C::PolicyViolation), Some(RefusalClass::Unroutable));
        assert_eq!(class(C::InvalidRecord), Some(RefusalClass::Unroutable));
        assert_eq!(class(C::MessageSizeTooLarge), Some(RefusalClass::TooLarge));
    }

    fn refused(kind: RefusalKind, topic: Option<&str>, dead_letter_topic: bool) -> Refused {
        Refused {
            kind,
            topic: topic.map(str::to_owned),
            dead_letter_topic,
            detail: "Broker: something".into(),
        }
    }

    #[test]
    fn refusals_name_the_topic_and_the_fix() {
        let text = refused(RefusalKind::TopicMissing, Some("orders.order"), false).to_string();
        assert!(
            text.contains("topic \"orders.order\" does not exist"),
            "{text}"
        );
        assert!(
            text.contains("kafka-topics.sh") && text.contains("--create --topic orders.order"),
            "{text}"
        );
        assert!(text.contains("on_unroutable = \"dead-letter\""), "{text}");
        assert!(text.contains("Broker: something"), "{text}");

        // For the dead-letter topic there is no dead-letter way out.
        let text = refused(RefusalKind::TopicMissing, Some("orders.dlq"), true).to_string();
        assert!(
            text.contains("the dead-letter topic \"orders.dlq\""),
            "{text}"
        );
        assert!(!text.contains("on_unroutable"), "{text}");

        let text = refused(RefusalKind::TopicUnauthorized, Some("orders.order"), false).to_string();
        assert!(
            text.contains("not authorized to write to topic \"orders.order\""),
            "{text}"
        );
        assert!(
            text.contains("kafka-acls.sh") && text.contains("--topic orders.order"),
            "{text}"
        );

        let text = refused(RefusalKind::ClusterUnauthorized, None, false).to_string();
        assert!(text.contains("IdempotentWrite --cluster"), "{text}");

        let text = refused(RefusalKind::AuthenticationFailed, None, false).to_string();
        assert!(
            text.contains("SASL credentials") && text.contains("sasl.password"),
            "{text}"
        );

        for kind in [RefusalKind::PolicyViolation, RefusalKind::InvalidRecord] {
            let r = refused(kind, Some("orders.order"), false);
            let text = r.to_string();
            assert!(text.contains("\"orders.order\""), "{text}");
            assert!(text.contains("on_unroutable"), "{text}");
            // The dead-letter reason says what happened, not how to configure.
            assert!(!r.reason().contains("on_unroutable"), "{}", r.reason());
        }
        assert!(
            refused(RefusalKind::TooLarge, Some("t"), false)
                .reason()
                .contains("too large")
        );
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
