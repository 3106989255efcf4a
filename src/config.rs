//! The one relay configuration: loaded from a TOML file and `OUTBOX_RELAY__*`
//! environment variables, validated once, then handed out as plain values.
//!
//! Role: the CLI contract. [`Config::load`] is the only place that touches the
//! file system, and the environment arrives as an explicit iterator, so the
//! library never reads process state itself; tests pass variables directly.
//! `main` may instead call [`Config::figment`], merge flag overrides into it,
//! and finish with [`Config::from_figment`].
//!
//! Invariants:
//! * Every struct denies unknown keys: a typo is an error naming the key, not
//!   a silent default.
//! * A [`Config`] obtained from this module has passed [`Config::validate`];
//!   each failure is a [`ConfigError::Invalid`] naming the field path and the
//!   constraint, and producer properties that would weaken the relay's
//!   guarantees (acks, idempotence, partitioner, ...) are refused with why.
//! * Every duration has an upper bound (see `validate.rs`), so a deadline
//!   `Instant::now() + duration` built from a valid config never overflows,
//!   and a typo cannot turn into a week-long wait.
//! * Secrets never reach `Debug`, `Display`, `Serialize` or an error
//!   message: the password in `postgres.url` and Kafka properties that look
//!   secret are shown as `***`, and parse errors never quote the offending
//!   text. Serializing a config (the effective config, the documentation test)
//!   yields the redacted values, so it can never round-trip a secret.

mod addr;
mod build;
mod contracts;
mod effective;
mod env_names;
mod providers;
mod show;
mod validate;
mod webhooks;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use serde::{Deserialize, Serialize, Serializer};

use crate::cleanup::Cleanup;
use crate::envelope::{ContentMode, DEFAULT_TOPIC_TEMPLATE, EnvelopeSettings};
use crate::outbox::Source;
use crate::outbox::message::DEFAULT_PREFIX;
use crate::routes::AfterDeadLetter;
use crate::sink::OnUnroutable;

pub use crate::invocation::{command, set_config_path};
pub use crate::redact::{is_secret_property, redact_conninfo};
pub use addr::ListenAddr;
pub use contracts::{ContractConfig, Framing, RegistryConfig, SubjectStrategy};
pub use env_names::ENV_PREFIX;
pub use webhooks::{RouteConfig, SinkConfig, SinkKind, warnings};

/// A complete, commented example configuration (`relay.example.toml`).
pub const EXAMPLE_TOML: &str = include_str!("config/relay.example.toml");

/// Why the configuration cannot be used. No variant quotes a secret.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The sources do not deserialize: unknown key, wrong type, bad TOML.
    #[error("{}", render_problems(.0))]
    Parse(Vec<ParseProblem>),
    /// A value deserialized but breaks a rule.
    #[error("{field}: {constraint}")]
    Invalid { field: String, constraint: String },
}

/// One deserialization problem, located by its dotted key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseProblem {
    /// Dotted key path (`kafka.linger_ms`); empty for the document itself.
    pub field: String,
    pub message: String,
    /// The file or environment variable the value came from, when known.
    pub origin: Option<String>,
}

impl fmt::Display for ParseProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)?;
        if let Some(origin) = &self.origin {
            write!(f, " (in {origin})")?;
        }
        Ok(())
    }
}

fn render_problems(problems: &[ParseProblem]) -> String {
    let texts: Vec<String> = problems.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// The whole configuration. Obtain it through [`Config::load`] or
/// [`Config::from_figment`], which validate it.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub postgres: PostgresConfig,
    pub kafka: KafkaConfig,
    pub cloudevents: CloudEventsConfig,
    pub relay: RelayConfig,
    pub tracing: TracingConfig,
    /// `[[routes]]`: events sent to a sink other than Kafka, first match wins.
    pub routes: Vec<RouteConfig>,
    /// `[sinks.NAME]`: the webhook endpoints routes name.
    pub sinks: BTreeMap<String, SinkConfig>,
    /// `[[contracts]]`: the schema each event type's payload must satisfy,
    /// first match wins.
    pub contracts: Vec<ContractConfig>,
    /// `[registry]`: the schema registry of registry contracts.
    pub registry: RegistryConfig,
    /// The directory of the config file the `[[contracts]]` came from:
    /// their relative schema paths start there. Not a key of the file.
    #[serde(skip)]
    pub config_dir: Option<PathBuf>,
}

