//! The session's decisions, without I/O: a state machine that takes what
//! arrives (a replication message, a keepalive, a delivery report) and
//! decides what to send, what is confirmed, and when reading must pause.
//!
//! Role: everything the streaming loop (`session.rs`) does not do itself.
//! The loop owns the sockets and timers; it feeds this machine and hands the
//! records it decides to send to a [`Producer`], a non-blocking hand-off
//! (librdkafka's queue, or a fake in tests). The confirmed position comes
//! from the ack tracker alone ("confirm only what the broker holds",
//! docs/design.md); the loop reads it from [`SessionMachine::confirmed`].
//! This file takes the stream apart; `machine/delivery.rs` hands records to
//! the producer and takes the reports; `machine/messages_and_traces.rs` turns logical
//! messages into events. The machine does no I/O, logging included: a line
//! the operator must read goes back to the shell as a [`Notice`]
//! (`machine/notice.rs`), which the shell logs; the machine decides that it
//! is due, and that a once-per-session one was not said yet. Nor does it
//! read a clock (the shell tells it the time, [`Now`]) or bump a metric (it
//! tallies [`Counts`], which the shell takes and adds to the metrics).
//!
//! States, named:
//! * the transaction arriving: [`TxnState`] (`Idle`, `Delivering` one the
//!   relay has not confirmed yet, `Replaying` one it confirmed already: the
//!   server re-sends from the slot's own position, which may lag; told by the
//!   transaction's final LSN, never a change's, "never filter by change LSN");
//! * the hand-off: [`Outgoing`] (`Clear`, or a record the full local queue
//!   refused, sent again after the next report; reading pauses meanwhile:
//!   "bounded memory"), and the bytes in flight: each record handed over
//!   counts its size in the ack tracker until its report, and reading
//!   pauses while they reach `max_in_flight_bytes` (records of a webhook
//!   sink and those on their way to the parking table count alike);
//! * the isolation of a suspect: [`Isolation`] (a record a broker refused in
//!   a batch is sent alone, nothing else in flight, reading paused; its
//!   report says whether it was the culprit; see `refusals.rs`).
//!
//! Events come from the outbox table's inserts and from transactional
//! logical messages with the outbox prefix (`postgres.source`); both go
//! through `records.rs` and count in their transaction alike, so the order
//! of a key holds across them. A non-transactional outbox message is
//! refused (logged at error, counted, never published): it is not atomic
//! with any business write. Beside the decisions, the machine notes the
//! rows a confirmed transaction leaves to delete (`cleanup.rs`) and starts
//! and ends the produce spans of traced events (`otel.rs`).
//!
//! Invariants: the ack tracker only ever confirms whole transactions whose
//! every record was acknowledged; records of one key are handed over in
//! commit order (a suspect pauses reading, so nothing overtakes it); any
//! refusal the machine cannot settle in place ends the session with an
//! error whose `kind()` tells the relay what to do.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use chrono::Utc;

use super::RelaySettings;
use super::delivery_tag::DeliveryTag;
use super::error::SessionError;
use super::exactly_once::checkpoint::{Bounds, Partial};
use super::records::{Commit, Routed, Router};
use super::refusals::{
    DeadLetterFate, Refusals, failure_reason, fatal_refusal, forget_confirmed, note_innocent,
    note_refusal,
};
use crate::ack::AckTracker;
use crate::cleanup::{Cleanup, Collector, Deletable};
use crate::deadletter;
use crate::envelope::{KafkaRecord, TraceContext};
use crate::otel::Tracer;
use crate::replication::{OutboxTable, RelationClass};
use crate::sink::{
    DeliveryError, DeliveryReport, KafkaSink, OnUnroutable, RefusalClass, Refused, SendError,
};
use pgoutput::assembler::{AssemblyError, Relation, TransactionAssembler, TxEvent};
use pgoutput::lsn::Lsn;
use pgoutput::{self, DecodeContext, TupleData, pg_timestamp_to_utc};

mod carry;
mod commit;
mod counts;
mod delivery;
mod fence;
mod messages_and_traces;
mod notice;
mod pace;
mod parking;
mod webhook;

type SessionResult<T> = Result<T, SessionError>;

pub use carry::{Carry, merge_checkpoint, partial_at};
pub use commit::CommitPlan;
use commit::Commits;
pub use counts::Counts;
pub use fence::{AfterFailure, Said, after_failure};
pub use notice::Notice;
pub use pace::Now;
use pace::Pace;
pub use parking::ParkTag;

