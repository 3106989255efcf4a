//! The session's side of the webhook sinks: events handed over by the
//! session machine, delivered per aggregate one at a time and in commit
//! order, each answered with a [`DeliveryReport`] once it is handled.
//!
//! "Handled" is the ack tracker's "delivered": a 2xx came back, or the
//! event's row is committed in the delivery table (PENDING to be retried by
//! the worker, or DEAD), or a row for the event was there already (a replay
//! of an event handled before a crash). So the slot's position moves past
//! an event that waits for a retry: the slot never waits on a retry.
//!
//! Per event, in its aggregate's lane:
//! 1. look the event and its aggregate up in the delivery table: known →
//!    handled; a row holds its aggregate (PENDING, or DEAD under
//!    `after_dead_letter = "park"`: [`store::holds`]) → inserted behind it
//!    as PENDING, never sent ahead of an older event;
//! 2. else up to `inline_attempts` quick tries (100 ms, 200 ms, … apart, or
//!    the receiver's `Retry-After` up to a second; a longer one ends the
//!    tries in line); a 2xx → handled; a permanent refusal → a DEAD row;
//! 3. still failing → a PENDING row, due after the schedule's first delay.
//!
//! Every row written records the event's `after_dead_letter` (its route's,
//! set by the session), so a DEAD row holds its aggregate or not as its
//! route says, also when the retry worker marks it DEAD later.
//!
//! A PostgreSQL failure is retried (with [`crate::backoff::Backoff`], 100 ms
//! to 5 s, shared by the sink's events; counted in
//! `outbox_relay_reconnects_total{reason="delivery_table"}`, logged once per
//! incident) until it works or the session ends: an event is never
//! reported handled before its row exists.
//!
//! Concurrency: one event in flight per (sink, aggregate); at most
//! `max_concurrency` events of a sink handled at once (their SQL and their
//! requests), plus the retry worker's few loops. The bookkeeping lives in
//! [`Dispatch`], owned by the session task; each event's work runs in its
//! own task, aborted when the session ends (the slot replays what was not
//! handled).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::Client;
use super::retry::{Answer, InlineTries, LastTry, Next};
use super::store::{self, DeliveryTable, NewRow, Session};
use super::{HttpSinkSettings, WebhookEvent};
use crate::backoff::{Backoff, Incident};
use crate::events;
use crate::metrics::{self as m, webhook_outcome};
use crate::pg::{ConnectSettings, PgError};
use crate::sink::DeliveryReport;

/// A sink's shared parts: settings, client, request limit, SQL connections.
pub struct SinkRuntime {
    pub settings: HttpSinkSettings,
    pub client: Client,
    limit: Semaphore,
    pub table: DeliveryTable,
    pub pool: Pool,
    /// Shared by the sink's events in flight.
    sql_trouble: Mutex<SqlTrouble>,
}

impl SinkRuntime {
    /// The connection settings of its SQL connections.
    pub fn pool_settings(&self) -> &ConnectSettings {
        &self.pool.settings
    }

    fn sql_trouble(&self) -> std::sync::MutexGuard<'_, SqlTrouble> {
        self.sql_trouble.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bound on requests in flight to this sink.
    pub fn limit(&self) -> &Semaphore {
        &self.limit
    }

    /// # Errors
    /// The client could not be set up (TLS library).
    pub fn new(
        settings: HttpSinkSettings,
        table: DeliveryTable,
        connection: ConnectSettings,
    ) -> Result<Arc<SinkRuntime>, super::client::TransportError> {
        let settings_concurrency = settings.max_concurrency;
        Ok(Arc::new(SinkRuntime {
            client: Client::new(&settings)?,
            limit: Semaphore::new(settings.max_concurrency),
            settings,
            table: table.clone(),
            // Every event in flight holds one while it looks itself up,
            // plus the retry worker's few: fewer kept idle would make the
            // events beyond them open (and authenticate) a connection each.
            pool: Pool::new(connection, table, settings_concurrency + WORKER_CONNECTIONS),
            sql_trouble: Mutex::new(SqlTrouble::new()),
        }))
    }
}

/// Connections the retry worker's loops may hold besides the events in
/// flight.
const WORKER_CONNECTIONS: usize = 4;

/// SQL sessions on the delivery table, opened on demand, kept for the next
/// statement (up to `keep`, each with the statements it prepared), dropped
/// after an error.
pub struct Pool {
    settings: ConnectSettings,
    table: DeliveryTable,
    keep: usize,
    idle: Mutex<Vec<Session>>,
}

impl Pool {
    pub fn new(settings: ConnectSettings, table: DeliveryTable, keep: usize) -> Pool {
        Pool {
            settings,
            table,
            keep,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle connection, or a new one.
    ///
    /// # Errors
    /// The connection's.
    pub async fn get(&self) -> Result<Session, PgError> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => Session::connect(&self.settings, &self.table).await,
        }
    }

