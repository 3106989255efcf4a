//! Exactly-once delivery: the read of the last committed checkpoint.
//!
//! [`read_checkpoint`] reads the checkpoint topic to its end with a
//! read_committed consumer, after `init_transactions` settled this relay's
//! own transactions (`transactional.rs`), and says what the last record
//! under the relay's key holds.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::Cause;
use crate::sink::connect_at_once;
use crate::sink::{Reader, ReaderContext, SinkSettings};

/// Reading the checkpoint topic failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointReadError {
    #[error(
        "could not create the checkpoint reader: {0} (check kafka.brokers and kafka.properties)"
    )]
    Create(KafkaError),
    #[error(
        "could not read checkpoint topic \"{topic}\" to its end within {within:?}: {why}; retrying"
    )]
    Incomplete {
        topic: String,
        within: Duration,
        why: String,
    },
    /// The cluster refuses the relay the checkpoint topic: retrying cannot
    /// cure it, so the relay stops.
    #[error(
        "the relay is not authorized to read checkpoint topic \"{topic}\" ({detail}); grant the \
         relay's principal READ on it (DESCRIBE comes with it): kafka-acls.sh --bootstrap-server \
         <broker> --add --allow-principal User:<relay> --operation Read --topic {topic}"
    )]
    Unauthorized { topic: String, detail: String },
    /// The checkpoint topic has more than one partition: records of two
    /// partitions have no order, so the last checkpoint cannot be told.
    #[error(
        "checkpoint topic \"{topic}\" has {partitions} partitions; exactly-once delivery needs \
         exactly one (its last checkpoint is the last record under the relay's key, and records \
         of different partitions have no order: once the partition count changed, an older \
         checkpoint could be taken and transactions written twice). Stop the relay gracefully, \
         point kafka.checkpoint_topic at a new topic and create it compacted with one partition \
         (`{}` does, or: {create}); after a graceful stop the slot holds the last committed \
         position, so nothing is written twice",
        crate::invocation::command("init")
    )]
    Partitioned {
        topic: String,
        partitions: usize,
        create: String,
    },
}

impl CheckpointReadError {
    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> Cause {
        match self {
            CheckpointReadError::Create(_) => Cause::KafkaClientUnbuildable,
            CheckpointReadError::Unauthorized { .. } => Cause::KafkaNotAuthorized,
            CheckpointReadError::Incomplete { .. } | CheckpointReadError::Partitioned { .. } => {
                Cause::CheckpointTopicUnusable
            }
        }
    }

    /// Whether retrying the read cannot cure it.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            CheckpointReadError::Unauthorized { .. } | CheckpointReadError::Partitioned { .. }
        )
    }
}

/// Whether the cluster refuses the relay the topic (the refusal
/// classification the producer's records use).
fn unauthorized(e: &KafkaError) -> bool {
    crate::sink::classify_error(e) == Some(crate::sink::RefusalKind::TopicUnauthorized)
}

/// What the checkpoint topic holds for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointRead {
    /// The topic does not exist (the read never creates it; the relay
    /// refuses to start without it).
    NoTopic,
    /// The topic holds no record under the key.
    Nothing,
    /// The value of the last record under the key (`None`: a tombstone).
    Last(Option<Vec<u8>>),
}

