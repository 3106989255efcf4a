//! What the relay runs with: [`RelaySettings`], taken once from the
//! validated config (the replication connection, the producer, the envelope,
//! the routes, exactly-once, the relay lock), and [`Observability`], what it
//! reports about itself besides /metrics.

use std::time::Duration;

use crate::cleanup::Cleanup;
use crate::config::Config;
use crate::envelope::EnvelopeSettings;
use crate::otel::{Endpoint, OtlpSettings};
use crate::outbox::message::DEFAULT_PREFIX;
use crate::outbox::shard::Shard;
use crate::outbox::{ColumnMap, Source};
use crate::replication::{self, ReplicationSettings};
use crate::sink::http::Webhooks;
use crate::sink::{OnUnroutable, SinkSettings};

use super::lock::LockSettings;
use super::{exactly_once, progress};

/// Everything the relay needs, taken from the validated config.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    pub replication: ReplicationSettings,
    pub sink: SinkSettings,
    pub envelope: EnvelopeSettings,
    pub columns: ColumnMap,
    /// The outbox table: `(schema, name)`.
    pub table: (String, String),
    pub dlq_topic: String,
    /// `kafka.checkpoint_topic`, reserved for exactly-once checkpoints in
    /// either delivery mode: no event goes there.
    pub checkpoint_topic: String,
    /// Events handed to the producer and not yet acknowledged, at most.
    /// Reaching it stops reading the slot (backpressure: "bounded memory" in docs/design.md).
    pub max_in_flight: usize,
    /// Emit a heartbeat message when the outbox was idle this long.
    pub heartbeat_interval: Option<Duration>,
    /// How long a graceful stop waits for outstanding acknowledgements.
    pub shutdown_drain: Duration,
    /// What to do with an event the broker cannot route to its topic.
    pub on_unroutable: OnUnroutable,
    /// /health turns 503 once a retry loop went on this long without progress.
    pub unhealthy_after: Duration,
    /// Where events come from, and what becomes of table rows afterwards.
    pub source: SourceSettings,
    /// Produce spans exported over OTLP; `None`: tracing off.
    pub otlp: Option<OtlpSettings>,
    /// `kafka.delivery = "exactly-once"`; `None`: at-least-once.
    pub exactly_once: Option<exactly_once::ExactlyOnceSettings>,
    /// `[[routes]]` to webhook sinks, and their delivery table.
    pub webhooks: Webhooks,
    /// Standby relays: the relay lock (`relay.standby_lock`).
    pub lock: LockSettings,
}

/// Where events come from (`postgres.source`, `postgres.message_prefix`),
/// which of them are this relay's (`postgres.shards`, `postgres.shard`) and
/// what becomes of table rows once confirmed (`postgres.cleanup`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSettings {
    pub kind: Source,
    pub message_prefix: String,
    pub cleanup: Cleanup,
    /// This relay's shard: its publication's row filter picks its rows; its
    /// outbox messages, which no row filter reaches, the relay picks itself.
    pub shard: Shard,
}

impl Default for SourceSettings {
    fn default() -> Self {
        SourceSettings {
            kind: Source::Table,
            message_prefix: DEFAULT_PREFIX.to_owned(),
            cleanup: Cleanup::None,
            shard: Shard::default(),
        }
    }
}

impl RelaySettings {
    /// The relay's share of the validated config.
    ///
    /// # Panics
    /// When `postgres.url` does not parse, which [`Config::validate`] rules out.
    pub fn from_config(config: &Config) -> Self {
        let pg = &config.postgres;
        let kafka = &config.kafka;
        let conninfo = replication::Conninfo::parse(&pg.url).expect("validated postgres.url");
        let mut replication = ReplicationSettings::new(conninfo, &pg.slot, &pg.publication);
        replication.outbox_table = Some(pg.table_parts());
        replication.status_interval = pg.status_interval();
        replication.connect_timeout = pg.connect_timeout();
        RelaySettings {
            replication,
            sink: SinkSettings {
                brokers: kafka.brokers.clone(),
                linger_ms: kafka.linger_ms,
                message_timeout_ms: kafka.message_timeout_ms,
                queue_max_messages: kafka.queue_max_messages,
                dead_letter_topic: kafka.dlq_topic.clone(),
                properties: kafka.property_pairs(),
            },
            envelope: config.envelope_settings(),
            columns: ColumnMap {
                id: pg.columns.id.clone(),
                aggregate_type: pg.columns.aggregate_type.clone(),
                aggregate_id: pg.columns.aggregate_id.clone(),
                event_type: pg.columns.event_type.clone(),
                payload: pg.columns.payload.clone(),
                timestamp: pg.columns.timestamp_column().map(str::to_owned),
                tracing_span_context: pg.columns.tracing_span_context_column().map(str::to_owned),
                trace_state: pg.columns.tracestate_column().map(str::to_owned),
                source: pg.columns.source_column().map(str::to_owned),
                headers: pg.header_column_pairs(),
            },
            table: pg.table_parts(),
            dlq_topic: kafka.dlq_topic.clone(),
            checkpoint_topic: kafka.checkpoint_topic.clone(),
            max_in_flight: config.relay.channel_capacity,
            heartbeat_interval: pg.heartbeat_interval(),
            shutdown_drain: kafka.shutdown_drain(),
            on_unroutable: kafka.on_unroutable,
            unhealthy_after: config.relay.unhealthy_after(),
            source: SourceSettings {
                kind: pg.source,
                message_prefix: pg.message_prefix.clone(),
                cleanup: pg.cleanup,
                shard: Shard {
                    shards: pg.shards,
                    shard: pg.shard,
                },
            },
            webhooks: Webhooks::from_config(config),
            lock: LockSettings {
                enabled: config.relay.standby_lock,
                lease: config.relay.lock_lease(),
            },
            // Validated with the config.
            otlp: config.tracing.otlp_endpoint.as_deref().and_then(|url| {
                Some(OtlpSettings {
                    endpoint: Endpoint::parse(url.trim()).ok()?,
                    service_name: if config.tracing.service_name.trim().is_empty() {
                        "outbox-relay".to_owned()
                    } else {
                        config.tracing.service_name.clone()
                    },
                })
            }),
            exactly_once: exactly_once::ExactlyOnceSettings::from_config(config),
        }
    }
}

/// What the relay reports about itself besides /metrics, from the config's
/// `[relay]` section.
#[derive(Debug, Clone)]
pub struct Observability {
    /// Interval of the progress line while there is work; `None`: no line.
    pub progress_interval: Option<Duration>,
}

impl Default for Observability {
    fn default() -> Self {
        Observability {
            progress_interval: Some(progress::DEFAULT_INTERVAL),
        }
    }
}

impl Observability {
    pub fn from_config(config: &Config) -> Self {
        Observability {
            progress_interval: config.relay.progress_interval(),
        }
    }
}
