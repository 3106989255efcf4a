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
//! [`m::DELIVERY_FAILURES`] or [`m::RECONNECTS`] by reason label, and tells
//! [`Health`], which turns /health 503 once the loop has gone on for
//! `relay.unhealthy_after_secs` without progress.
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

pub mod checkpoint;
mod error;
pub mod exactly_once;
mod fates;
pub mod lock;
mod machine;
mod monitor;
mod position;
mod progress;
mod records;
mod session;
mod settings;
mod sinks;
mod tag;

use std::time::Duration;

use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::cleanup::{self, Cleanup, DeleterSettings};
use crate::lsn::Lsn;
use crate::metrics::{self as m, Health};
use crate::otel;
use crate::replication::{ErrorKind, ReplicationError, ReplicationStream};
use crate::sink::http::dispatch::SinkRuntime;
use crate::sink::http::table_access;
use crate::sink::http::worker as http_worker;
use crate::sink::{KafkaSink, SinkError, TopicCheck};
use monitor::SlotLag;
use position::Position;
use progress::Progress;
use std::sync::Arc;

pub use error::{RelayError, SessionError, Side};
pub use fates::Refusals;
pub use lock::{DEFAULT_LEASE, LockError, LockSettings, MAX_LEASE, MIN_LEASE, lock_key};
pub use machine::{Producer, SessionMachine, Step};
pub use settings::{Observability, RelaySettings, SourceSettings};
pub use tag::DeliveryTag;

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
    run_observed(settings, Observability::default(), shutdown, health).await
}

/// [`run`], with the progress line as `observability` says. The slot's lag
/// is sampled in the background for as long as it runs, and the background
/// tasks of the cleanup and the trace exporter run beside the sessions.
pub async fn run_observed(
    settings: RelaySettings,
    observability: Observability,
    shutdown: watch::Receiver<bool>,
    health: Health,
) -> Result<Stopped, RelayError> {
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
                connection: settings.replication.clone(),
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
    let (webhooks, retry_worker) = spawn_webhooks(&settings, &worker_stop)?;
    let background = Background {
        tracer,
        deleter,
        webhooks,
    };
    let background_webhooks = background.webhooks.clone();
    let outcome = run_sessions(settings, observability, shutdown, health, &background).await;
    // The tasks end once their last handle is gone, after finishing what
    // they hold.
    drop(background);
    let _ = stop_worker.send(true);
    if let Some(mut worker) = retry_worker {
        let longest = settings_timeout(&background_webhooks) + BACKGROUND_DRAIN;
        if tokio::time::timeout(longest, &mut worker).await.is_err() {
            worker.abort();
        }
    }
    for task in [exporter, cleaner].into_iter().flatten() {
        let _ = tokio::time::timeout(BACKGROUND_DRAIN, task).await;
    }
    outcome
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
}

/// The webhook sinks and the retry worker's task, if any.
type WebhookParts = (Vec<Arc<SinkRuntime>>, Option<tokio::task::JoinHandle<()>>);

