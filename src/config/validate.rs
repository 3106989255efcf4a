//! The rules a [`Config`] must satisfy, each failure naming the field path
//! and the constraint, and the policy for pass-through Kafka properties.

use crate::cleanup::Cleanup;
use crate::envelope::{render_topic, topic_name_problem};
use crate::replication::HEARTBEAT_PREFIX;

use super::{Config, ConfigError, Delivery};

/// librdkafka's upper bound for `linger.ms`.
const MAX_LINGER_MS: u64 = 900_000;
/// librdkafka's upper bound for `message.timeout.ms` and
/// `queue.buffering.max.messages` (`INT32_MAX`).
const MAX_LIBRDKAFKA_INT: u64 = i32::MAX as u64;
/// The design sends a status update at least every `min(10 s,
/// wal_sender_timeout / 2)`; PostgreSQL's default `wal_sender_timeout` is
/// 60 s, and a longer interval risks the server dropping the connection.
const MAX_STATUS_INTERVAL_SECS: u64 = 10;
/// Upper bounds of the other durations. Each one is far above any sane value,
/// low enough that a typo (an extra digit or three, a value in ms where
/// seconds are meant) is refused instead of becoming a week-long wait, and
/// small enough that `Instant::now() + duration` can never overflow (which
/// panics) on any platform.
///
/// A connection attempt that has not finished in 5 minutes will not: the
/// server is unreachable, and retrying with backoff says so sooner.
const MAX_CONNECT_TIMEOUT_SECS: u64 = 300;
/// The heartbeat exists so that an idle outbox on a busy database does not
/// pin WAL; an hour between heartbeats already lets an hour of WAL pile up.
const MAX_HEARTBEAT_INTERVAL_SECS: u64 = 3_600;
/// A graceful stop waits at most this long for acknowledgements. Process
/// supervisors kill a process long before an hour (Kubernetes after 30 s,
/// systemd after 90 s by default), and what is not drained is only sent
/// again after the restart, never lost.
const MAX_SHUTDOWN_DRAIN_SECS: u64 = 3_600;
/// `relay.max_in_flight_bytes`: 0 would stop every read; above 1 TiB is a
/// typo (and librdkafka's `queue.buffering.max.kbytes`, derived from it,
/// takes at most `INT32_MAX` KiB).
const MAX_IN_FLIGHT_BYTES: std::ops::RangeInclusive<u64> = 1..=1 << 40;
/// PostgreSQL's `NAMEDATALEN - 1`: longer identifiers are truncated.
const MAX_IDENTIFIER_LEN: usize = 63;
/// The idempotent producer keeps ordering only with at most this many
/// in-flight requests per connection (KIP-98; librdkafka enforces it).
const MAX_IN_FLIGHT_IDEMPOTENT: u64 = 5;
/// Bounds of `relay.unhealthy_after_secs`: a day without progress is an
/// outage whatever the setting.
const UNHEALTHY_AFTER_SECS: std::ops::RangeInclusive<u64> = 1..=86_400;
/// Longest interval between progress lines: past an hour a log no longer
/// tells when a rate changed.
const MAX_PROGRESS_INTERVAL_SECS: u64 = 3_600;

/// Bounds of one Kafka transaction in exactly-once mode. A transaction
/// holds whole PostgreSQL transactions, so these are the sizes at which the
/// relay commits at the next transaction boundary, not hard limits.
const TRANSACTION_MAX_EVENTS: std::ops::RangeInclusive<u64> = 1..=1_000_000;
const TRANSACTION_MAX_BYTES: std::ops::RangeInclusive<u64> = 1..=1 << 30;
/// read_committed consumers see nothing of a transaction until it commits,
/// and a crash redoes it whole: half a minute is already a long wait.
const TRANSACTION_MAX_MS: std::ops::RangeInclusive<u64> = 1..=30_000;
const TRANSACTION_QUIET_MS: std::ops::RangeInclusive<u64> = 0..=30_000;
/// In exactly-once mode the transaction timeout covers the message timeout
/// (see `KafkaConfig::transaction_timeout`), and brokers refuse a
/// transaction timeout above `transaction.max.timeout.ms` (15 minutes by
/// default).
const MAX_MESSAGE_TIMEOUT_EXACTLY_ONCE_MS: u64 = 600_000;
/// Longest `kafka.transaction_timeout_ms` accepted: the brokers' default
/// `transaction.max.timeout.ms`.
const MAX_TRANSACTION_TIMEOUT_MS: u64 = 900_000;
/// Longest `kafka.transactional_id` accepted.
const MAX_TRANSACTIONAL_ID_LEN: usize = 249;
/// Most shards of one outbox: every walsender decodes all of the WAL, so
/// past a handful more shards only multiply the decoding.
const MAX_SHARDS: u32 = 64;

