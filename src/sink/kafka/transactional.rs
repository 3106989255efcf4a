//! Exactly-once delivery, the broker's side: the transactional producer.
//! The read of the last committed checkpoint is `relay/exactly_once/checkpoint_reader.rs`.
//!
//! With `kafka.delivery = "exactly-once"` the producer has a
//! `transactional.id` (stable across restarts: `outbox-relay.<slot>` unless
//! configured). [`KafkaSink::init_transactions`] registers it with the
//! transaction coordinator, which fences any older producer with the same
//! id and completes or aborts whatever transaction that one left open; only
//! then is the checkpoint topic read
//! ([`read_checkpoint`](crate::relay::exactly_once::read_checkpoint), read_committed), so the
//! checkpoint read is the last one that can ever commit under the id. The
//! session begins a transaction before its first record, and ends it with a
//! checkpoint record ([`KafkaSink::send_checkpoint`]) and
//! [`KafkaSink::commit_transaction`].
//!
//! librdkafka speaks the first transaction protocol (KIP-98), which Kafka
//! 4.x brokers still accept. A commit that fails is never retried on the
//! same producer: whatever the failure (timed out, abortable, retriable),
//! the session ends, the producer is destroyed and a new one is built,
//! whose `init_transactions` settles the outcome of the commit in doubt
//! before the checkpoint is read again. (librdkafka's maintainers advise
//! recreating the producer after a timed-out commit; it also keeps the
//! relay's recovery to one path: replay from the last committed checkpoint.)
//!
//! Invariant: the checkpoint record's delivery report goes to nobody (the
//! session's reports are about rows); its fate is the transaction's.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer};

use super::{BrokerFailure, KafkaSink, Sent, SinkError, SinkSettings};
use crate::error::Cause;

/// The transactional producer's settings, from the validated config.
#[derive(Debug, Clone)]
pub struct TransactionSettings {
    pub transactional_id: String,
    pub checkpoint_topic: String,
    /// The producer's `transaction.timeout.ms`.
    pub transaction_timeout: Duration,
}

impl TransactionSettings {
    pub(super) fn configure(&self, cfg: &mut ClientConfig) {
        cfg.set("transactional.id", &self.transactional_id).set(
            "transaction.timeout.ms",
            self.transaction_timeout.as_millis().to_string(),
        );
        connect_at_once(cfg);
    }
}

/// librdkafka's property for connecting to every broker as soon as the
/// cluster's metadata names it, rather than when a request first needs it.
pub const SPARSE_CONNECTIONS: &str = "enable.sparse.connections";

/// The exactly-once clients (the transactional producer, the checkpoint
/// reader) connect to every broker at once, unless `kafka.properties` says
/// otherwise. With librdkafka's sparse connections (its default) a client
/// connects through the bootstrap address, learns the brokers, drops that
/// connection and connects to a broker again only when a request needs
/// one. A transactional producer asking for its coordinator in that gap
/// finds no broker up, and when the bootstrap connection is still counted
/// as up at that instant librdkafka schedules no connection: the question
/// waits for its 500 ms coordinator timer (half the starts, measured in
/// benches/cpu-notes.md). The checkpoint reader's first metadata request,
/// sent on the bootstrap connection as it closes, waits the same way for
/// its retry. Connected at once, the producer has its id and the reader its
/// answer a few milliseconds after the broker's first metadata answer. The
/// cost is a connection to each broker of the cluster, which a producer
/// writing to partitions led by every broker holds anyway.
pub(crate) fn connect_at_once(cfg: &mut ClientConfig) {
    if cfg.get(SPARSE_CONNECTIONS).is_none() {
        cfg.set(SPARSE_CONNECTIONS, "false");
    }
}

/// Whether a delivery result is the checkpoint record's.
pub(super) fn is_checkpoint(checkpoint_topic: Option<&str>, result: &DeliveryResult<'_>) -> bool {
    let Some(topic) = checkpoint_topic else {
        return false;
    };
    match result {
        Ok(msg) => msg.topic() == topic,
        Err((_, msg)) => msg.topic() == topic,
    }
}

