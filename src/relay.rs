//! The relay: connects the replication stream to the Kafka producer, and
//! recovers from failures without losing or skipping anything.
//!
//! [`run`] is the outer loop: connect, stream (a [`session`]), and on a
//! transient failure (PostgreSQL restarted, walsender killed, a delivery
//! failed) back off, rebuild what broke and resume from the last confirmed
//! LSN ("a failed delivery rewinds, it never skips" in docs/design.md). Fatal errors (slot missing or invalidated, publication
//! missing, authentication refused, Kafka refusing the relay's credentials or
//! permissions, an unroutable event under `kafka.on_unroutable = "stop"`, a
//! missing dead-letter topic) end it with a message that names the fix.
//!
//! Each time round the retry loop it logs the reason at warn, counts it in
//! `outbox_relay_delivery_failures_total` or `outbox_relay_reconnects_total`
//! by reason label, and tells [`Health`], which turns /health 503 once the
//! loop has gone on for `relay.unhealthy_after_secs` without progress.
//!
//! The loop is a shell: `round` goes round once (lock, stream, session) and
//! says how it ended; `supervisor` decides, without I/O, what comes next
//! (retry after which delay, stand by, exit, stop) and what is counted,
//! logged and told to /health; [`run_sessions`] carries that out.
//!
//! Standby relays (`relay.standby_lock`, see `lock`): before it streams,
//! the relay holds the relay lock, or stands by and tries again; a session
//! ends the moment the lock is lost, and the relay stands by again. Taking
//! the lock, a relay ends the process still reading the slot (a relay that
//! lost the lock) instead of waiting for the server to notice.
//!
//! What is confirmed to PostgreSQL comes only from the ack tracker inside the
//! session ("confirm only what the broker holds" in docs/design.md); this loop carries that LSN from one session to the
//! next.

mod delivery_tag;
mod error;
pub mod exactly_once;
pub mod lock;
mod machine;
mod monitor;
mod position;
mod producer;
mod progress;
mod records;
mod refusals;
mod round;
mod session;
mod settings;
mod supervisor;
mod upkeep;

use std::time::Duration;

use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::cleanup::{self, Cleanup, DeleterSettings};
use crate::metrics::Health;
use crate::otel;
use crate::sink::http::dispatch::SinkRuntime;
use crate::sink::http::worker as http_worker;
use crate::sink::{KafkaSink, SinkError, TopicCheck};
use monitor::SlotLag;
use progress::Progress;
use std::sync::Arc;
use supervisor::{Action, Outcome, Supervisor};

pub use delivery_tag::DeliveryTag;
pub use error::{RelayError, SessionError, Side};
pub use lock::{DEFAULT_LEASE, LockError, LockSettings, MAX_LEASE, MIN_LEASE, lock_key};
pub use machine::{Notice, Producer, SessionMachine, Step};
pub use refusals::Refusals;
pub use settings::{Observability, RelaySettings, SourceSettings};
pub use upkeep::Upkeep;

/// Aborts the background task it holds when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How a graceful stop ended: what the exit code tells a supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every event sent was acknowledged and confirmed (or nothing was in
    /// flight): a restart sends nothing twice.
    Drained,
    /// The drain deadline (`kafka.shutdown_drain_secs`) passed with events
    /// unacknowledged, or before the open transaction's commit arrived:
    /// the slot was not confirmed past them, so the next start sends them
    /// again. Nothing is lost.
    Undrained {
        /// Events sent and not acknowledged when the relay gave up waiting.
        pending: u64,
    },
}

/// How long a stopping relay waits for its background tasks (the cleanup's
/// last deletes, the last spans) before it exits anyway.
const BACKGROUND_DRAIN: Duration = Duration::from_secs(5);

/// Runs the relay until `shutdown` becomes true (graceful: in-flight events
/// are drained and confirmed, up to the drain deadline; [`Stopped`] says
/// whether they were) or a fatal error occurs, with the default
/// [`Observability`].
pub async fn run(
    settings: RelaySettings,
    shutdown: watch::Receiver<bool>,
    health: Health,
) -> Result<Stopped, RelayError> {
    run_observed(
        settings,
        Observability::default(),
        &Upkeep::current(),
        shutdown,
        health,
    )
    .await
}

/// [`run`], with the progress line as `observability` says. The slot's lag
/// is sampled in the background for as long as it runs, and the background
/// tasks of the cleanup, the trace exporter and the parked gauges run
/// beside the sessions, on `upkeep`'s runtime with the relay lock's
/// session.
pub async fn run_observed(
    settings: RelaySettings,
    observability: Observability,
    upkeep: &Upkeep,
    shutdown: watch::Receiver<bool>,
    health: Health,
) -> Result<Stopped, RelayError> {
    let spawned = upkeep.enter(|| spawn_background(&settings, &observability, upkeep, &health))?;
    let background_webhooks = spawned.background.webhooks.clone();
    let outcome = run_sessions(
        settings,
        observability,
        shutdown,
        health,
        &spawned.background,
    )
    .await;
    // The tasks end once their last handle is gone, after finishing what
    // they hold.
    drop(spawned.background);
    let _ = spawned.stop_worker.send(true);
    if let Some(mut worker) = spawned.retry_worker {
        let longest = settings_timeout(&background_webhooks) + BACKGROUND_DRAIN;
        if tokio::time::timeout(longest, &mut worker).await.is_err() {
            worker.abort();
        }
    }
    let tasks = [spawned.exporter, spawned.cleaner, spawned.parked_gauges];
    for task in tasks.into_iter().flatten() {
        let _ = tokio::time::timeout(BACKGROUND_DRAIN, task).await;
    }
    outcome
}

