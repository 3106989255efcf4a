//! The events of the Kafka side: reaching the brokers, dead letters, and
//! exactly-once delivery's checkpoints and transactions.

use std::fmt::Display;
use std::time::Duration;

use pgoutput::lsn::Lsn;

use super::{event, say};
use crate::metrics as m;

/// No Kafka broker answers: events wait in the relay. Once per incident
/// (the client's reachability decides; `sink::reach`).
pub struct BrokersUnreachable<'a> {
    pub brokers: &'a str,
    pub reason: &'a str,
}
event!(BrokersUnreachable<'_>, "brokers_unreachable", WARN, Fault);

impl BrokersUnreachable<'_> {
    pub fn emit(&self) {
        let (brokers, reason) = (self.brokers, self.reason);
        say!(
            brokers,
            "cannot reach any Kafka broker at {brokers} ({reason}): events wait in the relay \
             until one answers; check kafka.brokers and the network"
        );
    }
}

/// Still no Kafka broker answers (a reminder while it lasts).
pub struct BrokersStillUnreachable<'a> {
    pub brokers: &'a str,
    pub down_for: Duration,
    pub errors: u64,
    pub reason: &'a str,
}
event!(
    BrokersStillUnreachable<'_>,
    "brokers_still_unreachable",
    WARN,
    Notice
);

impl BrokersStillUnreachable<'_> {
    pub fn emit(&self) {
        let (brokers, errors, reason) = (self.brokers, self.errors, self.reason);
        say!(
            brokers,
            errors,
            "still cannot reach any Kafka broker at {brokers} after {} s ({errors} client \
             errors since the last line; last: {reason}); events wait",
            self.down_for.as_secs()
        );
    }
}

/// The Kafka client meets errors but some broker answers.
pub struct KafkaClientDegraded<'a> {
    pub brokers: &'a str,
    pub errors: u64,
    pub reason: &'a str,
}
event!(
    KafkaClientDegraded<'_>,
    "kafka_client_degraded",
    WARN,
    Notice
);

impl KafkaClientDegraded<'_> {
    pub fn emit(&self) {
        let (brokers, errors, reason) = (self.brokers, self.errors, self.reason);
        say!(brokers, errors, "Kafka client degraded, retrying: {reason}");
    }
}

/// The Kafka client is still degraded (a reminder while it lasts).
pub struct KafkaClientStillDegraded<'a> {
    pub brokers: &'a str,
    pub for_: Duration,
    pub errors: u64,
    pub reason: &'a str,
}
event!(
    KafkaClientStillDegraded<'_>,
    "kafka_client_still_degraded",
    WARN,
    Notice
);

impl KafkaClientStillDegraded<'_> {
    pub fn emit(&self) {
        let (brokers, errors, reason) = (self.brokers, self.errors, self.reason);
        say!(
            brokers,
            errors,
            "Kafka client still degraded after {} s, retrying ({errors} client errors since \
             the last line; last: {reason})",
            self.for_.as_secs()
        );
    }
}

/// A Kafka broker answers again after none did.
pub struct BrokerAnswers<'a> {
    pub brokers: &'a str,
    pub after: Duration,
    pub errors: u64,
}
event!(BrokerAnswers<'_>, "broker_answers", INFO, Lifecycle);

impl BrokerAnswers<'_> {
    pub fn emit(&self) {
        let (brokers, errors) = (self.brokers, self.errors);
        say!(
            brokers,
            errors,
            "a Kafka broker answers again after {} s unreachable ({errors} client errors \
             meanwhile)",
            self.after.as_secs()
        );
    }
}

/// The Kafka client met an error a person must act on (credentials or a
/// setting refused); connection trouble is said by the reachability
/// events instead, and a fatal producer error by the retry that follows.
pub struct KafkaClientError<'a> {
    pub error: &'a dyn Display,
    pub reason: &'a str,
}
event!(KafkaClientError<'_>, "kafka_client_error", ERROR, Notice);

impl KafkaClientError<'_> {
    pub fn emit(&self) {
        let (error, reason) = (self.error, self.reason);
        say!("librdkafka: {error}: {reason}");
    }
}