/// The webhook sinks' shared parts, and the retry worker beside the
/// sessions (it stops with `shutdown`, after finishing the rows it holds).
fn spawn_webhooks(
    settings: &RelaySettings,
    shutdown: &watch::Receiver<bool>,
) -> Result<WebhookParts, RelayError> {
    let mut connection = settings.replication.clone();
    connection.outbox_table = None;
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

async fn run_sessions(
    mut settings: RelaySettings,
    observability: Observability,
    mut shutdown: watch::Receiver<bool>,
    health: Health,
    background: &Background,
) -> Result<Stopped, RelayError> {
    let lag = SlotLag::default();
    let _monitor = AbortOnDrop(tokio::spawn(monitor::run(
        settings.replication.clone(),
        lag.clone(),
    )));
    let mut progress = Progress::new(
        observability.progress_interval,
        lag,
        std::time::Instant::now(),
    );
    let mut confirmed;
    // The confirmed position and the server it belongs to, carried from
    // one session to the next (only to the same server: see `position`).
    let mut carried: Option<Position> = None;
    let mut attempt: u32 = 0;
    let mut backoff = Backoff::reconnect();
    let mut refusals = Refusals::new();
    let mut dead_letter_topic_checked = false;
    health.set_unhealthy_after(settings.unhealthy_after);
    let mut lock: Option<lock::HeldLock> = None;
    let mut candidate = lock::Candidate::default();
    let mut standing_by = false;
    // Every host of `postgres.url`, for the lock; while the lock is held,
    // the relay's connections go to its server only (`HeldLock::server`).
    let configured = settings.replication.conninfo.clone();
    loop {
        if *shutdown.borrow() {
            health.set_stopping();
            return Ok(Stopped::Drained);
        }
        if settings.lock.enabled && lock.as_ref().is_none_or(lock::HeldLock::is_lost) {
            settings.replication.conninfo = configured.clone();
            match lock::hold_lock(
                &settings,
                &mut candidate,
                &mut lock,
                &health,
                &mut standing_by,
            )
            .await
            {
                Ok(true) => {
                    if let Some(held) = &lock {
                        settings.replication.conninfo = configured.pinned_to(held.server());
                    }
                }
                Ok(false) => {
                    // Another relay holds the lock and moves the slot on:
                    // the position this one confirmed is no longer the
                    // last word, and the slot found ahead of it when it
                    // takes over is no gap. It starts from the slot then
                    // (an exactly-once relay from its checkpoint).
                    carried = None;
                    let delay = settings.lock.poll();
                    if wait_or_shutdown(delay, &mut shutdown).await {
                        health.set_stopping();
                        return Ok(Stopped::Drained);
                    }
                    continue;
                }
                Err(e) if e.is_fatal() => return Err(e.into()),
                Err(e) => {
                    let reason = m::reason::CONNECT_FAILED;
                    tracing::warn!(reason, error = %e, attempt, "cannot try the relay lock; retrying");
                    // Out of reach of PostgreSQL, it could not take over.
                    health.set_standby(false);
                    metrics::counter!(m::RECONNECTS, "reason" => reason).increment(1);
                    health.retrying(reason, &e);
                    if wait_or_shutdown(backoff.next_delay(), &mut shutdown).await {
                        health.set_stopping();
                        return Ok(Stopped::Drained);
                    }
                    attempt = attempt.saturating_add(1);
                    continue;
                }
            }
        }
        // The stream reports nothing before `confirm` below: the position to
        // report depends on which server answered.
        let mut stream = match ReplicationStream::connect(&settings.replication, Lsn::ZERO).await {
            Ok(stream) => stream,
            Err(e) => {
                let mut delay = backoff.next_delay();
                let reason = match e.kind() {
                    ErrorKind::Fatal => return Err(e.into()),
                    ErrorKind::SlotBusy if lock.is_some() => {
                        // The reader was told to end when the lock was
                        // taken; it is on its way out.
                        tracing::info!(error = %e, "holding the relay lock, waiting for the slot's previous reader to exit");
                        delay = backoff.first();
                        m::reason::SLOT_BUSY
                    }
                    ErrorKind::SlotBusy => {
                        tracing::warn!(
                            reason = m::reason::SLOT_BUSY,
                            error = %e,
                            "another process reads the slot; waiting for it to let go"
                        );
                        m::reason::SLOT_BUSY
                    }
                    ErrorKind::Transient => {
                        tracing::warn!(reason = m::reason::CONNECT_FAILED, error = %e, attempt, "cannot stream from PostgreSQL; retrying");
                        m::reason::CONNECT_FAILED
                    }
                };
                metrics::counter!(m::RECONNECTS, "reason" => reason).increment(1);
                health.retrying(reason, &e);
                if wait_or_shutdown(delay, &mut shutdown).await {
                    health.set_stopping();
                    return Ok(Stopped::Drained);
                }
                attempt = attempt.saturating_add(1);
                continue;
            }
        };
        let server = stream.identity().clone();
        // Exactly-once: the last committed checkpoint is where this session
        // starts (see `exactly_once`).
        let mut prepared = None;
        let mut partial = None;
        if let Some(eos) = &settings.exactly_once {
            match exactly_once::prepare(
                &settings.sink,
                eos,
                &settings.replication.slot,
                &server,
                stream.server_wal_position(),
            )
            .await
            {
                Ok(exactly_once::Prepared {
                    sink,
                    carried: from_checkpoint,
                    partial: from_partial,
                }) => {
                    partial = from_partial
                        .zip(from_checkpoint.as_ref())
                        .map(|(partial, position)| (partial, position.confirmed));
                    match from_checkpoint {
                        Some(position) => carried = Some(position),
                        None if carried.is_none() => tracing::info!(
                            topic = %eos.transactions.checkpoint_topic,
                            key = %eos.transactions.transactional_id,
                            "no checkpoint of this relay found: starting from the slot's position. \
                             Expected on the first start on a checkpoint topic; otherwise (the \
                             relay's checkpoints deleted from the topic) transactions already \
                             committed to Kafka above the slot's position are written again, once"
                        ),
                        // Keep what this process committed.
                        None => {}
                    }
                    prepared = Some(sink);
                }
                Err(e) if e.is_fatal() => return Err(e.into()),
                Err(e) => {
                    let reason = m::reason::PRODUCER_FATAL;
                    metrics::counter!(m::DELIVERY_FAILURES, "reason" => reason).increment(1);
                    tracing::warn!(reason, error = %e, attempt, "cannot start the Kafka transactions; retrying");
                    health.retrying(reason, &e);
                    drop(stream);
                    if wait_or_shutdown(backoff.next_delay(), &mut shutdown).await {
                        health.set_stopping();
                        return Ok(Stopped::Drained);
                    }
                    attempt = attempt.saturating_add(1);
                    continue;
                }
            }
        }
        let (start, resumed) = position::resume(
            carried.as_ref(),
            &server,
            stream.slot_confirmed_flush(),
            stream.server_wal_position(),
        );
        // The part of a transaction in Kafka counts only from the checkpoint
        // it was written with.
        let partial = partial
            .filter(|(_, at)| *at == start)
            .map(|(partial, _)| partial);
        position::report_resume(&resumed, &server, &stream, &settings.replication.slot);
        confirmed = start;
        stream.confirm(confirmed);
        metrics::gauge!(m::CONFIRMED_LSN).set(confirmed.as_u64() as f64);
        let outbox = stream.outbox_table().cloned();
        if !settings.replication.outbox_table_optional && outbox.is_none() {
            // The settings name the table (above), so the stream resolved it.
            return Err(ReplicationError::TableMissing {
                table: format!("{}.{}", settings.table.0, settings.table.1),
                database: String::new(),
            }
            .into());
        }
        if let Some(outbox) = &outbox {
            if outbox.current_name != outbox.qualified_name() {
                tracing::warn!(
                    configured = %outbox.qualified_name(),
                    now = %outbox.current_name,
                    oid = outbox.oid,
                    "the outbox table was renamed; streaming on (same table). Set postgres.table \
                     to the new name before the next restart"
                );
            }
            settings.replication.outbox_oid = Some(outbox.oid);
        }
        let (mut sink, reports) = match prepared {
            Some(prepared) => prepared,
            None => KafkaSink::<DeliveryTag>::new(&settings.sink)?,
        };
        let eos = settings
            .exactly_once
            .clone()
            .map(|eos| exactly_once::Eos::new(eos, &settings.replication.slot, server.clone()));
        let brokers = settings.sink.brokers.clone();
        let reach = health.clone();
        sink.on_reach(Box::new(move |down| match down {
            Some(why) => reach.kafka_unreachable(&format_args!("{brokers} ({why})")),
            None => reach.kafka_reachable(),
        }));
        // Before the first event: is any broker there at all? If none
        // answers, the probe says so once and the relay streams anyway:
        // the broker may come up later, and events wait in the producer
        // until it does. The dead-letter topic is checked at the first
        // start that reaches one.
        if !dead_letter_topic_checked
            && sink
                .probe_brokers(settings.sink.topic_check_timeout())
                .await
        {
            check_dead_letter_topic(&mut sink, &settings).await?;
            table_access::check_at_start(&background.webhooks).await?;
            dead_letter_topic_checked = true;
        }
        tracing::info!(
            slot = %settings.replication.slot,
            confirmed = %confirmed,
            "streaming from the slot's confirmed position"
        );
        health.set_streaming(true);
        metrics::gauge!(m::ROLE_ACTIVE).set(1.0);
        let outcome = session::Session::new(
            &settings,
            stream,
            (sink, reports),
            (outbox, confirmed),
            &mut refusals,
            health.clone(),
            (&mut progress, background),
        )
        .with_exactly_once(eos, partial)
        .fenced_by(lock.as_ref().map(lock::HeldLock::watch))
        .run(&mut shutdown)
        .await;
        health.set_streaming(false);
        if lock.is_none() {
            metrics::gauge!(m::ROLE_ACTIVE).set(0.0);
        }
        // Whatever waited in this session is replayed by the next one.
        metrics::gauge!(m::OLDEST_UNACKED_AGE).set(0.0);
        match outcome {
            Ok((final_confirmed, stopped)) => {
                match stopped {
                    Stopped::Drained => tracing::info!(
                        confirmed = %final_confirmed,
                        "stopped after draining in-flight events"
                    ),
                    Stopped::Undrained { pending } => tracing::warn!(
                        confirmed = %final_confirmed,
                        pending,
                        "stopped before every event was acknowledged; the slot stays at the \
                         confirmed position and the next start sends them again"
                    ),
                }
                return Ok(stopped);
            }
            Err((err, last_confirmed)) => {
                let progressed = last_confirmed > confirmed;
                confirmed = confirmed.max(last_confirmed);
                carried = Some(Position {
                    server: server.clone(),
                    confirmed,
                });
                // Fenced while the relay lock is lost: the relay that took
                // over fenced this producer. Stand by, like any lost lock.
                let err = match err {
                    SessionError::Transaction(crate::sink::TxnFailure::Fenced { .. })
                        if lock.as_ref().is_some_and(lock::HeldLock::is_lost) =>
                    {
                        SessionError::LockLost {
                            slot: settings.replication.slot.clone(),
                        }
                    }
                    err => err,
                };
                if err.is_fatal() {
                    return Err(err.into());
                }
                match &err {
                    SessionError::LockLost { .. } => {
                        let reason = m::reason::LOCK_LOST;
                        metrics::counter!(m::RECONNECTS, "reason" => reason).increment(1);
                        tracing::warn!(reason, error = %err, confirmed = %confirmed, "the relay lock was lost: stopped producing; standing by unless it can be taken again");
                        metrics::gauge!(m::ROLE_ACTIVE).set(0.0);
                        health.retrying(reason, &err);
                        lock = None;
                        // No backoff: the lock decides who goes on.
                        continue;
                    }
                    SessionError::Delivery { reason, error } => {
                        let reason = *reason;
                        metrics::counter!(m::DELIVERY_FAILURES, "reason" => reason).increment(1);
                        tracing::warn!(reason, error = %error, confirmed = %confirmed, "delivery failed; rebuilding the producer and replaying from the confirmed position");
                        health.producer_retrying(reason, error);
                    }
                    SessionError::Transaction(_) | SessionError::Checkpoint(_) => {
                        let reason = m::reason::PRODUCER_FATAL;
                        metrics::counter!(m::DELIVERY_FAILURES, "reason" => reason).increment(1);
                        tracing::warn!(reason, error = %err, checkpoint = %confirmed, "Kafka transaction failed; rebuilding the producer and replaying from the last committed checkpoint");
                        health.producer_retrying(reason, &err);
                    }
                    other => {
                        let reason = m::reason::STREAM_BROKE;
                        metrics::counter!(m::RECONNECTS, "reason" => reason).increment(1);
                        tracing::warn!(reason, error = %other, confirmed = %confirmed, "replication stream broke; reconnecting from the confirmed position");
                        health.retrying(reason, other);
                    }
                }
                // A failure right after a good run (something new confirmed)
                // starts the backoff over. A session that failed before
                // confirming anything (the broker refuses every record, say)
                // backs off further each time: otherwise a persistent failure
                // reconnects to PostgreSQL and builds a producer (a new
                // producer id on the broker) as fast as sessions can start.
                if progressed {
                    attempt = 0;
                    backoff.reset();
                }
                attempt = attempt.saturating_add(1);
                if wait_or_shutdown(backoff.next_delay(), &mut shutdown).await {
                    health.set_stopping();
                    return Ok(Stopped::Drained);
                }
            }
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
            tracing::warn!(
                topic = %settings.dlq_topic,
                why = %why,
                "could not check the dead-letter topic at start; a missing one will stop the relay at the first dead letter"
            );
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
