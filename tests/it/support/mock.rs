//! Support for tests against librdkafka's mock cluster (`rdkafka::mocking`):
//! reading a topic back from the mock, checking that every injected request
//! error was used up, what an idempotent producer makes of an error, and the
//! relay's producer driven alone. (The in-process relay's log lines, which
//! these tests read, are captured by [`super::LogCapture`].)
//!
//! The mock cluster lives inside the test process and dies with its
//! `MockCluster` value: keep that value alive longer than the relay and any
//! consumer pointed at its bootstrap servers.

use std::time::Duration;

use bytes::Bytes;
use outbox_relay::envelope::KafkaRecord;
use outbox_relay::sink::{
    DeliveryError, DeliveryReport, KafkaSink, SendError, SinkSettings, TransactionSettings,
};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, FutureProducer, FutureRecord, Producer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{Offset, TopicPartitionList};

use super::{Received, random_name};

/// The mock cluster type the tests own.
pub type Mock = MockCluster<'static, DefaultProducerContext>;

/// A mock cluster of `brokers` brokers (ids 1..=brokers) holding `topic`
/// with `partitions` partitions, created ahead as production teams do.
pub fn mock_with_topic(brokers: i32, topic: &str, partitions: i32) -> Mock {
    let mock = MockCluster::new(brokers).expect("start the mock cluster");
    mock.create_topic(topic, partitions, 1)
        .expect("create the topic on the mock cluster");
    mock
}

/// Reads every record of `topic` on the mock cluster, up to each partition's
/// high watermark at the time of the call (so, once the relay stopped, the
/// duplicates it wrote too). Gives up after 60 s with what it has; the
/// checker then reports the loss.
pub async fn read_mock_to_end(brokers: &str, topic: &str) -> Vec<Received> {
    let (brokers, topic) = (brokers.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || read_blocking(&brokers, &topic))
        .await
        .expect("mock reader thread")
}

/// What a read_committed consumer of `topic` on the mock cluster sees: it
/// reads until every partition reports its end (the last stable offset),
/// so aborted records and transaction markers are skipped.
pub async fn read_mock_committed(brokers: &str, topic: &str) -> Vec<Received> {
    let (brokers, topic) = (brokers.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", random_name("checker"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .create()
            .expect("mock consumer");
        let md = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .expect("mock metadata");
        let partitions = md.topics()[0].partitions().len();
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions as i32 {
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .expect("partition offset");
        }
        consumer.assign(&tpl).expect("assign");
        let start = std::time::Instant::now();
        let mut at_end = std::collections::HashSet::new();
        let mut out = Vec::new();
        while at_end.len() < partitions {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "reading {topic} to its end took over 60 s"
            );
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => out.push(Received::from_message(&m)),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    at_end.insert(p);
                }
                Some(Err(e)) => panic!("consume {topic} from the mock cluster: {e}"),
                None => {}
            }
        }
        out
    })
    .await
    .expect("mock reader thread")
}

fn read_blocking(brokers: &str, topic: &str) -> Vec<Received> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", random_name("checker"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("mock consumer");
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("mock metadata");
    let partitions = md.topics()[0].partitions().len() as i32;
    let mut tpl = TopicPartitionList::new();
    let mut total = 0;
    for p in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .expect("mock watermarks");
        total += (high - low) as usize;
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition offset");
    }
    consumer.assign(&tpl).expect("assign");
    let start = std::time::Instant::now();
    let mut out = Vec::with_capacity(total);
    while out.len() < total && start.elapsed() < Duration::from_secs(60) {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push(Received::from_message(&m)),
            Some(Err(e)) => panic!("consume {topic} from the mock cluster: {e}"),
            None => {}
        }
    }
    out
}

/// Asserts that no injected Produce error is left on the mock's stack, i.e.
/// the relay's own requests met every one of them: a probe record sent
/// without retries to a topic of its own must go through. Call it only once
/// the relay has nothing more to send.
pub async fn assert_produce_errors_used_up(mock: &Mock) {
    let probe_topic = random_name("probe");
    mock.create_topic(&probe_topic, 1, 1)
        .expect("create the probe topic");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("message.send.max.retries", "0")
        .set("message.timeout.ms", "10000")
        .create()
        .expect("probe producer");
    let sent = producer
        .send(
            FutureRecord::to(&probe_topic).key("probe").payload("probe"),
            Duration::from_secs(10),
        )
        .await;
    assert!(
        sent.is_ok(),
        "a probe record met an injected error the relay should have used up: {:?}",
        sent.err().map(|(e, _)| e)
    );
}

/// What an idempotent producer makes of one error answered to its first
/// Produce request.
#[derive(Debug)]
pub struct ProducerVerdict {
    /// The record was delivered in the end (librdkafka retried by itself).
    pub delivered: bool,
    /// librdkafka's fatal error (`rd_kafka_fatal_error`), if it raised one.
    pub fatal: Option<String>,
}

