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

use super::delivery_tag::DeliveryTag;
use super::error::SessionError;
use super::exactly_once::Eos;
use super::machine::{ParkTag, SessionMachine};
use super::progress::Progress;
use super::refusals::Refusals;
use super::{Background, RelaySettings, Stopped};
use crate::cleanup::Deleter;
use crate::metrics::Health;
use crate::parking::Head;
use crate::parking::writer::{Writer, WriterSettings};
use crate::pg::PgClient;
use crate::replication::{OutboxTable, ReplicationSettings, ReplicationStream};
use crate::sink::http::dispatch::Dispatch;
use crate::sink::{DeliveryReport, KafkaSink};
use pgoutput::lsn::Lsn;

mod errands;
mod feed;
mod notices;
mod stop;

use errands::{HotMetrics, clocks, lock_lost, spawn_heartbeat};
use stop::SETTLE_AFTER_STREAM_FAILURE;

/// The parking writer's next report; pending for ever without a writer.
async fn park_report(parking: &mut Option<Writer<ParkTag>>) -> crate::parking::Report<ParkTag> {
    match parking {
        Some(writer) => writer.recv().await,
        None => std::future::pending().await,
    }
}

/// How often the session updates the gauges that age with time (the oldest
/// unacknowledged event) and checks whether a progress line is due.
const OBSERVE_EVERY: Duration = Duration::from_secs(1);

type SessionResult<T> = Result<T, SessionError>;
type Reports = mpsc::UnboundedReceiver<DeliveryReport<DeliveryTag>>;

pub(super) struct Session<'a> {
    settings: &'a RelaySettings,
    /// The settings the stream connected with (pinned to the relay lock's
    /// server while it is held): the catalog and heartbeat connections go
    /// where the stream went.
    replication: ReplicationSettings,
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
    catalog: Option<PgClient>,
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
    /// The parking writer, when anything parks after a dead letter.
    parking: Option<Writer<ParkTag>>,
}