/// `[postgres]`: where the outbox rows come from.
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct PostgresConfig {
    /// libpq URL or key=value conninfo. Holds the password: never log it,
    /// use [`redact_conninfo`] (serialization does).
    #[serde(serialize_with = "show::serialize_redacted_conninfo")]
    pub url: String,
    pub slot: String,
    pub publication: String,
    /// `schema.name` or `name` (schema `public`).
    pub table: String,
    pub status_interval_secs: u64,
    pub connect_timeout_secs: u64,
    /// 0 = no heartbeat.
    pub heartbeat_interval_secs: u64,
    pub columns: OutboxColumns,
    /// Extra column name → Kafka header name.
    pub header_columns: BTreeMap<String, String>,
    /// Where events come from: the table's inserts, outbox logical
    /// messages, or both.
    pub source: Source,
    /// The logical message prefix of outbox events (`outbox_emit`'s
    /// `prefix`): one per relay when several share a database.
    pub message_prefix: String,
    /// What the relay does with outbox rows once the broker has them.
    pub cleanup: Cleanup,
    /// The delivery table of HTTP routes (retries, dead events): a name in
    /// the outbox table's schema, or `schema.name`.
    pub delivery_table: String,
    /// The parking table: events of an aggregate parked behind a dead
    /// letter (`after_dead_letter = "park"`), held in commit order until
    /// it is retried or discarded; a name in the outbox table's schema, or
    /// `schema.name`; empty: the outbox table's name followed by `_parked`.
    pub parked_table: String,
    /// The outbox split between this many relays, each with its own
    /// publication (a row filter on the aggregate id) and slot; 1: none.
    pub shards: u32,
    /// Which of the `shards` this relay's publication and slot carry.
    pub shard: u32,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url: String::new(),
            slot: String::new(),
            publication: String::new(),
            table: "public.outbox".to_owned(),
            status_interval_secs: 10,
            connect_timeout_secs: 10,
            heartbeat_interval_secs: 30,
            columns: OutboxColumns::default(),
            header_columns: BTreeMap::new(),
            source: Source::Table,
            message_prefix: DEFAULT_PREFIX.to_owned(),
            cleanup: Cleanup::None,
            delivery_table: "outbox_delivery".to_owned(),
            parked_table: String::new(),
            shards: 1,
            shard: 0,
        }
    }
}

/// `[postgres.columns]`: outbox column names. Defaults match Debezium's
/// outbox event router. An empty optional column name means "no such column".
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxColumns {
    pub id: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub payload: String,
    pub timestamp: String,
    pub tracing_span_context: String,
    /// The W3C `tracestate` column, optional like the traceparent's.
    pub tracestate: String,
    pub source: Option<String>,
}

impl Default for OutboxColumns {
    fn default() -> Self {
        OutboxColumns {
            id: "id".to_owned(),
            aggregate_type: "aggregatetype".to_owned(),
            aggregate_id: "aggregateid".to_owned(),
            event_type: "type".to_owned(),
            payload: "payload".to_owned(),
            timestamp: "timestamp".to_owned(),
            tracing_span_context: "tracingspancontext".to_owned(),
            tracestate: "tracestate".to_owned(),
            source: None,
        }
    }
}

