//! What the broker's refusals mean, classified once.
//!
//! Every error librdkafka gives for a record (a delivery report or a refused
//! `send`), for the producer as a whole (its fatal error) or for the client
//! (the error callback: SASL) goes through [`classify`]: too large
//! (dead-lettered), unauthorized (always fatal: nothing gets through until
//! someone fixes credentials or ACLs), unroutable (the topic is missing, a
//! policy or the broker's validation refuses the record:
//! `kafka.on_unroutable` decides), or anything else, which the relay meets by
//! rebuilding the producer and replaying from the confirmed position ("a
//! failed delivery rewinds, it never skips", docs/design.md). A refusal
//! carries its topic and the fix ([`Refused`]); any other failure becomes a
//! [`BrokerFailure`].
//!
//! Invariant: [`DeliveryError`] holds no rdkafka type. The session machine
//! receives it and is pure (docs/design.md, "Layers"), so librdkafka's
//! error is converted here, once, where the sink meets the client; the
//! machine and its tests see only what the relay acts on.

use std::fmt;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use serde::{Deserialize, Serialize};

use crate::error::{Cause, ErrorKind};

/// What a refusal means for the relay; see [`classify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// Larger than the producer's `message.max.bytes` or the topic's
    /// `max.message.bytes`.
    TooLarge,
    /// The topic does not exist and the broker does not create it.
    TopicMissing,
    /// A broker or topic policy refused the record.
    PolicyViolation,
    /// The broker's validation refused the record (e.g. no key on a
    /// compacted topic).
    InvalidRecord,
    /// The relay's principal may not write to the topic.
    TopicUnauthorized,
    /// The relay's principal lacks a cluster permission (IDEMPOTENT_WRITE on
    /// brokers before Kafka 2.8).
    ClusterUnauthorized,
    /// The broker refused the relay's SASL credentials.
    AuthenticationFailed,
}

/// How the relay meets a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalClass {
    /// The record goes to the dead-letter topic (or, if it is a dead letter,
    /// goes there without its payload).
    TooLarge,
    /// No record of this kind can reach its topic until someone acts;
    /// [`OnUnroutable`] decides between stopping and dead-lettering.
    Unroutable,
    /// Credentials or permissions: always fatal, since retrying only hides
    /// the problem and nothing gets through.
    Unauthorized,
}

impl RefusalKind {
    pub fn class(self) -> RefusalClass {
        match self {
            RefusalKind::TooLarge => RefusalClass::TooLarge,
            RefusalKind::TopicMissing
            | RefusalKind::PolicyViolation
            | RefusalKind::InvalidRecord => RefusalClass::Unroutable,
            RefusalKind::TopicUnauthorized
            | RefusalKind::ClusterUnauthorized
            | RefusalKind::AuthenticationFailed => RefusalClass::Unauthorized,
        }
    }

    /// A stable label for the `dlq_reason_code` header.
    pub fn reason_code(self) -> &'static str {
        match self {
            RefusalKind::TooLarge => "too_large",
            RefusalKind::TopicMissing => "topic_missing",
            RefusalKind::PolicyViolation => "policy_violation",
            RefusalKind::InvalidRecord => "invalid_record",
            RefusalKind::TopicUnauthorized => "topic_unauthorized",
            RefusalKind::ClusterUnauthorized => "cluster_unauthorized",
            RefusalKind::AuthenticationFailed => "authentication_failed",
        }
    }
}

/// Classifies an error librdkafka reports for a record (delivery report or
/// refused `send`), for the producer as a whole (its fatal error) or for the
/// client (the error callback). `None`: transient or unknown; the relay
/// rebuilds the producer and replays ("a failed delivery rewinds, it never skips" in docs/design.md).
///
/// Left out on purpose: `UNKNOWN_TOPIC_OR_PART` answered to a Produce request
/// (librdkafka refreshes metadata and retries it; a topic that really is
/// missing then fails records with the local `_UNKNOWN_TOPIC`, classified
/// here) and `CORRUPT_MESSAGE` (a checksum failure in transit, retried).
pub fn classify(code: RDKafkaErrorCode) -> Option<RefusalKind> {
    use RDKafkaErrorCode as C;
    Some(match code {
        C::MessageSizeTooLarge => RefusalKind::TooLarge,
        C::UnknownTopic | C::UnknownTopicOrPartition => RefusalKind::TopicMissing,
        C::PolicyViolation => RefusalKind::PolicyViolation,
        C::InvalidRecord => RefusalKind::InvalidRecord,
        C::TopicAuthorizationFailed => RefusalKind::TopicUnauthorized,
        C::ClusterAuthorizationFailed => RefusalKind::ClusterUnauthorized,
        C::Authentication | C::SaslAuthenticationFailed => RefusalKind::AuthenticationFailed,
        _ => return None,
    })
}

