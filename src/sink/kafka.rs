//! The Kafka producer: the one place that talks to the broker.
//!
//! An idempotent producer (`enable.idempotence=true`, hence `acks=all` and at
//! most five requests in flight per partition, which keeps per-partition order
//! across retries) with the Java client's partitioner (`murmur2_random`), so
//! that keys land on the partition any other producer of the topic would pick
//! ("per-aggregate order" in docs/design.md).
//!
//! Sending never blocks: [`KafkaSink::send`] hands the record to librdkafka's
//! queue and returns; the broker's answer arrives later as a
//! [`DeliveryReport`] on the channel returned by [`KafkaSink::new`]. The relay
//! feeds those reports to the ack tracker: a record counts as delivered only
//! when the broker acknowledged it ("confirm only what the broker holds" in docs/design.md). A full local queue is
//! returned to the caller ([`SendError::QueueFull`]) so the relay stops
//! reading the slot instead of buffering ("bounded memory" in docs/design.md).
//!
//! Every refusal is classified once, in [`super::refusal`].
//!
//! The producer does not know what the relay tracks about a record: each
//! record travels with an opaque tag of the caller's type `T`, returned in
//! its [`DeliveryReport`].
//!
//! Exactly-once is this producer with a `transactional.id`: its submodule
//! `transactional` (`kafka/transactional.rs`) adds the transactional calls
//! to [`KafkaSink`].

mod reports;
pub(super) mod transactional;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafka;
use tokio::sync::mpsc;

use super::broker_watch::{BrokerWatch, ReachObserver};
use super::counters::AckCounters;
use super::librdkafka_log;
use super::refusal_kind::{
    BrokerFailure, DeliveryError, RefusalClass, RefusalKind, Refused, classify, classify_error,
};
use crate::backoff::Backoff;
use crate::envelope::KafkaRecord;
use reports::{PumpGuard, RelayProducer};

pub use transactional::{TransactionSettings, TxnFailure};

/// A Kafka client config with the operator's `[kafka.properties]` (TLS,
/// SASL, ...) and `kafka.brokers`: the base of every client the relay and
/// its commands build (producer, checkpoint reader, admin, dead letters).
pub fn client_config<'a>(
    brokers: &str,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    cfg.set("bootstrap.servers", brokers);
    cfg
}

/// Why librdkafka refuses the property `name = value`, in its own words
/// (an unknown name, a value out of range or of the wrong type), or `None`
/// when it takes it. Config validation asks this, so such a property is a
/// configuration error before the relay connects anywhere, not a producer
/// that fails to build once the relay is active. librdkafka checks each
/// property as it is set on a configuration object (`rd_kafka_conf_set`):
/// no client is made, nothing touches the network. Properties that depend
/// on each other are checked only when a client is made. The reason never
/// quotes the value of a property whose name marks a secret.
pub fn property_problem(name: &str, value: &str) -> Option<String> {
    let mut cfg = ClientConfig::new();
    cfg.set(name, value);
    let reason = match cfg.create_native_config() {
        Ok(_) => return None,
        Err(KafkaError::ClientConfig(_, reason, _, _)) => reason,
        Err(other) => other.to_string(),
    };
    Some(
        if crate::redact::is_secret_property(name) && !value.is_empty() {
            reason.replace(value, "***")
        } else {
            reason
        },
    )
}

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
    "transactional.id",
    "transaction.timeout.ms",
];

/// The broker's answer for one record, with the tag it was sent with.
#[derive(Debug)]
pub struct DeliveryReport<T> {
    pub tag: T,
    pub result: Result<(), DeliveryError>,
}

