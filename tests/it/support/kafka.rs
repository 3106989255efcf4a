//! Kafka for the tests: topics created ahead (as production teams do), and
//! reading topics back the way a consumer sees them (`read_committed`,
//! from the beginning), whole or keeping only what the checker needs.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::{Committed, TestOutbox, env, random_name};

impl TestOutbox {
    /// Creates `topic` with `partitions` partitions ahead of the relay, as
    /// production teams do.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        self.create_topic_with_config(topic, partitions, &[]).await;
    }

    /// Like [`TestOutbox::create_topic`], with topic configs.
    pub async fn create_topic_with_config(
        &self,
        topic: &str,
        partitions: i32,
        config: &[(&str, &str)],
    ) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", env("KAFKA_BROKERS"))
            .create()
            .expect("admin client");
        let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        for (k, v) in config {
            new_topic = new_topic.set(k, v);
        }
        let res = admin
            .create_topics(
                &[new_topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .expect("create topic");
        for r in res {
            r.expect("topic created");
        }
    }
}

impl TestOutbox {
    /// Deletes `topic` (an operator's mistake some tests play).
    pub async fn delete_topic(&self, topic: &str) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", env("KAFKA_BROKERS"))
            .create()
            .expect("admin client");
        let res = admin
            .delete_topics(
                &[topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .expect("delete topic");
        for r in res {
            r.expect("topic deleted");
        }
        // The broker answers before every metadata answer forgets it.
        super::wait_until(
            "the deleted topic to be gone",
            super::DEADLINE,
            || async move { !topic_exists(topic).await },
        )
        .await;
    }
}

/// Whether `topic` exists: the metadata of every topic, a request that
/// never has a topic created.
pub async fn topic_exists(topic: &str) -> bool {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", env("KAFKA_BROKERS"))
            .create()
            .expect("consumer");
        let metadata = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .expect("metadata");
        metadata.topics().iter().any(|t| t.name() == topic)
    })
    .await
    .unwrap()
}

/// `topic`'s partition count and `cleanup.policy` as an admin client
/// describes them, or `None` when it does not exist (asking never creates
/// it).
pub async fn describe_topic(topic: &str) -> Option<(usize, String)> {
    if !topic_exists(topic).await {
        return None;
    }
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .set("allow.auto.create.topics", "false")
        .create()
        .expect("admin client");
    let name = topic.to_owned();
    let metadata = tokio::task::block_in_place(|| {
        admin
            .inner()
            .fetch_metadata(Some(&name), Duration::from_secs(10))
            .expect("metadata")
    });
    let partitions = metadata.topics()[0].partitions().len();
    let described = admin
        .describe_configs(
            &[rdkafka::admin::ResourceSpecifier::Topic(topic)],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("describe configs");
    let config = described
        .into_iter()
        .next()
        .expect("one resource")
        .expect("its configs");
    let policy = config
        .get("cleanup.policy")
        .and_then(|e| e.value.clone())
        .expect("cleanup.policy");
    Some((partitions, policy))
}

/// A record read back from Kafka.
#[derive(Debug, Clone)]
pub struct Received {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: HashMap<String, Vec<u8>>,
    /// The record's timestamp in ms: when the broker appended it on a
    /// topic with `message.timestamp.type = LogAppendTime`.
    pub timestamp: Option<i64>,
}

impl Received {
    /// Copies what the checker needs out of a consumed message.
    pub fn from_message(m: &impl Message) -> Self {
        Received {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers: m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default(),
            timestamp: m.timestamp().to_millis(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| std::str::from_utf8(v).expect("utf-8 header"))
    }
}

/// Reads `topic` from the beginning with a read_committed consumer until
/// `until` says the records suffice or `deadline` passes; then reads on for
/// `settle` to catch records that should not be there (duplicates).
pub async fn consume(
    topic: &str,
    deadline: Duration,
    mut until: impl FnMut(&[Received]) -> bool + Send + 'static,
) -> Vec<Received> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || consume_blocking(&topic, deadline, &mut until))
        .await
        .unwrap()
}

fn consume_blocking(
    topic: &str,
    deadline: Duration,
    until: &mut dyn FnMut(&[Received]) -> bool,
) -> Vec<Received> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .set("group.id", random_name("checker"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .expect("consumer");
    let start = std::time::Instant::now();
    // Wait for the topic to exist (the relay creates it on first write).
    let partitions = loop {
        if let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5))
            && let Some(t) = md.topics().first()
            && t.error().is_none()
            && !t.partitions().is_empty()
        {
            break t.partitions().len() as i32;
        }
        if start.elapsed() > deadline {
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    while start.elapsed() < deadline && !until(&out) {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push(Received::from_message(&m)),
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            None => {}
        }
    }
    out
}

/// Reads every record currently in `topic` (up to each partition's high
/// watermark). Used once the relay stopped, so that duplicates it wrote are
/// all visible.
pub async fn consume_to_end(topic: &str) -> Vec<Received> {
    read_to_end(topic, "read_committed", |m| Received::from_message(m)).await
}

