//! What the Kafka cluster says, for `check`: which brokers answer, which
//! topics exist, whether the broker creates topics on demand, and each
//! topic's `max.message.bytes`.
//!
//! Role: the broker-side I/O of `check`, with the relay's own connection
//! properties (`kafka.brokers`, `[kafka.properties]`: TLS, SASL), bounded by
//! a timeout.
//!
//! Invariant: nothing is created. Metadata is requested for all topics,
//! never for one by name: a request naming a missing topic makes a broker
//! with `auto.create.topics.enable` create it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;

use crate::config::KafkaConfig;

/// librdkafka's default `message.max.bytes`.
pub const DEFAULT_MESSAGE_MAX_BYTES: i64 = 1_000_000;

/// The cluster as `check` sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KafkaFacts {
    /// `id@host:port` of each broker in the metadata.
    pub brokers: Vec<String>,
    /// Existing topics and their partition counts.
    pub topics: BTreeMap<String, usize>,
    /// The broker's `auto.create.topics.enable`, when it could be read.
    pub broker_auto_create: Option<bool>,
    /// `max.message.bytes` of the topics asked about that exist.
    pub max_message_bytes: BTreeMap<String, i64>,
    /// Why a config could not be read (authorization, timeout), if so.
    pub config_problem: Option<String>,
    /// `cleanup.policy` of the topics asked about that exist.
    pub cleanup_policy: BTreeMap<String, String>,
}

/// The producer's `message.max.bytes`: the property, else librdkafka's
/// default.
pub fn producer_message_max_bytes(kafka: &KafkaConfig) -> i64 {
    kafka
        .properties
        .get("message.max.bytes")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES)
}

/// Whether the relay's producer asks brokers to create missing topics
/// (`allow.auto.create.topics`, on by default for a producer).
pub fn producer_auto_create(kafka: &KafkaConfig) -> bool {
    crate::sink::allows_topic_creation(
        kafka
            .properties
            .get("allow.auto.create.topics")
            .map(String::as_str),
    )
}

/// Asks the cluster. `wanted` are the topics whose configs to read (those
/// that do not exist are skipped).
///
/// # Errors
/// The client cannot be built or no broker answered within `timeout`: the
/// text says which.
pub async fn gather(
    kafka: &KafkaConfig,
    wanted: &[String],
    timeout: Duration,
) -> Result<KafkaFacts, String> {
    let mut config = crate::sink::client_config(&kafka.brokers, &kafka.properties);
    config.set("socket.timeout.ms", timeout.as_millis().max(10).to_string());
    let admin: Arc<AdminClient<DefaultClientContext>> = Arc::new(
        config
            .create()
            .map_err(|e| format!("cannot create a Kafka client: {e}"))?,
    );
    let metadata_client = Arc::clone(&admin);
    let metadata = tokio::task::spawn_blocking(move || {
        metadata_client
            .inner()
            .fetch_metadata(None, timeout)
            .map(|md| {
                let brokers: Vec<(i32, String)> = md
                    .brokers()
                    .iter()
                    .map(|b| (b.id(), format!("{}@{}:{}", b.id(), b.host(), b.port())))
                    .collect();
                let topics: BTreeMap<String, usize> = md
                    .topics()
                    .iter()
                    .filter(|t| t.error().is_none())
                    .map(|t| (t.name().to_owned(), t.partitions().len()))
                    .collect();
                (brokers, topics)
            })
    })
    .await
    .map_err(|e| format!("metadata request task: {e}"))?
    .map_err(|e| {
        format!(
            "no answer to a metadata request from {} within {timeout:?}: {e}",
            kafka.brokers
        )
    })?;
    let (brokers, topics) = metadata;
    let mut facts = KafkaFacts {
        brokers: brokers.iter().map(|(_, b)| b.clone()).collect(),
        topics,
        ..KafkaFacts::default()
    };
    let existing: Vec<&String> = wanted
        .iter()
        .filter(|t| facts.topics.contains_key(*t))
        .collect();
    let mut resources: Vec<ResourceSpecifier<'_>> = existing
        .iter()
        .map(|t| ResourceSpecifier::Topic(t.as_str()))
        .collect();
    if let Some((id, _)) = brokers.first() {
        resources.push(ResourceSpecifier::Broker(*id));
    }
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let described = tokio::time::timeout(
        timeout + Duration::from_secs(1),
        admin.describe_configs(resources.iter(), &options),
    )
    .await;
    match described {
        Err(_) => facts.config_problem = Some(format!("no answer within {timeout:?}")),
        Ok(Err(e)) => facts.config_problem = Some(e.to_string()),
        Ok(Ok(results)) => {
            for result in results {
                match result {
                    Ok(resource) => {
                        use rdkafka::admin::OwnedResourceSpecifier as R;
                        let value =
                            |name: &str| resource.get(name).and_then(|entry| entry.value.clone());
                        match &resource.specifier {
                            R::Topic(topic) => {
                                if let Some(bytes) =
                                    value("max.message.bytes").and_then(|v| v.trim().parse().ok())
                                {
                                    facts.max_message_bytes.insert(topic.clone(), bytes);
                                }
                                if let Some(policy) = value("cleanup.policy") {
                                    facts.cleanup_policy.insert(topic.clone(), policy);
                                }
                            }
                            R::Broker(_) => {
                                facts.broker_auto_create = value("auto.create.topics.enable")
                                    .map(|v| v.trim().eq_ignore_ascii_case("true"));
                            }
                            R::Group(_) => {}
                        }
                    }
                    Err(code) => {
                        facts.config_problem = Some(format!("describe configs: {code}"));
                    }
                }
            }
        }
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_settings_follow_the_properties_and_librdkafka_defaults() {
        let mut kafka = KafkaConfig::default();
        assert_eq!(
            producer_message_max_bytes(&kafka),
            DEFAULT_MESSAGE_MAX_BYTES
        );
        assert!(producer_auto_create(&kafka));
        kafka
            .properties
            .insert("message.max.bytes".into(), " 5000000 ".into());
        kafka
            .properties
            .insert("allow.auto.create.topics".into(), "false".into());
        assert_eq!(producer_message_max_bytes(&kafka), 5_000_000);
        assert!(!producer_auto_create(&kafka));
    }
}