/// Errors from [`KafkaSink::send`].
#[derive(Debug, thiserror::Error)]
pub enum SendError<T> {
    /// librdkafka's local queue is full: wait for delivery reports, then retry.
    #[error("producer queue full")]
    QueueFull(Box<(KafkaRecord, T)>),
    /// Refused before it left ([`classify`]): larger than
    /// `message.max.bytes`, or its topic is known not to exist. The record
    /// comes back with the refusal.
    #[error("{0}")]
    Refused(Refused, Box<(KafkaRecord, T)>),
    /// Any other immediate error (e.g. the producer hit a fatal error:
    /// [`KafkaSink::explain`] tells which).
    #[error("producer refused the record: {0}")]
    Failed(BrokerFailure),
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

impl SinkError {
    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> crate::error::Cause {
        match self {
            SinkError::Create(_) => crate::error::Cause::KafkaClientUnbuildable,
            SinkError::Refused(r) => r.cause(),
        }
    }
}

/// Plain settings for the producer, taken from the validated config.
/// `Debug` shows `***` for every property whose name marks a secret
/// ([`crate::redact::is_secret_property`]).
#[derive(Clone)]
pub struct SinkSettings {
    pub brokers: String,
    pub linger_ms: u64,
    pub message_timeout_ms: u64,
    pub queue_max_messages: u64,
    /// `queue.buffering.max.kbytes`, unless `properties` set it; `None`:
    /// librdkafka's default (1 GiB).
    pub queue_max_kbytes: Option<u64>,
    /// The dead-letter topic: refusals of records for it say so.
    pub dead_letter_topic: String,
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
                let shown = if crate::redact::is_secret_property(name) {
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
            .field("queue_max_kbytes", &self.queue_max_kbytes)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("properties", &properties)
            .finish()
    }
}

struct ReportingContext<T> {
    reports: mpsc::UnboundedSender<DeliveryReport<T>>,
    dead_letter_topic: String,
    /// The producer's own librdkafka handle, set right after creation, so a
    /// failed delivery can stop everything queued behind it (see
    /// [`ReportingContext::purge_behind_failure`]).
    handle: AtomicPtr<RDKafka>,
    purged: AtomicBool,
    /// Set by [`KafkaSink::abandon`]: the relay is discarding this producer
    /// and replays its records from the confirmed position, so the errors
    /// its teardown raises are expected (see `error` below).
    abandoned: AtomicBool,
    /// Client-level refusals (SASL): they fail no record (records wait for
    /// a broker until they time out), so they come through here. Only the
    /// first is sent.
    alarms: mpsc::UnboundedSender<Refused>,
    alarmed: AtomicBool,
    /// What the broker acknowledged, counted where the topic, size and
    /// dead-letter reason of each record are at hand.
    acknowledged: AckCounters,
    /// Exactly-once: the checkpoint topic, whose records are the sink's
    /// own and report to nobody (`transactional.rs`).
    checkpoint_topic: Option<String>,
    /// Whether a broker answers, from the callbacks below; logs
    /// connection trouble once per incident instead of once per error.
    brokers: BrokerWatch,
    /// Woken by librdkafka when reports land on its empty queue, unless
    /// the session holds them (`kafka/reports.rs`).
    reports_wake: Arc<reports::Wake>,
}

impl<T> ReportingContext<T> {
    /// A record failed for good: the relay will replay from the confirmed
    /// LSN, so no later record of this producer may reach the broker, or it
    /// would land before the failed one's replay and break per-aggregate
    /// order ("per-aggregate order" in docs/design.md). After a non-fatal permanent error librdkafka
    /// bumps the producer epoch and goes on with the queue; purging here, on
    /// the thread that serves this report, wins against that epoch bump
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

impl<T: Send + Sync + 'static> ClientContext for ReportingContext<T> {
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
        // A producer being discarded: what its teardown raises (the
        // gap-less guarantee broken by purging records in flight, after a
        // grace that did not see them answered) concerns records the next
        // producer sends again. Nobody needs to act.
        if self.abandoned.load(Ordering::Acquire) {
            tracing::debug!(
                target: "librdkafka",
                "librdkafka: {error}: {reason} (expected: the relay discarded this producer; \
                 the next one sends its records again from the confirmed position)"
            );
            return;
        }
        // The producer's fatal error: the records and transactional calls
        // it fails come back to the relay, which says what follows.
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            tracing::debug!(
                target: "librdkafka",
                note = librdkafka_log::REPORTED_BY_THE_RELAY,
                "librdkafka: {error}: {reason}"
            );
            return;
        }
        // Connection trouble repeats with every attempt: the watch logs
        // it once per incident. The rest needs a person.
        if !self.brokers.client_error(&error, reason) {
            crate::events::KafkaClientError {
                error: &error,
                reason,
            }
            .emit();
        }
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        librdkafka_log::forward(level, fac, message);
    }

    /// Read only while no broker is known to answer (see
    /// [`STATISTICS_INTERVAL_MS`]), so a healthy producer pays nothing
    /// but librdkafka's own JSON.
    fn stats_raw(&self, statistics: &[u8]) {
        self.brokers.statistics(statistics);
    }
}

