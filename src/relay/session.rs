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
//!   events await acknowledgement (backpressure, invariant 9);
//! * the producer's client-level refusal (SASL refused), which is fatal.
//!
//! Nothing here sleeps or polls: every wake-up is a socket becoming readable,
//! a delivery report, a timer the stream owns, or shutdown.
//!
//! Refused records (see [`crate::sink::classify`]): one refused as too large
//! or unroutable on the spot (by the producer's own checks) is replaced by
//! its dead letter in place. One the broker refuses stops the producer
//! (`enable.gapless.guarantee`), so the session ends and notes in
//! [`Refusals`] what the replay has to do with its row. Authorization and
//! authentication refusals, and unroutable events under
//! `kafka.on_unroutable = "stop"`, end the relay instead.

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
use crate::deadletter::{self, DeadLetter, dead_letter_record, row_columns};
use crate::envelope::{KafkaRecord, OutboxRow, build_record};
use crate::lsn::Lsn;
use crate::metrics::{self as m, Health};
use crate::outbox::RowExtractor;
use crate::pgoutput::{self, DecodeContext, TupleData, pg_timestamp_to_utc};
use crate::replication::{
    OutboxTable, RelationClass, RelationLookup, ReplicationError, ReplicationSettings,
    ReplicationStream, SqlConnection, StreamItem, classify, emit_heartbeat, look_up,
};
use crate::sink::{
    DeliveryError, DeliveryReport, DeliveryTag, KafkaSink, OnUnroutable, RefusalClass, RefusalKind,
    Refused, SendError,
};

/// How long a session whose stream broke waits for the acknowledgements of
/// records already sent before it hands over to the next session. Short:
/// reconnecting matters more than saving a few duplicates.
const SETTLE_AFTER_STREAM_FAILURE: Duration = Duration::from_secs(5);

/// Why a session ended without a graceful stop.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    /// A delivery failed: the relay rebuilds the producer and replays from
    /// the confirmed LSN. `reason` is one of [`m::reason`]'s labels.
    #[error("{error}")]
    Delivery {
        reason: &'static str,
        error: DeliveryError,
    },
    /// Kafka refuses the relay in a way retrying cannot cure.
    #[error(transparent)]
    Refused(Refused),
    /// The stream cannot be understood (a decoder or framing error): retrying
    /// would read the same bytes again, so the relay stops and says why.
    #[error("{0}")]
    Fatal(String),
}

impl SessionError {
    /// Whether the relay stops for good on this error.
    fn is_fatal(&self) -> bool {
        match self {
            SessionError::Replication(e) => e.kind() == crate::replication::ErrorKind::Fatal,
            SessionError::Delivery { .. } => false,
            SessionError::Refused(_) | SessionError::Fatal(_) => true,
        }
    }
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
    /// Rows whose records a broker refused; owned by the relay so it
    /// outlives this session.
    refusals: &'a mut Refusals,
    /// A suspect being sent alone; reading pauses meanwhile.
    isolating: Option<Isolation>,
    health: Health,
    /// The outbox table as resolved at connect.
    outbox: OutboxTable,
    /// What each relation described in this session is, by OID.
    classes: HashMap<u32, RelationClass>,
    /// For catalog look-ups of relations not known at connect.
    catalog: Option<SqlConnection>,
}

/// Rows whose records a broker refused, by row key (the outbox id, or
/// [`anonymous_row_key`] for a row whose id cannot be read), remembered
/// across producer rebuilds: with `enable.gapless.guarantee` a refusal stops
/// the producer, and the relay replays from the slot, where the row comes
/// back and is sent as its [`RowFate`] says.
///
/// The broker refuses a whole batch when one record breaks a rule (it
/// exceeds the topic's `max.message.bytes`, a policy or validation refuses
/// it), so a refusal in a batch only makes its records suspects. On the
/// replay a suspect is sent alone (nothing else in flight, reading paused):
/// refused again, it is dead-lettered; delivered, it was an innocent batch
/// mate and is forgotten. The same goes for a dead letter the dead-letter
/// topic refuses as too large: alone, it is sent again without its payload.
/// An entry goes once its row settled (its record or dead letter delivered).
pub type Refusals = HashMap<String, RowFate>;