impl<'a> Session<'a> {
    pub(super) fn new(
        settings: &'a RelaySettings,
        (stream, replication): (ReplicationStream, ReplicationSettings),
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
            replication,
            machine: SessionMachine::new(settings, outbox, confirmed, refusals, clocks())
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
            parking: None,
        }
    }

    /// The aggregates parked at the start (`heads`), and the writer that
    /// parks more (when `settings.parking` names a table).
    pub(super) fn with_parked(mut self, heads: Vec<Head>, settings: &RelaySettings) -> Self {
        self.machine = self.machine.with_parked(heads);
        self.parking = settings.parking.clone().map(|table| {
            Writer::spawn(WriterSettings {
                connection: self.replication.connection.clone(),
                table,
                shard: settings.source.shard.shard,
                sinks: settings.webhooks.routes.sinks().to_vec(),
                pace: parking_pace(settings.exactly_once.is_some()),
            })
        });
        self
    }

    /// Exactly-once delivery (`exactly_once.rs`), resuming after the part
    /// of a transaction an earlier session committed.
    pub(super) fn with_exactly_once(
        mut self,
        eos: Option<Eos>,
        partial: Option<super::exactly_once::checkpoint::Partial>,
    ) -> Self {
        if let Some(eos) = &eos {
            self.machine = self.machine.exactly_once(partial, eos.bounds());
        }
        self.eos = eos;
        self
    }

    /// Streams only while `fence` stays false (the relay lock held).
    pub(super) fn fenced_by(mut self, fence: Option<watch::Receiver<bool>>) -> Self {
        self.fence = fence;
        self
    }

    /// Streams until shutdown (returns the final confirmed position and
    /// whether everything sent was drained) or failure (returns the error
    /// and the position confirmed so far).
    pub(super) async fn run(
        mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(Lsn, Stopped), (SessionError, Lsn)> {
        let streamed = self.stream_until_shutdown(shutdown).await;
        // From here on (a drain, a settle) every report wakes the session.
        self.sink.hold_reports(false);
        let deadline = match streamed {
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
    /// received; returns the deadline for the whole graceful stop. The
    /// machine decides when the stream may end, how much one wake-up takes,
    /// when a heartbeat and a Kafka transaction's commit are due; this
    /// loop waits on what it says.
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
        loop {
            if let Some(deadline) = self.machine.stop_reached() {
                return Ok(Instant::from_std(deadline));
            }
            let status_due = self.stream.status_due_at();
            let stop_deadline = self.machine.stop_deadline().map(Instant::from_std);
            let can_read = self.machine.can_read();
            // A busy stream read to its end is left unread for a moment, so
            // that the next read takes several transactions (pace.rs).
            let read_hold = self.machine.read_hold().map(Instant::from_std);
            let commit_at = self.machine.commit_wake_at().map(Instant::from_std);
            // The report of the one event in flight may wait for the turn
            // the next WAL wakes (pace.rs; a record handed over lets go of
            // the hold); whatever landed is served now, so the reports
            // branch below sees it before the stream does.
            let reports_wait = self.machine.reports_wait_until().map(Instant::from_std);
            self.sink.hold_reports(reports_wait.is_some());
            self.machine.set_time(clocks());
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
                    if self.machine.stop_requested(deadline.into_std()).is_none() {
                        crate::events::StopMidTransaction.emit();
                    }
                }
                () = tokio::time::sleep_until(stop_deadline.unwrap_or(status_due)), if stop_deadline.is_some() => {
                    crate::events::StopDeadlineMidTransaction.emit();
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
                    // Reports already waiting are taken in this turn too,
                    // as many as the machine says.
                    for _ in 1..self.machine.reports_per_wake() {
                        match self.reports.try_recv() {
                            Ok(report) => self.on_report(report)?,
                            Err(_) => break,
                        }
                    }
                }
                // Reports held are due: the next turn serves them, and lets
                // the rest wake it.
                () = tokio::time::sleep_until(reports_wait.unwrap_or(status_due)), if reports_wait.is_some() => {}
                report = self.http.recv() => {
                    self.on_report(report)?;
                }
                report = park_report(&mut self.parking) => {
                    self.on_park_report(report)?;
                }
                item = self.stream.next(), if can_read && read_hold.is_none() => {
                    // When it arrived: after a pause, or not (pace.rs).
                    self.machine.set_time(clocks());
                    self.on_item(item?).await?;
                    // What the same read brought in, without a trip through
                    // this select per message (it polls every branch).
                    for _ in 1..self.machine.messages_per_wake() {
                        if !self.machine.can_read() {
                            break;
                        }
                        match self.stream.try_next()? {
                            Some(item) => self.on_item(item).await?,
                            None => break,
                        }
                    }
                    // All read: what a quiet stream means (exactly-once: an
                    // early commit; at-least-once: a nudge to the producer)
                    // is the machine's to decide.
                    if self.stream.caught_up() {
                        self.machine.stream_quiet(std::time::Instant::now());
                        if self.machine.nudge_due() {
                            self.sink.nudge();
                        }
                    }
                }
                // While backpressure keeps `next()` from running, status
                // updates (periodic, and prompt reports of progress) still
                // have to reach the server.
                () = tokio::time::sleep_until(status_due), if !can_read => {
                    self.stream.send_due_status().await?;
                }
                // The hold is over: the next turn reads what arrived.
                () = tokio::time::sleep_until(read_hold.unwrap_or(status_due)), if can_read && read_hold.is_some() => {}
                // Exactly-once: the open transaction reached its time bound.
                // (A disabled branch's expression is still evaluated: any
                // instant at hand, rather than reading the clock every turn.)
                () = tokio::time::sleep_until(commit_at.unwrap_or(status_due)), if commit_at.is_some() => {}
                _ = heartbeat_tick.tick(), if heartbeat_every.is_some() => {
                    let running = heartbeat.as_ref().is_some_and(|t| !t.is_finished());
                    let interval = heartbeat_every.unwrap_or_default();
                    if self.machine.heartbeat_due(std::time::Instant::now(), interval, running) {
                        heartbeat = Some(spawn_heartbeat(self.replication.clone()));
                    }
                }
            }
            self.machine.set_time(clocks());
            if let Some(eos) = &mut self.eos {
                eos.commit_if_due(&mut self.machine, &self.sink, false)
                    .await?;
            }
            self.confirm();
            self.hot
                .events_in_flight
                .set(self.machine.pending_events() as f64);
            self.hot
                .events_in_flight_bytes
                .set(self.machine.pending_bytes() as f64);
        }
    }
}

/// How often the parking writer commits while parked events keep coming
/// (`parking/writer.rs`). At-least-once, a parked event holds back only the
/// slot's confirmation, so batches of 50 ms cost nothing a consumer sees
/// and make a busy parked aggregate cheap during a drain (one transaction
/// per 50 ms instead of one per event). Exactly-once, the open Kafka
/// transaction commits only once the writer answered (`machine/commit.rs`),
/// so the pace stays well under its 100 ms bound.
fn parking_pace(exactly_once: bool) -> Duration {
    if exactly_once {
        Duration::from_millis(10)
    } else {
        Duration::from_millis(50)
    }
}
