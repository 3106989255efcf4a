//! One streaming session: from START_REPLICATION until shutdown or failure.
//!
//! A single task owns the replication stream, the producer's delivery
//! reports and the ack tracker, and reacts to whichever is ready:
//!
//! * shutdown (first, `biased`): stop reading (once the transaction being
//!   received, if any, has reached its Commit, so that its already-sent
//!   events become confirmable), wait for outstanding acknowledgements up
//!   to the drain deadline, send the final status update;
//! * a delivery report: ack the event in the tracker; confirm what the
//!   tracker says is the acknowledged prefix (invariant 1);
//! * the next replication message, only while fewer than `max_in_flight`
//!   events await acknowledgement (backpressure, invariant 9).
//!
//! Nothing here sleeps or polls: every wake-up is a socket becoming readable,
//! a delivery report, a timer the stream owns, or shutdown.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::RelaySettings;
use crate::ack::{AckTracker, TxnId};
use crate::assembler::{Relation, TransactionAssembler, TxEvent};
use crate::deadletter::{DeadLetter, dead_letter_record};
use crate::envelope::{KafkaRecord, build_record};
use crate::lsn::Lsn;
use crate::metrics as m;
use crate::outbox::RowExtractor;
use crate::pgoutput::{self, DecodeContext, TupleData, pg_timestamp_to_utc};
use crate::replication::{
    OutboxTable, RelationClass, RelationLookup, ReplicationError, ReplicationSettings,
    ReplicationStream, SqlConnection, StreamItem, classify, emit_heartbeat, look_up,
};
use crate::sink::{DeliveryError, DeliveryReport, DeliveryTag, KafkaSink, SendError};

/// How long a session whose stream broke waits for the acknowledgements of
/// records already sent before it hands over to the next session. Short:
/// reconnecting matters more than saving a few duplicates.
const SETTLE_AFTER_STREAM_FAILURE: Duration = Duration::from_secs(5);

/// Why a session ended without a graceful stop.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error("{0}")]
    Delivery(DeliveryError),
    /// The stream cannot be understood (a decoder or framing error): retrying
    /// would read the same bytes again, so the relay stops and says why.
    #[error("{0}")]
    Fatal(String),
}

/// The transaction whose messages are arriving.
struct OpenTxn {
    txn: TxnId,
    commit_lsn: Lsn,
    commit_time: DateTime<Utc>,
}

enum TxnState {
    Idle,
    Open(OpenTxn),
    /// A transaction the slot re-sent although we confirmed past it already
    /// (the server restarts from its own, possibly older, confirmed_flush_lsn).
    /// Deduplicated by transaction LSN, never by per-change LSN (invariant 4).
    Replayed,
}

pub(super) struct Session<'a> {
    settings: &'a RelaySettings,
    stream: ReplicationStream,
    sink: KafkaSink,
    reports: mpsc::UnboundedReceiver<DeliveryReport>,
    tracker: AckTracker,
    assembler: TransactionAssembler,
    extractor: RowExtractor,
    decode_ctx: DecodeContext,
    state: TxnState,
    /// A record refused with QueueFull, sent again after the next report.
    retry: Option<(KafkaRecord, DeliveryTag)>,
    confirmed: Lsn,
    table: String,
    /// When the last outbox row arrived; heartbeats only while idle.
    last_event: Instant,
    /// Events the broker refused as too large; owned by the relay so it
    /// outlives this session.
    too_large: &'a mut TooLarge,
    /// A suspect being sent alone; reading pauses meanwhile.
    isolating: Option<Isolation>,
    /// The outbox table as resolved at connect.
    outbox: OutboxTable,
    /// What each relation described in this session is, by OID.
    classes: HashMap<u32, RelationClass>,
    /// For catalog look-ups of relations not known at connect.
    catalog: Option<SqlConnection>,
}