/// What the replay does with a row whose record was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowFate {
    pub event: EventFate,
    pub dead_letter: DeadLetterFate,
}

/// What becomes of the row's event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EventFate {
    /// Sent as usual.
    #[default]
    Send,
    /// Refused in a batch: may be innocent; sent alone.
    Suspect,
    /// Refused on its own (or for a reason that is its own, like a missing
    /// topic): dead-lettered with this reason.
    DeadLetter { reason: String, code: &'static str },
}

/// What becomes of the row's dead letter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeadLetterFate {
    /// Sent whole, payload included.
    #[default]
    Send,
    /// The dead-letter topic refused it as too large in a batch: sent alone.
    Suspect,
    /// Refused as too large on its own: sent as [`deadletter::headers_only`].
    Truncate,
    /// Even the headers-only stand-in was refused: [`deadletter::minimal`].
    Minimal,
}

/// A suspect record waiting to be sent, or sent, alone.
struct Isolation {
    record: Option<(KafkaRecord, DeliveryTag)>,
    /// Its row key and whether it is the row's dead letter.
    row_key: String,
    dead_letter: bool,
    /// Already counted in its transaction (a dead letter replacing an event
    /// refused on the spot): then it is alone when it is the one pending.
    counted: bool,
}

/// The row key of a dead-lettered row whose id cannot be read: stable across
/// replays (same commit, same key, same payload), which is all the
/// [`Refusals`] need; identical rows share a fate, rightly.
fn anonymous_row_key(lsn: Lsn, key: &[u8], value: &[u8]) -> String {
    let mut hasher = openssl::sha::Sha256::new();
    hasher.update(&(key.len() as u64).to_be_bytes());
    hasher.update(key);
    hasher.update(value);
    let digest: String = hasher.finish()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("@{lsn}/{digest}")
}

/// The error that ends the relay for `refused`, if it does: authorization
/// and authentication always; an unroutable record under
/// `on_unroutable = "stop"`, or a dead letter (there is nowhere else to send
/// it).
fn fatal_refusal(
    on_unroutable: OnUnroutable,
    tag: &DeliveryTag,
    refused: &Refused,
) -> Option<SessionError> {
    let fatal = match refused.kind.class() {
        RefusalClass::Unauthorized => true,
        RefusalClass::Unroutable => tag.dead_letter || on_unroutable == OnUnroutable::Stop,
        RefusalClass::TooLarge => false,
    };
    fatal.then(|| SessionError::Refused(refused.clone()))
}

/// Notes in `refusals` what the replay does with the row of a refused
/// record (`alone`: it was sent alone, or refused on the spot); returns the
/// error that ends the relay instead, if the refusal is fatal.
fn note_refusal(
    refusals: &mut Refusals,
    on_unroutable: OnUnroutable,
    tag: &DeliveryTag,
    refused: &Refused,
    alone: bool,
) -> Option<SessionError> {
    if let Some(fatal) = fatal_refusal(on_unroutable, tag, refused) {
        return Some(fatal);
    }
    let fate = refusals.entry(tag.event_id.clone()).or_default();
    if tag.dead_letter {
        // Only "too large" gets here (see fatal_refusal).
        fate.dead_letter = match fate.dead_letter {
            DeadLetterFate::Send | DeadLetterFate::Suspect if !alone => DeadLetterFate::Suspect,
            DeadLetterFate::Send | DeadLetterFate::Suspect => DeadLetterFate::Truncate,
            DeadLetterFate::Truncate => DeadLetterFate::Minimal,
            DeadLetterFate::Minimal => return Some(SessionError::Refused(refused.clone())),
        };
    } else if alone || refused.kind == RefusalKind::TopicMissing {
        // A missing topic is no batch's fault: every record for it fails.
        fate.event = EventFate::DeadLetter {
            reason: refused.reason(),
            code: refused.kind.reason_code(),
        };
    } else if fate.event == EventFate::Send {
        fate.event = EventFate::Suspect;
    }
    None
}