fn invalid(field: impl Into<String>, constraint: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        constraint: constraint.into(),
    }
}

pub(super) fn validate(config: &Config) -> Result<(), ConfigError> {
    validate_postgres(config)?;
    validate_kafka(config)?;
    validate_properties(config)?;
    super::webhooks::validate(config)?;
    if config.cloudevents.source.trim().is_empty() {
        return Err(invalid(
            "cloudevents.source",
            "required: the CloudEvents `source` of every event, a URI reference such as \
             \"/orders-service\" (also the fallback when the source column is NULL)",
        ));
    }
    if config.relay.channel_capacity == 0 {
        return Err(invalid("relay.channel_capacity", "must be at least 1"));
    }
    if !MAX_IN_FLIGHT_BYTES.contains(&config.relay.max_in_flight_bytes) {
        return Err(invalid(
            "relay.max_in_flight_bytes",
            "must be between 1 and 1099511627776 (1 TiB): the bytes of records the relay holds \
             unacknowledged before it pauses reading the slot, 134217728 (128 MiB) by default; \
             a record larger than it still goes, alone",
        ));
    }
    if !UNHEALTHY_AFTER_SECS.contains(&config.relay.unhealthy_after_secs) {
        return Err(invalid(
            "relay.unhealthy_after_secs",
            "must be between 1 and 86400: how long a retry loop may go on without \
             progress before /health answers 503",
        ));
    }
    let lease = config.relay.lock_lease();
    if lease < crate::relay::MIN_LEASE || lease > crate::relay::MAX_LEASE {
        return Err(invalid(
            "relay.lock_lease_ms",
            "must be between 1000 and 60000 (milliseconds): how long the relay lock's session \
             may stay silent before the server ends it and a standby takes over",
        ));
    }
    if config.relay.progress_interval_secs > MAX_PROGRESS_INTERVAL_SECS {
        return Err(invalid(
            "relay.progress_interval_secs",
            format!(
                "must be at most {MAX_PROGRESS_INTERVAL_SECS} (seconds), or 0 for no progress \
                 lines"
            ),
        ));
    }
    Ok(())
}

