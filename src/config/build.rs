//! The validated config turned into each layer's own settings, parsed here
//! and only here: the relay, the producer, the webhook sinks and their
//! routes, exactly-once, the relay lock, OTLP. The layers below take their
//! settings types and never see a [`Config`]; nothing below parses a value
//! of the config file again.
//!
//! What does not parse (a conninfo, a URL) is a [`ConfigError`] naming the
//! key: [`Config::validate`] builds the settings once to find it, so a
//! config that loaded builds again without failing.

use std::time::Duration;

use crate::otel::{Endpoint as OtlpEndpoint, OtlpSettings};
use crate::outbox::ColumnMap;
use crate::outbox::shard::Shard;
use crate::parking::ParkedTable;
use crate::pg::Conninfo;
use crate::relay::exactly_once::ExactlyOnceSettings;
use crate::relay::exactly_once::checkpoint::Bounds;
use crate::relay::lock::LockSettings;
use crate::relay::{Observability, RelaySettings, SourceSettings};
use crate::replication::ReplicationSettings;
use crate::routes::{AfterDeadLetter, Routes};
use crate::sink::SinkSettings;
use crate::sink::TransactionSettings;
use crate::sink::http::schedule::Schedule;
use crate::sink::http::store::DeliveryTable;
use crate::sink::http::{Endpoint, HttpSinkSettings, Webhooks};

use super::webhooks::RouteConfig;
use super::{Config, ConfigError, Delivery};

/// The service name of exported spans when `tracing.service_name` is empty.
pub const DEFAULT_SERVICE_NAME: &str = "outbox-relay";

fn invalid(field: impl Into<String>, constraint: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        constraint: constraint.into(),
    }
}

/// librdkafka's default `message.max.bytes`.
const LIBRDKAFKA_MESSAGE_MAX_BYTES: u64 = 1_000_000;
/// librdkafka's upper bound for `queue.buffering.max.kbytes` (`INT32_MAX`).
const LIBRDKAFKA_MAX_QUEUE_KBYTES: u64 = i32::MAX as u64;

impl Config {
    /// Everything the relay runs with.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a value that does not parse (never for a
    /// config [`Config::validate`] accepted).
    pub fn relay_settings(&self) -> Result<RelaySettings, ConfigError> {
        let pg = &self.postgres;
        let kafka = &self.kafka;
        // The PostgreSQL client's own conninfo parser, on the value as given:
        // its reason names the fix and never the password; the string is
        // not shown at all.
        let conninfo =
            Conninfo::parse(&pg.url).map_err(|error| invalid("postgres.url", error.reason()))?;
        let mut replication = ReplicationSettings::new(conninfo, &pg.slot, &pg.publication);
        // The stream resolves the outbox table from the catalog at every
        // connect. When events come from messages only, no table need exist
        // (the stream still checks the publication, which pgoutput needs),
        // but one that exists and is published is resolved all the same:
        // rows a service still inserts into it are published, never skipped.
        replication.outbox_table = Some(pg.table_parts());
        replication.outbox_table_optional = !pg.source.table();
        replication.status_interval = pg.status_interval();
        replication.connection.connect_timeout = pg.connect_timeout();
        Ok(RelaySettings {
            replication,
            sink: self.sink_settings(),
            envelope: self.envelope_settings(),
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
            max_in_flight: self.relay.channel_capacity,
            max_in_flight_bytes: self.relay.max_in_flight_bytes,
            heartbeat_interval: pg.heartbeat_interval(),
            shutdown_drain: kafka.shutdown_drain(),
            on_unroutable: kafka.on_unroutable,
            unhealthy_after: self.relay.unhealthy_after(),
            source: SourceSettings {
                kind: pg.source,
                message_prefix: pg.message_prefix.clone(),
                cleanup: pg.cleanup,
                shard: Shard {
                    shards: pg.shards,
                    shard: pg.shard,
                },
            },
            webhooks: self.webhooks()?,
            lock: LockSettings {
                enabled: self.relay.standby_lock,
                lease: self.relay.lock_lease(),
            },
            otlp: self.otlp()?,
            exactly_once: self.exactly_once(),
            contracts: self.contracts()?,
            parking: self.parking(),
        })
    }

    /// The producer's settings: the relay's, and those of the operator
    /// commands that produce or read as it does.
    pub fn sink_settings(&self) -> SinkSettings {
        let kafka = &self.kafka;
        SinkSettings {
            brokers: kafka.brokers.clone(),
            linger_ms: kafka.linger_ms,
            message_timeout_ms: kafka.message_timeout_ms,
            queue_max_messages: kafka.queue_max_messages,
            queue_max_kbytes: self.queue_max_kbytes(),
            dead_letter_topic: kafka.dlq_topic.clone(),
            properties: kafka.property_pairs(),
        }
    }

    /// librdkafka's `queue.buffering.max.kbytes` for the relay's producer:
    /// `relay.max_in_flight_bytes` and one record of `message.max.bytes`
    /// beside it (the most the relay holds in flight is the bound reached,
    /// plus the one record that reached it), so librdkafka never holds more
    /// than the relay lets go. A value in `[kafka.properties]` wins
    /// (`producer_config`).
    pub fn queue_max_kbytes(&self) -> Option<u64> {
        let message_max = self
            .kafka
            .properties
            .get("message.max.bytes")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(LIBRDKAFKA_MESSAGE_MAX_BYTES);
        let bytes = self.relay.max_in_flight_bytes.saturating_add(message_max);
        Some(bytes.div_ceil(1024).min(LIBRDKAFKA_MAX_QUEUE_KBYTES))
    }