/// [`classify`] for a [`KafkaError`] that carries a code.
pub fn classify_error(err: &KafkaError) -> Option<RefusalKind> {
    err.rdkafka_error_code().and_then(classify)
}

/// What the relay reads from a failure that is not a refusal: the metric
/// label of a failed delivery tells a timed-out record from the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// No answer for the record within `message.timeout.ms`.
    TimedOut,
    /// Anything else: a broker or network error, a fatal producer, a
    /// transaction that could not begin.
    Other,
}

/// A failure of the broker or the client that a new producer and a replay
/// may cure, as the relay keeps it: librdkafka's error, read once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct BrokerFailure {
    pub kind: FailureKind,
    /// librdkafka's words, as its error prints them (code and reason).
    pub detail: String,
}

impl BrokerFailure {
    /// The relay's reading of a client error.
    pub(super) fn of(err: &KafkaError) -> Self {
        let kind = match err.rdkafka_error_code() {
            Some(RDKafkaErrorCode::MessageTimedOut) => FailureKind::TimedOut,
            _ => FailureKind::Other,
        };
        BrokerFailure {
            kind,
            detail: err.to_string(),
        }
    }
}

/// `kafka.on_unroutable`: what to do with an event no broker will take for
/// its topic (topic missing with auto-creation off, policy violation,
/// invalid record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnUnroutable {
    /// Stop with an error naming the topic and the fix: nothing goes where
    /// nobody looks, and the slot keeps the event.
    #[default]
    Stop,
    /// Send the event to the dead-letter topic with the reason and go on.
    DeadLetter,
}

impl OnUnroutable {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnUnroutable::Stop => "stop",
            OnUnroutable::DeadLetter => "dead-letter",
        }
    }
}

/// A refusal, with what the relay knows about it. Its `Display` says what
/// happened and how to fix it; [`Refused::reason`] only what happened (the
/// dead-letter reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub kind: RefusalKind,
    /// The refused record's topic, when there is one.
    pub topic: Option<String>,
    /// True when the topic is the dead-letter topic: there is nowhere else
    /// to send the record, so no refusal of it is ever dead-lettered.
    pub dead_letter_topic: bool,
    /// librdkafka's or the broker's words.
    pub detail: String,
}

impl Refused {
    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> Cause {
        match self.kind {
            RefusalKind::TopicUnauthorized | RefusalKind::ClusterUnauthorized => {
                Cause::KafkaNotAuthorized
            }
            RefusalKind::AuthenticationFailed => Cause::KafkaAuthenticationFailed,
            RefusalKind::TooLarge
            | RefusalKind::TopicMissing
            | RefusalKind::PolicyViolation
            | RefusalKind::InvalidRecord => Cause::RecordRefused,
        }
    }

    /// What happened, without the fix.
    pub fn reason(&self) -> String {
        let topic = match (&self.topic, self.dead_letter_topic) {
            (Some(t), true) => format!("the dead-letter topic \"{t}\""),
            (Some(t), false) => format!("topic \"{t}\""),
            (None, _) => "its topic".to_owned(),
        };
        let detail = &self.detail;
        match self.kind {
            RefusalKind::TooLarge => format!("the record is too large for {topic} ({detail})"),
            RefusalKind::TopicMissing => format!(
                "{topic} does not exist and the broker does not create topics automatically ({detail})"
            ),
            RefusalKind::PolicyViolation => {
                format!("a broker policy refused the record for {topic} ({detail})")
            }
            RefusalKind::InvalidRecord => {
                format!("the broker refused the record for {topic} as invalid ({detail})")
            }
            RefusalKind::TopicUnauthorized => {
                format!("the relay is not authorized to write to {topic} ({detail})")
            }
            RefusalKind::ClusterUnauthorized => match &self.topic {
                Some(_) => format!(
                    "the broker refused the relay a cluster permission writing to {topic} ({detail})"
                ),
                None => format!("the broker refused the relay a cluster permission ({detail})"),
            },
            RefusalKind::AuthenticationFailed => {
                format!("Kafka refused the relay's SASL credentials ({detail})")
            }
        }
    }

