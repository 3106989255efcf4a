//! One streaming session, the I/O around the [`SessionMachine`]: from
//! START_REPLICATION until shutdown or failure.
//!
//! A single task owns the replication stream, the producer and its delivery
//! reports, and reacts to whichever is ready:
//!
//! * the relay lock lost (first, `biased`, with shutdown): stop at once,
//!   without waiting for acknowledgements: the producer is purged, nothing
//!   more is confirmed, and the next holder replays what was not (see
//!   `lock.rs`);
//! * shutdown: stop reading (once the transaction being
//!   received, if any, has reached its Commit, so that its already-sent
//!   events become confirmable), wait for outstanding acknowledgements up
//!   to the drain deadline, send the final status update;
//! * a delivery report (from the broker, or from the webhook dispatch for
//!   events routed to an HTTP sink), fed to the machine; what it confirms goes to the
//!   stream ("confirm only what the broker holds", docs/design.md);
//! * the next replication message, only while the machine can read
//!   ("bounded memory");
//! * the producer's client-level refusal (SASL refused), which is fatal;
//! * the idle heartbeat.
//!
//! Whenever the confirmed position moves, the rows of the transactions it
//! confirmed go to the cleanup's deleter (when `postgres.cleanup` is on),
//! without waiting for it.
//!
//! Nothing here sleeps or polls: every wake-up is a socket becoming readable,
//! a delivery report, a timer the stream owns, or shutdown.

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::error::SessionError;
use super::exactly_once::{Eos, Transactional};
use super::fates::Refusals;
use super::machine::{SessionMachine, Step};
use super::progress::Progress;
use super::sinks::Sinks;
use super::tag::DeliveryTag;
use super::{Background, RelaySettings, Stopped};
use crate::cleanup::Deleter;
use crate::lsn::Lsn;
use crate::metrics::{self as m, Health};
use crate::replication::{
    OutboxTable, RelationClass, ReplicationSettings, ReplicationStream, SqlConnection, StreamItem,
    classify, emit_heartbeat, look_up,
};
use crate::sink::http::dispatch::Dispatch;
use crate::sink::{DeliveryReport, KafkaSink};

/// How often the session updates the gauges that age with time (the oldest
/// unacknowledged event) and checks whether a progress line is due.
const OBSERVE_EVERY: Duration = Duration::from_secs(1);

/// At most this many messages already read off the socket, or delivery
/// reports already queued, are handled per turn of the session's `select!`;
/// then the other branches (stop requests, timers) get their turn.
const BUFFERED_ITEMS_PER_WAKE: usize = 64;

/// How long a session whose stream broke waits for the acknowledgements of
/// records already sent before it hands over to the next session. Short:
/// reconnecting matters more than saving a few duplicates.
const SETTLE_AFTER_STREAM_FAILURE: Duration = Duration::from_secs(5);

type SessionResult<T> = Result<T, SessionError>;
type Reports = mpsc::UnboundedReceiver<DeliveryReport<DeliveryTag>>;

/// Whether a stop was asked for.
enum Stop {
    Running,
    /// Asked in the middle of a transaction: reading on to its Commit,
    /// until this deadline.
    AtCommit(Instant),
}

pub(super) struct Session<'a> {
    settings: &'a RelaySettings,
    machine: SessionMachine<'a>,
    stream: ReplicationStream,
    sink: KafkaSink<DeliveryTag>,
    reports: Reports,
    /// The webhook sinks' side of this session.
    http: Dispatch<DeliveryTag>,
    health: Health,
    /// The position last handed to the stream.
    confirmed: Lsn,
    /// For catalog look-ups of relations not known at connect.
    catalog: Option<SqlConnection>,
    /// Counts acknowledgements for the progress line; outlives the session.
    progress: &'a mut Progress,
    /// The metrics updated for every message, held rather than looked up
    /// in the recorder's registry each time.
    hot: HotMetrics,
    /// Where confirmed rows go to be deleted, when cleanup is on.
    deleter: Option<Deleter>,
    /// Exactly-once: the open Kafka transaction; the slot is confirmed
    /// only up to its last committed checkpoint.
    eos: Option<Eos>,
    /// Turns true when the relay lock is lost; `None` without the lock.
    fence: Option<watch::Receiver<bool>>,
}