fn validate_postgres(config: &Config) -> Result<(), ConfigError> {
    let pg = &config.postgres;
    if !(1..=MAX_SHARDS).contains(&pg.shards) {
        return Err(invalid(
            "postgres.shards",
            format!("must be between 1 (not sharded) and {MAX_SHARDS}"),
        ));
    }
    if pg.shard >= pg.shards {
        return Err(invalid(
            "postgres.shard",
            format!(
                "must be below postgres.shards ({}): shards are numbered from 0",
                pg.shards
            ),
        ));
    }
    let url = pg.url.trim();
    if url.is_empty() {
        return Err(invalid(
            "postgres.url",
            "required: a postgres:// URL or key=value connection string \
             (set it in the file or in OUTBOX_RELAY__POSTGRES__URL)",
        ));
    }
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("postgres://")
        || lower.starts_with("postgresql://")
        || url.contains('='))
    {
        // The value itself is never quoted: it may be a password.
        return Err(invalid(
            "postgres.url",
            "must be a postgres:// URL or a key=value connection string \
             (e.g. \"host=/run/postgresql dbname=app user=relay\")",
        ));
    }
    if let Some(problem) = slot_name_problem(&pg.slot) {
        return Err(invalid("postgres.slot", problem));
    }
    if pg.publication.is_empty() || pg.publication.len() > MAX_IDENTIFIER_LEN {
        return Err(invalid(
            "postgres.publication",
            "required: the publication name, 1 to 63 bytes",
        ));
    }
    if !is_table_name(&pg.table) {
        return Err(invalid(
            "postgres.table",
            "must be \"schema.name\" or \"name\": each part 1 to 63 bytes, \
             without whitespace, dots or quotes",
        ));
    }
    if !(1..=MAX_STATUS_INTERVAL_SECS).contains(&pg.status_interval_secs) {
        return Err(invalid(
            "postgres.status_interval_secs",
            "must be between 1 and 10: the server drops a replication connection that \
             is silent for wal_sender_timeout (60 s by default)",
        ));
    }
    if !(1..=MAX_CONNECT_TIMEOUT_SECS).contains(&pg.connect_timeout_secs) {
        return Err(invalid(
            "postgres.connect_timeout_secs",
            format!(
                "must be between 1 and {MAX_CONNECT_TIMEOUT_SECS} (seconds): a connection \
                 attempt that takes longer will not succeed, the relay retries instead"
            ),
        ));
    }
    if pg.heartbeat_interval_secs > MAX_HEARTBEAT_INTERVAL_SECS {
        return Err(invalid(
            "postgres.heartbeat_interval_secs",
            format!(
                "must be at most {MAX_HEARTBEAT_INTERVAL_SECS} (seconds), or 0 for no \
                 heartbeat: a longer interval lets that much WAL pile up behind an idle outbox"
            ),
        ));
    }
    let columns = &pg.columns;
    for (field, column) in [
        ("postgres.columns.id", &columns.id),
        ("postgres.columns.aggregate_type", &columns.aggregate_type),
        ("postgres.columns.aggregate_id", &columns.aggregate_id),
        ("postgres.columns.event_type", &columns.event_type),
        ("postgres.columns.payload", &columns.payload),
    ] {
        if column.is_empty() {
            return Err(invalid(field, "must name a column of the outbox table"));
        }
    }
    for (column, header) in &pg.header_columns {
        let field = format!("postgres.header_columns.{column}");
        if column.is_empty() {
            return Err(invalid(field, "the column name must not be empty"));
        }
        let lower = header.to_ascii_lowercase();
        if header.is_empty() {
            return Err(invalid(field, "the header name must not be empty"));
        }
        if lower.starts_with("ce_") || lower == "content-type" || lower == "id" {
            return Err(invalid(
                field,
                "the header name is one the relay sets itself (ce_*, content-type, id); \
                 choose another",
            ));
        }
        if config.tracing.otlp_endpoint.is_some()
            && (lower == "traceparent" || lower == "tracestate")
        {
            return Err(invalid(
                field,
                "with tracing.otlp_endpoint set, the relay writes the traceparent and \
                 tracestate headers itself (its produce span's context); choose another name",
            ));
        }
    }
    if pg.message_prefix.is_empty() || pg.message_prefix == HEARTBEAT_PREFIX {
        return Err(invalid(
            "postgres.message_prefix",
            format!(
                "must be a non-empty prefix other than {HEARTBEAT_PREFIX:?} (the relay's \
                 heartbeat): the prefix outbox_emit writes, \"outbox\" by default"
            ),
        ));
    }
    if pg.cleanup == Cleanup::DeleteAfterAck && !pg.source.table() {
        return Err(invalid(
            "postgres.cleanup",
            "\"delete-after-ack\" deletes outbox table rows, and postgres.source = \
             \"messages\" has none: leave cleanup at \"none\" (messages leave nothing to clean up)",
        ));
    }
    Ok(())
}