/// The metric label of a failed delivery.
fn failure_reason(error: &DeliveryError) -> &'static str {
    match error {
        DeliveryError::Refused(r) => match r.kind.class() {
            RefusalClass::TooLarge => m::reason::TOO_LARGE,
            RefusalClass::Unroutable => m::reason::UNROUTABLE,
            RefusalClass::Unauthorized => m::reason::BROKER_ERROR,
        },
        DeliveryError::Failed(e)
            if e.rdkafka_error_code()
                == Some(rdkafka::types::RDKafkaErrorCode::MessageTimedOut) =>
        {
            m::reason::MESSAGE_TIMEOUT
        }
        DeliveryError::Failed(_) => m::reason::BROKER_ERROR,
        DeliveryError::ProducerFatal(_) => m::reason::PRODUCER_FATAL,
    }
}

type SessionResult<T> = Result<T, SessionError>;

impl<'a> Session<'a> {
    pub(super) fn new(
        settings: &'a RelaySettings,
        stream: ReplicationStream,
        (sink, reports): (KafkaSink, mpsc::UnboundedReceiver<DeliveryReport>),
        confirmed: Lsn,
        refusals: &'a mut Refusals,
        outbox: OutboxTable,
        health: Health,
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
            refusals,
            isolating: None,
            health,
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
            Err(mut e) => {
                if matches!(e, SessionError::Replication(_)) {
                    // Only the stream broke; the producer is healthy. Let
                    // what it already sent be acknowledged (briefly) so the
                    // next session starts past it instead of sending it again.
                    let deadline = Instant::now() + SETTLE_AFTER_STREAM_FAILURE;
                    if let Some(fatal) = self.settle_acks(deadline).await {
                        e = fatal;
                    }
                }
                let confirmed = self.confirmed;
                let e = self.abandon(e).await;
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
                refused = self.sink.unauthorized() => {
                    return Err(SessionError::Refused(refused));
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
                // Nothing newer than what is confirmed, nothing in flight:
                // caught up, which counts as progress for /health.
                if wal_end <= self.confirmed && self.tracker.pending_events() == 0 {
                    self.health.progress();
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
                // Keep what can be read: the payload is often the only copy.
                let salvaged = self.extractor.salvage(relation, tuple);
                let key = self.extractor.key(relation, tuple).unwrap_or_default();
                let value = salvaged.payload.unwrap_or_default();
                let row_key = self
                    .extractor
                    .event_id(relation, tuple)
                    .unwrap_or_else(|| anonymous_row_key(lsn, &key, &value));
                let record = dead_letter_record(DeadLetter {
                    topic: &self.settings.dlq_topic,
                    reason: e.to_string(),
                    reason_code: e.reason_code(),
                    key,
                    lsn,
                    source_table: &self.table,
                    value,
                    columns: salvaged.columns,
                });
                let tag = DeliveryTag {
                    txn,
                    event_id: row_key,
                    lsn,
                    key: record.key.clone(),
                    dead_letter: true,
                };
                return self.send_dead_letter(record, tag, false);
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
        let fate = if self.refusals.is_empty() {
            EventFate::Send
        } else {
            self.refusals
                .get(&row.id)
                .map_or(EventFate::Send, |f| f.event.clone())
        };
        if let EventFate::DeadLetter { reason, code } = fate {
            return self.dead_letter_row(&row, reason, code, tag, false);
        }
        let record = match build_record(&row, commit_time, &self.settings.envelope) {
            Ok(record) => record,
            Err(e) => {
                return self.dead_letter_row(&row, e.to_string(), e.reason_code(), tag, false);
            }
        };
        if fate == EventFate::Suspect {
            self.isolate(record, tag, false);
            return self.send_isolated_when_alone();
        }
        self.count(&tag)?;
        match self.send_counted(record, tag)? {
            None => Ok(()),
            // Refused before it left (larger than message.max.bytes, or its
            // topic is known not to exist): its dead letter takes its place
            // in the transaction.
            Some((refused, tag)) => self.dead_letter_row(
                &row,
                refused.reason(),
                refused.kind.reason_code(),
                tag,
                true,
            ),
        }
    }

    /// Counts a record in its transaction, before it is handed over.
    fn count(&mut self, tag: &DeliveryTag) -> SessionResult<()> {
        self.tracker
            .add_event(tag.txn)
            .map_err(|e| SessionError::Fatal(format!("ack tracker: {e}")))
    }

    /// Dead-letters an extracted row: its payload as the value, its columns
    /// as headers. `counted`: it replaces an event already counted.
    fn dead_letter_row(
        &mut self,
        row: &OutboxRow,
        reason: String,
        reason_code: &'static str,
        tag: DeliveryTag,
        counted: bool,
    ) -> SessionResult<()> {
        let record = dead_letter_record(DeadLetter {
            topic: &self.settings.dlq_topic,
            reason,
            reason_code,
            key: tag.key.clone(),
            lsn: tag.lsn,
            source_table: &self.table,
            value: row.payload.clone(),
            columns: row_columns(row),
        });
        let tag = DeliveryTag {
            dead_letter: true,
            ..tag
        };
        self.send_dead_letter(record, tag, counted)
    }

    /// Sends a dead letter as its row's fate says: whole, alone, or as a
    /// stand-in without its payload.
    fn send_dead_letter(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
        counted: bool,
    ) -> SessionResult<()> {
        let fate = if self.refusals.is_empty() {
            DeadLetterFate::Send
        } else {
            self.refusals
                .get(&tag.event_id)
                .map_or(DeadLetterFate::Send, |f| f.dead_letter)
        };
        let record = match fate {
            DeadLetterFate::Send => record,
            DeadLetterFate::Truncate => deadletter::headers_only(&record),
            DeadLetterFate::Minimal => deadletter::minimal(&record),
            DeadLetterFate::Suspect => {
                self.isolate(record, tag, counted);
                return self.send_isolated_when_alone();
            }
        };
        if !counted {
            self.count(&tag)?;
        }
        match self.send_counted(record, tag)? {
            None => Ok(()),
            Some((refused, tag)) => Err(self.replay_for(&tag, refused, true)),
        }
    }

    /// Hands a record already counted in its transaction to the producer.
    /// A dead letter refused on the spot as too large goes again as its
    /// smaller stand-in; an event refused on the spot comes back to the
    /// caller (which knows its row); a fatal refusal ends the session.
    fn send_counted(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
    ) -> SessionResult<Option<(Refused, DeliveryTag)>> {
        match self.sink.send(record, tag) {
            Ok(()) => Ok(None),
            Err(SendError::QueueFull(refused)) => {
                // Stop reading until a report frees room (invariant 9).
                self.retry = Some(*refused);
                Ok(None)
            }
            Err(SendError::Refused(refused, sent)) => {
                let (record, tag) = *sent;
                if let Some(fatal) = fatal_refusal(self.settings.on_unroutable, &tag, &refused) {
                    return Err(fatal);
                }
                if !tag.dead_letter {
                    return Ok(Some((refused, tag)));
                }
                // Larger than message.max.bytes: the payload cannot go.
                match deadletter::smaller(&record) {
                    Some(smaller) => self.send_counted(smaller, tag),
                    None => Err(SessionError::Refused(refused)),
                }
            }
            Err(SendError::Failed(err)) => Err(self.delivery_failed(DeliveryError::Failed(err))),
        }
    }

    /// Notes a refusal for the replay and returns the error that ends the
    /// session: a replay, or the fatal error.
    fn replay_for(&mut self, tag: &DeliveryTag, refused: Refused, alone: bool) -> SessionError {
        if let Some(fatal) = note_refusal(
            self.refusals,
            self.settings.on_unroutable,
            tag,
            &refused,
            alone,
        ) {
            return fatal;
        }
        let error = DeliveryError::Refused(refused);
        SessionError::Delivery {
            reason: failure_reason(&error),
            error,
        }
    }

    /// The session error for a failed delivery: a replay, unless the
    /// producer's fatal error is a refusal that retrying cannot cure.
    fn delivery_failed(&self, err: DeliveryError) -> SessionError {
        match self.sink.explain(err) {
            DeliveryError::Refused(refused)
                if refused.kind.class() == RefusalClass::Unauthorized =>
            {
                SessionError::Refused(refused)
            }
            error => SessionError::Delivery {
                reason: failure_reason(&error),
                error,
            },
        }
    }

    fn resend_refused(&mut self) -> SessionResult<()> {
        if let Some((record, tag)) = self.retry.take()
            && let Some((refused, tag)) = self.send_counted(record, tag)?
        {
            return Err(self.replay_for(&tag, refused, true));
        }
        Ok(())
    }

    /// Holds `record` back until it can go alone; reading pauses meanwhile.
    fn isolate(&mut self, record: KafkaRecord, tag: DeliveryTag, counted: bool) {
        self.isolating = Some(Isolation {
            row_key: tag.event_id.clone(),
            dead_letter: tag.dead_letter,
            counted,
            record: Some((record, tag)),
        });
    }

    /// Sends the suspect being isolated once nothing else is in flight.
    fn send_isolated_when_alone(&mut self) -> SessionResult<()> {
        let Some(isolation) = &self.isolating else {
            return Ok(());
        };
        let others = self
            .tracker
            .pending_events()
            .saturating_sub(u64::from(isolation.counted));
        if others > 0 || self.retry.is_some() {
            return Ok(());
        }
        let counted = isolation.counted;
        let Some((record, tag)) = self.isolating.as_mut().and_then(|i| i.record.take()) else {
            return Ok(());
        };
        if !counted {
            self.count(&tag)?;
        }
        match self.send_counted(record, tag)? {
            None => Ok(()),
            Some((refused, tag)) => Err(self.replay_for(&tag, refused, true)),
        }
    }

    /// Whether `tag` is the isolated record, sent alone.
    fn is_isolated(&self, tag: &DeliveryTag) -> bool {
        self.isolating.as_ref().is_some_and(|i| {
            i.record.is_none() && i.row_key == tag.event_id && i.dead_letter == tag.dead_letter
        })
    }

    fn on_report(&mut self, report: DeliveryReport) -> SessionResult<()> {
        match report.result {
            Ok(()) => {
                if report.tag.dead_letter || self.isolating.is_some() {
                    // A settled row: dead-lettered, or an isolated suspect
                    // that went through after all.
                    if !self.refusals.is_empty() {
                        self.refusals.remove(&report.tag.event_id);
                    }
                    if self.is_isolated(&report.tag) {
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
            Err(DeliveryError::Refused(refused)) => {
                let alone = self.is_isolated(&report.tag);
                Err(self.replay_for(&report.tag, refused, alone))
            }
            Err(err) => Err(self.delivery_failed(err)),
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
            self.health.progress();
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
                let e = self.abandon(e).await;
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
    /// just ends the wait: the next session replays from the slot; a fatal
    /// one is returned.
    async fn settle_acks(&mut self, deadline: Instant) -> Option<SessionError> {
        while self.tracker.pending_events() > 0 && self.retry.is_none() {
            let report = tokio::select! {
                r = self.reports.recv() => r,
                () = tokio::time::sleep_until(deadline) => break,
            };
            let Some(report) = report else { break };
            if let Err(e) = self.on_report(report) {
                return e.is_fatal().then_some(e);
            }
        }
        None
    }

    /// Drops the stream and the producer after a failure. Unacknowledged
    /// records are discarded; the next session replays them from the slot.
    /// Returns the error the session ends with: `error`, or a fatal refusal
    /// found among the last reports.
    async fn abandon(self, error: SessionError) -> SessionError {
        drop(self.stream);
        drop_sink(self.sink).await;
        // The destroyed producer reported everything it held. Reports that
        // arrive after the one that ended the session can still carry a
        // refusal (librdkafka may report a fatal error's consequences,
        // `_FATAL` and purges, before its cause): note those rows, or the
        // replay would send the same refused batch again, and stop on a
        // refusal that is fatal whatever ended the session.
        let mut error = error;
        let mut reports = self.reports;
        while let Ok(report) = reports.try_recv() {
            let Err(DeliveryError::Refused(refused)) = report.result else {
                continue;
            };
            let alone = self.isolating.as_ref().is_some_and(|i| {
                i.record.is_none()
                    && i.row_key == report.tag.event_id
                    && i.dead_letter == report.tag.dead_letter
            });
            let on_unroutable = self.settings.on_unroutable;
            if let Some(fatal) =
                note_refusal(self.refusals, on_unroutable, &report.tag, &refused, alone)
                && !error.is_fatal()
            {
                error = fatal;
            }
        }
        error
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ack::AckTracker;

    fn tag(dead_letter: bool) -> DeliveryTag {
        DeliveryTag {
            txn: AckTracker::new(Lsn::ZERO).open(),
            event_id: "row-1".into(),
            lsn: Lsn(1),
            key: Bytes::from_static(b"k"),
            dead_letter,
        }
    }

    fn refused(kind: RefusalKind, dead_letter: bool) -> Refused {
        Refused {
            kind,
            topic: Some("t".into()),
            dead_letter_topic: dead_letter,
            detail: "Broker: no".into(),
        }
    }

    fn note(
        refusals: &mut Refusals,
        on_unroutable: OnUnroutable,
        kind: RefusalKind,
        dead_letter: bool,
        alone: bool,
    ) -> Option<SessionError> {
        note_refusal(
            refusals,
            on_unroutable,
            &tag(dead_letter),
            &refused(kind, dead_letter),
            alone,
        )
    }

    #[test]
    fn an_event_refused_in_a_batch_is_a_suspect_then_dead_lettered_alone() {
        for kind in [
            RefusalKind::TooLarge,
            RefusalKind::PolicyViolation,
            RefusalKind::InvalidRecord,
        ] {
            let mut r = Refusals::new();
            let dl = OnUnroutable::DeadLetter;
            assert!(note(&mut r, dl, kind, false, false).is_none());
            assert_eq!(r["row-1"].event, EventFate::Suspect, "{kind:?}");
            assert!(note(&mut r, dl, kind, false, true).is_none());
            assert!(
                matches!(&r["row-1"].event, EventFate::DeadLetter { code, .. } if *code == kind.reason_code()),
                "{kind:?}: {:?}",
                r["row-1"]
            );
            // A later batch refusal does not undo what is known.
            assert!(note(&mut r, dl, kind, false, false).is_none());
            assert!(matches!(r["row-1"].event, EventFate::DeadLetter { .. }));
        }
        // A missing topic is the event's own: dead-lettered at once.
        let mut r = Refusals::new();
        let missing = RefusalKind::TopicMissing;
        assert!(note(&mut r, OnUnroutable::DeadLetter, missing, false, false).is_none());
        assert!(matches!(r["row-1"].event, EventFate::DeadLetter { .. }));
    }

    #[test]
    fn a_dead_letter_too_large_goes_alone_then_without_payload_then_minimal() {
        let mut r = Refusals::new();
        let too_large = RefusalKind::TooLarge;
        let stop = OnUnroutable::Stop;
        assert!(note(&mut r, stop, too_large, true, false).is_none());
        assert_eq!(r["row-1"].dead_letter, DeadLetterFate::Suspect);
        assert!(note(&mut r, stop, too_large, true, false).is_none());
        assert_eq!(r["row-1"].dead_letter, DeadLetterFate::Suspect);
        assert!(note(&mut r, stop, too_large, true, true).is_none());
        assert_eq!(r["row-1"].dead_letter, DeadLetterFate::Truncate);
        assert!(note(&mut r, stop, too_large, true, false).is_none());
        assert_eq!(r["row-1"].dead_letter, DeadLetterFate::Minimal);
        // Nothing smaller left: the dead-letter topic is misconfigured.
        assert!(matches!(
            note(&mut r, stop, too_large, true, true),
            Some(SessionError::Refused(_))
        ));
        assert_eq!(
            r["row-1"].event,
            EventFate::Send,
            "the event's fate is untouched"
        );
    }

    #[test]
    fn refusals_that_end_the_relay() {
        use RefusalKind::*;
        for kind in [TopicUnauthorized, ClusterUnauthorized, AuthenticationFailed] {
            for on_unroutable in [OnUnroutable::Stop, OnUnroutable::DeadLetter] {
                for dead_letter in [false, true] {
                    let mut r = Refusals::new();
                    assert!(
                        note(&mut r, on_unroutable, kind, dead_letter, false).is_some(),
                        "{kind:?} is fatal"
                    );
                    assert!(r.is_empty());
                }
            }
        }
        for kind in [TopicMissing, PolicyViolation, InvalidRecord] {
            let mut r = Refusals::new();
            assert!(note(&mut r, OnUnroutable::Stop, kind, false, true).is_some());
            // A dead letter that cannot be routed has nowhere else to go.
            assert!(note(&mut r, OnUnroutable::DeadLetter, kind, true, true).is_some());
            assert!(r.is_empty());
            assert!(note(&mut r, OnUnroutable::DeadLetter, kind, false, true).is_none());
        }
    }

    #[test]
    fn anonymous_row_keys_are_stable_and_tell_rows_apart() {
        let a = anonymous_row_key(Lsn(5), b"k", b"{}");
        assert_eq!(a, anonymous_row_key(Lsn(5), b"k", b"{}"));
        assert_ne!(a, anonymous_row_key(Lsn(6), b"k", b"{}"));
        assert_ne!(a, anonymous_row_key(Lsn(5), b"k2", b"{}"));
        assert_ne!(a, anonymous_row_key(Lsn(5), b"k", b"{ }"));
        // Key and value boundaries do not blur.
        assert_ne!(
            anonymous_row_key(Lsn(5), b"ab", b"c"),
            anonymous_row_key(Lsn(5), b"a", b"bc")
        );
    }

    #[test]
    fn failures_get_their_metric_label() {
        use rdkafka::error::KafkaError;
        use rdkafka::types::RDKafkaErrorCode as C;
        let failed = |c| DeliveryError::Failed(KafkaError::MessageProduction(c));
        assert_eq!(
            failure_reason(&failed(C::MessageTimedOut)),
            m::reason::MESSAGE_TIMEOUT
        );
        assert_eq!(
            failure_reason(&failed(C::NetworkException)),
            m::reason::BROKER_ERROR
        );
        assert_eq!(
            failure_reason(&DeliveryError::ProducerFatal("x".into())),
            m::reason::PRODUCER_FATAL
        );
        let refusal = |k| DeliveryError::Refused(refused(k, false));
        assert_eq!(
            failure_reason(&refusal(RefusalKind::TooLarge)),
            m::reason::TOO_LARGE
        );
        assert_eq!(
            failure_reason(&refusal(RefusalKind::TopicMissing)),
            m::reason::UNROUTABLE
        );
    }
}