/// The `ce_id` of every record on `topic` up to its high watermark, read
/// uncommitted: records of aborted and open transactions too, with their
/// offsets. For explaining a loss, not for checking delivery.
pub async fn ids_read_uncommitted(topic: &str) -> HashMap<String, (i32, i64)> {
    read_to_end(topic, "read_uncommitted", |m| Received::from_message(m))
        .await
        .into_iter()
        .filter_map(|r| Some((r.header("ce_id")?.to_owned(), (r.partition, r.offset))))
        .collect()
}

/// Every record of `topic` from its beginning up to the high watermarks
/// found at the start, read at `isolation`, each kept as `keep` makes it.
/// A partition is read to its end once the consumer's position reached
/// that watermark: a transaction marker takes an offset but is never
/// delivered, so counting records would wait for one that never comes.
async fn read_to_end(
    topic: &str,
    isolation: &'static str,
    keep: fn(&rdkafka::message::BorrowedMessage<'_>) -> Received,
) -> Vec<Received> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = lean_consumer(isolation);
        let md = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .expect("metadata");
        let partitions: Vec<i32> = md.topics()[0].partitions().iter().map(|p| p.id()).collect();
        let mut tpl = TopicPartitionList::new();
        let mut high: HashMap<i32, i64> = HashMap::new();
        for &p in &partitions {
            let (_, h) = consumer
                .fetch_watermarks(&topic, p, Duration::from_secs(10))
                .expect("watermarks");
            high.insert(p, h);
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).expect("assign");
        let mut done: HashMap<i32, bool> = high.iter().map(|(p, h)| (*p, *h == 0)).collect();
        let mut out = Vec::with_capacity(high.values().sum::<i64>() as usize);
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        while done.values().any(|d| !d) {
            assert!(
                std::time::Instant::now() < deadline,
                "reading {topic} to its end took over 10 minutes"
            );
            match consumer.poll(Duration::from_millis(500)) {
                Some(Ok(m)) => {
                    if m.offset() + 1 >= high[&m.partition()] {
                        done.insert(m.partition(), true);
                    }
                    out.push(keep(&m));
                }
                Some(Err(e)) => panic!("consume {topic}: {e}"),
                None => {
                    // Markers at the end of a partition: its position
                    // reached the watermark, nothing more to give.
                    if let Ok(pos) = consumer.position() {
                        for e in pos.elements() {
                            if let Offset::Offset(o) = e.offset()
                                && o >= high[&e.partition()]
                            {
                                done.insert(e.partition(), true);
                            }
                        }
                    }
                }
            }
        }
        out
    })
    .await
    .unwrap()
}

/// Reads `topic` until every committed id has been seen at least once (or
/// `within` passes), returning all records read.
pub async fn consume_all_ids(
    topic: &str,
    committed: &[Committed],
    within: Duration,
) -> Vec<Received> {
    let mut missing: HashSet<String> = committed.iter().map(|c| c.id.clone()).collect();
    let mut checked = 0;
    consume(topic, within, move |r| {
        for x in &r[checked..] {
            if let Some(id) = x.header("ce_id") {
                missing.remove(id);
            }
        }
        checked = r.len();
        missing.is_empty()
    })
    .await
}

/// A consumer of its own group that commits nothing, reading at
/// `isolation` (`read_committed` or `read_uncommitted`).
fn lean_consumer(isolation: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .set("group.id", random_name("checker"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .expect("consumer")
}

/// The ids of `events` that are on `topic` now (read to its end).
pub async fn ids_on_topic(topic: &str, events: &[Committed]) -> Vec<String> {
    let wanted: HashSet<&str> = events.iter().map(|c| c.id.as_str()).collect();
    consume_ids_to_end(topic)
        .await
        .iter()
        .filter_map(|r| r.header("ce_id"))
        .filter(|id| wanted.contains(id))
        .map(str::to_owned)
        .collect()
}

/// Records on `topic` right now: the sum of the partitions' high minus low
/// watermarks (0 while the topic does not exist).
pub async fn topic_len(topic: &str) -> i64 {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = lean_consumer("read_committed");
        let Ok(md) = consumer.fetch_metadata(Some(&topic), Duration::from_secs(5)) else {
            return 0;
        };
        let Some(t) = md.topics().first().filter(|t| t.error().is_none()) else {
            return 0;
        };
        t.partitions()
            .iter()
            .filter_map(|p| {
                consumer
                    .fetch_watermarks(&topic, p.id(), Duration::from_secs(5))
                    .ok()
            })
            .map(|(low, high)| high - low)
            .sum()
    })
    .await
    .unwrap()
}

/// Reads every record of `topic` up to the high watermarks, keeping only
/// partition, offset and the `ce_id` header (no key, value or other
/// headers): enough for [`super::check_delivery`] on a million records.
pub async fn consume_ids_to_end(topic: &str) -> Vec<Received> {
    read_to_end(topic, "read_committed", |m| {
        let id = m
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == "ce_id"))
            .and_then(|h| h.value)
            .unwrap_or_default()
            .to_vec();
        Received {
            topic: String::new(),
            partition: m.partition(),
            offset: m.offset(),
            key: None,
            value: None,
            headers: HashMap::from([("ce_id".to_string(), id)]),
            timestamp: None,
        }
    })
    .await
}
