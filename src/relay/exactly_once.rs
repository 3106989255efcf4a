//! Exactly-once delivery, the relay's side: where a session starts (the
//! last committed checkpoint), how records enter a Kafka transaction, and
//! when that transaction commits with its checkpoint.
//!
//! Flow of one session (docs/exactly-once.md):
//! 1. [`prepare`]: build the transactional producer, `init_transactions`
//!    (fences an older producer with the id and settles its open
//!    transaction) while another client checks the checkpoint topic
//!    without ever having it created (missing or not compacted: the relay
//!    stops, exit code 4), then read the checkpoint topic (read_committed)
//!    to its end. A usable checkpoint becomes the carried position: the session
//!    starts there, skips every PostgreSQL transaction whose end LSN is at
//!    or below it, and confirms the slot up to it.
//! 2. [`Transactional`] hands records to the producer, opening a Kafka
//!    transaction before the first.
//! 3. [`Eos::commit_if_due`], asked by the session after every step: at a
//!    PostgreSQL transaction boundary (the machine's `at_boundary`), once
//!    a bound of [`Batch`] is reached, it sends the checkpoint record (end
//!    LSN of the last PostgreSQL transaction handed over) and commits.
//!    Only then does the position confirmed to PostgreSQL move
//!    ([`Eos::committed`]).
//!
//! Any failure ends the session; the next one starts from step 1 with a
//! new producer, so an aborted or doubtful transaction is replayed from the
//! last committed checkpoint, never from what this process believes.
//!
//! The room's files: this one (the session's side: fencing, transactions,
//! commits), `checkpoint.rs` (the pure part), `checkpoint_topic.rs` (the
//! topic's one verdict) and `checkpoint_reader.rs` (the read of the last
//! committed checkpoint). Beside them: the commit rule of the session
//! machine (`machine/commit.rs`), the transactional producer
//! (`crate::sink`, `kafka/transactional.rs`), and the thin `init`, `check`
//! and `dead` files of the operator's commands.

pub mod checkpoint;
pub mod checkpoint_reader;
pub mod checkpoint_topic;

pub use checkpoint_reader::{CheckpointRead, CheckpointReadError, read_checkpoint};

use std::time::{Duration, Instant};

use bytes::Bytes;

use self::checkpoint::{Bounds, Checkpoint, Found, Partial, usable};
use self::checkpoint_topic::{CheckpointTopicRefused, Looked, Verdict};
use super::DeliveryTag;
use super::error::SessionError;
use super::machine::{AfterFailure, CommitPlan, Producer, Said, SessionMachine, after_failure};
use super::position::Position;
use crate::envelope::KafkaRecord;
use crate::events;
use crate::metrics::{self as m, transaction_outcome as outcome};
use crate::replication::ServerIdentity;
use crate::sink::{
    BrokerFailure, DeliveryError, DeliveryReport, KafkaSink, SendError, SinkSettings,
    TransactionSettings,
};
use pgoutput::lsn::Lsn;

/// How long the checkpoint read at start may take before the session is
/// retried.
const CHECKPOINT_READ: Duration = Duration::from_secs(30);

/// `kafka.delivery = "exactly-once"`, from the validated config.
#[derive(Debug, Clone)]
pub struct ExactlyOnceSettings {
    pub transactions: TransactionSettings,
    pub bounds: Bounds,
}

type Reports = tokio::sync::mpsc::UnboundedReceiver<DeliveryReport<DeliveryTag>>;

/// What a session in exactly-once mode starts with: the transactional
/// producer, and from a usable checkpoint the position to carry into the
/// session and the part of the next transaction already in Kafka.
pub(super) struct Prepared {
    pub(super) sink: (KafkaSink<DeliveryTag>, Reports),
    pub(super) carried: Option<Position>,
    pub(super) partial: Option<Partial>,
}