/// Reads the checkpoint topic to its end with a read_committed consumer and
/// returns what the last record keyed `key` holds.
///
/// The end is the last stable offset of each partition: a transaction
/// still open on the topic (another relay's) hides what follows it from a
/// read_committed reader, so the read first waits, up to `within`, until no
/// transaction is open (the read_committed and read_uncommitted ends
/// agree; see the comment in the wait for why a read_committed watermark
/// is the last stable offset). This relay's own transactions are settled
/// already ([`KafkaSink::init_transactions`](crate::sink::KafkaSink::init_transactions) ran before). When the wait
/// runs out the error says a transaction stays open, not that a query
/// timed out. A topic of more than one partition is refused
/// ([`CheckpointReadError::Partitioned`]): across partitions there is no
/// last record.
pub async fn read_checkpoint(
    settings: &SinkSettings,
    topic: &str,
    key: &str,
    within: Duration,
) -> Result<CheckpointRead, CheckpointReadError> {
    let settings = settings.clone();
    let topic = topic.to_owned();
    let key = key.to_owned();
    let (answer, read) = tokio::sync::oneshot::channel();
    // The answer goes back before the clients are closed: closing a
    // consumer waits on librdkafka's threads (~100 ms measured, in
    // benches/cpu-notes.md), which the session need not wait for. They
    // only read, so nothing is lost when they close after the session
    // started.
    tokio::task::spawn_blocking(move || {
        let mut clients = Clients::default();
        let _ = answer.send(read_blocking(&settings, &topic, &key, within, &mut clients));
        drop(clients);
    });
    read.await.map_err(|e| CheckpointReadError::Incomplete {
        topic: String::new(),
        within,
        why: format!("reader task: {e}"),
    })?
}

/// The checkpoint reader's two clients, held by whoever closes them.
#[derive(Default)]
struct Clients {
    committed: Option<Reader>,
    uncommitted: Option<Reader>,
}