fn validate_kafka(config: &Config) -> Result<(), ConfigError> {
    let kafka = &config.kafka;
    if kafka.brokers.trim().is_empty() {
        return Err(invalid(
            "kafka.brokers",
            "required: a comma-separated host:port list",
        ));
    }
    if kafka
        .brokers
        .split(',')
        .any(|b| b.trim().is_empty() || b.trim().contains(char::is_whitespace))
    {
        return Err(invalid(
            "kafka.brokers",
            "must be a comma-separated host:port list without empty entries or spaces",
        ));
    }
    if let Err(e) = render_topic(&kafka.topic, "SampleAggregate", "SampleType") {
        return Err(invalid(
            "kafka.topic",
            format!(
                "the template must give a valid Kafka topic name once {{aggregatetype}} and \
                 {{type}} are replaced (the only placeholders): {e}"
            ),
        ));
    }
    if let Some(problem) = topic_name_problem(&kafka.dlq_topic) {
        return Err(invalid(
            "kafka.dlq_topic",
            format!("not a valid Kafka topic name: {problem} (use 1 to 249 of [a-zA-Z0-9._-])"),
        ));
    }
    if kafka.dlq_topic == kafka.topic {
        return Err(invalid(
            "kafka.dlq_topic",
            "must differ from kafka.topic: dead letters would mix with events",
        ));
    }
    if kafka.linger_ms > MAX_LINGER_MS {
        return Err(invalid(
            "kafka.linger_ms",
            "must be at most 900000 (librdkafka's limit)",
        ));
    }
    if kafka.message_timeout_ms == 0 || kafka.message_timeout_ms > MAX_LIBRDKAFKA_INT {
        return Err(invalid(
            "kafka.message_timeout_ms",
            "must be between 1 and 2147483647: an unbounded timeout would let one \
             stuck record stop confirmation forever",
        ));
    }
    if kafka.message_timeout_ms <= kafka.linger_ms {
        return Err(invalid(
            "kafka.message_timeout_ms",
            "must be greater than kafka.linger_ms (librdkafka refuses otherwise)",
        ));
    }
    if kafka.shutdown_drain_secs > MAX_SHUTDOWN_DRAIN_SECS {
        return Err(invalid(
            "kafka.shutdown_drain_secs",
            format!(
                "must be at most {MAX_SHUTDOWN_DRAIN_SECS} (seconds): process supervisors \
                 kill a stopping relay long before that, and what a stop does not drain \
                 is sent again after the restart"
            ),
        ));
    }
    if kafka.queue_max_messages == 0 || kafka.queue_max_messages > MAX_LIBRDKAFKA_INT {
        return Err(invalid(
            "kafka.queue_max_messages",
            "must be between 1 and 2147483647",
        ));
    }
    validate_exactly_once(config)
}