/// Events the broker refused as too large, by outbox id, remembered across
/// producer rebuilds (with `enable.gapless.guarantee` a refusal stops the
/// producer, and the relay replays from the slot).
///
/// The broker refuses a whole batch when it exceeds the topic's
/// `max.message.bytes`, so a refusal only makes its records suspects. On the
/// replay a suspect is sent alone (nothing else in flight, reading paused):
/// refused again, it is too large and is dead-lettered; delivered, it was an
/// innocent batch mate and is forgotten. An entry goes once settled.
pub type TooLarge = HashMap<String, TooLargeEntry>;

/// What is known about an event the broker refused as too large.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TooLargeEntry {
    /// Refused in a batch: may be innocent.
    Suspect,
    /// Refused on its own (or by the producer's own size check): dead-letter
    /// it with this reason.
    TooLarge(String),
}

/// A suspect record waiting to be sent, or sent, alone.
struct Isolation {
    record: Option<(KafkaRecord, DeliveryTag)>,
    event_id: String,
}

type SessionResult<T> = Result<T, SessionError>;

impl<'a> Session<'a> {
    pub(super) fn new(
        settings: &'a RelaySettings,
        stream: ReplicationStream,
        sink: KafkaSink,
        reports: mpsc::UnboundedReceiver<DeliveryReport>,
        confirmed: Lsn,
        too_large: &'a mut TooLarge,
        outbox: OutboxTable,
    ) -> Self {
        Self {
            settings,
            stream,
            sink,
            reports,
            tracker: AckTracker::new(confirmed),
            assembler: TransactionAssembler::new(),
            extractor: RowExtractor::new(settings.columns.clone()),
            decode_ctx: DecodeContext {
                protocol_version: 1,
                in_stream: false,
                parallel_streaming: false,
            },
            state: TxnState::Idle,
            retry: None,
            confirmed,
            table: outbox.qualified_name(),
            last_event: Instant::now(),
            too_large,
            isolating: None,
            outbox,
            classes: HashMap::new(),
            catalog: None,
        }
    }