/// A background task's handle, if it runs.
type Task = Option<tokio::task::JoinHandle<()>>;

/// The background tasks as `run_observed` holds them.
struct Spawned {
    /// Their handles, for the sessions.
    background: Background,
    exporter: Task,
    cleaner: Task,
    retry_worker: Task,
    parked_gauges: Task,
    /// Stops the retry worker and the parked gauges.
    stop_worker: watch::Sender<bool>,
}

/// The background tasks, spawned on the current runtime.
fn spawn_background(
    settings: &RelaySettings,
    observability: &Observability,
    upkeep: &Upkeep,
    health: &Health,
) -> Result<Spawned, RelayError> {
    let (tracer, exporter) = match &settings.otlp {
        Some(otlp) => {
            let (tracer, task) = otel::spawn_exporter(otlp.clone());
            (Some(tracer), Some(task))
        }
        None => (None, None),
    };
    let (deleter, cleaner) =
        if settings.source.cleanup == Cleanup::DeleteAfterAck && settings.source.kind.table() {
            let (deleter, task) = cleanup::spawn_deleter(DeleterSettings {
                connection: settings.replication.connection.clone(),
                table: settings.table.clone(),
                id_column: settings.columns.id.clone(),
                aggregate_id_column: settings.columns.aggregate_id.clone(),
                shard: settings.source.shard,
            });
            (Some(deleter), Some(task))
        } else {
            (None, None)
        };
    // The retry worker stops once the sessions are over (a graceful stop
    // after their drain, or a fatal error), finishing the rows it holds.
    let (stop_worker, worker_stop) = watch::channel(false);
    let (webhooks, retry_worker) = spawn_webhooks(settings, &worker_stop)?;
    let parked_gauges = observability.parked_table.clone().map(|table| {
        let connection = settings.replication.connection.clone();
        crate::parking::gauges::spawn(connection, table, health.clone(), worker_stop.clone())
    });
    let background = Background {
        tracer,
        deleter,
        webhooks,
        upkeep: upkeep.clone(),
    };
    Ok(Spawned {
        background,
        exporter,
        cleaner,
        retry_worker,
        parked_gauges,
        stop_worker,
    })
}

/// The longest request timeout of the webhook sinks.
fn settings_timeout(sinks: &[Arc<SinkRuntime>]) -> Duration {
    sinks
        .iter()
        .map(|s| s.settings.timeout)
        .max()
        .unwrap_or_default()
}

/// The handles of the background tasks, for every session.
pub(crate) struct Background {
    pub(crate) tracer: Option<otel::Tracer>,
    pub(crate) deleter: Option<cleanup::Deleter>,
    /// The webhook sinks, indexed as `[[routes]]` name them; shared by the
    /// sessions and the retry worker.
    pub(crate) webhooks: Vec<Arc<SinkRuntime>>,
    /// Where the relay lock's session and the monitor run.
    pub(crate) upkeep: Upkeep,
}

/// The webhook sinks and the retry worker's task, if any.
type WebhookParts = (Vec<Arc<SinkRuntime>>, Option<tokio::task::JoinHandle<()>>);

/// The webhook sinks' shared parts, and the retry worker beside the
/// sessions (it stops with `shutdown`, after finishing the rows it holds).
fn spawn_webhooks(
    settings: &RelaySettings,
    shutdown: &watch::Receiver<bool>,
) -> Result<WebhookParts, RelayError> {
    let connection = &settings.replication.connection;
    let mut runtimes = Vec::new();
    for sink in &settings.webhooks.sinks {
        let runtime = SinkRuntime::new(
            sink.clone(),
            settings.webhooks.table.clone(),
            connection.clone(),
        )
        .map_err(|e| RelayError::Webhook(format!("sinks.{}: {e}", sink.name)))?;
        runtimes.push(runtime);
    }
    let worker = (!runtimes.is_empty())
        .then(|| tokio::spawn(http_worker::run(runtimes.clone(), shutdown.clone())));
    Ok((runtimes, worker))
}