fn validate_exactly_once(config: &Config) -> Result<(), ConfigError> {
    let kafka = &config.kafka;
    // A Kafka transaction's checkpoint covers whole PostgreSQL transactions;
    // an event of one of them still in flight to an HTTP endpoint would be
    // skipped after a crash as if delivered. Until webhook deliveries are
    // part of the checkpoint, the two are refused together.
    if kafka.delivery == super::Delivery::ExactlyOnce && !config.routes.is_empty() {
        return Err(invalid(
            "kafka.delivery",
            "\"exactly-once\" covers Kafka only and cannot be combined with [[routes]] to \
             webhook sinks: use \"at-least-once\" (webhook receivers de-duplicate on the \
             Idempotency-Key), or run the webhook routes in a relay of their own",
        ));
    }
    if let Some(problem) = topic_name_problem(&kafka.checkpoint_topic) {
        return Err(invalid(
            "kafka.checkpoint_topic",
            format!("not a valid Kafka topic name: {problem} (use 1 to 249 of [a-zA-Z0-9._-])"),
        ));
    }
    if kafka.checkpoint_topic == kafka.dlq_topic || kafka.checkpoint_topic == kafka.topic {
        return Err(invalid(
            "kafka.checkpoint_topic",
            "must differ from kafka.topic and kafka.dlq_topic: it is a compacted topic of \
             the relay's own",
        ));
    }
    let id = &kafka.transactional_id;
    if !id.is_empty()
        && (id.len() > MAX_TRANSACTIONAL_ID_LEN || !id.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err(invalid(
            "kafka.transactional_id",
            format!(
                "must be 1 to {MAX_TRANSACTIONAL_ID_LEN} printable ASCII characters without \
                 spaces, or left out for \"outbox-relay.<slot>\""
            ),
        ));
    }
    for (field, value, range, what) in [
        (
            "kafka.transaction_max_events",
            kafka.transaction_max_events,
            TRANSACTION_MAX_EVENTS,
            "records",
        ),
        (
            "kafka.transaction_max_bytes",
            kafka.transaction_max_bytes,
            TRANSACTION_MAX_BYTES,
            "bytes",
        ),
        (
            "kafka.transaction_max_ms",
            kafka.transaction_max_ms,
            TRANSACTION_MAX_MS,
            "milliseconds: read_committed consumers see nothing of a transaction until \
             it commits",
        ),
        (
            "kafka.transaction_quiet_ms",
            kafka.transaction_quiet_ms,
            TRANSACTION_QUIET_MS,
            "milliseconds of a quiet stream before the open transaction commits",
        ),
    ] {
        if !range.contains(&value) {
            return Err(invalid(
                field,
                format!(
                    "must be between {} and {} ({what})",
                    range.start(),
                    range.end()
                ),
            ));
        }
    }
    if kafka.transaction_timeout_ms != 0
        && !(kafka.least_transaction_timeout_ms()..=MAX_TRANSACTION_TIMEOUT_MS)
            .contains(&kafka.transaction_timeout_ms)
    {
        return Err(invalid(
            "kafka.transaction_timeout_ms",
            format!(
                "must be 0 (derived) or between {} (kafka.message_timeout_ms plus twice \
                 kafka.transaction_max_ms) and {MAX_TRANSACTION_TIMEOUT_MS} (the brokers' \
                 default transaction.max.timeout.ms)",
                kafka.least_transaction_timeout_ms()
            ),
        ));
    }
    if kafka.delivery == Delivery::ExactlyOnce
        && kafka.message_timeout_ms > MAX_MESSAGE_TIMEOUT_EXACTLY_ONCE_MS
    {
        return Err(invalid(
            "kafka.message_timeout_ms",
            format!(
                "must be at most {MAX_MESSAGE_TIMEOUT_EXACTLY_ONCE_MS} with delivery = \
                 \"exactly-once\": the transaction timeout must cover it, and brokers cap \
                 transaction timeouts at transaction.max.timeout.ms (15 minutes by default)"
            ),
        ));
    }
    Ok(())
}

/// Why the relay refuses a pass-through property, or `None` if it may pass.
/// The names are librdkafka's, aliases included.
pub(super) fn property_refusal(name: &str, value: &str) -> Option<String> {
    let name = name.to_ascii_lowercase();
    let owned =
        |key: &str| format!("set by the relay from {key}; set that instead of this property");
    let reason = match name.as_str() {
        "bootstrap.servers" | "metadata.broker.list" => owned("kafka.brokers"),
        "linger.ms" | "queue.buffering.max.ms" => owned("kafka.linger_ms"),
        "message.timeout.ms" | "delivery.timeout.ms" => owned("kafka.message_timeout_ms"),
        "queue.buffering.max.messages" => owned("kafka.queue_max_messages"),
        "acks" | "request.required.acks" => {
            "set by the relay (acks=all is required for the idempotent producer); remove it".into()
        }
        "enable.idempotence" => "set by the relay (the idempotent producer keeps broker retries \
             from duplicating or reordering events); remove it"
            .into(),
        "enable.gapless.guarantee" => "set by the relay (a record that fails for good must \
             stop the producer, or later records of its aggregate overtake it when the relay \
             replays); remove it"
            .into(),
        "partitioner" => "set by the relay (murmur2_random, the Java client's \
             partitioner, so every producer of a topic sends a key to the same partition); \
             remove it"
            .into(),
        "transactional.id" | "transaction.timeout.ms" => "set by the relay in exactly-once \
             mode, where a transaction carries the relay's position: set kafka.delivery = \
             \"exactly-once\" (and kafka.transactional_id to choose the id) instead of this \
             property"
            .into(),
        "max.in.flight.requests.per.connection" | "max.in.flight" => {
            return match value.trim().parse::<u64>() {
                Ok(n) if (1..=MAX_IN_FLIGHT_IDEMPOTENT).contains(&n) => None,
                _ => Some(
                    "must be an integer from 1 to 5: the idempotent producer keeps order \
                     only with at most 5 requests in flight"
                        .into(),
                ),
            };
        }
        "retries" | "message.send.max.retries" => {
            return match value.trim().parse::<u64>() {
                Ok(n) if n >= 1 => None,
                _ => Some(
                    "must be a positive integer: the idempotent producer retries, and a \
                     message.timeout.ms bounds the retrying"
                        .into(),
                ),
            };
        }
        _ if is_consumer_property(&name) => {
            "a consumer property; the relay only produces, so it would have no effect; remove it"
                .into()
        }
        _ => return None,
    };
    Some(reason)
}