    /// The parking table, when anything parks after a dead letter.
    pub fn parking(&self) -> Option<ParkedTable> {
        let (schema, name) = self.postgres.parked_table_parts();
        self.routes()
            .any_park()
            .then_some(ParkedTable { schema, name })
    }

    /// What the relay reports about itself besides /metrics.
    pub fn observability(&self) -> Observability {
        Observability {
            progress_interval: self.relay.progress_interval(),
            parked_table: self.parking(),
        }
    }

    /// The webhook side: routes, sinks, and their delivery table.
    ///
    /// # Errors
    /// A sink URL that does not parse.
    pub fn webhooks(&self) -> Result<Webhooks, ConfigError> {
        let (schema, name) = self.postgres.delivery_table_parts();
        Ok(Webhooks {
            routes: self.routes(),
            sinks: self.http_sinks()?,
            table: DeliveryTable { schema, name },
        })
    }

    /// The `[[routes]]`, over the sinks in name order (the order
    /// [`Config::http_sinks`] lists them in).
    pub fn routes(&self) -> Routes {
        let sinks: Vec<String> = self.sinks.keys().cloned().collect();
        let known: Vec<&RouteConfig> = self
            .routes
            .iter()
            .filter(|r| sinks.contains(&r.sink))
            .collect();
        let routes = known
            .iter()
            .filter_map(|r| {
                let sink = sinks.iter().position(|s| *s == r.sink)?;
                Some((r.aggregatetype.clone(), r.event_type.clone(), sink))
            })
            .collect();
        let sink_after: Vec<AfterDeadLetter> =
            self.sinks.values().map(|s| s.after_dead_letter).collect();
        let route_after: Vec<Option<AfterDeadLetter>> =
            known.iter().map(|r| r.after_dead_letter).collect();
        Routes::from_parts(routes, sinks).with_after_dead_letter(
            self.kafka.after_dead_letter,
            &sink_after,
            &route_after,
        )
    }

    /// Every HTTP sink, in name order.
    ///
    /// # Errors
    /// `sinks.NAME.url` when it does not parse.
    pub fn http_sinks(&self) -> Result<Vec<HttpSinkSettings>, ConfigError> {
        self.sinks
            .iter()
            .map(|(name, sink)| {
                let endpoint = Endpoint::parse(sink.url.trim())
                    .map_err(|why| invalid(format!("sinks.{name}.url"), why))?;
                Ok(HttpSinkSettings {
                    name: name.clone(),
                    endpoint,
                    secrets: sink.active_secrets(),
                    bearer_token: sink.bearer_token.clone().filter(|t| !t.is_empty()),
                    ca_file: sink.ca_file.as_ref().map(|f| f.trim().into()),
                    timeout: Duration::from_millis(sink.timeout_ms),
                    schedule: Schedule {
                        inline: sink.inline_attempts,
                        delays: sink
                            .retry_schedule_secs
                            .iter()
                            .map(|&s| Duration::from_secs(s))
                            .collect(),
                    },
                    max_concurrency: sink.max_concurrency,
                    retry_poll: Duration::from_millis(sink.retry_poll_ms),
                })
            })
            .collect()
    }

    /// Produce spans over OTLP; `None`: tracing off.
    ///
    /// # Errors
    /// `tracing.otlp_endpoint` when it does not parse.
    pub fn otlp(&self) -> Result<Option<OtlpSettings>, ConfigError> {
        let Some(url) = self.tracing.otlp_endpoint.as_deref() else {
            return Ok(None);
        };
        let endpoint =
            OtlpEndpoint::parse(url.trim()).map_err(|why| invalid("tracing.otlp_endpoint", why))?;
        Ok(Some(OtlpSettings {
            endpoint,
            service_name: self.service_name().to_owned(),
        }))
    }

    /// `tracing.service_name`, or its default.
    pub fn service_name(&self) -> &str {
        let name = self.tracing.service_name.trim();
        if name.is_empty() {
            DEFAULT_SERVICE_NAME
        } else {
            name
        }
    }

    /// `kafka.delivery = "exactly-once"`; `None` in at-least-once mode.
    pub fn exactly_once(&self) -> Option<ExactlyOnceSettings> {
        let kafka = &self.kafka;
        (kafka.delivery == Delivery::ExactlyOnce).then(|| ExactlyOnceSettings {
            transactions: TransactionSettings {
                transactional_id: kafka.transactional_id_for(&self.postgres.slot),
                checkpoint_topic: kafka.checkpoint_topic.clone(),
                transaction_timeout: kafka.transaction_timeout(),
            },
            bounds: Bounds {
                max_events: kafka.transaction_max_events,
                max_bytes: kafka.transaction_max_bytes,
                max_open: kafka.transaction_max_duration(),
                quiet_after: kafka.transaction_quiet_duration(),
                split_after: kafka.transaction_timeout() / 2,
            },
        })
    }
}