/// Builds the transactional producer and reads the last committed
/// checkpoint for `slot` on `server`, whose WAL is flushed up to
/// `server_wal`. `said`: what earlier sessions said already.
pub(super) async fn prepare(
    sink_settings: &SinkSettings,
    settings: &ExactlyOnceSettings,
    slot: &str,
    server: &ServerIdentity,
    server_wal: Lsn,
    said: &mut Said,
) -> Result<Prepared, SessionError> {
    let id = &settings.transactions.transactional_id;
    let topic = &settings.transactions.checkpoint_topic;
    let (sink, reports) = KafkaSink::new_transactional(sink_settings, &settings.transactions)
        .map_err(|e| SessionError::Transaction(crate::sink::TxnFailure::Fatal(e.to_string())))?;
    // The topic is looked at beside the producer's start, by a client that
    // never has it created; the producer names it only with its first
    // checkpoint, after this.
    let (looked, registered) = tokio::join!(
        checkpoint_topic::look(
            &sink_settings.brokers,
            &sink_settings.properties,
            topic,
            sink_settings.topic_check_timeout(),
        ),
        sink.init_transactions(id, settings.transactions.transaction_timeout),
    );
    registered?;
    judge_checkpoint_topic(looked, topic, &sink_settings.brokers, said)?;
    let missing = || {
        SessionError::CheckpointTopic(CheckpointTopicRefused::Missing {
            topic: topic.clone(),
            brokers: sink_settings.brokers.clone(),
        })
    };
    let value = match read_checkpoint(sink_settings, topic, id, CHECKPOINT_READ).await? {
        CheckpointRead::Last(value) => value,
        CheckpointRead::Nothing => None,
        CheckpointRead::NoTopic => return Err(missing()),
    };
    let checkpoint = match value.as_deref().map(Checkpoint::decode) {
        None => None,
        Some(Ok(checkpoint)) => Some(checkpoint),
        Some(Err(e)) => {
            events::CheckpointUnreadable {
                topic,
                key: id,
                error: &e,
            }
            .emit();
            None
        }
    };
    let mut partial = None;
    let carried = match usable(checkpoint.as_ref(), slot, server, server_wal) {
        Found::Use(lsn) => {
            partial = checkpoint.as_ref().and_then(|c| c.partial);
            events::CheckpointResumed {
                checkpoint: lsn,
                topic,
            }
            .emit();
            checkpoint.map(|c| Position {
                server: c.server,
                confirmed: lsn,
            })
        }
        Found::Nothing => None,
        Found::OtherSystem { found } => {
            events::CheckpointOtherCluster {
                topic,
                key: id,
                checkpoint_server: &found,
                server,
            }
            .emit();
            None
        }
        Found::OtherSlot { found } => {
            events::CheckpointOtherSlot {
                topic,
                key: id,
                checkpoint_slot: &found,
                slot,
            }
            .emit();
            None
        }
        Found::AheadOfServer { found, server_wal } => {
            events::CheckpointAboveServerWal::count();
            if said.checkpoint_ahead(found) {
                events::CheckpointAboveServerWal {
                    topic,
                    key: id,
                    checkpoint: found,
                    server_wal,
                    server,
                }
                .emit();
            }
            None
        }
    };
    Ok(Prepared {
        sink: (sink, reports),
        carried,
        partial,
    })
}

/// Refuses a checkpoint topic that is missing or not compacted; warns,
/// once per run of the outer loop (`said`), when the relay cannot tell
/// whether it is compacted or it is also deleted by retention. A topic of
/// more than one partition is refused by the checkpoint read.
fn judge_checkpoint_topic(
    looked: Result<Looked, String>,
    topic: &str,
    brokers: &str,
    said: &mut Said,
) -> Result<(), SessionError> {
    let verdict = match looked {
        Ok(looked) => checkpoint_topic::judge(&looked),
        Err(why) => Verdict::PolicyUnknown { why },
    };
    if let Some(refused) = CheckpointTopicRefused::of(&verdict, topic, brokers) {
        return Err(SessionError::CheckpointTopic(refused));
    }
    let warning = match verdict {
        Verdict::PolicyUnknown { why } => format!(
            "could not check that the checkpoint topic is compacted ({why}); the relay starts \
             all the same. With ACLs, grant the relay's principal DESCRIBE_CONFIGS on the topic \
             (outbox-relay init prints the grants)"
        ),
        Verdict::AlsoDeletes { policy } => format!(
            "the checkpoint topic is compacted but also deleted by retention \
             (cleanup.policy={policy}): a relay idle for longer than the retention loses its \
             checkpoint and writes the gap again once. Fix: {}",
            checkpoint_topic::compact_command(brokers, topic)
        ),
        _ => return Ok(()),
    };
    if said.topic_warning() {
        events::CheckpointTopicWarning {
            topic,
            warning: &warning,
        }
        .emit();
    }
    Ok(())
}