/// `[kafka]`: where the events go.
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    pub brokers: String,
    /// Topic template; see [`crate::envelope::render_topic`].
    pub topic: String,
    pub dlq_topic: String,
    pub linger_ms: u64,
    pub message_timeout_ms: u64,
    pub queue_max_messages: u64,
    pub shutdown_drain_secs: u64,
    /// What to do with an event the broker cannot route to its topic.
    pub on_unroutable: OnUnroutable,
    /// What a dead letter of an event bound for Kafka does to its
    /// aggregate's later events: `park` them behind it (order kept) or
    /// `skip` (they go on ahead of it).
    pub after_dead_letter: AfterDeadLetter,
    /// At-least-once (the idempotent producer) or exactly-once for
    /// read_committed consumers (Kafka transactions carrying a checkpoint).
    pub delivery: Delivery,
    /// The producer's `transactional.id` in exactly-once mode; empty means
    /// [`KafkaConfig::transactional_id_for`] the slot. Also the key of the
    /// relay's checkpoint record.
    pub transactional_id: String,
    /// Compacted topic holding each exactly-once relay's last committed
    /// position.
    pub checkpoint_topic: String,
    /// A Kafka transaction is committed (between two PostgreSQL
    /// transactions) once it holds this many records, ...
    pub transaction_max_events: u64,
    /// ... or this many bytes of keys, values and headers, ...
    pub transaction_max_bytes: u64,
    /// ... or has been open this long.
    pub transaction_max_ms: u64,
    /// A Kafka transaction also commits at a PostgreSQL transaction
    /// boundary once the stream has been quiet this long: nothing more is
    /// coming to batch with it.
    pub transaction_quiet_ms: u64,
    /// The producer's `transaction.timeout.ms`; 0: derived
    /// ([`KafkaConfig::transaction_timeout`]). A Kafka transaction open for
    /// half of it commits even inside a PostgreSQL transaction.
    pub transaction_timeout_ms: u64,
    /// Other librdkafka properties, as text. May hold secrets: see
    /// [`is_secret_property`] (serialization hides them).
    #[serde(
        deserialize_with = "providers::deserialize_properties",
        serialize_with = "show::serialize_redacted_properties"
    )]
    pub properties: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: String::new(),
            topic: DEFAULT_TOPIC_TEMPLATE.to_owned(),
            dlq_topic: "outbox.dlq".to_owned(),
            linger_ms: 5,
            message_timeout_ms: 30_000,
            queue_max_messages: 100_000,
            shutdown_drain_secs: 30,
            on_unroutable: OnUnroutable::Stop,
            after_dead_letter: AfterDeadLetter::Park,
            delivery: Delivery::AtLeastOnce,
            transactional_id: String::new(),
            checkpoint_topic: DEFAULT_CHECKPOINT_TOPIC.to_owned(),
            transaction_max_events: 10_000,
            transaction_max_bytes: 16 * 1024 * 1024,
            transaction_max_ms: 100,
            // At a trickle every event is committed as soon as the relay
            // has read everything the server sent (not even a part of a
            // message left: `ReplicationStream::caught_up`) and nothing more
            // came for a moment; under load the stream is never that quiet.
            // Not zero: 0 measured no lower latency (the commit's own round
            // trips are the wait, benches/cpu-notes.md's seventeenth round),
            // and a read that emptied the socket just before the server's
            // next write would commit a small transaction in a backlog.
            transaction_quiet_ms: 1,
            transaction_timeout_ms: 0,
            properties: BTreeMap::new(),
        }
    }
}

/// `kafka.checkpoint_topic` unless configured.
pub const DEFAULT_CHECKPOINT_TOPIC: &str = "outbox-relay.checkpoints";

/// `kafka.delivery`: what a consumer of the event topics can count on.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// Every committed row arrives at least once; a crash may send some
    /// again, and consumers de-duplicate by event id.
    #[default]
    AtLeastOnce,
    /// Each committed row becomes visible exactly once to read_committed
    /// consumers: records go out in Kafka transactions that also carry the
    /// relay's position (docs/design.md, "Exactly once").
    ExactlyOnce,
}

impl Delivery {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::AtLeastOnce => "at-least-once",
            Delivery::ExactlyOnce => "exactly-once",
        }
    }
}

/// `[cloudevents]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct CloudEventsConfig {
    pub source: String,
    pub mode: ContentMode,
}

/// `relay.max_in_flight_bytes` by default: 128 MiB of records
/// unacknowledged. A drain of 1 MB payloads peaked at about 160 MiB of RSS
/// with it, and drained as fast as without a bound within the noise; 64 MiB
/// held 95 MiB but drained a quarter slower (docs/operations.md, "Memory
/// with large payloads"; benches/cpu-notes.md).
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: u64 = 128 * 1024 * 1024;

/// `[relay]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RelayConfig {
    pub channel_capacity: usize,
    /// Bytes of records (key, value, headers) handed to the producer or a
    /// webhook sink and not yet acknowledged, at most: reaching it pauses
    /// reading from the slot. One record larger than it still goes, alone.
    /// It also bounds librdkafka's queue (`queue.buffering.max.kbytes`)
    /// unless `[kafka.properties]` sets that.
    pub max_in_flight_bytes: u64,
    /// `host:port`, the host an IP address or a name resolved at start.
    pub metrics_addr: Option<ListenAddr>,
    pub log_format: LogFormat,
    /// /health turns 503 once a retry loop has gone on this long without
    /// progress.
    pub unhealthy_after_secs: u64,
    /// Seconds between progress lines while there is work; 0 = none.
    pub progress_interval_secs: u64,
    /// Relays on one slot elect the active one by an advisory lock; the
    /// others stand by (see docs/operations.md, "Standby relays").
    pub standby_lock: bool,
    /// The lock's lease: a holder cut off from PostgreSQL stops producing
    /// within it, and a standby takes over soon after.
    pub lock_lease_ms: u64,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            channel_capacity: 10_000,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            metrics_addr: None,
            log_format: LogFormat::Text,
            unhealthy_after_secs: 120,
            progress_interval_secs: 30,
            standby_lock: true,
            lock_lease_ms: 3_000,
        }
    }
}