/// Where records go: a non-blocking hand-off whose answers come back later
/// as [`DeliveryReport`]s.
pub trait Producer {
    /// Hands `record` over, or says at once why not.
    fn send(&mut self, record: KafkaRecord, tag: DeliveryTag)
    -> Result<(), SendError<DeliveryTag>>;
    /// `err`, or the producer's own fatal error when it has one (its text
    /// names the cause the bare error code of a record does not).
    fn explain(&self, err: DeliveryError) -> DeliveryError;
    /// Exactly-once: opens a Kafka transaction, before the record that the
    /// machine says opens one. Nothing to do for a producer without them.
    /// A failure comes as the delivery error a report would carry (the
    /// shell's producer converts its client's error), so the machine
    /// classifies it like a failed send.
    fn open_transaction(&mut self) -> Result<(), DeliveryError> {
        Ok(())
    }
    /// Hands an event routed to webhook sink `sink` (its index in
    /// `RelaySettings::webhooks`) over; its report comes back like a
    /// broker's. A producer without webhook sinks hands it back.
    fn send_webhook(
        &mut self,
        sink: usize,
        event: crate::sink::http::WebhookEvent,
        tag: DeliveryTag,
    ) -> Result<(), Box<(crate::sink::http::WebhookEvent, DeliveryTag)>> {
        let _ = sink;
        Err(Box::new((event, tag)))
    }
    /// Hands a request to the parking writer (`crate::parking`); its
    /// report comes back through [`SessionMachine::on_park_report`]. A
    /// producer without a writer hands it back.
    fn park(
        &mut self,
        request: crate::parking::Request,
        tag: ParkTag,
    ) -> Result<(), Box<(crate::parking::Request, ParkTag)>> {
        Err(Box::new((request, tag)))
    }
}

impl Producer for KafkaSink<DeliveryTag> {
    fn send(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
    ) -> Result<(), SendError<DeliveryTag>> {
        KafkaSink::send(self, record, tag)
    }

    fn explain(&self, err: DeliveryError) -> DeliveryError {
        KafkaSink::explain(self, err)
    }
}

/// The transaction whose messages are arriving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Idle,
    /// Its events are being sent.
    Delivering(Commit),
    /// Confirmed already: its events are not sent again.
    Replaying,
}

/// The hand-off to the producer.
#[derive(Debug)]
pub enum Outgoing {
    Clear,
    /// The local queue was full: this record (already counted in its
    /// transaction) goes again after the next delivery report.
    QueueFull(Box<(KafkaRecord, DeliveryTag)>),
}

/// A suspect being sent alone.
#[derive(Debug)]
pub enum Isolation {
    None,
    /// Held back until nothing else is in flight. `counted`: it replaces an
    /// event already counted in its transaction.
    Waiting {
        record: KafkaRecord,
        tag: DeliveryTag,
        counted: bool,
    },
    /// Sent alone; its delivery report says whether it was the culprit.
    Sent {
        row_key: String,
        dead_letter: bool,
    },
}

/// What the loop must do before it feeds the next message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Continue,
    /// The server described a relation the catalog must classify
    /// ([`crate::replication::look_up`]); answer with
    /// [`SessionMachine::relation_classified`].
    LookUp(Arc<Relation>),
}

