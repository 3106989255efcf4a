//! The exactly-once items of `check` (`kafka.delivery = "exactly-once"`):
//! the checkpoint topic exists and is compacted, and the relay may use its
//! transactional id.
//!
//! Role: [`evaluate`] is pure, over the cluster's metadata and configs;
//! [`probe_transactional_id`] asks the transaction coordinator.
//!
//! Invariant: `check` never fences a running relay. Registering the
//! transactional id (the only exact test of the permission) fences the
//! producer that holds it, so it is tried only when no relay holds the slot;
//! otherwise the item is skipped, saying why.

use std::time::Duration;

use crate::admin::kafka_facts::KafkaFacts;
use crate::config::Config;
use crate::relay::exactly_once::checkpoint_topic::{self, Looked, Verdict};
use crate::sink::{KafkaSink, TransactionSettings, TxnFailure};

use super::Item;

/// The checkpoint topic's items: the relay's own verdict
/// ([`checkpoint_topic::judge`]), each failure with its fix.
pub fn evaluate(config: &Config, cluster: &Result<KafkaFacts, String>) -> Vec<Item> {
    let kafka = &config.kafka;
    let topic = &kafka.checkpoint_topic;
    let brokers = &kafka.brokers;
    let name = "kafka.checkpoint_topic";
    let Ok(facts) = cluster else {
        return vec![Item::skip(name, "no broker answered")];
    };
    let looked = match facts.topics.get(topic) {
        None => Looked::Missing,
        Some(partitions) => Looked::Exists {
            partitions: *partitions,
            cleanup_policy: facts.cleanup_policy.get(topic).cloned().ok_or_else(|| {
                facts
                    .config_problem
                    .clone()
                    .unwrap_or_else(|| "not described".to_owned())
            }),
        },
    };
    let partitions = match &looked {
        Looked::Exists { partitions, .. } => *partitions,
        Looked::Missing => 0,
    };
    let item = match checkpoint_topic::judge(&looked) {
        Verdict::Ready => Item::ok(
            name,
            format!("checkpoint topic {topic:?}: {partitions} partition, compacted"),
        ),
        Verdict::Missing => Item::fail(
            name,
            format!(
                "checkpoint topic {topic:?} does not exist: exactly-once delivery keeps the \
                 relay's position there, compacted, and the relay refuses to start without it"
            ),
        )
        .fix(format!(
            "{} (creates it compacted, with one partition), or: {}",
            checkpoint_topic::init_command(),
            checkpoint_topic::create_command(brokers, topic)
        )),
        // The relay refuses it at start: records of two partitions have no
        // order, so the last checkpoint cannot be told (docs/exactly-once.md).
        Verdict::Partitioned { partitions } => Item::fail(
            name,
            format!(
                "checkpoint topic {topic:?} has {partitions} partitions; exactly-once \
                 delivery needs exactly one, and the relay refuses to start with more: \
                 stop the relay gracefully and point kafka.checkpoint_topic at a new topic"
            ),
        )
        .fix(format!(
            "{} creates the new topic, or: {}",
            checkpoint_topic::init_command(),
            checkpoint_topic::create_command(brokers, "<new-topic>")
        )),
        Verdict::NotCompacted { policy } => Item::fail(
            name,
            format!(
                "checkpoint topic {topic:?} is not compacted (cleanup.policy={policy}): \
                 retention would delete the relay's last checkpoint, and the relay refuses to \
                 start on it"
            ),
        )
        .fix(checkpoint_topic::compact_command(brokers, topic)),
        Verdict::AlsoDeletes { policy } => Item::warn(
            name,
            format!(
                "checkpoint topic {topic:?} ({partitions} partition) is compacted but also \
                 deletes by retention (cleanup.policy={policy}): a relay idle for longer than \
                 the retention loses its checkpoint and writes the gap again once"
            ),
        )
        .fix(checkpoint_topic::compact_command(brokers, topic)),
        // The relay warns at start in the same case; with ACLs the usual
        // cause is a missing grant.
        Verdict::PolicyUnknown { why } => Item::warn(
            name,
            format!(
                "checkpoint topic {topic:?} exists; its cleanup.policy could not be read ({why})"
            ),
        )
        .fix(format!(
            "with ACLs, grant the relay's principal DESCRIBE_CONFIGS on it: kafka-acls.sh \
             --bootstrap-server {brokers} --add --allow-principal User:<relay> --operation \
             DescribeConfigs --topic {topic}"
        )),
    };
    vec![item]
}