/// `[tracing]`: OpenTelemetry. Without an endpoint nothing of it runs.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// OTLP/HTTP endpoint of a collector, `http://host:port` (the path
    /// `/v1/traces` is added when none is given).
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the relay's spans; `outbox-relay` when empty.
    pub service_name: String,
}

/// Log line format.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Config {
    /// Reads the TOML file at `path` (if any), applies `OUTBOX_RELAY__*`
    /// variables from `env` over it, and validates the result. `main` passes
    /// `std::env::vars()`; nothing else in the library reads the environment.
    ///
    /// # Errors
    /// [`ConfigError::Read`], [`ConfigError::Parse`], [`ConfigError::Invalid`].
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        Config::from_figment(&Config::figment(path, env)?)
    }

    /// The layered sources (file, then environment) without extracting them,
    /// so `main` can merge command-line overrides on top.
    ///
    /// # Errors
    /// [`ConfigError::Read`] if `path` cannot be read.
    pub fn figment(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Figment, ConfigError> {
        let toml = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                Some((text, Some(path.to_owned())))
            }
            None => None,
        };
        Ok(providers::figment(toml, env))
    }

    /// Like [`Config::figment`] for TOML text already in memory.
    pub fn figment_from_str(
        toml: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Figment {
        providers::figment(Some((toml.to_owned(), None)), env)
    }

    /// Extracts and validates.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] or [`ConfigError::Invalid`].
    pub fn from_figment(figment: &Figment) -> Result<Config, ConfigError> {
        let mut config: Config = providers::extract(figment)?;
        config.config_dir = figment
            .find_metadata("contracts")
            .and_then(|md| match &md.source {
                Some(figment::Source::File(path)) => path.parent().map(Path::to_owned),
                _ => None,
            });
        config.validate()?;
        Ok(config)
    }

    /// Checks every rule; the first failure names its field and constraint.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::validate(self)?;
        // What parses (the conninfo, the URLs) is parsed where the
        // settings are built: building them once finds what does not.
        self.relay_settings().map(drop)
    }

    /// The envelope's settings.
    pub fn envelope_settings(&self) -> EnvelopeSettings {
        EnvelopeSettings {
            source: self.cloudevents.source.clone(),
            mode: self.cloudevents.mode,
            topic_template: self.kafka.topic.clone(),
        }
    }
}

impl PostgresConfig {
    /// The outbox table as `(schema, name)`; schema `public` when unqualified.
    pub fn table_parts(&self) -> (String, String) {
        match self.table.split_once('.') {
            Some((schema, name)) => (schema.to_owned(), name.to_owned()),
            None => ("public".to_owned(), self.table.clone()),
        }
    }

    /// The delivery table as `(schema, name)`: the outbox table's schema
    /// unless qualified.
    pub fn delivery_table_parts(&self) -> (String, String) {
        match self.delivery_table.trim().split_once('.') {
            Some((schema, name)) => (schema.to_owned(), name.to_owned()),
            None => (self.table_parts().0, self.delivery_table.trim().to_owned()),
        }
    }

    /// `(schema, name)` of the parking table, in the outbox table's schema
    /// unless named; unset: the outbox table's name followed by `_parked`
    /// (relays of different outbox tables never share one: their
    /// aggregates are not each other's).
    pub fn parked_table_parts(&self) -> (String, String) {
        let (schema, outbox) = self.table_parts();
        match self.parked_table.trim() {
            "" => (schema, format!("{outbox}_parked")),
            named => match named.split_once('.') {
                Some((schema, name)) => (schema.to_owned(), name.to_owned()),
                None => (schema, named.to_owned()),
            },
        }
    }

    pub fn status_interval(&self) -> Duration {
        Duration::from_secs(self.status_interval_secs)
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs)
    }

    /// `None` when heartbeats are off.
    pub fn heartbeat_interval(&self) -> Option<Duration> {
        (self.heartbeat_interval_secs > 0)
            .then(|| Duration::from_secs(self.heartbeat_interval_secs))
    }

    /// `(column, header name)` pairs, in column-name order.
    pub fn header_column_pairs(&self) -> Vec<(String, String)> {
        self.header_columns
            .iter()
            .map(|(c, h)| (c.clone(), h.clone()))
            .collect()
    }
}