/// Answers `error` to a fresh idempotent producer's first Produce request,
/// on a mock cluster of its own, and reports what became of it: a test
/// shows this way that the fault it injects into the relay is the one it
/// claims to be (retried, failed, or fatal).
pub async fn idempotent_producer_verdict(error: RDKafkaRespErr) -> ProducerVerdict {
    let topic = random_name("verdict");
    let mock = mock_with_topic(1, &topic, 1);
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "10000")
        .create()
        .expect("idempotent probe producer");
    mock.request_errors(RDKafkaApiKey::Produce, &[error]);
    let sent = producer
        .send(
            FutureRecord::to(&topic).key("probe").payload("probe"),
            Duration::from_secs(10),
        )
        .await;
    ProducerVerdict {
        delivered: sent.is_ok(),
        fatal: producer
            .client()
            .fatal_error()
            .map(|(code, text)| format!("{code:?}: {text}")),
    }
}

/// The relay's producer settings for `topic` on the mock cluster (its
/// default linger), with extra librdkafka properties.
pub fn sink_settings(
    mock: &Mock,
    topic: &str,
    message_timeout_ms: u64,
    properties: Vec<(String, String)>,
) -> SinkSettings {
    SinkSettings {
        brokers: mock.bootstrap_servers(),
        linger_ms: 5,
        message_timeout_ms,
        queue_max_messages: 100_000,
        queue_max_kbytes: None,
        dead_letter_topic: format!("{topic}.dlq"),
        properties,
    }
}

/// The producer alone on a mock cluster: records for `topic`, each tagged
/// with its event id (the producer does not look inside tags).
pub struct SinkRig {
    pub sink: KafkaSink<String>,
    reports: tokio::sync::mpsc::UnboundedReceiver<DeliveryReport<String>>,
    topic: String,
}

impl SinkRig {
    pub fn start(mock: &Mock, topic: &str, message_timeout_ms: u64) -> Self {
        Self::start_with(mock, topic, message_timeout_ms, Vec::new())
    }

    /// With extra librdkafka properties.
    pub fn start_with(
        mock: &Mock,
        topic: &str,
        message_timeout_ms: u64,
        properties: Vec<(String, String)>,
    ) -> Self {
        let (sink, reports) =
            KafkaSink::new(&sink_settings(mock, topic, message_timeout_ms, properties))
                .expect("producer");
        Self {
            sink,
            reports,
            topic: topic.to_string(),
        }
    }

    /// The transactional producer of exactly-once mode, its transactions
    /// initialized; the test begins and ends transactions itself.
    pub async fn start_transactional(
        mock: &Mock,
        topic: &str,
        message_timeout_ms: u64,
        properties: Vec<(String, String)>,
    ) -> Self {
        let transactions = TransactionSettings {
            transactional_id: random_name("txn"),
            checkpoint_topic: format!("{topic}.checkpoints"),
            transaction_timeout: Duration::from_secs(60),
        };
        let (sink, reports) = KafkaSink::new_transactional(
            &sink_settings(mock, topic, message_timeout_ms, properties),
            &transactions,
        )
        .expect("transactional producer");
        sink.init_transactions(&transactions.transactional_id, Duration::from_secs(30))
            .await
            .expect("init_transactions");
        Self {
            sink,
            reports,
            topic: topic.to_string(),
        }
    }

    /// Sends record `n`, keyed `agg-{n}`.
    pub fn send(&mut self, n: usize) -> Result<(), SendError<String>> {
        self.send_keyed(n, &format!("agg-{n}"))
    }

    /// Sends record `n` (event id `event-{n}`) with the given key.
    pub fn send_keyed(&mut self, n: usize, key: &str) -> Result<(), SendError<String>> {
        let record = KafkaRecord {
            topic: self.topic.clone(),
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::from_static(b"{}"),
            headers: Vec::new(),
        };
        self.sink.send(record, format!("event-{n}"))
    }

    /// Sends record 0 and waits for it to be delivered: the producer has
    /// met the broker before the test's fault.
    pub async fn deliver_first(&mut self) {
        self.send(0).expect("first record queued");
        assert!(
            self.next_report().await.is_ok(),
            "the first record is delivered"
        );
    }

    pub async fn next_report(&mut self) -> Result<(), DeliveryError> {
        tokio::time::timeout(Duration::from_secs(30), self.reports.recv())
            .await
            .expect("a delivery report within 30 s")
            .expect("report channel open")
            .result
    }

    /// Discards the producer as a failed session does (off the async
    /// workers, one second's grace for records in flight); returns how
    /// long it took.
    pub async fn abandon(self) -> Duration {
        self.abandon_with(Duration::from_secs(1)).await.0
    }

    /// [`SinkRig::abandon`] with `grace`; also returns the reports of the
    /// records that were still unanswered, in arrival order.
    pub async fn abandon_with(self, grace: Duration) -> (Duration, Vec<Result<(), DeliveryError>>) {
        let started = std::time::Instant::now();
        let SinkRig {
            sink, mut reports, ..
        } = self;
        tokio::time::timeout(
            Duration::from_secs(30),
            tokio::task::spawn_blocking(move || sink.abandon(grace)),
        )
        .await
        .expect("dropping the producer does not hang")
        .expect("drop thread");
        let took = started.elapsed();
        let mut last = Vec::new();
        while let Ok(report) = reports.try_recv() {
            last.push(report.result);
        }
        (took, last)
    }
}