    /// Back to the pool after a statement that worked.
    pub fn put(&self, conn: Session) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.keep {
            idle.push(conn);
        }
    }
}

/// One aggregate's queue: `(sink index, aggregate key)`.
type Lane = (usize, String);
type Done<T> = (Lane, DeliveryReport<T>);

/// The webhook sinks of one session. `T` is the tag each event travels
/// with and comes back with in its report (the relay's delivery tag).
pub struct Dispatch<T> {
    sinks: Vec<Arc<SinkRuntime>>,
    /// Lanes with an event in flight, and what waits behind it.
    lanes: HashMap<Lane, VecDeque<(WebhookEvent, T)>>,
    done_tx: mpsc::UnboundedSender<Done<T>>,
    done_rx: mpsc::UnboundedReceiver<Done<T>>,
    tasks: JoinSet<()>,
}

impl<T: Send + 'static> Dispatch<T> {
    /// `sinks` indexed as [`crate::routes::Target::Http`] counts them.
    pub fn new(sinks: Vec<Arc<SinkRuntime>>) -> Dispatch<T> {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Dispatch {
            sinks,
            lanes: HashMap::new(),
            done_tx,
            done_rx,
            tasks: JoinSet::new(),
        }
    }

    /// Hands an event over; its report comes from [`Dispatch::recv`]. An
    /// index of no sink hands it back (routes index only configured sinks).
    ///
    /// # Errors
    /// The event and its tag, when `sink` is no sink of this dispatch.
    pub fn send(
        &mut self,
        sink: usize,
        event: WebhookEvent,
        tag: T,
    ) -> Result<(), Box<(WebhookEvent, T)>> {
        if sink >= self.sinks.len() {
            return Err(Box::new((event, tag)));
        }
        let lane = (sink, event.key.clone());
        match self.lanes.get_mut(&lane) {
            Some(waiting) => waiting.push_back((event, tag)),
            None => {
                self.lanes.insert(lane.clone(), VecDeque::new());
                self.start(lane, event, tag);
            }
        }
        Ok(())
    }

    fn start(&mut self, lane: Lane, event: WebhookEvent, tag: T) {
        // `send` checked the index.
        let sink = Arc::clone(&self.sinks[lane.0]);
        let done = self.done_tx.clone();
        self.tasks.spawn(async move {
            handle(&sink, &event).await;
            let _ = done.send((
                lane,
                DeliveryReport {
                    tag,
                    result: Ok(()),
                },
            ));
        });
    }

    /// The next event handled. Cancel-safe: nothing awaits after the
    /// channel gave its item. Pending forever while nothing is in flight.
    pub async fn recv(&mut self) -> DeliveryReport<T> {
        // `done_tx` lives in `self`: the channel never closes.
        let Some((lane, report)) = self.done_rx.recv().await else {
            return std::future::pending().await;
        };
        // Reap finished tasks so the set does not grow.
        while self.tasks.try_join_next().is_some() {}
        let next = self.lanes.get_mut(&lane).and_then(VecDeque::pop_front);
        match next {
            Some((event, tag)) => self.start(lane, event, tag),
            None => {
                self.lanes.remove(&lane);
            }
        }
        report
    }

    /// Events handed over and not reported yet.
    pub fn in_flight(&self) -> usize {
        self.lanes.values().map(|w| w.len() + 1).sum()
    }
}