impl OutboxColumns {
    /// The timestamp column, `None` if configured as "".
    pub fn timestamp_column(&self) -> Option<&str> {
        Some(self.timestamp.as_str()).filter(|c| !c.is_empty())
    }

    /// The tracing span context column, `None` if configured as "".
    pub fn tracing_span_context_column(&self) -> Option<&str> {
        Some(self.tracing_span_context.as_str()).filter(|c| !c.is_empty())
    }

    /// The tracestate column, `None` if configured as "".
    pub fn tracestate_column(&self) -> Option<&str> {
        Some(self.tracestate.as_str()).filter(|c| !c.is_empty())
    }

    /// The per-row source column, if configured.
    pub fn source_column(&self) -> Option<&str> {
        self.source.as_deref().filter(|c| !c.is_empty())
    }
}

impl KafkaConfig {
    /// The pass-through librdkafka properties, validated (none of them is one
    /// the relay sets itself).
    pub fn property_pairs(&self) -> Vec<(String, String)> {
        self.properties
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn message_timeout(&self) -> Duration {
        Duration::from_millis(self.message_timeout_ms)
    }

    pub fn shutdown_drain(&self) -> Duration {
        Duration::from_secs(self.shutdown_drain_secs)
    }

    /// The `transactional.id` of an exactly-once relay on `slot`: the
    /// configured one, else `outbox-relay.<slot>`. Stable across restarts,
    /// which is what lets a restarted relay fence its predecessor and
    /// find its checkpoint.
    pub fn transactional_id_for(&self, slot: &str) -> String {
        if self.transactional_id.is_empty() {
            format!("outbox-relay.{slot}")
        } else {
            self.transactional_id.clone()
        }
    }

    pub fn transaction_max_duration(&self) -> Duration {
        Duration::from_millis(self.transaction_max_ms)
    }

    pub fn transaction_quiet_duration(&self) -> Duration {
        Duration::from_millis(self.transaction_quiet_ms)
    }

    /// The producer's `transaction.timeout.ms` in exactly-once mode: how
    /// long the broker lets a transaction stay open before it aborts it.
    /// It must cover a record's whole `message_timeout_ms` (librdkafka
    /// refuses less) plus the time bound of a transaction, with room for
    /// the last PostgreSQL transaction to arrive whole; never below
    /// librdkafka's default of 60 s. Validation keeps it under the brokers'
    /// default cap (`transaction.max.timeout.ms`, 15 minutes).
    pub fn transaction_timeout(&self) -> Duration {
        if self.transaction_timeout_ms > 0 {
            return Duration::from_millis(self.transaction_timeout_ms);
        }
        Duration::from_millis(self.least_transaction_timeout_ms().max(60_000))
    }

    /// The shortest `transaction.timeout.ms` that covers a record's whole
    /// `message_timeout_ms` and the time bound of a transaction twice.
    pub fn least_transaction_timeout_ms(&self) -> u64 {
        self.message_timeout_ms + 2 * self.transaction_max_ms
    }
}

impl RelayConfig {
    pub fn unhealthy_after(&self) -> Duration {
        Duration::from_secs(self.unhealthy_after_secs)
    }

    /// `None` when progress lines are off.
    pub fn progress_interval(&self) -> Option<Duration> {
        (self.progress_interval_secs > 0).then(|| Duration::from_secs(self.progress_interval_secs))
    }

    pub fn lock_lease(&self) -> Duration {
        Duration::from_millis(self.lock_lease_ms)
    }
}

/// For tests of modules that read a config: the smallest valid one, with
/// `extra` TOML appended and `env` as `OUTBOX_RELAY__…` variables.
#[cfg(test)]
pub(crate) fn load_for_test(extra: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    const MINIMAL: &str = r#"
        [postgres]
        url = "postgres://relay@localhost/app"
        slot = "s"
        publication = "p"
        [kafka]
        brokers = "localhost:9092"
        [cloudevents]
        source = "/test"
    "#;
    Config::from_figment(&Config::figment_from_str(
        &format!("{MINIMAL}\n{extra}"),
        env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    ))
}

#[cfg(test)]
mod effective_tests;
#[cfg(test)]
mod source_tests;
#[cfg(test)]
mod tests;