/// One session's decisions. See the module docs.
pub struct SessionMachine<'a> {
    settings: &'a RelaySettings,
    tracker: AckTracker,
    assembler: TransactionAssembler,
    decode_ctx: DecodeContext,
    txn: TxnState,
    router: Router,
    /// Owned by the relay: it outlives the session, as the replay needs it.
    refusals: &'a mut Refusals,
    outgoing: Outgoing,
    isolation: Isolation,
    /// The outbox table as resolved at connect; `None` when events come
    /// from messages only (every relation is then another table).
    outbox: Option<OutboxTable>,
    /// What each relation described in this session is, by OID.
    classes: HashMap<u32, RelationClass>,
    /// Outbox rows and messages seen, for the loop's idle detection.
    rows_seen: u64,
    /// The rows of confirmed transactions, when cleanup is on.
    cleanup: Option<Collector>,
    /// Produce spans, when tracing is on.
    tracer: Option<Tracer>,
    /// Outbox messages arrived while the source excludes them: said once.
    warned_messages_off: bool,
    /// Outbox table rows arrived while the source is messages only: said
    /// once (they are published, as with `both`).
    warned_rows_in_messages_mode: bool,
    /// A malformed trace context was dropped: said once.
    warned_trace_context: bool,
    /// Lines for the shell to log, oldest first (`notice.rs`).
    notices: Vec<Notice>,
    /// Everything up to here was handed to the producer (the end LSN of
    /// the last transaction delivered, or an idle position): where an
    /// exactly-once checkpoint may point once the records are committed.
    handed_off: Lsn,
    /// What was counted since the shell last took it (`counts.rs`).
    counts: Counts,
    /// Exactly-once: the open Kafka transaction's bounds and the last
    /// committed checkpoint, which is what may be confirmed (acknowledged
    /// is not enough: the Kafka transaction holding the records must have
    /// committed). `None`: at-least-once, where the acknowledged prefix is
    /// confirmable. See `commit.rs`.
    commits: Option<Commits>,
    /// Graceful stop, batching and heartbeat idleness (`pace.rs`).
    pace: Pace,
    /// Exactly-once: the part of a transaction that an earlier session's
    /// committed Kafka transactions hold, skipped when it arrives.
    resume: Option<Partial>,
    /// Events of the open transaction still to skip ([`Partial::events`]).
    skip: u64,
    /// The aggregates parked behind a dead letter (`parking.rs`).
    parked: parking::Parked,
    /// Outbox events of the open transaction handed over (or skipped as
    /// written before), in stream order.
    txn_events: u64,
}

impl<'a> SessionMachine<'a> {
    /// A session that starts at `confirmed` (the slot's position, or the one
    /// carried from the last session on the same server), at `now`.
    pub fn new(
        settings: &'a RelaySettings,
        outbox: Option<OutboxTable>,
        confirmed: Lsn,
        refusals: &'a mut Refusals,
        now: Now,
    ) -> Self {
        forget_confirmed(refusals, confirmed);
        let source_table = outbox.as_ref().map_or_else(
            || format!("{}.{}", settings.table.0, settings.table.1),
            OutboxTable::qualified_name,
        );
        let cleanup = (settings.source.cleanup == Cleanup::DeleteAfterAck
            && settings.source.kind.table())
        .then(Collector::new);
        SessionMachine {
            settings,
            tracker: AckTracker::new(confirmed),
            assembler: TransactionAssembler::new(),
            decode_ctx: DecodeContext {
                protocol_version: 1,
                in_stream: false,
                parallel_streaming: false,
            },
            txn: TxnState::Idle,
            router: Router::new(
                settings.columns.clone(),
                settings.envelope.clone(),
                settings.dlq_topic.clone(),
                source_table,
            )
            .with_message_prefix(&settings.source.message_prefix)
            .with_checkpoint_topic(&settings.checkpoint_topic)
            .with_contracts(settings.contracts.clone()),
            refusals,
            outgoing: Outgoing::Clear,
            isolation: Isolation::None,
            outbox,
            classes: HashMap::new(),
            rows_seen: 0,
            cleanup,
            tracer: None,
            warned_messages_off: false,
            warned_rows_in_messages_mode: false,
            warned_trace_context: false,
            notices: Vec::new(),
            counts: Counts::default(),
            handed_off: confirmed,
            commits: None,
            pace: Pace::new(now),
            resume: None,
            skip: 0,
            txn_events: 0,
            parked: parking::Parked::default(),
        }
    }

    /// Exactly-once delivery within `bounds`: what is confirmable is what
    /// a committed checkpoint holds ([`SessionMachine::commit_done`]),
    /// starting at the session's start; `resume` is the part of a
    /// transaction already in Kafka, from the checkpoint the session
    /// starts at.
    pub fn exactly_once(mut self, resume: Option<Partial>, bounds: Bounds) -> Self {
        self.commits = Some(Commits::new(bounds, self.tracker.confirmed(), self.now()));
        self.resume = resume;
        self
    }

    /// What may be confirmed to PostgreSQL, and what cleanup may delete up
    /// to: the acknowledged prefix, and in exactly-once mode no further
    /// than the last committed checkpoint.
    pub fn confirmable(&self) -> Lsn {
        // A committed Kafka transaction holds its records even while their
        // delivery reports wait in the channel.
        self.commits
            .as_ref()
            .map_or_else(|| self.tracker.confirmed(), Commits::committed)
    }