/// The outer loop: goes round ([`round::Sessions`]) and carries out what
/// the supervisor decides after each round (`supervisor.rs`).
async fn run_sessions(
    settings: RelaySettings,
    observability: Observability,
    shutdown: watch::Receiver<bool>,
    health: Health,
    background: &Background,
) -> Result<Stopped, RelayError> {
    let lag = SlotLag::default();
    let _monitor = AbortOnDrop(
        background
            .upkeep
            .enter(|| tokio::spawn(monitor::run(settings.replication.clone(), lag.clone()))),
    );
    let progress = Progress::new(
        observability.progress_interval,
        lag,
        std::time::Instant::now(),
    );
    health.set_unhealthy_after(settings.unhealthy_after);
    let mut supervisor = Supervisor::new(&settings.replication.slot, Backoff::reconnect());
    let mut shutdown = shutdown;
    let Some(settings) =
        resolve_contracts(settings, &mut supervisor, &mut shutdown, &health).await?
    else {
        health.set_stopping();
        return Ok(Stopped::Drained);
    };
    let sessions = round::Sessions::new(&settings, progress, health.clone(), background);
    supervise(supervisor, sessions, shutdown, &health).await
}

/// The settings with every registry contract's schema fetched (a pinned
/// version, or the latest now), before the first session: an event is
/// never sent unchecked for want of its schema. While the registry does
/// not answer, the supervisor's policy goes round (retry after its
/// back-off, /health told, the reconnect counter's `schema_registry`);
/// `None`: a stop was asked for meanwhile.
async fn resolve_contracts(
    mut settings: RelaySettings,
    supervisor: &mut Supervisor,
    shutdown: &mut watch::Receiver<bool>,
    health: &Health,
) -> Result<Option<RelaySettings>, RelayError> {
    loop {
        if *shutdown.borrow() {
            return Ok(None);
        }
        let error = match settings.contracts.resolve().await {
            Ok(contracts) => {
                settings.contracts = contracts;
                return Ok(Some(settings));
            }
            Err(error) => error,
        };
        match supervisor.decide(Outcome::Unresolved(error)) {
            Action::Retry { after, report } => {
                report.emit(health);
                if wait_or_shutdown(after, shutdown).await {
                    return Ok(None);
                }
            }
            Action::Exit(error) => return Err(error),
            other => unreachable!("the supervisor retries or exits on a registry error: {other:?}"),
        }
    }
}

/// What the outer loop goes round: the real sessions, or a test's script.
pub(crate) trait Rounds {
    /// One time round: the relay lock, the stream, a session.
    async fn round(&mut self, shutdown: &mut watch::Receiver<bool>) -> Outcome;
    /// The relay lock is lost, or another relay holds it: let go of it.
    fn let_go_of_lock(&mut self);
}

impl Rounds for round::Sessions<'_> {
    async fn round(&mut self, shutdown: &mut watch::Receiver<bool>) -> Outcome {
        round::Sessions::round(self, shutdown).await
    }

    fn let_go_of_lock(&mut self) {
        round::Sessions::let_go_of_lock(self);
    }
}

/// Goes round until a stop or a fatal error, doing what `supervisor`
/// decides after each round.
pub(crate) async fn supervise(
    mut supervisor: Supervisor,
    mut rounds: impl Rounds,
    mut shutdown: watch::Receiver<bool>,
    health: &Health,
) -> Result<Stopped, RelayError> {
    loop {
        if *shutdown.borrow() {
            health.set_stopping();
            return Ok(Stopped::Drained);
        }
        let outcome = rounds.round(&mut shutdown).await;
        let after = match supervisor.decide(outcome) {
            Action::Retry { after, report } => {
                report.emit(health);
                after
            }
            Action::StandBy { after, report } => {
                rounds.let_go_of_lock();
                if let Some(report) = &report {
                    report.emit(health);
                }
                after
            }
            Action::Exit(error) => return Err(error),
            Action::Stop { stopped, said } => {
                said.emit();
                return Ok(stopped);
            }
        };
        if !after.is_zero() && wait_or_shutdown(after, &mut shutdown).await {
            health.set_stopping();
            return Ok(Stopped::Drained);
        }
    }
}

/// Asks the cluster about the dead-letter topic before the first event, so
/// that a missing one (on a broker that does not create topics) or one the
/// relay may not write to stops the relay now, not at the first bad row,
/// which could be weeks away. A broker that does not answer in time only
/// gets a warning: the first dead letter will tell.
async fn check_dead_letter_topic(
    sink: &mut KafkaSink<DeliveryTag>,
    settings: &RelaySettings,
) -> Result<(), SinkError> {
    let timeout = settings.sink.topic_check_timeout();
    match sink.check_topic(&settings.dlq_topic, true, timeout).await {
        TopicCheck::Exists => Ok(()),
        TopicCheck::Refused(refused) => Err(refused.into()),
        TopicCheck::Unknown(why) => {
            crate::events::DeadLetterTopicUnchecked {
                topic: &settings.dlq_topic,
                why: &why,
            }
            .emit();
            Ok(())
        }
    }
}

/// Sleeps for `delay`; returns true if shutdown was requested meanwhile.
async fn wait_or_shutdown(delay: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        biased;
        // A dropped sender can never ask for a stop again: stop now.
        _ = shutdown.wait_for(|stop| *stop) => true,
        () = tokio::time::sleep(delay) => false,
    }
}