    /// How to fix it.
    fn fix(&self) -> String {
        let topic = self.topic.as_deref().unwrap_or("<topic>");
        let or_dead_letter = if self.dead_letter_topic {
            ""
        } else {
            " (or set kafka.on_unroutable = \"dead-letter\" to send such events to the dead-letter topic and go on)"
        };
        match self.kind {
            RefusalKind::TooLarge => {
                "raise the topic's max.message.bytes or the producer's message.max.bytes".to_owned()
            }
            RefusalKind::TopicMissing => format!(
                "create it: kafka-topics.sh --bootstrap-server <broker> --create --topic {topic}{or_dead_letter}"
            ),
            RefusalKind::PolicyViolation => format!(
                "change the topic's configuration or the broker's policy{or_dead_letter}"
            ),
            RefusalKind::InvalidRecord => format!(
                "check the topic's configuration (a compacted topic needs a key, for one){or_dead_letter}"
            ),
            RefusalKind::TopicUnauthorized => format!(
                "grant the relay's principal WRITE on it (DESCRIBE comes with it): kafka-acls.sh --bootstrap-server <broker> --add --allow-principal User:<relay> --operation Write --topic {topic}"
            ),
            RefusalKind::ClusterUnauthorized => "brokers before Kafka 2.8 require IDEMPOTENT_WRITE on the cluster for the idempotent producer: kafka-acls.sh --bootstrap-server <broker> --add --allow-principal User:<relay> --operation IdempotentWrite --cluster".to_owned(),
            RefusalKind::AuthenticationFailed => "check security.protocol, sasl.mechanisms, sasl.username and sasl.password under [kafka.properties] against the broker's listener".to_owned(),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.reason(), self.fix())
    }
}

impl std::error::Error for Refused {}

/// Why the broker did not take a record.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeliveryError {
    /// Refused for a reason retrying cannot cure ([`classify`]): too large,
    /// unroutable or unauthorized.
    #[error("{0}")]
    Refused(Refused),
    /// Anything else (timeout, fatal idempotence error...): the relay stops
    /// confirming, rebuilds the producer and replays from the last confirmed
    /// LSN ("a failed delivery rewinds, it never skips" in docs/design.md).
    #[error("delivery failed: {0}")]
    Failed(BrokerFailure),
    /// The producer hit a fatal error (`rd_kafka_fatal_error`: say, an
    /// idempotence sequence it can no longer vouch for) and refuses every
    /// record from now on. Carries librdkafka's reason, which the bare
    /// `_FATAL` code of the refused record does not tell.
    #[error("the producer hit a fatal error: {0}")]
    ProducerFatal(String),
}