    /// Where a Kafka transaction may commit inside the transaction being
    /// received: every event handed over so far is in it (nothing held
    /// back by a full queue or an isolation). `Some(None)`: none of the
    /// open transaction's events yet (or none open); `Some(Some(p))`: the
    /// checkpoint must say that `p.events` of them are in.
    pub fn split_point(&self) -> Option<Option<Partial>> {
        if !matches!(self.outgoing, Outgoing::Clear) || !matches!(self.isolation, Isolation::None) {
            return None;
        }
        // Events of the transaction in Kafka: those handed over so far, and
        // those an earlier session's checkpoint says are there that this one
        // has not reached yet (they come first, and are skipped).
        let events = self.txn_events + self.skip;
        Some(match self.txn {
            TxnState::Delivering(commit) if events > 0 => Some(Partial {
                commit_lsn: commit.lsn,
                events,
            }),
            _ => None,
        })
    }

    /// Counts an outbox event of the open transaction; true when an
    /// earlier session's committed Kafka transaction already holds it.
    fn written_before(&mut self) -> bool {
        self.txn_events += 1;
        if self.skip > 0 {
            self.skip -= 1;
            return true;
        }
        false
    }

    /// Starts a produce span for each traced event.
    pub fn with_tracer(mut self, tracer: Option<Tracer>) -> Self {
        self.tracer = tracer;
        self
    }

    /// The rows of every transaction confirmed so far that were not handed
    /// out yet (cleanup on): nothing above the confirmed position.
    pub fn take_deletable(&mut self) -> Option<Deletable> {
        let confirmable = self.confirmable();
        self.cleanup.as_mut()?.release(confirmable)
    }

    /// The acknowledged prefix: what may be confirmed to PostgreSQL.
    pub fn confirmed(&self) -> Lsn {
        self.tracker.confirmed()
    }

    /// Records handed over and not yet acknowledged.
    pub fn pending_events(&self) -> u64 {
        self.tracker.pending_events()
    }

    /// The commit time of the transaction `txn` while its events wait for
    /// the broker (for the commit-to-ack latency).
    pub fn commit_time(&self, txn: crate::ack::TxnId) -> Option<chrono::DateTime<Utc>> {
        self.tracker.commit_time(txn)
    }

    /// The commit time of the oldest event waiting for the broker.
    pub fn oldest_unacked_commit_time(&self) -> Option<chrono::DateTime<Utc>> {
        self.tracker.oldest_unacked_commit_time()
    }

    /// Bytes of the records handed over and not yet acknowledged (and of
    /// one held back by a full queue or waiting to go alone, once counted).
    pub fn pending_bytes(&self) -> u64 {
        self.tracker.pending_bytes()
    }

    /// Whether the next replication message may be read: nothing held back
    /// by a full queue or an isolation, fewer than `max_in_flight` pending,
    /// and fewer than `max_in_flight_bytes` bytes of them. With nothing
    /// pending it may always read: a record larger than the byte bound goes
    /// alone instead of never.
    pub fn can_read(&self) -> bool {
        matches!(self.outgoing, Outgoing::Clear)
            && matches!(self.isolation, Isolation::None)
            && (self.tracker.pending_events() as usize) < self.settings.max_in_flight
            && (self.tracker.pending_bytes() < self.settings.max_in_flight_bytes
                || self.tracker.pending_events() == 0)
    }

    /// Counts the record `tag` travels with as `size` bytes in flight, in
    /// place of what it was counted as before (nothing, or the record a
    /// smaller stand-in replaces).
    fn hold(&mut self, tag: &mut DeliveryTag, size: usize) {
        let size = size as u64;
        self.tracker.hold_bytes(tag.held_bytes, size);
        tag.held_bytes = size;
    }

    /// The record `tag` travels with was acknowledged: its event and its
    /// bytes are no longer in flight.
    fn acknowledged(&mut self, tag: &DeliveryTag) -> SessionResult<()> {
        self.tracker.ack_event(tag.txn)?;
        self.tracker.release_bytes(tag.held_bytes);
        Ok(())
    }

    /// Whether anything still waits for the broker: pending records, or one
    /// the full queue refused.
    pub fn awaiting_broker(&self) -> bool {
        self.tracker.pending_events() > 0 || !matches!(self.outgoing, Outgoing::Clear)
    }