impl<T> Drop for Dispatch<T> {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// Delivers or parks one event; returns once it is handled.
async fn handle(sink: &SinkRuntime, event: &WebhookEvent) {
    // One permit for the whole of an event's handling, its SQL included: at
    // most `max_concurrency` aggregates of a sink are worked on at once, so
    // a burst of many aggregates opens at most that many connections to
    // PostgreSQL and to the endpoint. (The semaphore is never closed; were
    // it, the event would go on unbounded rather than be lost.)
    let _permit = sink.limit.acquire().await;
    let name = sink.settings.name.as_str();
    let known = with_sql(sink, "look up", |mut conn| {
        let event = event.clone();
        let route = name.to_owned();
        async move {
            let known = store::look_up(&mut conn, &route, &event).await;
            (conn, known)
        }
    })
    .await;
    if known.event {
        // Handled before (a replay after a crash): its row says how.
        return;
    }
    let schedule = &sink.settings.schedule;
    if known.held {
        count(name, webhook_outcome::QUEUED);
        park(
            sink,
            event,
            store::PENDING,
            (0, schedule.max_attempts_queued()),
            Duration::ZERO,
            None,
            None,
        )
        .await;
        return;
    }
    // What follows each try is the policy's (`retry.rs`); posting,
    // waiting, counting and logging are done here.
    let mut tries = InlineTries::new(schedule.inline);
    let mut next = tries.start();
    let (tried, last) = loop {
        match next {
            Next::Post => {}
            Next::RetryAt(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
            Next::Delivered => {
                count(name, webhook_outcome::DELIVERED);
                return;
            }
            Next::Dead { attempts, status } => {
                count(name, webhook_outcome::DEAD);
                events::WebhookRefused {
                    route: name,
                    event_id: &event.id,
                    status,
                    parks: store::holds(store::DEAD, event.after_dead_letter),
                }
                .emit();
                park(
                    sink,
                    event,
                    store::DEAD,
                    (attempts, schedule.max_attempts_after_inline()),
                    Duration::ZERO,
                    Some(status),
                    Some(format!("HTTP {status}")),
                )
                .await;
                return;
            }
            Next::Park { tried, last } => break (tried, last),
        }
        let answer = match sink.client.post(event).await {
            Ok(answer) => Answer::Status {
                code: answer.status,
                retry_after: answer.retry_after,
            },
            Err(e) => Answer::Failed(e.0),
        };
        next = tries.answered(answer, Instant::now().into_std());
        if matches!(next, Next::RetryAt(_) | Next::Park { .. }) {
            count(name, webhook_outcome::FAILED);
        }
    };
    let LastTry {
        status,
        error,
        retry_after,
    } = last;
    // The whole schedule follows the tries made in line.
    let max = tried + schedule.delays.len() as u32;
    let delay = schedule
        .next_delay(tried, max, rand::random::<f64>(), retry_after)
        .unwrap_or_default();
    events::WebhookParked {
        route: name,
        event_id: &event.id,
        error: &error,
        retry_in: delay,
    }
    .emit();
    count(name, webhook_outcome::PARKED);
    park(
        sink,
        event,
        store::PENDING,
        (tried, max),
        delay,
        status,
        Some(error),
    )
    .await;
}

/// Inserts the event's row, retrying until it is committed.
async fn park(
    sink: &SinkRuntime,
    event: &WebhookEvent,
    status: &'static str,
    (attempts, max_attempts): (u32, u32),
    delay: Duration,
    last_status: Option<u16>,
    last_error: Option<String>,
) {
    with_sql(sink, "insert", |mut conn| {
        let route = sink.settings.name.clone();
        let event = event.clone();
        let last_error = last_error.clone();
        async move {
            let row = NewRow {
                route: &route,
                event: &event,
                status,
                attempts,
                max_attempts,
                delay,
                last_status,
                last_error,
            };
            let inserted = store::insert(&mut conn, &row).await;
            (conn, inserted)
        }
    })
    .await;
}

/// Runs `op` on a pooled connection until it succeeds, backing off between
/// failures (the session ends meanwhile if PostgreSQL stays away). The
/// sink's events share one back-off and one incident: a table that cannot
/// be used fails them all, and is logged once.
async fn with_sql<T, F, Fut>(sink: &SinkRuntime, what: &'static str, mut op: F) -> T
where
    F: FnMut(Session) -> Fut,
    Fut: std::future::Future<Output = (Session, Result<T, PgError>)>,
{
    loop {
        let error = match sink.pool.get().await {
            Ok(conn) => match op(conn).await {
                (conn, Ok(value)) => {
                    sink.pool.put(conn);
                    sink.sql_trouble().worked(&sink.settings.name, &sink.table);
                    return value;
                }
                // A connection that failed a statement is not reused.
                (_, Err(e)) => e,
            },
            Err(e) => e,
        };
        let pause = sink
            .sql_trouble()
            .failed(&sink.settings.name, &sink.table, what, &error);
        tokio::time::sleep(pause).await;
    }
}

/// The dispatcher's failures on the delivery table, for one sink.
struct SqlTrouble {
    backoff: Backoff,
    incident: Incident,
}

impl SqlTrouble {
    fn new() -> SqlTrouble {
        SqlTrouble {
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(5), 3),
            incident: Incident::default(),
        }
    }

    /// Counts the failure, logs it once per incident, and says how long to
    /// wait before the next try.
    fn failed(
        &mut self,
        route: &str,
        table: &DeliveryTable,
        what: &str,
        error: &PgError,
    ) -> Duration {
        events::DeliveryTableFailing::count();
        let pause = self.backoff.next_delay();
        if let Some(still) = self.incident.failed(Instant::now()) {
            events::DeliveryTableFailing {
                route,
                table: &table.quoted(),
                what,
                error,
                still,
            }
            .emit();
        }
        pause
    }

    fn worked(&mut self, route: &str, table: &DeliveryTable) {
        self.backoff.reset();
        if let Some(end) = self.incident.recovered(Instant::now()) {
            events::DeliveryTableWorks {
                route,
                table: &table.quoted(),
                end,
            }
            .emit();
        }
    }
}

fn count(route: &str, outcome: &'static str) {
    metrics::counter!(m::WEBHOOK_DELIVERIES, "route" => route.to_owned(), "outcome" => outcome)
        .increment(1);
}