/// How a transactional call failed, as the relay acts on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnFailure {
    /// Another producer registered the same `transactional.id`: another
    /// relay runs with this id. Retrying would fence it in turn. (A fence
    /// of a transaction that outlived `transaction.timeout.ms`, which the
    /// coordinator aborted, is not this: see `Eos::abandon`.)
    #[error(
        "fenced: another producer with transactional id \"{transactional_id}\" started ({detail}). \
         Another relay runs with this kafka.transactional_id; stop one of them, or give each relay \
         its own id"
    )]
    Fenced {
        transactional_id: String,
        detail: String,
    },
    /// The producer cannot go on and a new one would not fare better
    /// (transactional id not authorized, broker without transactions).
    #[error("the transactional producer failed for good: {0}")]
    Fatal(String),
    /// The transaction is lost (aborted, timed out, or in doubt): replay
    /// from the last committed checkpoint with a new producer.
    #[error("the Kafka transaction did not commit: {0}")]
    Abortable(String),
}

/// What a transactional failure's message names: the producer's
/// transactional id and the checkpoint topic.
#[derive(Debug, Clone, Copy)]
pub(super) struct Names<'a> {
    pub(super) id: &'a str,
    pub(super) checkpoint_topic: &'a str,
}

impl TxnFailure {
    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> Cause {
        match self {
            TxnFailure::Fenced { .. } => Cause::TransactionalIdFenced,
            TxnFailure::Fatal(_) | TxnFailure::Abortable(_) => Cause::TransactionalProducerFailed,
        }
    }

    /// Sorts a failure by what cures it. librdkafka calls many errors of a
    /// transactional producer "fatal" (the producer cannot go on, e.g.
    /// INVALID_TXN_STATE while a broker restart settles an old
    /// transaction); a new producer cures all but a fence, a refused
    /// authorization and a broker without transactions, so only those stop
    /// the relay.
    fn classify(err: &KafkaError, fatal: Option<(RDKafkaErrorCode, String)>, names: Names) -> Self {
        let code = err.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
        Self::classify_code(code, err.to_string(), fatal, names)
    }

    /// [`TxnFailure::classify`] of an error code; the producer's fatal
    /// error, when it has one, says more than the code of the call.
    fn classify_code(
        code: RDKafkaErrorCode,
        detail: String,
        fatal: Option<(RDKafkaErrorCode, String)>,
        Names {
            id,
            checkpoint_topic,
        }: Names,
    ) -> Self {
        let (code, detail) = match fatal {
            Some((code, why)) => (Some(code), why),
            None => (Some(code), detail),
        };
        let grant =
            "kafka-acls.sh --bootstrap-server <broker> --add --allow-principal User:<relay>";
        match code {
            Some(
                RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch,
            ) => TxnFailure::Fenced {
                transactional_id: id.to_owned(),
                detail,
            },
            Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed) => {
                TxnFailure::Fatal(format!(
                    "{detail}: the relay is not authorized to use transactional id \"{id}\"; grant \
                 the relay's principal WRITE on it: {grant} --operation Write --transactional-id {id}"
                ))
            }
            Some(RDKafkaErrorCode::ClusterAuthorizationFailed) => TxnFailure::Fatal(format!(
                "{detail}: the broker refused the relay a cluster permission for transactional id \
                 \"{id}\" (brokers before Kafka 2.8 require IDEMPOTENT_WRITE on the cluster): \
                 {grant} --operation IdempotentWrite --cluster"
            )),
            // At a transactional call (the checkpoint's send, the commit
            // that adds its partition to the transaction). An event topic
            // that refuses the relay fails the records sent to it, whose
            // reports stop the relay naming that topic before any commit;
            // the checkpoint record's report goes to nobody, so its
            // refusal surfaces here.
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => TxnFailure::Fatal(format!(
                "{detail}: the relay is not authorized to write to checkpoint topic \
                 \"{checkpoint_topic}\"; grant the relay's principal WRITE on it: {grant} \
                 --operation Write --topic {checkpoint_topic}"
            )),
            Some(
                RDKafkaErrorCode::UnsupportedVersion
                | RDKafkaErrorCode::UnsupportedForMessageFormat,
            ) => TxnFailure::Fatal(format!(
                "{detail} (the brokers do not support transactions: use kafka.delivery = \
                 \"at-least-once\")"
            )),
            _ => TxnFailure::Abortable(detail),
        }
    }
}