    /// Whether a transaction whose events are being sent has not reached its
    /// Commit yet (a graceful stop reads on to it).
    pub fn delivering(&self) -> bool {
        matches!(self.txn, TxnState::Delivering(_))
    }

    /// Everything up to this position was handed to the producer: the end
    /// LSN of the last transaction delivered, or an idle position.
    pub fn handed_off(&self) -> Lsn {
        self.handed_off
    }

    /// Between two transactions, with nothing held back: an exactly-once
    /// Kafka transaction may end here with whole PostgreSQL transactions.
    pub fn at_boundary(&self) -> bool {
        matches!(self.txn, TxnState::Idle)
            && !self.assembler.in_transaction()
            && matches!(self.outgoing, Outgoing::Clear)
            && matches!(self.isolation, Isolation::None)
    }

    /// Outbox rows seen so far in this session.
    pub fn rows_seen(&self) -> u64 {
        self.rows_seen
    }

    /// The transactions the ack tracker holds (for memory-bound tests).
    pub fn queued_transactions(&self) -> usize {
        self.tracker.queued_transactions()
    }

    /// One pgoutput message from the stream.
    ///
    /// # Errors
    /// Fatal: undecodable message, broken framing. A send that fails ends the
    /// session like a delivery report would.
    pub fn on_wal(&mut self, mut data: Bytes, producer: &mut impl Producer) -> SessionResult<Step> {
        self.stream_busy();
        let msg = pgoutput::decode(&mut data, &self.decode_ctx).map_err(|source| {
            SessionError::Decode {
                slot: self.settings.replication.slot.clone(),
                source,
            }
        })?;
        let event = self
            .assembler
            .push(msg)
            .map_err(|source| SessionError::OutOfStep {
                slot: self.settings.replication.slot.clone(),
                source,
            })?;
        let Some(event) = event else {
            return Ok(Step::Continue);
        };
        match event {
            TxEvent::Begin {
                xid,
                final_lsn,
                commit_time,
            } => {
                // Also the exactly-once skip rule: the session starts at the
                // last committed checkpoint.
                self.txn = if super::exactly_once::checkpoint::already_committed(
                    final_lsn,
                    self.tracker.confirmed(),
                ) {
                    TxnState::Replaying
                } else {
                    let time = pg_timestamp_to_utc(commit_time).unwrap_or_else(|| self.wall_now());
                    if let Some(cleanup) = &mut self.cleanup {
                        cleanup.begin(xid, final_lsn);
                    }
                    self.txn_events = 0;
                    self.skip = match self.resume {
                        Some(partial) if partial.commit_lsn <= final_lsn => {
                            self.resume = None;
                            if partial.commit_lsn == final_lsn {
                                partial.events
                            } else {
                                0
                            }
                        }
                        _ => 0,
                    };
                    TxnState::Delivering(Commit {
                        txn: self.tracker.open_at(time),
                        lsn: final_lsn,
                        time,
                    })
                };
            }
            TxEvent::Relation(relation) => match &self.outbox {
                Some(outbox) if !outbox.members.contains(&relation.oid) => {
                    return Ok(Step::LookUp(relation));
                }
                Some(_) => self.relation_classified(&relation, RelationClass::Outbox),
                // No outbox table (messages only, and the configured table
                // does not exist or is not published): no table's rows are
                // events.
                None => self.relation_classified(&relation, RelationClass::Other),
            },
            TxEvent::Insert { relation, tuple } => self.on_insert(&relation, &tuple, producer)?,
            TxEvent::Update { relation } => self.count_ignored(&relation, "update"),
            TxEvent::Delete { relation } => self.count_ignored(&relation, "delete"),
            TxEvent::Truncate { relations } => {
                for relation in &relations {
                    self.count_ignored(relation, "truncate");
                }
            }
            TxEvent::Message(msg) => self.on_message(&msg, producer)?,
            TxEvent::Commit { end_lsn, .. } => {
                if let TxnState::Delivering(commit) =
                    std::mem::replace(&mut self.txn, TxnState::Idle)
                {
                    self.counts.transactions += 1;
                    if self.skip > 0 {
                        self.notify(Notice::CheckpointAhead {
                            commit_lsn: commit.lsn,
                            missing: self.skip,
                        });
                        self.skip = 0;
                    }
                    self.tracker.close(commit.txn, end_lsn)?;
                    self.handed_off = self.handed_off.max(end_lsn);
                    if let Some(cleanup) = &mut self.cleanup {
                        cleanup.commit(end_lsn);
                    }
                }
            }
        }
        Ok(Step::Continue)
    }