pub(crate) fn consumer_config(settings: &SinkSettings, isolation: &str) -> ClientConfig {
    let mut cfg = crate::sink::client_config(
        &settings.brokers,
        settings.properties.iter().map(|(k, v)| (k, v)),
    );
    cfg.set("group.id", "outbox-relay-checkpoint-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        // The read names the topic: it must never make a broker create it
        // (whatever kafka.properties says), or a missing topic would come
        // back with the broker's defaults, not compacted.
        .set("allow.auto.create.topics", "false")
        .set("log_level", "3");
    connect_at_once(&mut cfg);
    cfg
}

fn consumer(settings: &SinkSettings, isolation: &str) -> Result<Reader, CheckpointReadError> {
    consumer_config(settings, isolation)
        .create_with_context(ReaderContext)
        .map_err(CheckpointReadError::Create)
}

fn read_blocking(
    settings: &SinkSettings,
    topic: &str,
    key: &str,
    within: Duration,
    clients: &mut Clients,
) -> Result<CheckpointRead, CheckpointReadError> {
    let deadline = std::time::Instant::now() + within;
    let incomplete = |why: String| CheckpointReadError::Incomplete {
        topic: topic.to_owned(),
        within,
        why,
    };
    let refused = |detail: String| CheckpointReadError::Unauthorized {
        topic: topic.to_owned(),
        detail,
    };
    let failed = |e: KafkaError| {
        if unauthorized(&e) {
            refused(e.to_string())
        } else {
            incomplete(e.to_string())
        }
    };
    let left = || deadline.saturating_duration_since(std::time::Instant::now());
    let committed = clients
        .committed
        .insert(consumer(settings, "read_committed")?);
    let metadata = committed
        .fetch_metadata(Some(topic), left())
        .map_err(failed)?;
    let Some(described) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(CheckpointRead::NoTopic);
    };
    match described.error().map(RDKafkaErrorCode::from) {
        None => {}
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) => return Ok(CheckpointRead::NoTopic),
        Some(code)
            if crate::sink::classify(code) == Some(crate::sink::RefusalKind::TopicUnauthorized) =>
        {
            return Err(refused(format!("metadata: {code}")));
        }
        Some(code) => return Err(incomplete(format!("metadata: {code}"))),
    }
    let partitions: Vec<i32> = described.partitions().iter().map(|p| p.id()).collect();
    if partitions.is_empty() {
        return Ok(CheckpointRead::NoTopic);
    }
    // The read below takes the last record under the key in the order the
    // consumer returns them, which across partitions is arbitrary. The key
    // keeps every checkpoint in one partition only while the partition
    // count stays the same; after a change the old partition still holds
    // older checkpoints. One partition is the only layout whose last record
    // is the last checkpoint.
    if partitions.len() > 1 {
        return Err(CheckpointReadError::Partitioned {
            topic: topic.to_owned(),
            partitions: partitions.len(),
            create: super::checkpoint_topic::create_command(&settings.brokers, "<new-topic>"),
        });
    }
    // Wait until no transaction is open on the topic: then the
    // read_committed end is the end. The read_committed watermark is the
    // last stable offset: librdkafka's watermark query
    // (rd_kafka_query_watermark_offsets, rdkafka.c) sends a ListOffsets
    // request for the latest offset carrying the client's isolation.level
    // (rd_kafka_ListOffsetsRequest, rdkafka_request.c, librdkafka 2.12.1,
    // written from ListOffsets v2 on), and for a READ_COMMITTED request
    // the broker answers the last stable offset (Kafka's
    // ListOffsetsRequest.json: "Version 2 adds the isolation level";
    // KIP-98). The integration test
    // exactly_once::the_checkpoint_read_waits_out_a_transaction_open_on_the_topic
    // checks it against the broker.
    //
    // The end to reach is each partition's end NOW: this relay's last
    // checkpoint is below it (`init_transactions` settled this relay's
    // transactions before the read), and another relay writing to the
    // same topic (the shards of one outbox share it by default) keeps
    // opening transactions after it: waiting for a moment with none open,
    // or for the read to find no more records, may never end.
    let uncommitted = clients
        .uncommitted
        .insert(consumer(settings, "read_uncommitted")?);
    let mut target = std::collections::HashMap::new();
    for &p in &partitions {
        let (_, high) = uncommitted
            .fetch_watermarks(topic, p, left())
            .map_err(failed)?;
        target.insert(p, high);
    }
    let mut seen_open = false;
    loop {
        let watermarks = || -> Result<bool, KafkaError> {
            let mut settled = true;
            for &p in &partitions {
                let (_, stable) = committed.fetch_watermarks(topic, p, left())?;
                settled &= stable >= target[&p];
            }
            Ok(settled)
        };
        let look = watermarks();
        if let Err(e) = &look
            && unauthorized(e)
        {
            return Err(refused(e.to_string()));
        }
        seen_open |= matches!(look, Ok(false));
        match wait_step(&look, seen_open, !left().is_zero()) {
            Wait::Settled => break,
            Wait::Again => {}
            Wait::OpenTooLong => {
                return Err(incomplete(
                    "a transaction stays open on the checkpoint topic (another producer's: a \
                     relay with another transactional id writing to this topic, or one that \
                     died; it ends at the broker's transaction timeout)"
                        .into(),
                ));
            }
            Wait::Failed(why) => return Err(incomplete(why)),
        }
        std::thread::sleep(left().min(Duration::from_millis(50)));
    }
    let mut assignment = TopicPartitionList::new();
    for &p in &partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| incomplete(e.to_string()))?;
    }
    committed
        .assign(&assignment)
        .map_err(|e| incomplete(e.to_string()))?;
    let mut at_end: std::collections::HashSet<i32> = partitions
        .iter()
        .copied()
        .filter(|p| {
            committed
                .fetch_watermarks(topic, *p, left())
                .is_ok_and(|(low, _)| low >= target[p])
        })
        .collect();
    let mut last = CheckpointRead::Nothing;
    while at_end.len() < partitions.len() {
        if left().is_zero() {
            return Err(incomplete(format!(
                "{} of {} partitions read",
                at_end.len(),
                partitions.len()
            )));
        }
        match committed.poll(left().min(Duration::from_millis(500))) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            // librdkafka assigns partitions only to a consumer with a
            // group.id, and such a consumer looks up its group coordinator,
            // which needs DESCRIBE on the group. The reader never joins,
            // commits or fetches offsets of the group (it assigns explicit
            // offsets): the fetch goes on without it, so the relay's
            // principal needs no group ACL.
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::GroupAuthorizationFailed,
            ))) => {}
            Some(Err(e)) => return Err(failed(e)),
            Some(Ok(msg)) => {
                let end = target.get(&msg.partition()).copied().unwrap_or(0);
                if msg.offset() < end && msg.key() == Some(key.as_bytes()) {
                    last = CheckpointRead::Last(msg.payload().map(<[u8]>::to_vec));
                }
                // Past the end (or at its last offset): this partition is
                // read. A commit marker at the end is never delivered, but
                // the other writer's next record is, or the end of the
                // partition.
                if msg.offset() + 1 >= end {
                    at_end.insert(msg.partition());
                }
            }
        }
    }
    Ok(last)
}

