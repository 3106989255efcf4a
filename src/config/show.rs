//! How a configuration shows itself, secrets always redacted: the
//! serialization the effective config (`effective.rs`: `check-config`, the
//! start-up report) is made of, its flattened keys, `Debug` and the
//! one-line `Display`.
//!
//! Invariant: no password of `postgres.url` and no secret Kafka property
//! (`sasl.password`, `ssl.key.password`, ...) appears in any of them
//! (logs never hold a secret; the property tests in `tests.rs` try every
//! form a password can take).

use super::*;

pub(super) fn serialize_redacted_conninfo<S: Serializer>(
    url: &str,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redact_conninfo(url))
}

pub(super) fn serialize_redacted_properties<S: Serializer>(
    properties: &BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(properties.iter().map(|(k, v)| {
        let shown = if is_secret_property(k) {
            "***"
        } else {
            v.as_str()
        };
        (k, shown)
    }))
}

impl Config {
    /// Every key with its value, secrets redacted, as `(dotted key, value)`
    /// sorted by key within each table. A table with no entries (`kafka.properties` when none
    /// is set) is one key with an empty object.
    pub fn flattened(&self) -> Vec<(String, serde_json::Value)> {
        fn walk(
            prefix: &str,
            value: serde_json::Value,
            out: &mut Vec<(String, serde_json::Value)>,
        ) {
            match value {
                serde_json::Value::Object(map) if !map.is_empty() => {
                    for (key, value) in map {
                        let path = if prefix.is_empty() {
                            key
                        } else {
                            format!("{prefix}.{key}")
                        };
                        walk(&path, value, out);
                    }
                }
                leaf => out.push((prefix.to_owned(), leaf)),
            }
        }
        let mut out = Vec::new();
        // Serializing plain data to a JSON value cannot fail.
        if let Ok(value) = serde_json::to_value(self) {
            walk("", value, &mut out);
        }
        out
    }
}

// `Debug` is written by hand for the structs that hold secrets.

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("postgres", &self.postgres)
            .field("kafka", &self.kafka)
            .field("cloudevents", &self.cloudevents)
            .field("relay", &self.relay)
            .field("tracing", &self.tracing)
            .field("routes", &self.routes)
            .field("sinks", &self.sinks)
            .finish()
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &redact_conninfo(&self.url))
            .field("slot", &self.slot)
            .field("publication", &self.publication)
            .field("table", &self.table)
            .field("status_interval_secs", &self.status_interval_secs)
            .field("connect_timeout_secs", &self.connect_timeout_secs)
            .field("heartbeat_interval_secs", &self.heartbeat_interval_secs)
            .field("columns", &self.columns)
            .field("header_columns", &self.header_columns)
            .field("source", &self.source)
            .field("message_prefix", &self.message_prefix)
            .field("cleanup", &self.cleanup)
            .field("delivery_table", &self.delivery_table)
            .field("shards", &self.shards)
            .field("shard", &self.shard)
            .finish()
    }
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("dlq_topic", &self.dlq_topic)
            .field("linger_ms", &self.linger_ms)
            .field("message_timeout_ms", &self.message_timeout_ms)
            .field("queue_max_messages", &self.queue_max_messages)
            .field("shutdown_drain_secs", &self.shutdown_drain_secs)
            .field("on_unroutable", &self.on_unroutable)
            .field("delivery", &self.delivery)
            .field("transactional_id", &self.transactional_id)
            .field("checkpoint_topic", &self.checkpoint_topic)
            .field("transaction_max_events", &self.transaction_max_events)
            .field("transaction_max_bytes", &self.transaction_max_bytes)
            .field("transaction_max_ms", &self.transaction_max_ms)
            .field("transaction_timeout_ms", &self.transaction_timeout_ms)
            .field("properties", &RedactedProperties(&self.properties))
            .finish()
    }
}

struct RedactedProperties<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for RedactedProperties<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| {
                let shown = if is_secret_property(k) {
                    "***"
                } else {
                    v.as_str()
                };
                (k, shown)
            }))
            .finish()
    }
}

/// A one-line summary for the startup log, secrets redacted.
impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (schema, table) = self.postgres.table_parts();
        write!(
            f,
            "postgres {} slot={} publication={} table={schema}.{table} source={}; kafka brokers={} topic={} dlq={} properties=[",
            redact_conninfo(&self.postgres.url),
            self.postgres.slot,
            self.postgres.publication,
            self.postgres.source.as_str(),
            self.kafka.brokers,
            self.kafka.topic,
            self.kafka.dlq_topic,
        )?;
        for (i, (k, v)) in self.kafka.properties.iter().enumerate() {
            let shown = if is_secret_property(k) {
                "***"
            } else {
                v.as_str()
            };
            write!(f, "{}{k}={shown}", if i == 0 { "" } else { " " })?;
        }
        write!(
            f,
            "]; cloudevents source={} mode={}",
            self.cloudevents.source,
            self.cloudevents.mode.as_str()
        )
    }
}