    /// A keepalive: the server's last *sent* position. Returns whether the
    /// relay is caught up (nothing pending, nothing newer than confirmed).
    pub fn on_keepalive(&mut self, wal_end: Lsn) -> bool {
        self.advance_when_idle(wal_end);
        wal_end <= self.tracker.confirmed() && self.tracker.pending_events() == 0
    }

    /// With nothing open or unacknowledged, everything up to `lsn` has been
    /// handled: the position may move there, so an idle outbox on a busy
    /// database does not pin WAL.
    fn advance_when_idle(&mut self, lsn: Lsn) {
        if matches!(self.txn, TxnState::Idle)
            && !self.assembler.in_transaction()
            && matches!(self.outgoing, Outgoing::Clear)
            && self.tracker.idle_advance(lsn)
        {
            self.handed_off = self.handed_off.max(lsn);
        }
    }

    /// The catalog's answer for a relation the stream described.
    pub fn relation_classified(&mut self, relation: &Relation, class: RelationClass) {
        match class {
            RelationClass::Outbox => {
                if let Some(outbox) = &self.outbox
                    && relation.oid == outbox.oid
                    && (relation.namespace != outbox.schema || relation.name != outbox.name)
                {
                    self.notify(Notice::OutboxRenamed {
                        configured: outbox.qualified_name(),
                        now: relation.qualified_name(),
                        oid: relation.oid,
                    });
                }
            }
            RelationClass::OutboxByPublication => self.notify(Notice::OutboxByPublication {
                relation: relation.qualified_name(),
                oid: relation.oid,
                outbox: self
                    .outbox
                    .as_ref()
                    .map(OutboxTable::qualified_name)
                    .unwrap_or_default(),
            }),
            RelationClass::Other => {}
            RelationClass::Unknown => {
                self.counts.ignored.add("unknown_relation");
                self.notify(Notice::UnknownRelation {
                    relation: relation.qualified_name(),
                    oid: relation.oid,
                    publication: self.settings.replication.publication.clone(),
                });
            }
        }
        self.classes.insert(relation.oid, class);
    }

    /// The outbox table as resolved at connect (`None`: messages only).
    pub fn outbox(&self) -> Option<&OutboxTable> {
        self.outbox.as_ref()
    }

    fn is_outbox(&self, relation: &Relation) -> bool {
        self.classes
            .get(&relation.oid)
            .is_some_and(|class| class.is_outbox())
    }

    fn count_ignored(&mut self, relation: &Relation, kind: &'static str) {
        if self.is_outbox(relation) {
            self.counts.ignored.add(kind);
        }
    }

    fn on_insert(
        &mut self,
        relation: &Arc<Relation>,
        tuple: &TupleData,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        let commit = match self.txn {
            TxnState::Delivering(commit) => commit,
            TxnState::Replaying => return Ok(()),
            TxnState::Idle => {
                return Err(SessionError::OutOfStep {
                    slot: self.settings.replication.slot.clone(),
                    source: AssemblyError::OutsideTransaction { message: "Insert" },
                });
            }
        };
        if !self.is_outbox(relation) {
            self.counts.ignored.add("other_table");
            return Ok(());
        }
        if !self.settings.source.kind.table() && !self.warned_rows_in_messages_mode {
            self.warned_rows_in_messages_mode = true;
            self.notify(Notice::RowsInMessagesMode {
                table: relation.qualified_name(),
            });
        }
        self.rows_seen += 1;
        let written = self.written_before();
        if let Some(cleanup) = &mut self.cleanup {
            let id = self.router.event_id(relation, tuple);
            if written {
                // Its fate (a dead letter without its payload?) was the
                // earlier session's: the row stays.
                cleanup.leave(id.as_deref());
            } else {
                cleanup.row(id.as_deref());
            }
        }
        if written {
            return Ok(());
        }
        let routed = self.router.route(relation, tuple, &commit, self.refusals);
        self.deliver(routed, producer)
    }
}

#[cfg(test)]
mod tests;