/// What travels with a record through librdkafka: the caller's tag, and
/// the record's size (key, value, header names and values), counted on
/// the Rust side when it is sent so that its delivery report need not read
/// the headers back out of librdkafka.
pub(crate) struct Sent<T> {
    tag: T,
    bytes: usize,
}

impl<T> Sent<T> {
    pub(crate) fn new(tag: T, bytes: usize) -> Box<Self> {
        Box::new(Sent { tag, bytes })
    }
}

impl<T: Send + Sync + 'static> ProducerContext for ReportingContext<T> {
    type DeliveryOpaque = Box<Sent<T>>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Self::DeliveryOpaque) {
        if transactional::is_checkpoint(self.checkpoint_topic.as_deref(), result) {
            // Its fate is the transaction's: the commit says it.
            return;
        }
        let Sent { tag, bytes } = *sent;
        let result = match result {
            Ok(msg) => {
                self.brokers.answered();
                self.acknowledged
                    .count(msg, bytes, msg.topic() == self.dead_letter_topic);
                Ok(())
            }
            Err((err, msg)) => {
                self.purge_behind_failure();
                let dead_letter = msg.topic() == self.dead_letter_topic;
                Err(match refusal(err, msg.topic(), dead_letter) {
                    Some(refused) => DeliveryError::Refused(refused),
                    None => DeliveryError::Failed(BrokerFailure::of(err)),
                })
            }
        };
        // The receiver is gone only when the relay dropped the sink after a
        // failure; the reports of a discarded producer no longer matter.
        let _ = self.reports.send(DeliveryReport { tag, result });
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
/// topic is missing, in case it is creating it (when the producer may ask
/// for that). The controller creates a topic in tens of milliseconds, but a
/// busy broker applies the new metadata later: seen over 3 s on a loaded
/// 2-CPU machine, answering "unknown topic" all along.
pub const CREATION_GRACE: Duration = Duration::from_secs(30);

/// Longest wait for one answer about a topic the relay checks at start
/// (the dead-letter topic; a missing checkpoint topic).
const TOPIC_CHECK: Duration = Duration::from_secs(10);

impl SinkSettings {
    /// How long one question about a topic at start may take: at most
    /// [`TOPIC_CHECK`], and no longer than a record may wait.
    pub fn topic_check_timeout(&self) -> Duration {
        TOPIC_CHECK.min(Duration::from_millis(self.message_timeout_ms))
    }

    /// The producer may ask the broker to create a topic it names (see
    /// [`allows_topic_creation`]).
    pub fn may_create_topics(&self) -> bool {
        allows_topic_creation(
            self.properties
                .iter()
                .rfind(|(name, _)| name == "allow.auto.create.topics")
                .map(|(_, value)| value.as_str()),
        )
    }
}

/// Whether a producer whose `allow.auto.create.topics` is `value` (`None`:
/// not set) asks the broker to create a topic it names: librdkafka's
/// default for a producer is yes. Whether the broker does is its own
/// `auto.create.topics.enable`.
pub fn allows_topic_creation(value: Option<&str>) -> bool {
    value.is_none_or(|v| v.trim().eq_ignore_ascii_case("true"))
}

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

/// How often the answer probe asks the cluster while no broker is known
/// to answer: how an idle relay (no record in flight to be acknowledged)
/// learns that a broker answers again after an outage. One metadata
/// request for one topic: librdkafka's statistics, which told it before,
/// cost a JSON document of every topic and partition each interval, some
/// 19 ms of CPU a second at 1,000 topics whether anything happened or not.
pub const ANSWER_PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long the probe at start waits for any broker to answer, at most.
const BROKER_PROBE: Duration = Duration::from_secs(5);

/// The relay's producer configuration: the operator's properties, then
/// what the relay owns ([`RELAY_OWNED_PROPERTIES`]): idempotence and
/// `acks=all`, the gapless guarantee or, with `transactions`, the
/// transactional settings, the Java client's partitioner, the linger,
/// message timeout and queue bounds of `settings` (the byte bound unless
/// the operator's properties set it).
pub fn producer_config(
    settings: &SinkSettings,
    transactions: Option<&TransactionSettings>,
) -> ClientConfig {
    let mut cfg = client_config(
        &settings.brokers,
        settings.properties.iter().map(|(k, v)| (k, v)),
    );
    cfg.set("enable.idempotence", "true").set("acks", "all");
    match transactions {
        // In a transaction a failed record makes the whole transaction
        // abortable and the relay replays it all: no gap can be
        // committed, and a gapless error would be fatal instead.
        Some(transactions) => transactions.configure(&mut cfg),
        // Without it librdkafka keeps writing a partition after one of
        // its records failed for good (it bumps the epoch and goes on),
        // and the replay from the confirmed LSN would put the failed
        // record after its successors ("per-aggregate order" in docs/design.md). With it, such a
        // failure is fatal: the relay rebuilds the producer and replays.
        // (Records that hit message.timeout.ms are not covered by
        // librdkafka's guarantee; the relay treats them as failed too.)
        None => {
            cfg.set("enable.gapless.guarantee", "true");
        }
    }
    cfg
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
    // The byte bound of librdkafka's queue follows the relay's own
    // (`relay.max_in_flight_bytes`), unless the operator set it.
    if let Some(kbytes) = settings.queue_max_kbytes
        && cfg.get("queue.buffering.max.kbytes").is_none()
    {
        cfg.set("queue.buffering.max.kbytes", kbytes.to_string());
    }
    cfg
}

/// The answer probe: a thread that, while no broker is known to answer,
/// asks the cluster about `topic` (the dead-letter topic: metadata for one
/// topic is cheap on any cluster) every [`ANSWER_PROBE_EVERY`], and tells
/// the broker watch when one answers. It holds the producer only while it
/// asks, and ends once the producer is dropped.
fn spawn_answer_probe<T: Send + Sync + 'static>(
    producer: std::sync::Weak<RelayProducer<T>>,
    topic: String,
) {
    let _ = std::thread::Builder::new()
        .name("kafka-answer-probe".into())
        .spawn(move || {
            loop {
                std::thread::sleep(ANSWER_PROBE_EVERY);
                let Some(producer) = producer.upgrade() else {
                    return;
                };
                let brokers = &producer.client().context().brokers;
                if brokers.awaiting()
                    && producer
                        .client()
                        .fetch_metadata(Some(&topic), ANSWER_PROBE_EVERY)
                        .is_ok()
                {
                    brokers.answered();
                }
            }
        });
}

