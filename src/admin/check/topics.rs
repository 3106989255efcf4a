//! The Kafka items of `check`: the brokers, the topics the relay will write
//! to (from the topic template and the table's rows), the dead-letter topic
//! and the record size limits.
//!
//! Role: [`topics_for`] works out the topics; [`evaluate_kafka`] turns the
//! cluster's metadata into [`Item`]s. Both are pure.
//!
//! Invariants: a topic that depends on rows nobody could read is reported
//! as unknown, never as present.

use std::collections::BTreeSet;

use crate::admin::kafka_facts::{self, KafkaFacts};
use crate::config::Config;
use crate::envelope::render_topic;
use crate::sink::OnUnroutable;

use super::Item;

/// The topics the relay will write to, as far as they can be known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topics {
    /// The template has no placeholder: one topic.
    Fixed(String),
    /// From the (aggregate type, event type) pairs in the table.
    FromRows {
        topics: BTreeSet<String>,
        /// Rows whose topic name would be invalid: an example each.
        invalid: Vec<String>,
    },
    /// Depends on rows, and there are none to read (the reason).
    Unknown(String),
}

/// The topics for `template`, given the table's distinct `(aggregate type,
/// event type)` pairs (`None`: they could not be read, with why).
pub fn topics_for(template: &str, rows: Result<Vec<(String, String)>, String>) -> Topics {
    if !template.contains("{aggregatetype}") && !template.contains("{type}") {
        return Topics::Fixed(template.to_owned());
    }
    let rows = match rows {
        Ok(rows) if rows.is_empty() => {
            return Topics::Unknown("the outbox table holds no rows to take them from".into());
        }
        Ok(rows) => rows,
        Err(why) => return Topics::Unknown(why),
    };
    let mut topics = BTreeSet::new();
    let mut invalid = Vec::new();
    for (aggregate_type, event_type) in rows {
        match render_topic(template, &aggregate_type, &event_type) {
            Ok(topic) => {
                topics.insert(topic);
            }
            Err(e) if invalid.len() < 3 => invalid.push(e.to_string()),
            Err(_) => {}
        }
    }
    Topics::FromRows { topics, invalid }
}

