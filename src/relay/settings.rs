//! What the relay runs with: [`RelaySettings`], taken once from the
//! validated config (the replication connection, the producer, the envelope,
//! the routes, exactly-once, the relay lock), and [`Observability`], what it
//! reports about itself besides /metrics.

use std::time::Duration;

use crate::cleanup::Cleanup;
use crate::contracts::Contracts;
use crate::envelope::EnvelopeSettings;
use crate::otel::OtlpSettings;
use crate::outbox::message::DEFAULT_PREFIX;
use crate::outbox::shard::Shard;
use crate::outbox::{ColumnMap, Source};
use crate::parking::ParkedTable;
use crate::replication::ReplicationSettings;
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
    /// Bytes of the records handed over and not yet acknowledged, at most
    /// (one larger record still goes, alone): reaching it stops reading
    /// the slot too (`relay.max_in_flight_bytes`).
    pub max_in_flight_bytes: u64,
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
    /// `[[contracts]]`: the schema each event type's payload must satisfy.
    pub contracts: Contracts,
    /// The parking table, when any sink or route parks an aggregate after
    /// a dead letter (`after_dead_letter = "park"`, the default); `None`:
    /// every one skips.
    pub parking: Option<crate::parking::ParkedTable>,
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

/// What the relay reports about itself besides the sessions' own metrics,
/// from the config: the progress line (`[relay]`), and the parking table
/// whose figures it samples for /metrics and /health.
#[derive(Debug, Clone)]
pub struct Observability {
    /// Interval of the progress line while there is work; `None`: no line.
    pub progress_interval: Option<Duration>,
    /// `postgres.parked_table`, for the parked gauges
    /// (`parking::gauges`); `None`: not sampled.
    pub parked_table: Option<ParkedTable>,
}

impl Default for Observability {
    fn default() -> Self {
        Observability {
            progress_interval: Some(progress::DEFAULT_INTERVAL),
            parked_table: None,
        }
    }
}