impl DeliveryError {
    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> Cause {
        match self {
            DeliveryError::Refused(r) => r.cause(),
            DeliveryError::Failed(_) | DeliveryError::ProducerFatal(_) => Cause::DeliveryFailed,
        }
    }
    /// Fatal when retrying cannot cure it (unauthorized); anything else is
    /// transient: the relay rebuilds the producer and replays. What a
    /// too-large or unroutable refusal means depends on the record and the
    /// `on_unroutable` policy, which the session decides.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DeliveryError::Refused(r) if r.kind.class() == RefusalClass::Unauthorized => {
                ErrorKind::Fatal
            }
            _ => ErrorKind::Transient,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RDKafkaErrorCode as C;

    #[test]
    fn classify_sorts_refusals_from_what_retrying_cures() {
        let cases = [
            (C::MessageSizeTooLarge, Some(RefusalKind::TooLarge)),
            (C::UnknownTopic, Some(RefusalKind::TopicMissing)),
            (C::UnknownTopicOrPartition, Some(RefusalKind::TopicMissing)),
            (C::PolicyViolation, Some(RefusalKind::PolicyViolation)),
            (C::InvalidRecord, Some(RefusalKind::InvalidRecord)),
            (
                C::TopicAuthorizationFailed,
                Some(RefusalKind::TopicUnauthorized),
            ),
            (
                C::ClusterAuthorizationFailed,
                Some(RefusalKind::ClusterUnauthorized),
            ),
            (C::Authentication, Some(RefusalKind::AuthenticationFailed)),
            (
                C::SaslAuthenticationFailed,
                Some(RefusalKind::AuthenticationFailed),
            ),
            // What librdkafka retries, or the relay meets with a replay.
            (C::MessageTimedOut, None),
            (C::NotLeaderForPartition, None),
            (C::LeaderNotAvailable, None),
            (C::RequestTimedOut, None),
            (C::NotEnoughReplicas, None),
            (C::InvalidMessage, None),
            (C::OutOfOrderSequenceNumber, None),
            (C::InvalidProducerEpoch, None),
            (C::NetworkException, None),
            (C::BrokerTransportFailure, None),
            (C::AllBrokersDown, None),
            (C::Fatal, None),
            (C::GaplessGuarantee, None),
            (C::PurgeQueue, None),
            (C::PurgeInflight, None),
            (C::QueueFull, None),
        ];
        for (code, want) in cases {
            assert_eq!(classify(code), want, "{code:?}");
        }
        let class = |c| classify(c).map(RefusalKind::class);
        assert_eq!(
            class(C::SaslAuthenticationFailed),
            Some(RefusalClass::Unauthorized)
        );
        assert_eq!(
            class(C::ClusterAuthorizationFailed),
            Some(RefusalClass::Unauthorized)
        );
        assert_eq!(
            class(C::TopicAuthorizationFailed),
            Some(RefusalClass::Unauthorized)
        );
        assert_eq!(class(C::UnknownTopic), Some(RefusalClass::Unroutable));
        assert_eq!(class(C::PolicyViolation), Some(RefusalClass::Unroutable));
        assert_eq!(class(C::InvalidRecord), Some(RefusalClass::Unroutable));
        assert_eq!(class(C::MessageSizeTooLarge), Some(RefusalClass::TooLarge));
    }

    #[test]
    fn a_broker_failure_keeps_the_clients_words_and_tells_a_timeout() {
        let timed_out = KafkaError::MessageProduction(C::MessageTimedOut);
        let failure = BrokerFailure::of(&timed_out);
        assert_eq!(failure.kind, FailureKind::TimedOut);
        // Logs and events print what they printed when they held the
        // client's error.
        assert_eq!(failure.to_string(), timed_out.to_string());
        assert_eq!(
            DeliveryError::Failed(failure).to_string(),
            format!("delivery failed: {timed_out}")
        );
        for other in [
            KafkaError::MessageProduction(C::NetworkException),
            // Only a record's own timeout is one: not a flush's.
            KafkaError::Flush(C::OperationTimedOut),
            KafkaError::Canceled,
        ] {
            let failure = BrokerFailure::of(&other);
            assert_eq!(failure.kind, FailureKind::Other, "{other}");
            assert_eq!(failure.detail, other.to_string());
        }
    }

    fn refused(kind: RefusalKind, topic: Option<&str>, dead_letter_topic: bool) -> Refused {
        Refused {
            kind,
            topic: topic.map(str::to_owned),
            dead_letter_topic,
            detail: "Broker: something".into(),
        }
    }

    #[test]
    fn refusals_name_the_topic_and_the_fix() {
        let text = refused(RefusalKind::TopicMissing, Some("orders.order"), false).to_string();
        assert!(
            text.contains("topic \"orders.order\" does not exist"),
            "{text}"
        );
        assert!(
            text.contains("kafka-topics.sh") && text.contains("--create --topic orders.order"),
            "{text}"
        );
        assert!(text.contains("on_unroutable = \"dead-letter\""), "{text}");
        assert!(text.contains("Broker: something"), "{text}");

        // For the dead-letter topic there is no dead-letter way out.
        let text = refused(RefusalKind::TopicMissing, Some("orders.dlq"), true).to_string();
        assert!(
            text.contains("the dead-letter topic \"orders.dlq\""),
            "{text}"
        );
        assert!(!text.contains("on_unroutable"), "{text}");

        let text = refused(RefusalKind::TopicUnauthorized, Some("orders.order"), false).to_string();
        assert!(
            text.contains("not authorized to write to topic \"orders.order\""),
            "{text}"
        );
        assert!(
            text.contains("kafka-acls.sh")
                && text.contains("--operation Write --topic orders.order"),
            "{text}"
        );

        let text = refused(RefusalKind::ClusterUnauthorized, None, false).to_string();
        assert!(text.contains("IdempotentWrite --cluster"), "{text}");

        let text = refused(RefusalKind::AuthenticationFailed, None, false).to_string();
        assert!(
            text.contains("SASL credentials") && text.contains("sasl.password"),
            "{text}"
        );

        for kind in [RefusalKind::PolicyViolation, RefusalKind::InvalidRecord] {
            let r = refused(kind, Some("orders.order"), false);
            let text = r.to_string();
            assert!(text.contains("\"orders.order\""), "{text}");
            assert!(text.contains("on_unroutable"), "{text}");
            // The dead-letter reason says what happened, not how to configure.
            assert!(!r.reason().contains("on_unroutable"), "{}", r.reason());
        }
        assert!(
            refused(RefusalKind::TooLarge, Some("t"), false)
                .reason()
                .contains("too large")
        );
    }
}