/// The exactly-once side of a session that does I/O: commits and aborts
/// of the Kafka transactions whose timing the machine decides
/// (`machine/commit.rs`).
pub(super) struct Eos {
    settings: ExactlyOnceSettings,
    slot: String,
    server: ServerIdentity,
}

impl Eos {
    pub(super) fn new(settings: ExactlyOnceSettings, slot: &str, server: ServerIdentity) -> Self {
        Eos {
            settings,
            slot: slot.to_owned(),
            server,
        }
    }

    /// The bounds of a Kafka transaction, for the machine.
    pub(super) fn bounds(&self) -> Bounds {
        self.settings.bounds
    }

    fn id(&self) -> &str {
        &self.settings.transactions.transactional_id
    }

    /// Commits the open transaction with its checkpoint when the machine
    /// says a commit is due ([`SessionMachine::commit_due`]; `force`: a
    /// graceful stop).
    ///
    /// # Errors
    /// The transaction failed: [`SessionError::Transaction`].
    pub(super) async fn commit_if_due(
        &mut self,
        machine: &mut SessionMachine<'_>,
        sink: &KafkaSink<DeliveryTag>,
        force: bool,
    ) -> Result<(), SessionError> {
        let now = Instant::now();
        let Some(CommitPlan { lsn, partial }) = machine.commit_due(now, force) else {
            return Ok(());
        };
        if let Some(partial) = &partial {
            events::PartialTransactionCommitted {
                commit_lsn: partial.commit_lsn,
                events: partial.events,
            }
            .emit();
        }
        let id = self.id().to_owned();
        if !machine.transaction_open() {
            sink.begin_transaction()
                .map_err(|e| fenced_or(sink, &id, e))?;
        }
        let checkpoint = Checkpoint {
            slot: self.slot.clone(),
            lsn,
            server: self.server.clone(),
            partial,
        };
        sink.send_checkpoint(&id, id.as_bytes(), &checkpoint.encode(), unreported_tag())?;
        let started = Instant::now();
        let committed = sink
            .commit_transaction(&id, self.settings.transactions.transaction_timeout)
            .await;
        metrics::histogram!(m::KAFKA_COMMIT_DURATION).record(started.elapsed().as_secs_f64());
        if let Err(e) = committed {
            // Left open for the abandon that follows: it tells the
            // coordinator's abort of a paused relay's transaction from a
            // fence, and aborts or ends the transaction.
            metrics::counter!(m::KAFKA_TRANSACTIONS, "outcome" => outcome::COMMIT_FAILED)
                .increment(1);
            return Err(e.into());
        }
        metrics::counter!(m::KAFKA_TRANSACTIONS, "outcome" => outcome::COMMITTED).increment(1);
        metrics::gauge!(m::CHECKPOINT_LSN).set(lsn.as_u64() as f64);
        tracing::debug!(checkpoint = %lsn, "Kafka transaction committed");
        machine.commit_done(lsn, now);
        Ok(())
    }