    /// Streams until shutdown (returns the final confirmed LSN) or failure
    /// (returns the error and the LSN confirmed so far).
    pub(super) async fn run(
        mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Lsn, (SessionError, Lsn)> {
        let drain_deadline = match self.stream_until_shutdown(shutdown).await {
            Ok(deadline) => deadline,
            Err(e) => {
                if matches!(e, SessionError::Replication(_)) {
                    // Only the stream broke; the producer is healthy. Let
                    // what it already sent be acknowledged (briefly) so the
                    // next session starts past it instead of sending it again.
                    let deadline = Instant::now() + SETTLE_AFTER_STREAM_FAILURE;
                    self.settle_acks(deadline).await;
                }
                let confirmed = self.confirmed;
                self.abandon().await;
                return Err((e, confirmed));
            }
        };
        match self.drain_and_stop(drain_deadline).await {
            Ok(lsn) => Ok(lsn),
            Err((e, lsn)) => Err((e, lsn)),
        }
    }

    /// Streams until shutdown is requested and no transaction is half
    /// received; returns the deadline for the whole graceful stop.
    async fn stream_until_shutdown(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> SessionResult<Instant> {
        let heartbeat_every = self.settings.heartbeat_interval;
        let mut heartbeat_tick =
            tokio::time::interval(heartbeat_every.unwrap_or(Duration::from_secs(3600)));
        heartbeat_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        heartbeat_tick.reset();
        let mut heartbeat: Option<JoinHandle<()>> = None;
        // Set once a stop was requested in the middle of a transaction.
        let mut stopping: Option<Instant> = None;
        loop {
            if let Some(deadline) = stopping
                && !matches!(self.state, TxnState::Open(_))
            {
                return Ok(deadline);
            }
            let status_due = self.stream.status_due_at();
            let can_read = self.retry.is_none()
                && self.isolating.is_none()
                && (self.tracker.pending_events() as usize) < self.settings.max_in_flight;
            tokio::select! {
                biased;
                // A dropped sender means nobody can ask for a stop any more:
                // treat it as one.
                _ = async { shutdown.wait_for(|stop| *stop).await.is_ok() }, if stopping.is_none() => {
                    if let Some(task) = heartbeat.take() {
                        task.abort();
                    }
                    let deadline = Instant::now() + self.settings.shutdown_drain;
                    if !matches!(self.state, TxnState::Open(_)) {
                        return Ok(deadline);
                    }
                    // Events of a transaction are sent as they arrive, but
                    // only its Commit makes them confirmable. Stopping now
                    // would leave delivered events unconfirmed, sent again
                    // after the restart: read on to the Commit (bounded by
                    // the drain deadline) so a graceful stop sends nothing twice.
                    tracing::info!("stop requested mid-transaction: reading on to its commit");
                    stopping = Some(deadline);
                }
                () = tokio::time::sleep_until(stopping.unwrap_or_else(Instant::now)), if stopping.is_some() => {
                    tracing::warn!(
                        "shutdown deadline passed before the open transaction's commit arrived; its events will be sent again on restart"
                    );
                    return Ok(Instant::now());
                }
                Some(report) = self.reports.recv() => {
                    self.on_report(report)?;
                    self.resend_refused()?;
                    self.send_isolated_when_alone()?;
                }
                item = self.stream.next(), if can_read => {
                    self.on_item(item?).await?;
                }
                // While backpressure keeps `next()` from running, status
                // updates (periodic, and prompt reports of progress) still
                // have to reach the server.
                () = tokio::time::sleep_until(status_due), if !can_read => {
                    self.stream.send_due_status().await?;
                }
                _ = heartbeat_tick.tick(), if heartbeat_every.is_some() => {
                    let idle = self.last_event.elapsed() >= heartbeat_every.unwrap_or_default();
                    let running = heartbeat.as_ref().is_some_and(|t| !t.is_finished());
                    if idle && !running {
                        heartbeat = Some(spawn_heartbeat(self.settings.replication.clone()));
                    }
                }
            }
            metrics::gauge!(m::EVENTS_IN_FLIGHT).set(self.tracker.pending_events() as f64);
        }
    }

    async fn on_item(&mut self, item: StreamItem) -> SessionResult<()> {
        match item {
            StreamItem::XLogData { wal_end, data, .. } => {
                metrics::counter!(m::BYTES_RECEIVED).increment(data.len() as u64);
                metrics::gauge!(m::RECEIVED_LSN).set(wal_end.as_u64() as f64);
                self.on_wal(data).await
            }
            StreamItem::Keepalive { wal_end } => {
                // The keepalive carries the last LSN *sent*. Only when nothing
                // is open or unacknowledged may the slot move up to it, so an
                // idle outbox on a busy database does not pin WAL (invariant 5).
                if matches!(self.state, TxnState::Idle)
                    && !self.assembler.in_transaction()
                    && self.retry.is_none()
                    && self.tracker.idle_advance(wal_end)
                {
                    self.confirm();
                }
                Ok(())
            }
        }
    }

    async fn on_wal(&mut self, mut data: Bytes) -> SessionResult<()> {
        let msg = pgoutput::decode(&mut data, &self.decode_ctx).map_err(|e| {
            SessionError::Fatal(format!(
                "cannot decode a pgoutput message from slot \"{}\": {e}",
                self.settings.replication.slot
            ))
        })?;
        let event = self.assembler.push(msg).map_err(|e| {
            SessionError::Fatal(format!(
                "replication stream out of step on slot \"{}\": {e}",
                self.settings.replication.slot
            ))
        })?;
        let Some(event) = event else { return Ok(()) };
        match event {
            TxEvent::Begin {
                final_lsn,
                commit_time,
                ..
            } => {
                if final_lsn < self.tracker.confirmed() {
                    self.state = TxnState::Replayed;
                } else {
                    let txn = self.tracker.open();
                    self.state = TxnState::Open(OpenTxn {
                        txn,
                        commit_lsn: final_lsn,
                        commit_time: pg_timestamp_to_utc(commit_time).unwrap_or_else(Utc::now),
                    });
                }
                Ok(())
            }
            TxEvent::Relation(relation) => self.on_relation(&relation).await,
            TxEvent::Insert { relation, tuple } => self.on_insert(&relation, &tuple),
            TxEvent::Update { relation } => {
                self.count_ignored(&relation, "update");
                Ok(())
            }
            TxEvent::Delete { relation } => {
                self.count_ignored(&relation, "delete");
                Ok(())
            }
            TxEvent::Truncate { relations } => {
                for r in &relations {
                    self.count_ignored(r, "truncate");
                }
                Ok(())
            }
            TxEvent::Message(msg) => {
                // A non-transactional message (our heartbeat, or anyone's)
                // arrives when it is decoded: every transaction that
                // committed before it has been received. With nothing in
                // flight, the slot may move up to it (invariant 5).
                if !msg.transactional
                    && matches!(self.state, TxnState::Idle)
                    && self.retry.is_none()
                    && self.tracker.idle_advance(msg.lsn)
                {
                    self.confirm();
                }
                Ok(())
            }
            TxEvent::Commit { end_lsn, .. } => {
                match std::mem::replace(&mut self.state, TxnState::Idle) {
                    TxnState::Open(open) => {
                        metrics::counter!(m::TRANSACTIONS).increment(1);
                        self.tracker
                            .close(open.txn, end_lsn)
                            .map_err(|e| SessionError::Fatal(format!("ack tracker: {e}")))?;
                        self.confirm();
                    }
                    TxnState::Replayed | TxnState::Idle => {}
                }
                Ok(())
            }
        }
    }

    fn count_ignored(&self, relation: &Relation, kind: &'static str) {
        if self.is_outbox(relation) {
            metrics::counter!(m::CHANGES_IGNORED, "kind" => kind).increment(1);
        }
    }

    fn is_outbox(&self, relation: &Relation) -> bool {
        self.classes
            .get(&relation.oid)
            .is_some_and(|class| class.is_outbox())
    }

    /// Decides, when the server describes a table, whether its inserts are
    /// outbox rows: by OID, from the catalog, never by the name in the
    /// message (pgoutput names the leaf partition of a partitioned outbox).
    async fn on_relation(&mut self, relation: &Relation) -> SessionResult<()> {
        let class = if self.outbox.members.contains(&relation.oid) {
            RelationClass::Outbox
        } else {
            let lookup = self.look_up(relation.oid).await?;
            classify(lookup)
        };
        match class {
            RelationClass::Outbox => {
                if relation.oid == self.outbox.oid
                    && (relation.namespace != self.outbox.schema
                        || relation.name != self.outbox.name)
                {
                    tracing::warn!(
                        configured = %self.outbox.qualified_name(),
                        now = %relation.qualified_name(),
                        oid = relation.oid,
                        "the outbox table was renamed; streaming on (same table). Set \
                         postgres.table to the new name before the next restart"
                    );
                }
            }
            RelationClass::OutboxByPublication => tracing::warn!(
                relation = %relation.qualified_name(),
                oid = relation.oid,
                outbox = %self.outbox.qualified_name(),
                "relation is not in the outbox's partition tree now, but the publication \
                 publishes nothing else: taking its rows as outbox rows (a partition detached \
                 or dropped since)"
            ),
            RelationClass::Other => {}
            RelationClass::Unknown => {
                metrics::counter!(m::CHANGES_IGNORED, "kind" => "unknown_relation").increment(1);
                tracing::error!(
                    relation = %relation.qualified_name(),
                    oid = relation.oid,
                    publication = %self.settings.replication.publication,
                    "a relation in the stream was dropped since and the publication also \
                     publishes other tables: the catalog cannot tell whether its rows were \
                     outbox rows, so they are skipped. Give the relay a publication of its own \
                     (CREATE PUBLICATION ... FOR TABLE <outbox> WITH (publish = 'insert'))"
                );
            }
        }
        self.classes.insert(relation.oid, class);
        Ok(())
    }

    /// One catalog look-up on the session's SQL connection (opened on
    /// first use, kept for the session).
    async fn look_up(&mut self, oid: u32) -> SessionResult<RelationLookup> {
        let connection = match &mut self.catalog {
            Some(connection) => connection,
            None => self
                .catalog
                .insert(SqlConnection::connect(&self.settings.replication).await?),
        };
        let result = look_up(
            connection,
            &self.outbox,
            &self.settings.replication.publication,
            oid,
        )
        .await;
        if result.is_err() {
            // A broken connection is not reused.
            self.catalog = None;
        }
        Ok(result?)
    }

    fn on_insert(&mut self, relation: &Arc<Relation>, tuple: &TupleData) -> SessionResult<()> {
        let open = match &self.state {
            TxnState::Open(open) => open,
            TxnState::Replayed => return Ok(()),
            TxnState::Idle => {
                return Err(SessionError::Fatal(
                    "insert outside a transaction after framing checks".into(),
                ));
            }
        };
        if !self.is_outbox(relation) {
            metrics::counter!(m::CHANGES_IGNORED, "kind" => "other_table").increment(1);
            return Ok(());
        }
        let (txn, lsn, commit_time) = (open.txn, open.commit_lsn, open.commit_time);
        self.last_event = Instant::now();
        let row = match self.extractor.extract(relation, tuple) {
            Ok(row) => row,
            Err(e) => {
                let record = dead_letter_record(DeadLetter {
                    topic: &self.settings.dlq_topic,
                    reason: e.to_string(),
                    reason_code: e.reason_code(),
                    event_id: self.extractor.event_id(relation, tuple).as_deref(),
                    key: self.extractor.key(relation, tuple).unwrap_or_default(),
                    lsn,
                    source_table: &self.table,
                    value: Bytes::new(),
                });
                let tag = DeliveryTag {
                    txn,
                    event_id: String::new(),
                    lsn,
                    key: record.key.clone(),
                    dead_letter: true,
                };
                return self.send(record, tag);
            }
        };
        let tag = DeliveryTag {
            txn,
            event_id: row.id.clone(),
            lsn,
            key: Bytes::copy_from_slice(row.aggregate_id.as_bytes()),
            dead_letter: false,
        };
        // Almost always empty: skip hashing the id on the hot path.
        let known = if self.too_large.is_empty() {
            None
        } else {
            self.too_large.get(&row.id)
        };
        match known {
            Some(TooLargeEntry::TooLarge(why)) => {
                let record = self.too_large_dead_letter(&tag, why);
                return self.send(
                    record,
                    DeliveryTag {
                        dead_letter: true,
                        ..tag
                    },
                );
            }
            Some(TooLargeEntry::Suspect) => {
                if let Ok(record) = build_record(&row, commit_time, &self.settings.envelope) {
                    self.isolating = Some(Isolation {
                        record: Some((record, tag)),
                        event_id: row.id.clone(),
                    });
                    return self.send_isolated_when_alone();
                }
            }
            None => {}
        }
        match build_record(&row, commit_time, &self.settings.envelope) {
            Ok(record) => self.send(record, tag),
            Err(e) => {
                let record = dead_letter_record(DeadLetter {
                    topic: &self.settings.dlq_topic,
                    reason: e.to_string(),
                    reason_code: e.reason_code(),
                    event_id: Some(&row.id),
                    key: tag.key.clone(),
                    lsn,
                    source_table: &self.table,
                    value: row.payload.clone(),
                });
                self.send(
                    record,
                    DeliveryTag {
                        dead_letter: true,
                        ..tag
                    },
                )
            }
        }
    }

    /// Hands a record to the producer and counts it in its transaction.
    fn send(&mut self, record: KafkaRecord, tag: DeliveryTag) -> SessionResult<()> {
        let txn = tag.txn;
        self.tracker
            .add_event(txn)
            .map_err(|e| SessionError::Fatal(format!("ack tracker: {e}")))?;
        self.send_counted(record, tag)
    }

    /// Sends a record already counted in the tracker.
    fn send_counted(&mut self, record: KafkaRecord, tag: DeliveryTag) -> SessionResult<()> {
        match self.sink.send(record, tag) {
            Ok(()) => Ok(()),
            Err(SendError::QueueFull(refused)) => {
                // Stop reading until a report frees room (invariant 9).
                self.retry = Some(*refused);
                Ok(())
            }
            Err(SendError::TooLarge(err, tag)) => {
                self.dead_letter_too_large(*tag, &err.to_string())
            }
            Err(SendError::Failed(err)) => Err(SessionError::Delivery(
                self.sink.explain(DeliveryError::Failed(err)),
            )),
        }
    }

    fn resend_refused(&mut self) -> SessionResult<()> {
        if let Some((record, tag)) = self.retry.take() {
            self.send_counted(record, tag)?;
        }
        Ok(())
    }

    /// Sends the suspect being isolated once nothing else is in flight.
    fn send_isolated_when_alone(&mut self) -> SessionResult<()> {
        if self.tracker.pending_events() > 0 || self.retry.is_some() {
            return Ok(());
        }
        match self.isolating.as_mut().and_then(|i| i.record.take()) {
            Some((record, tag)) => self.send(record, tag),
            None => Ok(()),
        }
    }

    /// The broker refused a record as too large, in a delivery report.
    /// Alone (isolated), it is too large; in a batch, it is a suspect and the
    /// session ends so the replay can send it alone.
    fn on_refused_too_large(&mut self, tag: DeliveryTag, why: &str) -> SessionResult<()> {
        let alone = self
            .isolating
            .as_ref()
            .is_some_and(|i| i.record.is_none() && i.event_id == tag.event_id);
        if alone || tag.dead_letter {
            self.isolating = None;
            return self.dead_letter_too_large(tag, why);
        }
        self.too_large
            .entry(tag.event_id.clone())
            .or_insert(TooLargeEntry::Suspect);
        Err(SessionError::Delivery(DeliveryError::Failed(
            rdkafka::error::KafkaError::MessageProduction(
                rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge,
            ),
        )))
    }

    /// The record is too large (the producer's own `message.max.bytes`, or
    /// the broker refused it on its own): the dead-letter record takes its
    /// place in the transaction, with headers only.
    fn dead_letter_too_large(&mut self, tag: DeliveryTag, why: &str) -> SessionResult<()> {
        if tag.dead_letter {
            return Err(SessionError::Fatal(format!(
                "the dead-letter topic \"{}\" refused a record as too large: {why}",
                self.settings.dlq_topic
            )));
        }
        let why = format!("record too large for the broker: {why}");
        let record = self.too_large_dead_letter(&tag, &why);
        self.too_large
            .insert(tag.event_id.clone(), TooLargeEntry::TooLarge(why));
        // The original was counted once; its replacement takes that count.
        self.send_counted(
            record,
            DeliveryTag {
                dead_letter: true,
                ..tag
            },
        )
    }

    /// The dead letter of an event refused as too large: headers only.
    fn too_large_dead_letter(&self, tag: &DeliveryTag, why: &str) -> KafkaRecord {
        dead_letter_record(DeadLetter {
            topic: &self.settings.dlq_topic,
            reason: why.to_owned(),
            reason_code: "too_large",
            event_id: Some(&tag.event_id),
            key: tag.key.clone(),
            lsn: tag.lsn,
            source_table: &self.table,
            value: Bytes::new(),
        })
    }

    fn on_report(&mut self, report: DeliveryReport) -> SessionResult<()> {
        match report.result {
            Ok(()) => {
                if report.tag.dead_letter || self.isolating.is_some() {
                    // A settled too-large event: dead-lettered, or an
                    // isolated suspect that went through after all.
                    self.too_large.remove(&report.tag.event_id);
                    if self
                        .isolating
                        .as_ref()
                        .is_some_and(|i| i.event_id == report.tag.event_id)
                    {
                        self.isolating = None;
                    }
                }
                if report.tag.dead_letter {
                    metrics::counter!(m::EVENTS_DEAD_LETTERED).increment(1);
                } else {
                    metrics::counter!(m::EVENTS_PUBLISHED).increment(1);
                }
                self.tracker
                    .ack_event(report.tag.txn)
                    .map_err(|e| SessionError::Fatal(format!("ack tracker: {e}")))?;
                self.confirm();
                Ok(())
            }
            Err(DeliveryError::TooLarge(err)) => {
                self.on_refused_too_large(report.tag, &err.to_string())
            }
            Err(err) => Err(SessionError::Delivery(self.sink.explain(err))),
        }
    }

    /// Passes the tracker's acknowledged prefix to the stream; the stream
    /// sends it with its next status update.
    fn confirm(&mut self) {
        let confirmed = self.tracker.confirmed();
        if confirmed > self.confirmed {
            self.confirmed = confirmed;
            self.stream.confirm(confirmed);
            metrics::gauge!(m::CONFIRMED_LSN).set(confirmed.as_u64() as f64);
        }
    }

    /// Graceful stop: read nothing more, wait for outstanding reports up to
    /// the drain deadline (counted from the stop request), then send the
    /// final status update.
    async fn drain_and_stop(mut self, deadline: Instant) -> Result<Lsn, (SessionError, Lsn)> {
        // The stream is not read while draining: keep its status updates
        // going, or a drain longer than wal_sender_timeout loses the
        // connection before the final update.
        while self.tracker.pending_events() > 0 || self.retry.is_some() {
            let report = tokio::select! {
                r = self.reports.recv() => r,
                () = tokio::time::sleep_until(self.stream.status_due_at()) => {
                    if let Err(e) = self.stream.send_due_status().await {
                        tracing::warn!(error = %e, "status update while draining failed");
                    }
                    continue;
                }
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(
                        pending = self.tracker.pending_events(),
                        "shutdown deadline passed with events unacknowledged; they will be sent again on restart"
                    );
                    break;
                }
            };
            let Some(report) = report else { break };
            if let Err(e) = self.on_report(report).and_then(|()| self.resend_refused()) {
                let confirmed = self.confirmed;
                self.abandon().await;
                return Err((e, confirmed));
            }
        }
        let confirmed = self.confirmed;
        if let Err(e) = self.stream.shutdown().await {
            tracing::warn!(error = %e, "final status update failed; the slot keeps its last confirmed position");
        }
        drop_sink(self.sink).await;
        Ok(confirmed)
    }

    /// Takes delivery reports until nothing is pending or `deadline`
    /// passes, without reading the (broken) stream. A delivery failure here
    /// just ends the wait: the next session replays from the slot.
    async fn settle_acks(&mut self, deadline: Instant) {
        while self.tracker.pending_events() > 0 && self.retry.is_none() {
            let report = tokio::select! {
                r = self.reports.recv() => r,
                () = tokio::time::sleep_until(deadline) => break,
            };
            let Some(report) = report else { break };
            if self.on_report(report).is_err() {
                break;
            }
        }
    }

    /// Drops the stream and the producer after a failure. Unacknowledged
    /// records are discarded; the next session replays them from the slot.
    async fn abandon(self) {
        drop(self.stream);
        drop_sink(self.sink).await;
        // The destroyed producer reported everything it held. Reports that
        // arrive after the one that ended the session can still say "too
        // large" (librdkafka may report a fatal error's consequences before
        // its cause): note those records as suspects, or the replay would
        // send the same refused batch again.
        let mut reports = self.reports;
        while let Ok(report) = reports.try_recv() {
            if matches!(report.result, Err(DeliveryError::TooLarge(_))) && !report.tag.dead_letter {
                self.too_large
                    .entry(report.tag.event_id)
                    .or_insert(TooLargeEntry::Suspect);
            }
        }
    }
}

/// Emits one heartbeat in the background; a failure is logged, the stream
/// goes on (the next interval tries again).
fn spawn_heartbeat(settings: ReplicationSettings) -> JoinHandle<()> {
    tokio::spawn(async move {
        match emit_heartbeat(&settings).await {
            Ok(()) => metrics::counter!(m::HEARTBEATS).increment(1),
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed; trying again at the next interval")
            }
        }
    })
}

/// Destroying a producer blocks while librdkafka tears down its threads: do
/// it off the async workers.
async fn drop_sink(sink: KafkaSink) {
    let _ = tokio::task::spawn_blocking(move || {
        sink.purge();
        drop(sink);
    })
    .await;
}
