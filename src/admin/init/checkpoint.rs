//! init's share of exactly-once delivery (`kafka.delivery =
//! "exactly-once"`): the checkpoint topic, created with one partition,
//! `cleanup.policy=compact` and the broker's default replication factor
//! when it does not exist, and the grants the relay's principal needs
//! where the cluster uses ACLs.
//!
//! Invariants, as for the database: an existing topic is never changed
//! (one with more than one partition or without compaction is refused,
//! with the fix, before anything runs), and asking about the topic never
//! creates it ([`checkpoint_topic::look`]).

use std::time::Duration;

use super::InitError;
use crate::config::{Config, Delivery};
use crate::relay::exactly_once::checkpoint_topic::{self, Created, Looked, Verdict};

/// Longest wait for one answer of the cluster.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// What init does about the checkpoint topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicPlan {
    /// At-least-once: there is none.
    NotUsed,
    /// It exists as the relay needs it; the line says how it is.
    InPlace(String),
    Create,
}

impl TopicPlan {
    /// The lines `--dry-run` prints for it.
    pub fn render_dry_run(&self, config: &Config) -> String {
        let kafka = &config.kafka;
        match self {
            TopicPlan::NotUsed => String::new(),
            TopicPlan::InPlace(line) => format!("-- in place: {line}\n"),
            TopicPlan::Create => format!(
                "\n-- init would create the checkpoint topic {:?} (1 partition, \
                 cleanup.policy=compact, the broker's default replication factor), as:\n-- {}\n",
                kafka.checkpoint_topic,
                checkpoint_topic::create_command(&kafka.brokers, &kafka.checkpoint_topic)
            ),
        }
    }
}

/// Asks the cluster about the checkpoint topic, in exactly-once mode.
///
/// # Errors
/// No broker answered, or the cluster refused the question.
pub async fn look(config: &Config) -> Result<Option<Looked>, InitError> {
    let kafka = &config.kafka;
    if kafka.delivery != Delivery::ExactlyOnce {
        return Ok(None);
    }
    checkpoint_topic::look(
        &kafka.brokers,
        &kafka.property_pairs(),
        &kafka.checkpoint_topic,
        KAFKA_TIMEOUT,
    )
    .await
    .map(Some)
    .map_err(|why| InitError::CheckpointTopicUnknown {
        topic: kafka.checkpoint_topic.clone(),
        why,
        create: checkpoint_topic::create_command(&kafka.brokers, &kafka.checkpoint_topic),
    })
}

/// What to do about the topic as `looked` found it (`None`: not in
/// exactly-once mode).
///
/// # Errors
/// [`InitError::CheckpointTopicUnusable`]: it exists with more than one
/// partition or without compaction.
pub fn plan(config: &Config, looked: Option<&Looked>) -> Result<TopicPlan, InitError> {
    let Some(looked) = looked else {
        return Ok(TopicPlan::NotUsed);
    };
    let kafka = &config.kafka;
    let topic = &kafka.checkpoint_topic;
    let unusable = |problem: String, fix: String| InitError::CheckpointTopicUnusable {
        topic: topic.clone(),
        problem,
        fix,
    };
    let compact = checkpoint_topic::compact_command(&kafka.brokers, topic);
    Ok(match checkpoint_topic::judge(looked) {
        Verdict::Missing => TopicPlan::Create,
        Verdict::Ready => TopicPlan::InPlace(format!(
            "checkpoint topic {topic:?} (1 partition, compacted)"
        )),
        Verdict::AlsoDeletes { policy } => TopicPlan::InPlace(format!(
            "checkpoint topic {topic:?} (1 partition, cleanup.policy={policy}: also deleted by \
             retention, so a relay idle for longer loses its checkpoint; to keep it: {compact})"
        )),
        Verdict::PolicyUnknown { why } => TopicPlan::InPlace(format!(
            "checkpoint topic {topic:?} (1 partition; whether it is compacted could not be read: \
             {why})"
        )),
        Verdict::NotCompacted { policy } => {
            return Err(unusable(
                format!(
                    "is not compacted (cleanup.policy={policy}): retention would delete the \
                     relay's last checkpoint"
                ),
                format!("Make it compacted: {compact}"),
            ));
        }
        Verdict::Partitioned { partitions } => {
            return Err(unusable(
                format!(
                    "has {partitions} partitions: the relay's last checkpoint cannot be told \
                     among them (exactly-once delivery needs one)"
                ),
                "Point kafka.checkpoint_topic at a new topic (init creates it; a relay that ran \
                 on the old one must be stopped gracefully first)"
                    .to_owned(),
            ));
        }
    })
}