/// The broker acknowledged a dead letter: where it is and why, never the
/// payload. Counted by the producer's acknowledgement counters (their
/// handles are kept per reason, off the hot path's lookups); the emitter
/// limits the lines with a [`super::Burst`], `not_logged` saying how many
/// before this one got none.
pub struct DeadLettered<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub event_id: Option<&'a str>,
    pub reason: &'a str,
    pub original_topic: Option<&'a str>,
    pub lsn: Option<&'a str>,
    pub not_logged: u64,
}
event!(DeadLettered<'_>, "dead_lettered", WARN, Fault);

impl DeadLettered<'_> {
    pub fn emit(&self) {
        let (topic, partition, offset, event_id, reason, original_topic, lsn) = (
            self.topic,
            self.partition,
            self.offset,
            self.event_id,
            self.reason,
            self.original_topic,
            self.lsn,
        );
        let not_logged = self.not_logged;
        if not_logged == 0 {
            say!(
                topic,
                partition,
                offset,
                event_id,
                reason,
                original_topic,
                lsn,
                "an outbox event went to the dead-letter topic; the stream goes on \
                 (outbox-relay dead list shows it with its reason)"
            );
        } else {
            say!(
                topic,
                partition,
                offset,
                event_id,
                reason,
                original_topic,
                lsn,
                not_logged,
                "an outbox event went to the dead-letter topic; the stream goes on \
                 (outbox-relay dead list shows it with its reason; {not_logged} dead letters \
                 before it were not logged, outbox_relay_events_dead_lettered_total counts them)"
            );
        }
    }
}

/// Exactly-once: no checkpoint of this relay on the checkpoint topic.
pub struct NoCheckpoint<'a> {
    pub topic: &'a str,
    pub key: &'a str,
}
event!(NoCheckpoint<'_>, "no_checkpoint", INFO, Lifecycle);

impl NoCheckpoint<'_> {
    pub fn emit(&self) {
        say!(
            topic = self.topic,
            key = self.key,
            "no checkpoint of this relay found: starting from the slot's position. Expected on \
             the first start on a checkpoint topic; otherwise (the relay's checkpoints deleted \
             from the topic) transactions already committed to Kafka above the slot's position \
             are written again, once"
        );
    }
}

/// Exactly-once: the session resumes from the last committed checkpoint.
pub struct CheckpointResumed<'a> {
    pub checkpoint: Lsn,
    pub topic: &'a str,
}
event!(CheckpointResumed<'_>, "checkpoint_resumed", INFO, Lifecycle);

impl CheckpointResumed<'_> {
    /// Sets [`m::CHECKPOINT_LSN`] and logs the line.
    pub fn emit(&self) {
        metrics::gauge!(m::CHECKPOINT_LSN).set(self.checkpoint.as_u64() as f64);
        say!(
            checkpoint = %self.checkpoint,
            topic = self.topic,
            "resuming from the last committed checkpoint"
        );
    }
}

/// Exactly-once: the last checkpoint record cannot be decoded.
pub struct CheckpointUnreadable<'a> {
    pub topic: &'a str,
    pub key: &'a str,
    pub error: &'a dyn Display,
}
event!(
    CheckpointUnreadable<'_>,
    "checkpoint_unreadable",
    WARN,
    Notice
);

impl CheckpointUnreadable<'_> {
    pub fn emit(&self) {
        say!(
            topic = self.topic,
            key = self.key,
            error = %self.error,
            "the last checkpoint record cannot be read: ignoring it and starting from the slot's \
             position (transactions already in Kafka above it are written again)"
        );
    }
}