/// Where the wait for open transactions on the checkpoint topic goes after
/// one look at its watermarks.
#[derive(Debug, PartialEq, Eq)]
enum Wait {
    /// No transaction is open: read the topic.
    Settled,
    /// Look again after a pause.
    Again,
    /// The time ran out with a transaction open.
    OpenTooLong,
    /// The query failed; the text says why.
    Failed(String),
}

/// `look` is the last look (`Ok(true)`: settled), `seen_open` whether any
/// look found a transaction open, `time_left` whether the deadline is still
/// ahead.
fn wait_step(look: &Result<bool, KafkaError>, seen_open: bool, time_left: bool) -> Wait {
    match look {
        Ok(true) => Wait::Settled,
        Ok(false) if time_left => Wait::Again,
        Ok(false) => Wait::OpenTooLong,
        // Every query is given all the time left, so one that timed out ran
        // to the deadline, even when the clock read a moment later is still
        // short of it (librdkafka counts whole milliseconds and may give up
        // up to one before). With a transaction seen open, the open
        // transaction is the cause worth reporting, not the query.
        Err(e) if seen_open && (!time_left || timed_out(e)) => Wait::OpenTooLong,
        Err(e) => Wait::Failed(e.to_string()),
    }
}

fn timed_out(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use RDKafkaErrorCode as C;

    /// The checkpoint read names its topic: it never lets a broker create
    /// it, even when kafka.properties allows the producer to.
    #[test]
    fn the_checkpoint_reader_never_has_the_topic_created() {
        let settings = SinkSettings {
            brokers: "127.0.0.1:9092".into(),
            linger_ms: 5,
            message_timeout_ms: 30_000,
            queue_max_messages: 100_000,
            queue_max_kbytes: None,
            dead_letter_topic: "dlq".into(),
            properties: vec![("allow.auto.create.topics".into(), "true".into())],
        };
        for isolation in ["read_committed", "read_uncommitted"] {
            assert_eq!(
                consumer_config(&settings, isolation).get("allow.auto.create.topics"),
                Some("false")
            );
        }
    }

    /// Every case of one look at the watermarks. The one a loaded CI machine
    /// hit: a query in flight at the deadline times out a fraction of a
    /// millisecond before it, so the clock still shows time left; the read
    /// must still blame the open transaction, not "Local: Timed out".
    #[test]
    fn the_wait_blames_an_open_transaction_for_a_query_that_ran_out_of_time() {
        let timeout = || Err(KafkaError::MetadataFetch(C::OperationTimedOut));
        let refused = || Err(KafkaError::MetadataFetch(C::TopicAuthorizationFailed));
        let failed =
            |r: &Result<bool, KafkaError>| Wait::Failed(r.as_ref().unwrap_err().to_string());
        for seen_open in [false, true] {
            for time_left in [false, true] {
                let case = format!("seen_open {seen_open}, time_left {time_left}");
                assert_eq!(
                    wait_step(&Ok(true), seen_open, time_left),
                    Wait::Settled,
                    "{case}"
                );
                let open = if time_left {
                    Wait::Again
                } else {
                    Wait::OpenTooLong
                };
                // A look that finds the transaction open has seen it open.
                assert_eq!(wait_step(&Ok(false), true, time_left), open, "{case}");
                let expected = if seen_open {
                    Wait::OpenTooLong
                } else {
                    failed(&timeout())
                };
                assert_eq!(
                    wait_step(&timeout(), seen_open, time_left),
                    expected,
                    "{case}"
                );
                let expected = if seen_open && !time_left {
                    Wait::OpenTooLong
                } else {
                    failed(&refused())
                };
                assert_eq!(
                    wait_step(&refused(), seen_open, time_left),
                    expected,
                    "{case}"
                );
            }
        }
    }
}