impl<'a> Session<'a> {
    pub(super) fn new(
        settings: &'a RelaySettings,
        stream: ReplicationStream,
        (sink, reports): (KafkaSink<DeliveryTag>, Reports),
        (outbox, confirmed): (Option<OutboxTable>, Lsn),
        refusals: &'a mut Refusals,
        health: Health,
        // What outlives the session: the progress line's counts, and the
        // background tasks' handles.
        (progress, background): (&'a mut Progress, &Background),
    ) -> Self {
        Session {
            settings,
            machine: SessionMachine::new(settings, outbox, confirmed, refusals)
                .with_tracer(background.tracer.clone()),
            stream,
            sink,
            reports,
            http: Dispatch::new(background.webhooks.clone()),
            health,
            confirmed,
            catalog: None,
            progress,
            deleter: background.deleter.clone(),
            hot: HotMetrics::register(),
            eos: None,
            fence: None,
        }
    }

    /// Exactly-once delivery (`exactly_once.rs`), resuming after the part
    /// of a transaction an earlier session committed.
    pub(super) fn with_exactly_once(
        mut self,
        eos: Option<Eos>,
        partial: Option<super::checkpoint::Partial>,
    ) -> Self {
        if eos.is_some() {
            self.machine = self.machine.exactly_once(partial);
        }
        self.eos = eos;
        self
    }

    /// Streams only while `fence` stays false (the relay lock held).
    pub(super) fn fenced_by(mut self, fence: Option<watch::Receiver<bool>>) -> Self {
        self.fence = fence;
        self
    }

    /// Feeds one delivery report to the machine, after taking what the
    /// metrics and the progress line need from it: the commit-to-ack
    /// latency of an event (dead letters are not the events anyone waits
    /// for).
    fn on_report(&mut self, report: DeliveryReport<DeliveryTag>) -> SessionResult<()> {
        if report.result.is_ok() {
            self.progress.acknowledged(report.tag.dead_letter);
            if !report.tag.dead_letter
                && let Some(committed) = self.machine.commit_time(report.tag.txn)
            {
                self.hot.commit_to_ack.record(seconds_since(committed));
            }
        }
        // Exactly-once is refused together with webhook routes (config
        // validation), so a transactional session has no HTTP sink.
        match &mut self.eos {
            Some(eos) => self.machine.on_report(
                report,
                &mut Transactional {
                    sink: &mut self.sink,
                    eos,
                },
            ),
            None => self.machine.on_report(
                report,
                &mut Sinks {
                    kafka: &mut self.sink,
                    http: &mut self.http,
                },
            ),
        }
    }

    /// Once per [`OBSERVE_EVERY`]: the age of the oldest unacknowledged
    /// event, which grows while the broker does not answer, and the
    /// progress line when one is due.
    fn observe(&mut self) {
        let oldest = self
            .machine
            .oldest_unacked_commit_time()
            .map_or(0.0, seconds_since);
        metrics::gauge!(m::OLDEST_UNACKED_AGE).set(oldest);
        if let Some(summary) = self.progress.due(
            std::time::Instant::now(),
            self.machine.pending_events(),
            self.confirmed,
        ) {
            summary.log();
        }
    }

    /// Streams until shutdown (returns the final confirmed position and
    /// whether everything sent was drained) or failure (returns the error
    /// and the position confirmed so far).
    pub(super) async fn run(
        mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(Lsn, Stopped), (SessionError, Lsn)> {
        let deadline = match self.stream_until_shutdown(shutdown).await {
            Ok(deadline) => deadline,
            Err(mut e) => {
                if matches!(e, SessionError::Replication(_)) {
                    // Only the stream broke; the producer is healthy. Let
                    // what it already sent be acknowledged (briefly) so the
                    // next session starts past it instead of sending it again.
                    if let Some(fatal) = self.settle(SETTLE_AFTER_STREAM_FAILURE).await {
                        e = fatal;
                    }
                }
                let confirmed = self.confirmed;
                return Err((self.abandon(e).await, confirmed));
            }
        };
        self.drain_and_stop(deadline).await
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
        let mut observe_tick = tokio::time::interval(OBSERVE_EVERY);
        observe_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let (mut rows_at_tick, mut last_row) = (0, Instant::now());
        let mut stop = Stop::Running;
        loop {
            if let Stop::AtCommit(deadline) = stop
                && !self.machine.delivering()
            {
                return Ok(deadline);
            }
            let status_due = self.stream.status_due_at();
            let stop_deadline = match stop {
                Stop::AtCommit(deadline) => Some(deadline),
                Stop::Running => None,
            };
            let can_read = self.machine.can_read();
            let commit_at = self
                .eos
                .as_ref()
                .and_then(|eos| eos.wake_at(&self.machine))
                .map(Instant::from_std);
            tokio::select! {
                biased;
                () = lock_lost(&mut self.fence) => {
                    if let Some(task) = heartbeat.take() {
                        task.abort();
                    }
                    return Err(SessionError::LockLost {
                        slot: self.settings.replication.slot.clone(),
                    });
                }
                // A dropped sender means nobody can ask for a stop any more:
                // treat it as one.
                _ = async { shutdown.wait_for(|stop| *stop).await.is_ok() }, if stop_deadline.is_none() => {
                    self.health.set_stopping();
                    if let Some(task) = heartbeat.take() {
                        task.abort();
                    }
                    let deadline = Instant::now() + self.settings.shutdown_drain;
                    if !self.machine.delivering() {
                        return Ok(deadline);
                    }
                    // Events of a transaction are sent as they arrive, but
                    // only its Commit makes them confirmable: read on to it
                    // (bounded by the drain deadline) so a graceful stop
                    // sends nothing twice.
                    tracing::info!("stop requested mid-transaction: reading on to its commit");
                    stop = Stop::AtCommit(deadline);
                }
                () = tokio::time::sleep_until(stop_deadline.unwrap_or_else(Instant::now)), if stop_deadline.is_some() => {
                    tracing::warn!(
                        "shutdown deadline passed before the open transaction's commit arrived; its events will be sent again on restart"
                    );
                    return Ok(Instant::now());
                }
                refused = self.sink.unauthorized() => {
                    return Err(SessionError::Refused(refused));
                }
                // Before the reports and the stream, which may be ready all
                // the time under load: this one fires once a second at most.
                _ = observe_tick.tick() => self.observe(),
                Some(report) = self.reports.recv() => {
                    self.on_report(report)?;
                    // Reports come one per acknowledged record; those
                    // already waiting are taken in this turn too, as the
                    // stream's messages are below (at-least-once only:
                    // exactly-once keeps to one thing per turn).
                    if self.eos.is_none() {
                        for _ in 1..BUFFERED_ITEMS_PER_WAKE {
                            match self.reports.try_recv() {
                                Ok(report) => self.on_report(report)?,
                                Err(_) => break,
                            }
                        }
                    }
                }
                report = self.http.recv() => {
                    self.on_report(report)?;
                }
                item = self.stream.next(), if can_read => {
                    self.on_item(item?).await?;
                    // What the same read brought in, without a trip through
                    // this select per message (it polls every branch).
                    // At-least-once only and only while running: exactly-once
                    // checks its transaction bounds after each message, and a
                    // stop reads on to a commit and no further.
                    if self.eos.is_none() && matches!(stop, Stop::Running) {
                        for _ in 1..BUFFERED_ITEMS_PER_WAKE {
                            if !self.machine.can_read() {
                                break;
                            }
                            match self.stream.try_next()? {
                                Some(item) => self.on_item(item).await?,
                                None => break,
                            }
                        }
                    }
                }
                // While backpressure keeps `next()` from running, status
                // updates (periodic, and prompt reports of progress) still
                // have to reach the server.
                () = tokio::time::sleep_until(status_due), if !can_read => {
                    self.stream.send_due_status().await?;
                }
                // Exactly-once: the open transaction reached its time bound.
                // (A disabled branch's expression is still evaluated: any
                // instant at hand, rather than reading the clock every turn.)
                () = tokio::time::sleep_until(commit_at.unwrap_or(status_due)), if commit_at.is_some() => {}
                _ = heartbeat_tick.tick(), if heartbeat_every.is_some() => {
                    let rows = self.machine.rows_seen();
                    if rows != rows_at_tick {
                        (rows_at_tick, last_row) = (rows, Instant::now());
                    }
                    let idle = last_row.elapsed() >= heartbeat_every.unwrap_or_default();
                    let running = heartbeat.as_ref().is_some_and(|t| !t.is_finished());
                    if idle && !running {
                        heartbeat = Some(spawn_heartbeat(self.settings.replication.clone()));
                    }
                }
            }
            if let Some(eos) = &mut self.eos {
                eos.commit_if_due(&mut self.machine, &self.sink, false)
                    .await?;
            }
            self.confirm();
            self.hot
                .events_in_flight
                .set(self.machine.pending_events() as f64);
        }
    }

    async fn on_item(&mut self, item: StreamItem) -> SessionResult<()> {
        match item {
            StreamItem::XLogData { wal_end, data, .. } => {
                self.hot.bytes_received.increment(data.len() as u64);
                self.hot.received_lsn.set(wal_end.as_u64() as f64);
                let step = match &mut self.eos {
                    Some(eos) => self.machine.on_wal(
                        data,
                        &mut Transactional {
                            sink: &mut self.sink,
                            eos,
                        },
                    )?,
                    None => self.machine.on_wal(
                        data,
                        &mut Sinks {
                            kafka: &mut self.sink,
                            http: &mut self.http,
                        },
                    )?,
                };
                if let Step::LookUp(relation) = step {
                    let class = match self.look_up(relation.oid).await? {
                        Some(lookup) => classify(lookup),
                        None => RelationClass::Other,
                    };
                    self.machine.relation_classified(&relation, class);
                }
            }
            StreamItem::Keepalive { wal_end } => {
                // Caught up counts as progress for /health.
                if self.machine.on_keepalive(wal_end) {
                    self.health.progress();
                }
            }
        }
        Ok(())
    }

    /// One catalog look-up on the session's SQL connection (opened on
    /// first use, kept for the session); `None` without an outbox table.
    async fn look_up(
        &mut self,
        oid: u32,
    ) -> SessionResult<Option<crate::replication::RelationLookup>> {
        let Some(outbox) = self.machine.outbox().cloned() else {
            return Ok(None);
        };
        let connection = match &mut self.catalog {
            Some(connection) => connection,
            None => self
                .catalog
                .insert(SqlConnection::connect(&self.settings.replication).await?),
        };
        let result = look_up(
            connection,
            &outbox,
            &self.settings.replication.publication,
            oid,
        )
        .await;
        if result.is_err() {
            // A broken connection is not reused.
            self.catalog = None;
        }
        Ok(Some(result?))
    }

    /// Passes the machine's acknowledged prefix to the stream; the stream
    /// reports it with its next status update.
    fn confirm(&mut self) {
        // Exactly-once: acknowledged is not enough, the transaction holding
        // the records must have committed (the machine knows which).
        let confirmed = self.machine.confirmable();
        if confirmed > self.confirmed {
            self.confirmed = confirmed;
            self.stream.confirm(confirmed);
            self.hot.confirmed_lsn.set(confirmed.as_u64() as f64);
            self.health.progress();
        }
        if let Some(deleter) = &mut self.deleter {
            deleter.hand_over(self.machine.take_deletable());
        }
    }

    /// Graceful stop: read nothing more, wait for outstanding reports up to
    /// `deadline` (counted from the stop request), then send the final
    /// status update. Says whether it drained: [`Stopped::Undrained`] when
    /// events were still unacknowledged at the deadline, or the open
    /// transaction's commit never arrived (either is sent again at the next
    /// start).
    async fn drain_and_stop(
        mut self,
        deadline: Instant,
    ) -> Result<(Lsn, Stopped), (SessionError, Lsn)> {
        while self.machine.awaiting_broker() {
            // The stream is not read while draining: keep its status updates
            // going, or a drain longer than wal_sender_timeout loses the
            // connection before the final update.
            let report = tokio::select! {
                r = self.reports.recv() => r,
                r = self.http.recv() => Some(r),
                () = tokio::time::sleep_until(self.stream.status_due_at()) => {
                    if let Err(e) = self.stream.send_due_status().await {
                        tracing::warn!(error = %e, "status update while draining failed");
                    }
                    continue;
                }
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(
                        pending = self.machine.pending_events(),
                        "shutdown deadline passed with events unacknowledged; they will be sent again on restart"
                    );
                    break;
                }
            };
            let Some(report) = report else { break };
            if let Err(e) = self.on_report(report) {
                let confirmed = self.confirmed;
                return Err((self.abandon(e).await, confirmed));
            }
            self.confirm();
        }
        // Decided before exactly-once aborts what it holds of an open
        // transaction: that is not drained either.
        let stopped = if self.machine.awaiting_broker() || self.machine.delivering() {
            Stopped::Undrained {
                pending: self.machine.pending_events(),
            }
        } else {
            Stopped::Drained
        };
        if let Some(eos) = &mut self.eos {
            // What was handed over whole goes out with its checkpoint.
            if let Err(e) = eos.commit_if_due(&mut self.machine, &self.sink, true).await {
                let confirmed = self.confirmed;
                return Err((self.abandon(e).await, confirmed));
            }
            eos.abort_open(&self.sink).await;
            self.confirm();
        }
        if let Err(e) = self.stream.shutdown().await {
            tracing::warn!(error = %e, "final status update failed; the slot keeps its last confirmed position");
        }
        drop_sink(self.sink).await;
        Ok((self.confirmed, stopped))
    }

    /// Takes delivery reports for at most `within`, until nothing is pending,
    /// without reading the (broken) stream. A delivery failure just ends the
    /// wait (the next session replays from the slot); a fatal one is returned.
    async fn settle(&mut self, within: Duration) -> Option<SessionError> {
        if self.eos.is_some() {
            // The open transaction is aborted: nothing to save.
            return None;
        }
        let deadline = Instant::now() + within;
        while self.machine.awaiting_broker() {
            let report = tokio::select! {
                r = self.reports.recv() => r,
                r = self.http.recv() => Some(r),
                () = tokio::time::sleep_until(deadline) => break,
            };
            let Some(report) = report else { break };
            let handled = self.on_report(report);
            self.confirm();
            if let Err(e) = handled {
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
        let Session {
            mut machine,
            stream,
            sink,
            mut reports,
            eos,
            ..
        } = self;
        drop(stream);
        let error = match eos {
            Some(mut eos) => eos.abandon(&sink, error).await,
            None => error,
        };
        drop_sink(sink).await;
        // The destroyed producer reported everything it held.
        let mut error = error;
        while let Ok(report) = reports.try_recv() {
            if let Some(fatal) = machine.on_leftover(report)
                && !error.is_fatal()
            {
                error = fatal;
            }
        }
        error
    }
}

/// Resolves once the relay lock is lost (a dropped sender counts as lost);
/// never without a lock.
async fn lock_lost(fence: &mut Option<watch::Receiver<bool>>) {
    match fence {
        Some(lost) => {
            let _ = lost.wait_for(|lost| *lost).await;
        }
        None => std::future::pending().await,
    }
}

/// Handles to the metrics a session updates per message or per loop turn.
/// `metrics::counter!` and friends look the name up in the recorder's
/// registry on every call; at three messages per single-row transaction
/// that showed in the W3 profile (benches/cpu-notes.md).
struct HotMetrics {
    bytes_received: metrics::Counter,
    received_lsn: metrics::Gauge,
    confirmed_lsn: metrics::Gauge,
    events_in_flight: metrics::Gauge,
    commit_to_ack: metrics::Histogram,
}

impl HotMetrics {
    fn register() -> Self {
        HotMetrics {
            bytes_received: metrics::counter!(m::BYTES_RECEIVED),
            received_lsn: metrics::gauge!(m::RECEIVED_LSN),
            confirmed_lsn: metrics::gauge!(m::CONFIRMED_LSN),
            events_in_flight: metrics::gauge!(m::EVENTS_IN_FLIGHT),
            commit_to_ack: metrics::histogram!(m::COMMIT_TO_ACK),
        }
    }
}

/// Seconds from `time` to now; 0 for a time ahead of this host's clock.
fn seconds_since(time: chrono::DateTime<chrono::Utc>) -> f64 {
    let elapsed = chrono::Utc::now().signed_duration_since(time);
    elapsed.to_std().map_or(0.0, |d| d.as_secs_f64())
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

/// How long a discarded producer's records in flight get to be answered
/// before they are purged (see [`KafkaSink::abandon`]).
const ABANDON_GRACE: Duration = Duration::from_secs(1);

/// Destroying a producer blocks while librdkafka tears down its threads: do
/// it off the async workers.
async fn drop_sink(sink: KafkaSink<DeliveryTag>) {
    let _ = tokio::task::spawn_blocking(move || sink.abandon(ABANDON_GRACE)).await;
}