/// Consumer-only librdkafka properties (CONFIGURATION.md, scope `C`).
fn is_consumer_property(name: &str) -> bool {
    const CONSUMER: &[&str] = &[
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.protocol.type",
        "group.remote.assignor",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "coordinator.query.interval.ms",
        "max.poll.interval.ms",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "isolation.level",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "enable.partition.eof",
        "check.crcs",
        "consume.callback.max.messages",
        "offset.store.method",
    ];
    CONSUMER.contains(&name) || name.starts_with("fetch.")
}

/// Each pass-through property: first the relay's own policy (a property it
/// sets itself keeps the message naming the key to set instead), then
/// librdkafka's own check of the name and the value, which would otherwise
/// fail only when the producer is built, once the relay is active.
fn validate_properties(config: &Config) -> Result<(), ConfigError> {
    for (name, value) in &config.kafka.properties {
        // Quoted as TOML spells a dotted key, so the field can be found
        // (and copied) as written.
        let field = format!("kafka.properties.{name:?}");
        if name.trim().is_empty() {
            return Err(invalid(field, "the property name must not be empty"));
        }
        if let Some(reason) = property_refusal(name, value) {
            return Err(invalid(field, reason));
        }
        if let Some(reason) = crate::sink::property_problem(name, value) {
            return Err(invalid(
                field,
                format!(
                    "librdkafka refuses it: {reason}; fix the name or the value (librdkafka's \
                     CONFIGURATION.md lists every property and its values), or remove it"
                ),
            ));
        }
    }
    Ok(())
}

/// What is wrong with `name` as a replication slot name, by PostgreSQL's
/// rule (`[a-z0-9_]`, at most NAMEDATALEN - 1 bytes), or `None`. A slot
/// name is no secret: the text quotes what is wrong with it.
fn slot_name_problem(name: &str) -> Option<String> {
    const RULE: &str = "PostgreSQL allows only lowercase letters, digits and underscores in a \
                        replication slot name, at most 63 bytes";
    if name.is_empty() {
        return Some(format!(
            "required: the name of the relay's logical replication slot ({RULE})"
        ));
    }
    if name.len() > MAX_IDENTIFIER_LEN {
        return Some(format!(
            "is {} bytes long: {RULE}; choose a shorter name",
            name.len()
        ));
    }
    let bad: String = name
        .chars()
        .filter(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
        .collect();
    if bad.is_empty() {
        return None;
    }
    let fixed: String = name
        .chars()
        .map(|c| match c {
            'A'..='Z' => c.to_ascii_lowercase(),
            c if c.is_ascii_alphanumeric() || c == '_' => c,
            _ => '_',
        })
        .collect();
    Some(format!(
        "{name:?} has characters a slot name cannot have ({bad:?}): {RULE}; e.g. {fixed:?}"
    ))
}

/// `schema.name` or `name`, each part a plausible identifier.
fn is_table_name(table: &str) -> bool {
    let parts: Vec<&str> = table.split('.').collect();
    parts.len() <= 2
        && parts.iter().all(|p| {
            (1..=MAX_IDENTIFIER_LEN).contains(&p.len())
                && !p.contains(|c: char| c.is_whitespace() || c == '"')
        })
}