/// How long a nudge ([`KafkaSink::nudge`]) keeps the producer sending
/// without its linger: long enough for its broker threads to wake and send.
const NUDGE_HOLD_MS: i32 = 1;

/// The idempotent producer and its delivery-report channel.
pub struct KafkaSink<T: Send + Sync + 'static> {
    /// Shared only with a metadata request in flight on a blocking thread,
    /// and with the answer probe and the report pump (`kafka/reports.rs`),
    /// which hold it weakly.
    producer: Arc<RelayProducer<T>>,
    /// Serves the delivery reports while the sink lives.
    reports: PumpGuard,
    alarms: mpsc::UnboundedReceiver<Refused>,
    dead_letter_topic: String,
    /// The producer may ask the broker to create a topic it names
    /// (`allow.auto.create.topics`, on unless `kafka.properties` turns it
    /// off): a "missing" answer may be a creation under way.
    may_create_topics: bool,
}

impl<T: Send + Sync + 'static> KafkaSink<T> {
    /// Builds the producer. Reports for every record sent arrive on the
    /// returned receiver; its length is bounded by the records in flight,
    /// which the relay bounds.
    pub fn new(
        settings: &SinkSettings,
    ) -> Result<(Self, mpsc::UnboundedReceiver<DeliveryReport<T>>), SinkError> {
        Self::build(settings, None)
    }

    /// [`KafkaSink::new`], or with `transactions` the transactional
    /// producer of exactly-once delivery (`transactional.rs`).
    fn build(
        settings: &SinkSettings,
        transactions: Option<&TransactionSettings>,
    ) -> Result<(Self, mpsc::UnboundedReceiver<DeliveryReport<T>>), SinkError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (alarm_tx, alarms) = mpsc::unbounded_channel();
        let producer: RelayProducer<T> = producer_config(settings, transactions)
            .create_with_context(ReportingContext {
                reports: tx,
                dead_letter_topic: settings.dead_letter_topic.clone(),
                handle: AtomicPtr::new(std::ptr::null_mut()),
                purged: AtomicBool::new(false),
                abandoned: AtomicBool::new(false),
                alarms: alarm_tx,
                alarmed: AtomicBool::new(false),
                acknowledged: AckCounters::new(&settings.dead_letter_topic),
                checkpoint_topic: transactions.map(|t| t.checkpoint_topic.clone()),
                brokers: BrokerWatch::new(&settings.brokers),
                reports_wake: Arc::default(),
            })
            .map_err(SinkError::Create)?;
        let client = producer.client();
        client
            .context()
            .handle
            .store(client.native_ptr(), Ordering::Release);
        let producer = Arc::new(producer);
        let pump = reports::spawn(&producer);
        spawn_answer_probe(
            Arc::downgrade(&producer),
            settings.dead_letter_topic.clone(),
        );
        Ok((
            Self {
                producer,
                reports: pump,
                alarms,
                dead_letter_topic: settings.dead_letter_topic.clone(),
                may_create_topics: settings.may_create_topics(),
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

    /// Tells `observer` whether a broker answers: the state known now (if
    /// any), then every change (see `broker_watch`).
    pub fn on_reach(&self, observer: ReachObserver) {
        self.producer.client().context().brokers.observe(observer);
    }

    /// Asks the cluster for metadata, waiting at most a few seconds (and
    /// no longer than `timeout`): true if a broker answered. When none
    /// does, the watch says so in one line naming `kafka.brokers` and tells
    /// the observer; nothing else changes: records wait in librdkafka's
    /// queue, which keeps trying.
    pub async fn probe_brokers(&self, timeout: Duration) -> bool {
        let producer = Arc::clone(&self.producer);
        let topic = self.dead_letter_topic.clone();
        let timeout = timeout.min(BROKER_PROBE);
        // The dead-letter topic, which the relay asks about next anyway:
        // metadata for one topic is cheap on any cluster, that of every
        // topic is not.
        let answer = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(Some(&topic), timeout)
        })
        .await;
        let brokers = &self.producer.client().context().brokers;
        match answer {
            Ok(Ok(_)) => {
                brokers.answered();
                true
            }
            Ok(Err(e)) => {
                brokers.probe_failed(&e.to_string());
                false
            }
            Err(e) => {
                brokers.probe_failed(&format!("metadata request task: {e}"));
                false
            }
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
    /// answer is only believed once it held for [`CREATION_GRACE`], unless
    /// the producer may not ask for the creation: then at once.
    pub async fn check_topic(
        &mut self,
        topic: &str,
        dead_letter_topic: bool,
        timeout: Duration,
    ) -> TopicCheck {
        let started = tokio::time::Instant::now();
        // A broker creates a topic in tens of milliseconds: ask again soon
        // (a relay starting on a new dead-letter topic waits for this),
        // then less and less often.
        let mut pauses = Backoff::exact(Duration::from_millis(10), Duration::from_secs(1), 2);
        loop {
            let answer = self
                .check_topic_once(topic, dead_letter_topic, timeout)
                .await;
            let missing =
                matches!(&answer, TopicCheck::Refused(r) if r.kind == RefusalKind::TopicMissing);
            if !missing || !self.may_create_topics || started.elapsed() >= CREATION_GRACE {
                return answer;
            }
            tokio::time::sleep(pauses.next_delay()).await;
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
                .inspect(|_| producer.client().context().brokers.answered())
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
    /// as a [`DeliveryReport`]. Lets go of held reports first
    /// ([`KafkaSink::hold_reports`]).
    pub fn send(&self, record: KafkaRecord, tag: T) -> Result<(), SendError<T>> {
        self.reports.before_send();
        self.hand_over(record, tag)
    }

    /// [`KafkaSink::send`] without letting go of held reports.
    fn hand_over(&self, record: KafkaRecord, tag: T) -> Result<(), SendError<T>> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (k, v) in &record.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(v.as_ref()),
            });
        }
        let base = BaseRecord::with_opaque_to(&record.topic, Sent::new(tag, record.size()))
            .key(record.key.as_ref())
            .payload(record.value.as_ref())
            .headers(headers);
        match self.producer.send(base) {
            Ok(()) => Ok(()),
            Err((err, base)) => {
                let tag = base.delivery_opaque.tag;
                if err.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) {
                    return Err(SendError::QueueFull(Box::new((record, tag))));
                }
                let dead_letter = record.topic == self.dead_letter_topic;
                match refusal(&err, &record.topic, dead_letter) {
                    Some(refused) => Err(SendError::Refused(refused, Box::new((record, tag)))),
                    None => Err(SendError::Failed(BrokerFailure::of(&err))),
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

    /// Discards the producer after a failed session; the slot replays its
    /// unconfirmed records into the next one. Blocks (up to `grace` and
    /// librdkafka's teardown): call it off the async workers.
    ///
    /// Records still queued are purged (their reports arrive as purged
    /// errors). Records already in flight get `grace` to be answered
    /// first: purging a request in flight breaks the idempotent producer's
    /// gap-less guarantee, which librdkafka raises as a fatal error. After
    /// a PostgreSQL restart the broker is healthy and answers within
    /// milliseconds, so the producer goes quietly; when the broker is the
    /// trouble, what is left after `grace` is purged by the drop, and the
    /// error that raises is logged at debug only. Returns how many records
    /// were still unanswered when the grace ended.
    pub fn abandon(self, grace: Duration) -> i32 {
        self.producer
            .context()
            .abandoned
            .store(true, Ordering::Release);
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue());
        // A timeout only means records are left: the drop purges them.
        let _ = self.producer.flush(grace);
        let left = self.producer.in_flight_count();
        drop(self);
        left
    }

    /// Asks the producer to send the records it holds now instead of after
    /// `linger.ms` (the session does when the machine says nothing more is
    /// coming to batch them with). Returns at once: for [`NUDGE_HOLD_MS`]
    /// librdkafka treats the linger as passed, as while a flush runs, and
    /// its broker threads are woken to send (`rd_kafka_nudge`, the fifth
    /// patch of vendor/README.md; a flush would make the caller wait).
    pub fn nudge(&self) {
        // SAFETY: the handle belongs to `self.producer`, alive for the call;
        // the function only stores a time and wakes the broker threads.
        unsafe {
            rdkafka::bindings::rd_kafka_nudge(self.producer.client().native_ptr(), NUDGE_HOLD_MS);
        }
    }

    /// Holds the delivery reports (`true`: one landing on librdkafka's empty
    /// queue wakes nobody, and the next call serves it; the next
    /// [`KafkaSink::send`] lets go) or lets them wake the runtime as they
    /// land (`false`).
    /// Either way serves what already landed, so their reports are on the
    /// receiver when this returns (up to a turn's worth; the rest follow in
    /// the same wake-up). The session calls it at the start of every turn
    /// with the machine's word (`SessionMachine::reports_wait_until`); it
    /// costs a lock of the queue.
    pub fn hold_reports(&self, hold: bool) {
        self.reports.hold(&self.producer, hold);
    }

    /// Waits (blocking, up to `timeout`) for everything in flight; call it
    /// off the async runtime's worker threads. The relay does not use it: on
    /// shutdown the session drains by waiting for the delivery reports, up
    /// to `kafka.shutdown_drain_secs` (see `relay::session`).
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.flush(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::{SinkSettings, producer_config};

    /// librdkafka's byte bound follows the relay's, unless the operator's
    /// properties set it; without one, librdkafka's default stands.
    #[test]
    fn the_queue_byte_bound_is_the_relays_unless_the_operator_set_it() {
        let settings = |kbytes: Option<u64>, properties: &[(&str, &str)]| SinkSettings {
            brokers: "b:9092".into(),
            linger_ms: 5,
            message_timeout_ms: 30_000,
            queue_max_messages: 10,
            queue_max_kbytes: kbytes,
            dead_letter_topic: "dlq".into(),
            properties: properties
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        let kbytes = |s: &SinkSettings| {
            producer_config(s, None)
                .get("queue.buffering.max.kbytes")
                .map(str::to_owned)
        };
        assert_eq!(
            kbytes(&settings(Some(66_513), &[])).as_deref(),
            Some("66513")
        );
        assert_eq!(
            kbytes(&settings(
                Some(66_513),
                &[("queue.buffering.max.kbytes", "1024")]
            ))
            .as_deref(),
            Some("1024")
        );
        assert_eq!(kbytes(&settings(None, &[])), None);
        // Whether a "missing topic" answer may be a creation under way.
        assert!(settings(None, &[]).may_create_topics());
        assert!(!settings(None, &[("allow.auto.create.topics", "false")]).may_create_topics());
        assert!(settings(None, &[("allow.auto.create.topics", " TRUE ")]).may_create_topics());
    }

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
            queue_max_kbytes: None,
            dead_letter_topic: "dlq".into(),
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