/// The Kafka items.
pub fn evaluate_kafka(
    config: &Config,
    cluster: &Result<KafkaFacts, String>,
    topics: &Topics,
) -> Vec<Item> {
    let kafka_config = &config.kafka;
    let facts = match cluster {
        Ok(facts) => facts,
        Err(why) => {
            return vec![
                Item::fail("kafka.brokers", why.clone()).fix(
                    "check kafka.brokers, that the brokers are up, and the security properties \
                     in [kafka.properties]",
                ),
                Item::skip("kafka.topics", "no broker answered"),
                Item::skip("kafka.dead_letter_topic", "no broker answered"),
            ];
        }
    };
    let mut items = vec![Item::ok(
        "kafka.brokers",
        format!(
            "{} broker(s) answer: {}",
            facts.brokers.len(),
            facts.brokers.join(", ")
        ),
    )];
    let producer_creates = kafka_facts::producer_auto_create(kafka_config);
    let auto_create = facts.broker_auto_create.map(|b| b && producer_creates);
    let create_fix = |topic: &str| {
        format!(
            "kafka-topics.sh --bootstrap-server {} --create --topic {topic} --partitions <N>",
            kafka_config.brokers
        )
    };
    let dead_letters_unroutable = kafka_config.on_unroutable == OnUnroutable::DeadLetter;
    let not_created = if producer_creates {
        "the broker has auto.create.topics.enable = false"
    } else {
        "allow.auto.create.topics = false in [kafka.properties]"
    };
    let missing = |name: String, topic: &str, what: &str| match auto_create {
        Some(true) => Item::warn(
            name,
            format!(
                "{what} {topic:?} does not exist: the broker creates it on first use, with its \
                 default partition count and settings"
            ),
        )
        .fix(create_fix(topic)),
        // An event topic: what happens follows kafka.on_unroutable.
        Some(false) if what == "topic" && dead_letters_unroutable => Item::warn(
            name,
            format!(
                "{what} {topic:?} does not exist and will not be created automatically \
                 ({not_created}): its events go to the dead-letter topic \
                 (kafka.on_unroutable = \"dead-letter\")"
            ),
        )
        .fix(create_fix(topic)),
        Some(false) if what == "topic" => Item::fail(
            name,
            format!(
                "{what} {topic:?} does not exist and will not be created automatically \
                 ({not_created}): the relay stops at its first event"
            ),
        )
        .fix(format!(
            "{}; or set kafka.on_unroutable = \"dead-letter\" to dead-letter such events",
            create_fix(topic)
        )),
        Some(false) => Item::fail(
            name,
            format!(
                "{what} {topic:?} does not exist and will not be created automatically \
                 ({not_created}): the relay refuses to start without it"
            ),
        )
        .fix(create_fix(topic)),
        None => Item::warn(
            name,
            format!(
                "{what} {topic:?} does not exist, and whether the broker creates topics could \
                 not be read{}",
                facts
                    .config_problem
                    .as_deref()
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            ),
        )
        .fix(create_fix(topic)),
    };
    let topic_item = |topic: &str, what: &str, name: String| match facts.topics.get(topic) {
        Some(partitions) => Item::ok(name, format!("{what} {topic:?}: {partitions} partitions")),
        None => missing(name, topic, what),
    };
    let mut checked: Vec<String> = Vec::new();
    match topics {
        Topics::Fixed(topic) => {
            items.push(topic_item(topic, "topic", format!("kafka.topic.{topic}")));
            checked.push(topic.clone());
        }
        Topics::FromRows { topics, invalid } => {
            for topic in topics {
                items.push(topic_item(topic, "topic", format!("kafka.topic.{topic}")));
                checked.push(topic.clone());
            }
            if !invalid.is_empty() {
                items.push(Item::warn(
                    "kafka.topic_names",
                    format!(
                        "some rows give no valid topic name and go to the dead-letter topic: {}",
                        invalid.join("; ")
                    ),
                ));
            }
        }
        Topics::Unknown(why) => {
            let template = &kafka_config.topic;
            items.push(match auto_create {
                Some(true) => Item::ok(
                    "kafka.topics",
                    format!(
                        "topics come from {template:?} and the rows ({why}); the broker \
                         creates missing ones on first use"
                    ),
                ),
                _ => Item::warn(
                    "kafka.topics",
                    format!(
                        "topics come from {template:?} and the rows ({why}), and missing \
                         topics are not created automatically: create each one before the \
                         first event of its aggregate type, or {}",
                        if dead_letters_unroutable {
                            "its events go to the dead-letter topic"
                        } else {
                            "the relay stops at that event (kafka.on_unroutable)"
                        }
                    ),
                )
                .fix(create_fix(template)),
            });
        }
    }
    let dlq = &kafka_config.dlq_topic;
    items.push(topic_item(
        dlq,
        "dead-letter topic",
        "kafka.dead_letter_topic".into(),
    ));
    checked.push(dlq.clone());

    // Record sizes.
    let producer_max = kafka_facts::producer_message_max_bytes(kafka_config);
    let mut size_items = Vec::new();
    for topic in &checked {
        if let Some(&topic_max) = facts.max_message_bytes.get(topic)
            && producer_max > topic_max
        {
            size_items.push(
                Item::warn(
                    format!("kafka.message_size.{topic}"),
                    format!(
                        "the producer sends records up to {producer_max} bytes \
                         (message.max.bytes) but {topic:?} takes at most {topic_max} \
                         (max.message.bytes): records in between are refused by the broker \
                         and dead-lettered"
                    ),
                )
                .fix(format!(
                    "\"message.max.bytes\" = \"{topic_max}\" in [kafka.properties], or raise \
                     the topic's max.message.bytes"
                )),
            );
        }
    }
    if size_items.is_empty() {
        items.push(match &facts.config_problem {
            Some(problem) => Item::warn(
                "kafka.message_size",
                format!("topic configs could not be read: {problem}"),
            ),
            None => Item::ok(
                "kafka.message_size",
                format!(
                    "message.max.bytes {producer_max} fits the max.message.bytes of every \
                     existing topic checked"
                ),
            ),
        });
    }
    items.extend(size_items);
    items
}