/// Exactly-once: the checkpoint is another cluster's.
pub struct CheckpointOtherCluster<'a> {
    pub topic: &'a str,
    pub key: &'a str,
    pub checkpoint_server: &'a dyn Display,
    pub server: &'a dyn Display,
}
event!(
    CheckpointOtherCluster<'_>,
    "checkpoint_other_cluster",
    WARN,
    Notice
);

impl CheckpointOtherCluster<'_> {
    pub fn emit(&self) {
        say!(
            topic = self.topic,
            key = self.key,
            checkpoint_server = %self.checkpoint_server,
            server = %self.server,
            "the checkpoint belongs to another PostgreSQL cluster (another system identifier): \
             ignoring it and starting from the slot's position"
        );
    }
}

/// Exactly-once: the checkpoint is another slot's (a transactional id
/// shared by two relays).
pub struct CheckpointOtherSlot<'a> {
    pub topic: &'a str,
    pub key: &'a str,
    pub checkpoint_slot: &'a dyn Display,
    pub slot: &'a str,
}
event!(
    CheckpointOtherSlot<'_>,
    "checkpoint_other_slot",
    WARN,
    Notice
);

impl CheckpointOtherSlot<'_> {
    pub fn emit(&self) {
        say!(
            topic = self.topic,
            key = self.key,
            checkpoint_slot = %self.checkpoint_slot,
            slot = self.slot,
            "the checkpoint was written for another slot with the same transactional id: \
             ignoring it. Give each relay its own kafka.transactional_id"
        );
    }
}

/// Exactly-once: the last checkpoint is above the server's WAL (a
/// restored database). Counted at every session that meets it
/// ([`Self::count`]), logged once per checkpoint by the emitter.
pub struct CheckpointAboveServerWal<'a> {
    pub topic: &'a str,
    pub key: &'a str,
    pub checkpoint: Lsn,
    pub server_wal: Lsn,
    pub server: &'a dyn Display,
}
event!(
    CheckpointAboveServerWal<'_>,
    "checkpoint_above_server_wal",
    ERROR,
    Fault
);

impl CheckpointAboveServerWal<'_> {
    /// Counts it in [`m::POSITIONS_AHEAD`], logged or not.
    pub fn count() {
        metrics::counter!(m::POSITIONS_AHEAD).increment(1);
    }

    pub fn emit(&self) {
        say!(
            topic = self.topic,
            key = self.key,
            checkpoint = %self.checkpoint,
            server_wal = %self.server_wal,
            server = %self.server,
            "the last checkpoint is above the server's WAL position: the database was restored \
             from a backup or snapshot (or the checkpoint topic belongs to another database \
             with this system identifier). Ignoring it and starting from the slot's position. \
             Kafka may hold events of transactions the database no longer has, up to the \
             checkpoint: compare the topics with the outbox before their consumers act on them"
        );
    }
}

/// Exactly-once: the checkpoint topic's policy could not be checked, or it
/// is also deleted by retention (`warning` says which, and the fix).
pub struct CheckpointTopicWarning<'a> {
    pub topic: &'a str,
    pub warning: &'a str,
}
event!(
    CheckpointTopicWarning<'_>,
    "checkpoint_topic_warning",
    WARN,
    Notice
);

impl CheckpointTopicWarning<'_> {
    pub fn emit(&self) {
        let warning = self.warning;
        say!(topic = self.topic, "{warning}");
    }
}

/// Exactly-once: a PostgreSQL transaction streams for longer than half the
/// Kafka transaction timeout: the part sent so far is committed.
pub struct PartialTransactionCommitted {
    pub commit_lsn: Lsn,
    pub events: u64,
}
event!(
    PartialTransactionCommitted,
    "partial_transaction_committed",
    INFO,
    Lifecycle
);

impl PartialTransactionCommitted {
    pub fn emit(&self) {
        say!(
            commit_lsn = %self.commit_lsn,
            events = self.events,
            "a PostgreSQL transaction is taking longer to stream than half of the Kafka \
             transaction timeout: committing the part of it sent so far"
        );
    }
}