impl<T: Send + Sync + 'static> KafkaSink<T> {
    /// The transactional producer of exactly-once delivery. Call
    /// [`KafkaSink::init_transactions`] before anything else.
    #[allow(clippy::type_complexity)]
    pub fn new_transactional(
        settings: &SinkSettings,
        transactions: &TransactionSettings,
    ) -> Result<
        (
            Self,
            tokio::sync::mpsc::UnboundedReceiver<super::DeliveryReport<T>>,
        ),
        SinkError,
    > {
        Self::build(settings, Some(transactions))
    }

    fn failure(&self, err: &KafkaError, id: &str) -> TxnFailure {
        TxnFailure::classify(err, self.producer.client().fatal_error(), self.names(id))
    }

    fn names<'a>(&'a self, id: &'a str) -> Names<'a> {
        let checkpoint_topic = self.producer.context().checkpoint_topic.as_deref();
        Names {
            id,
            checkpoint_topic: checkpoint_topic.unwrap_or_default(),
        }
    }

    /// Registers the transactional id with the coordinator: fences any
    /// older producer with the id and settles the transaction it left open.
    pub async fn init_transactions(&self, id: &str, timeout: Duration) -> Result<(), TxnFailure> {
        let producer = Arc::clone(&self.producer);
        let done = tokio::task::spawn_blocking(move || producer.init_transactions(timeout)).await;
        match done {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.failure(&e, id)),
            Err(e) => Err(TxnFailure::Abortable(format!("init task: {e}"))),
        }
    }

    /// Opens a transaction (local: no broker round trip).
    pub fn begin_transaction(&self) -> Result<(), BrokerFailure> {
        self.producer
            .begin_transaction()
            .map_err(|e| BrokerFailure::of(&e))
    }

    /// Sends the checkpoint record (`key` → `value`) into the open
    /// transaction. `tag` is never reported back.
    pub fn send_checkpoint(
        &self,
        id: &str,
        key: &[u8],
        value: &[u8],
        tag: T,
    ) -> Result<(), TxnFailure> {
        let topic = self
            .producer
            .client()
            .context()
            .checkpoint_topic
            .clone()
            .unwrap_or_default();
        let record = BaseRecord::with_opaque_to(&topic, Sent::new(tag, key.len() + value.len()))
            .key(key)
            .payload(value);
        self.producer
            .send(record)
            .map_err(|(e, _)| self.failure(&e, id))
    }

    /// Commits the open transaction: librdkafka flushes every record, then
    /// commits.
    ///
    /// Called on librdkafka directly: rdkafka's wrapper first flushes by
    /// polling the producer's queue in steps of up to 100 ms, and with the
    /// threaded producer the background thread takes the events it waits
    /// for, so every commit took up to 100 ms more than needed (a third of
    /// the drain rate in exactly-once mode). librdkafka's own flush inside
    /// the commit waits on the delivery of the records, which the
    /// background thread serves.
    pub async fn commit_transaction(&self, id: &str, timeout: Duration) -> Result<(), TxnFailure> {
        let producer = Arc::clone(&self.producer);
        let done = tokio::task::spawn_blocking(move || {
            let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: the handle belongs to `producer`, kept alive by this
            // closure for the whole call; the returned error object is
            // read, then destroyed exactly once.
            unsafe {
                let error = rdkafka::bindings::rd_kafka_commit_transaction(
                    producer.client().native_ptr(),
                    ms,
                );
                if error.is_null() {
                    return Ok(());
                }
                let code = RDKafkaErrorCode::from(rdkafka::bindings::rd_kafka_error_code(error));
                let text =
                    std::ffi::CStr::from_ptr(rdkafka::bindings::rd_kafka_error_string(error))
                        .to_string_lossy()
                        .into_owned();
                rdkafka::bindings::rd_kafka_error_destroy(error);
                Err((code, text))
            }
        })
        .await;
        match done {
            Ok(Ok(())) => Ok(()),
            Ok(Err((code, text))) => Err(TxnFailure::classify_code(
                code,
                format!("commit: {text} ({code:?})"),
                self.producer.client().fatal_error(),
                self.names(id),
            )),
            Err(e) => Err(TxnFailure::Abortable(format!("commit task: {e}"))),
        }
    }

    /// Aborts the open transaction, best effort (a new producer's
    /// `init_transactions` aborts it anyway).
    pub async fn abort_transaction(&self, timeout: Duration) {
        let producer = Arc::clone(&self.producer);
        let _ = tokio::task::spawn_blocking(move || producer.abort_transaction(timeout)).await;
    }

    /// The producer's fatal error, when it is a fence.
    pub fn fenced(&self, id: &str) -> Option<TxnFailure> {
        let fatal = self.producer.client().fatal_error()?;
        match TxnFailure::classify(&KafkaError::Canceled, Some(fatal), self.names(id)) {
            fenced @ TxnFailure::Fenced { .. } => Some(fenced),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::exactly_once::checkpoint_reader;
    use RDKafkaErrorCode as C;

    /// The exactly-once clients connect to every broker at once (see
    /// [`connect_at_once`]) unless `kafka.properties` sets the property
    /// either way; the at-least-once producer keeps librdkafka's default.
    #[test]
    fn exactly_once_clients_connect_at_once_unless_the_properties_say_otherwise() {
        let transactions = TransactionSettings {
            transactional_id: "outbox-relay.s".into(),
            checkpoint_topic: "checkpoints".into(),
            transaction_timeout: Duration::from_secs(60),
        };
        let settings = |properties: Vec<(String, String)>| SinkSettings {
            brokers: "127.0.0.1:9092".into(),
            linger_ms: 5,
            message_timeout_ms: 30_000,
            queue_max_messages: 100_000,
            queue_max_kbytes: None,
            dead_letter_topic: "dlq".into(),
            properties,
        };
        let sparse = |cfg: ClientConfig| cfg.get(SPARSE_CONNECTIONS).map(str::to_owned);
        let plain = settings(Vec::new());
        assert_eq!(
            sparse(super::super::producer_config(&plain, Some(&transactions))),
            Some("false".into())
        );
        for isolation in ["read_committed", "read_uncommitted"] {
            assert_eq!(
                sparse(checkpoint_reader::consumer_config(&plain, isolation)),
                Some("false".into())
            );
        }
        assert_eq!(sparse(super::super::producer_config(&plain, None)), None);
        for value in ["true", "false"] {
            let chosen = settings(vec![(SPARSE_CONNECTIONS.into(), value.into())]);
            assert_eq!(
                sparse(super::super::producer_config(&chosen, Some(&transactions))),
                Some(value.into())
            );
            assert_eq!(
                sparse(checkpoint_reader::consumer_config(
                    &chosen,
                    "read_committed"
                )),
                Some(value.into())
            );
        }
    }

    const NAMES: Names<'static> = Names {
        id: "outbox-relay.s",
        checkpoint_topic: "cp",
    };

    fn fatal(code: RDKafkaErrorCode) -> TxnFailure {
        TxnFailure::classify(&KafkaError::Canceled, Some((code, "why".into())), NAMES)
    }

    #[test]
    fn only_a_fence_authorization_or_no_transactions_stop_the_relay() {
        for code in [C::Fenced, C::ProducerFenced, C::InvalidProducerEpoch] {
            let failure = fatal(code);
            assert!(matches!(failure, TxnFailure::Fenced { .. }), "{code:?}");
            let text = failure.to_string();
            assert!(
                text.contains("\"outbox-relay.s\"") && text.contains("kafka.transactional_id"),
                "{text}"
            );
        }
        let refused = fatal(C::TransactionalIdAuthorizationFailed);
        assert!(
            matches!(&refused, TxnFailure::Fatal(t) if t.contains(
                "--operation Write --transactional-id outbox-relay.s"
            )),
            "{refused:?}"
        );
        // The checkpoint topic refusing the relay's writes, met at the
        // commit: retrying cannot cure it, and the message names the topic.
        let refused = TxnFailure::classify_code(
            C::TopicAuthorizationFailed,
            "commit: Failed to add partition(s) to transaction".into(),
            None,
            NAMES,
        );
        assert!(
            matches!(&refused, TxnFailure::Fatal(t) if t.contains("checkpoint topic \"cp\"")
                && t.contains("--operation Write --topic cp")),
            "{refused:?}"
        );
        assert!(matches!(fatal(C::UnsupportedVersion), TxnFailure::Fatal(_)));
        // Fatal to librdkafka, cured by a new producer.
        for code in [C::InvalidTransactionalState, C::InvalidProducerIdMapping] {
            assert!(matches!(fatal(code), TxnFailure::Abortable(_)), "{code:?}");
        }
        // A timed-out commit: a new producer settles it.
        let timed_out = TxnFailure::classify(&KafkaError::Flush(C::OperationTimedOut), None, NAMES);
        assert!(
            matches!(timed_out, TxnFailure::Abortable(_)),
            "{timed_out:?}"
        );
        let fenced_commit = TxnFailure::classify(&KafkaError::Flush(C::Fenced), None, NAMES);
        assert!(matches!(fenced_commit, TxnFailure::Fenced { .. }));
    }
}