/// Registers the relay's transactional id with the coordinator, when no
/// relay holds the slot (`slot_held`: `None` when unknown).
pub async fn probe_transactional_id(
    config: &Config,
    slot_held: Option<bool>,
    timeout: Duration,
) -> Item {
    let name = "kafka.transactional_id";
    let id = config.kafka.transactional_id_for(&config.postgres.slot);
    match slot_held {
        Some(true) => {
            return Item::skip(
                name,
                format!(
                    "transactional id {id:?}: a relay holds the slot, and registering the id \
                     would fence it; run check while the relay is stopped to test the id"
                ),
            );
        }
        None => {
            return Item::skip(
                name,
                format!(
                    "transactional id {id:?}: whether a relay holds the slot is unknown, and \
                     registering the id would fence it"
                ),
            );
        }
        Some(false) => {}
    }
    let kafka = &config.kafka;
    let settings = config.sink_settings();
    let transactions = TransactionSettings {
        transactional_id: id.clone(),
        checkpoint_topic: kafka.checkpoint_topic.clone(),
        transaction_timeout: kafka.transaction_timeout(),
    };
    let sink = match KafkaSink::<()>::new_transactional(&settings, &transactions) {
        Ok((sink, _reports)) => sink,
        Err(e) => return Item::fail(name, e.to_string()),
    };
    let outcome = sink.init_transactions(&id, timeout).await;
    // Destroying a producer blocks while librdkafka stops its threads.
    let _ = tokio::task::spawn_blocking(move || drop(sink)).await;
    match outcome {
        Ok(()) => Item::ok(
            name,
            format!("transactional id {id:?}: the coordinator registered it"),
        ),
        Err(TxnFailure::Fatal(why)) => Item::fail(name, format!("transactional id {id:?}: {why}"))
            .fix(format!(
                "kafka-acls.sh --bootstrap-server {} --add --allow-principal User:<relay> \
                 --operation Write --transactional-id {id}",
                kafka.brokers
            )),
        Err(other) => Item::warn(
            name,
            format!("transactional id {id:?} could not be registered: {other}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::check::Status;
    use std::collections::BTreeMap;

    fn config() -> Config {
        let mut config = Config::default();
        config.kafka.brokers = "k1:9092".into();
        config.kafka.checkpoint_topic = "cp".into();
        config
    }

    fn cluster(policy: Option<&str>, exists: bool) -> Result<KafkaFacts, String> {
        let mut facts = KafkaFacts::default();
        if exists {
            facts.topics = BTreeMap::from([("cp".to_owned(), 1)]);
        }
        if let Some(policy) = policy {
            facts.cleanup_policy = BTreeMap::from([("cp".to_owned(), policy.to_owned())]);
        }
        Ok(facts)
    }

    fn status(items: &[Item]) -> Status {
        assert_eq!(items.len(), 1, "{items:?}");
        items[0].status
    }

    #[test]
    fn the_checkpoint_topic_must_exist_and_be_compacted() {
        let config = config();
        assert_eq!(
            status(&evaluate(&config, &cluster(Some("compact"), true))),
            Status::Ok
        );
        assert_eq!(
            status(&evaluate(&config, &cluster(Some("compact,delete"), true))),
            Status::Warn
        );
        let items = evaluate(&config, &cluster(Some("delete"), true));
        assert_eq!(status(&items), Status::Fail);
        assert!(
            format!("{items:?}").contains("cleanup.policy=compact"),
            "{items:?}"
        );
        let items = evaluate(&config, &cluster(None, false));
        assert_eq!(status(&items), Status::Fail);
        let fix = items[0].fix.as_deref().unwrap_or_default();
        assert!(
            fix.starts_with("outbox-relay init --config <this config>")
                && fix.contains("--create --topic cp"),
            "{items:?}"
        );
        // Its configs not described (with ACLs: no DESCRIBE_CONFIGS): a
        // warning, as at the relay's start, with the grant.
        let items = evaluate(&config, &cluster(None, true));
        assert_eq!(status(&items), Status::Warn);
        let fix = items[0].fix.as_deref().unwrap_or_default();
        assert!(
            fix.contains("--operation DescribeConfigs --topic cp"),
            "{items:?}"
        );
        assert_eq!(
            status(&evaluate(&config, &Err("down".into()))),
            Status::Skip
        );
    }

    /// The relay refuses a checkpoint topic of more than one partition at
    /// start; `check` says so before.
    #[test]
    fn the_checkpoint_topic_must_have_one_partition() {
        let config = config();
        let mut facts = cluster(Some("compact"), true).unwrap();
        facts.topics.insert("cp".into(), 3);
        let items = evaluate(&config, &Ok(facts));
        assert_eq!(status(&items), Status::Fail);
        let text = format!("{items:?}");
        assert!(
            text.contains("3 partitions")
                && text.contains("outbox-relay init --config")
                && text.contains("--partitions 1"),
            "{text}"
        );
    }
}