    /// A graceful stop that could not end at a PostgreSQL transaction
    /// boundary (its drain deadline passed mid-transaction): the open Kafka
    /// transaction holds part of one, so it is aborted now rather than left
    /// open until the broker's transaction timeout (read_committed
    /// consumers of its partitions would wait that long).
    pub(super) async fn abort_open(
        &mut self,
        machine: &mut SessionMachine<'_>,
        sink: &KafkaSink<DeliveryTag>,
    ) {
        if machine.transaction_open() {
            sink.abort_transaction(Duration::from_secs(5)).await;
            metrics::counter!(m::KAFKA_TRANSACTIONS, "outcome" => outcome::ABORTED).increment(1);
            machine.transaction_ended();
        }
    }

    /// After a failure: aborts the open transaction, best effort, unless
    /// the producer was fenced (then says so). A new producer's
    /// `init_transactions` aborts it in any case. A fence is told from the
    /// coordinator's abort of a transaction open past its timeout by the
    /// machine's policy (`machine/fence.rs`).
    pub(super) async fn abandon(
        &mut self,
        machine: &mut SessionMachine<'_>,
        sink: &KafkaSink<DeliveryTag>,
        error: SessionError,
    ) -> SessionError {
        let timeout = self.settings.transactions.transaction_timeout;
        let outlived = machine.transaction_outlived(Instant::now(), timeout);
        match after_failure(error, || sink.fenced(self.id()), outlived, timeout) {
            AfterFailure::End(error) => error,
            AfterFailure::Abort(error) => {
                self.abort_after_failure(machine, sink).await;
                error
            }
            AfterFailure::Expired(error) => {
                machine.transaction_ended();
                error
            }
        }
    }

    /// Aborts the open transaction after a failure, best effort.
    async fn abort_after_failure(
        &mut self,
        machine: &mut SessionMachine<'_>,
        sink: &KafkaSink<DeliveryTag>,
    ) {
        if machine.transaction_open() {
            sink.abort_transaction(Duration::from_secs(2)).await;
            metrics::counter!(m::KAFKA_TRANSACTIONS, "outcome" => outcome::ABORTED).increment(1);
            machine.transaction_ended();
        }
    }
}

/// The fence, when the producer's fatal error is one; else the error.
fn fenced_or(sink: &KafkaSink<DeliveryTag>, id: &str, err: BrokerFailure) -> SessionError {
    match sink.fenced(id) {
        Some(fenced) => SessionError::Transaction(fenced),
        None => SessionError::Transaction(crate::sink::TxnFailure::Abortable(err.to_string())),
    }
}

/// The tag of the checkpoint record: the producer wants one, the sink
/// never reports it.
fn unreported_tag() -> DeliveryTag {
    DeliveryTag {
        txn: crate::ack::AckTracker::new(Lsn::ZERO).open(),
        row_key: String::new(),
        lsn: Lsn::ZERO,
        key: Bytes::new(),
        dead_letter: false,
        span: None,
        held_bytes: 0,
    }
}

/// The producer as the machine sees it in exactly-once mode: a record the
/// machine says opens a Kafka transaction is preceded by its begin.
pub(super) struct Transactional<'s> {
    pub(super) sink: &'s mut KafkaSink<DeliveryTag>,
    /// The parking writer, when anything parks after a dead letter: a
    /// parked event is in neither the Kafka transaction nor its checkpoint
    /// until the writer answers (the machine's commit waits for it).
    pub(super) parking: Option<&'s crate::parking::writer::Writer<super::machine::ParkTag>>,
}

impl Producer for Transactional<'_> {
    fn send(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
    ) -> Result<(), SendError<DeliveryTag>> {
        self.sink.send(record, tag)
    }

    fn explain(&self, err: DeliveryError) -> DeliveryError {
        self.sink.explain(err)
    }

    fn open_transaction(&mut self) -> Result<(), DeliveryError> {
        KafkaSink::begin_transaction(self.sink).map_err(DeliveryError::Failed)
    }

    fn park(
        &mut self,
        request: crate::parking::Request,
        tag: super::machine::ParkTag,
    ) -> Result<(), Box<(crate::parking::Request, super::machine::ParkTag)>> {
        super::producer::park_with(self.parking, request, tag)
    }
}