/// Creates the checkpoint topic; returns the line to report.
///
/// # Errors
/// [`InitError::CheckpointTopicCreate`]: the cluster refused (no
/// permission to create topics, a policy) or did not answer.
pub async fn create(config: &Config) -> Result<String, InitError> {
    let kafka = &config.kafka;
    let topic = &kafka.checkpoint_topic;
    let created = checkpoint_topic::create(
        &kafka.brokers,
        &kafka.property_pairs(),
        topic,
        KAFKA_TIMEOUT,
    )
    .await
    .map_err(|why| InitError::CheckpointTopicCreate {
        topic: topic.clone(),
        why,
        create: checkpoint_topic::create_command(&kafka.brokers, topic),
    })?;
    match created {
        Created::Created => Ok(format!(
            "create checkpoint topic {topic:?} (1 partition, cleanup.policy=compact)"
        )),
        // Someone created it meanwhile: it must still be what the relay
        // needs.
        Created::Existed => {
            let looked = look(config).await?;
            match plan(config, looked.as_ref())? {
                TopicPlan::InPlace(line) => Ok(format!("{line}, created meanwhile by another")),
                _ => Err(InitError::CheckpointTopicCreate {
                    topic: topic.clone(),
                    why: "the broker says it exists, then that it does not".to_owned(),
                    create: checkpoint_topic::create_command(&kafka.brokers, topic),
                }),
            }
        }
    }
}

/// The grants the relay's principal needs on a cluster with ACLs, in
/// exactly-once mode (docs/operations.md lists the same): on the checkpoint
/// topic WRITE (the checkpoints), READ (the read at start) and
/// DESCRIBE_CONFIGS (the compaction check at start); on its transactional
/// id WRITE; and what every relay needs, WRITE on its event and
/// dead-letter topics (and IDEMPOTENT_WRITE on the cluster before Kafka
/// 2.8). DESCRIBE comes with WRITE and READ. Empty in at-least-once mode.
pub fn acl_note(config: &Config) -> String {
    let kafka = &config.kafka;
    if kafka.delivery != Delivery::ExactlyOnce {
        return String::new();
    }
    let grant = format!(
        "kafka-acls.sh --bootstrap-server {} --add --allow-principal User:<relay>",
        kafka.brokers
    );
    let events = match kafka.topic.split_once('{') {
        None => format!("--topic {}", kafka.topic),
        Some(("", _)) => "--topic <each event topic>".to_owned(),
        Some((prefix, _)) => format!("--resource-pattern-type prefixed --topic {prefix}"),
    };
    format!(
        "\n-- with ACLs, the relay's principal needs (User:<relay> is its principal; DESCRIBE \
         comes with WRITE and READ):\n\
         -- {grant} --operation Write --operation Read --operation DescribeConfigs \
         --topic {checkpoints}\n\
         -- {grant} --operation Write --transactional-id {id}\n\
         -- {grant} --operation Write {events}\n\
         -- {grant} --operation Write --topic {dlq}\n\
         -- and with brokers before Kafka 2.8: {grant} --operation IdempotentWrite --cluster\n",
        checkpoints = kafka.checkpoint_topic,
        id = kafka.transactional_id_for(&config.postgres.slot),
        dlq = kafka.dlq_topic,
    )
}
