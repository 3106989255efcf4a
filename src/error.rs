//! The one classification every error of the relay gets: what the outer
//! loop does about it.
//!
//! Each module keeps its own typed error (`PgError`, `SinkError`,
//! `DeliveryError`, `SessionError`, `ConfigError`); each of them answers
//! `kind()` with an [`ErrorKind`], so the relay decides from one method,
//! never by matching another module's variants.

/// What the relay does about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Reconnect or rebuild with backoff and resume from the confirmed
    /// position; nothing is lost (the slot re-sends everything after it).
    Transient,
    /// Another process streams from the slot: wait and retry, never read
    /// concurrently.
    SlotBusy,
    /// Retrying cannot help; a person has to act on the message.
    Fatal,
}

/// Why the relay stopped for good, by a stable name: the `cause` field of
/// its `fatal_error` line (`cause=slot_missing`), so that an alert or a
/// runbook tells one fatal error from another by a name that never
/// changes, not by the wording of the message, which may.
///
/// Each typed error answers `cause()` beside `kind()`; the names are snake
/// case and never reworded (a new cause gets a new name).
macro_rules! causes {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)+) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Cause {
            $($(#[$doc])* $variant,)+
        }

        impl Cause {
            /// Every cause, for the docs check of docs/operations.md.
            pub const ALL: &'static [Cause] = &[$(Cause::$variant,)+];

            /// The stable name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Cause::$variant => $name,)+
                }
            }
        }
    };
}

causes! {
    // PostgreSQL: reaching it and logging in.
    /// The conninfo cannot be read, or a slot name is not one.
    PostgresSettingsInvalid = "postgres_settings_invalid",
    /// TLS with PostgreSQL failed or cannot be had as `sslmode` asks.
    PostgresTlsFailed = "postgres_tls_failed",
    /// The server refused the role's password (or channel binding), or
    /// asked for one the conninfo lacks, or for a method the relay lacks.
    PostgresAuthenticationFailed = "postgres_authentication_failed",
    /// The relay's role lacks `REPLICATION`.
    ReplicationPrivilegeMissing = "replication_privilege_missing",
    /// The conninfo's database does not exist.
    DatabaseMissing = "database_missing",
    /// PostgreSQL cannot be reached, or dropped the connection.
    PostgresUnreachable = "postgres_unreachable",
    /// PostgreSQL refused a statement (its SQLSTATE is in the line).
    PostgresRefused = "postgres_refused",
    /// PostgreSQL said something the relay cannot read.
    PostgresProtocolViolation = "postgres_protocol_violation",
    // The slot and the publication.
    /// The replication slot does not exist.
    SlotMissing = "slot_missing",
    /// The slot is invalidated (`max_slot_wal_keep_size`, a conflict).
    SlotInvalidated = "slot_invalidated",
    /// The slot cannot be read as the relay needs (not pgoutput, another
    /// database, two-phase).
    SlotUnusable = "slot_unusable",
    /// Another process reads the slot.
    SlotInUse = "slot_in_use",
    /// The publication is missing, does not publish inserts, or lacks the
    /// outbox table.
    PublicationUnusable = "publication_unusable",
    /// The outbox table does not exist.
    OutboxTableMissing = "outbox_table_missing",
    /// The stream cannot be decoded or broke transaction framing.
    StreamUndecodable = "stream_undecodable",
    /// The relay's own acknowledgement bookkeeping refused an operation: a
    /// bug, to be reported.
    InternalError = "internal_error",
    // Kafka.
    /// The producer (or the checkpoint reader) could not be built from
    /// `kafka.brokers` and `kafka.properties`.
    KafkaClientUnbuildable = "kafka_client_unbuildable",
    /// The broker refused the relay's SASL credentials.
    KafkaAuthenticationFailed = "kafka_authentication_failed",
    /// An ACL refuses the relay a topic or a cluster operation.
    KafkaNotAuthorized = "kafka_not_authorized",
    /// A record was refused and `on_unroutable = "stop"` (or it was a
    /// dead letter the dead-letter topic refused).
    RecordRefused = "record_refused",
    /// A delivery failed for good (the producer's own fatal error).
    DeliveryFailed = "delivery_failed",
    /// Another producer with the same `transactional.id` fenced this one.
    TransactionalIdFenced = "transactional_id_fenced",
    /// The transactional producer failed for good.
    TransactionalProducerFailed = "transactional_producer_failed",
    /// The checkpoint topic is missing, not compacted, has more than one
    /// partition, or cannot be read.
    CheckpointTopicUnusable = "checkpoint_topic_unusable",
    // The relay's own tables, locks and settings.
    /// The relay lock cannot be used on this server.
    RelayLockUnusable = "relay_lock_unusable",
    /// The relay lock was lost in a session (never fatal: the relay stands
    /// by or takes it again).
    RelayLockLost = "relay_lock_lost",
    /// The webhook delivery table is missing, outdated or not permitted.
    DeliveryTableUnusable = "delivery_table_unusable",
    /// The parking table is missing or not permitted.
    ParkingTableUnusable = "parking_table_unusable",
    /// A webhook sink could not be set up.
    WebhookSinkUnusable = "webhook_sink_unusable",
    /// A contract's schema cannot be had from the schema registry.
    ContractsUnresolved = "contracts_unresolved",
    /// The process could not set itself up (the metrics endpoint, the
    /// runtime).
    SetupFailed = "setup_failed",
}

#[cfg(test)]
mod tests {
    use super::Cause;

    #[test]
    fn cause_names_are_distinct_snake_case() {
        let mut names: Vec<&str> = Cause::ALL.iter().map(|c| c.name()).collect();
        for name in &names {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}"
            );
        }
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "two causes share a name");
    }
}
