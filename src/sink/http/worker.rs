//! The retry worker: beside the sessions, for the life of the relay, it
//! sends the due rows of the delivery table and records each try.
//!
//! Per sink a few loops, each on its own SQL connection: claim the due head
//! of one aggregate's queue (`FOR UPDATE SKIP LOCKED`, transaction open),
//! POST it, record the try (SENT with `sent_at`, DEAD, or PENDING again at
//! the schedule's next delay) and commit. A head that goes DEAD under
//! `after_dead_letter = "park"` stays its aggregate's head: the rows behind
//! it are not claimed until `dead retry` or `dead discard` of it
//! (`store::claim`). The row lock is held while the request is in flight,
//! so two relays sharing the table never send one row at the same time; a
//! relay that dies mid-request releases it with its connection, and the row
//! is tried again (the receiver may then see that event twice: the
//! `Idempotency-Key` tells).
//!
//! A graceful stop lets every loop finish the row it holds.
//!
//! When the delivery table cannot be used (PostgreSQL away, the table
//! dropped or a privilege revoked while the relay runs), one of a sink's
//! loops tries again, backing off ([`crate::backoff::Backoff`], from 1 s to
//! 30 s), while the others wait for it to succeed. Each failed try is
//! counted in `outbox_relay_reconnects_total{reason="delivery_table"}`, and
//! one WARN line is logged per incident (again every 30 s while it lasts,
//! and at info once it ends). A table missing at start is refused before this
//! worker runs (`table_access`).
//!
//! One more loop samples the stuck-delivery gauges (pending, pending for
//! over 10 minutes, dead, oldest pending age; per route), the first time
//! at start-up; the deliveries counter's series of every route and outcome
//! are made at 0 then too.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::{Answer, TransportError};
use super::dispatch::SinkRuntime;
use super::schedule::Schedule;
use super::status::{Outcome, classify};
use super::store::{self, Finish, Session};
use crate::backoff::{Backoff, Incident};
use crate::events;
use crate::metrics::{self as m, webhook_outcome};
use crate::pg::PgError;

/// Loops per sink, at most (and at most its `max_concurrency`).
const LOOPS_PER_SINK: usize = 4;
/// How often the gauges are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Runs until `shutdown` turns true, then returns once every loop let go of
/// its row.
pub async fn run(sinks: Vec<Arc<SinkRuntime>>, shutdown: watch::Receiver<bool>) {
    let mut loops = JoinSet::new();
    for sink in &sinks {
        // Every outcome of the route at 0 from the start, so that an alert
        // on the first DEAD sees it.
        for &outcome in webhook_outcome::ALL {
            let route = sink.settings.name.clone();
            metrics::counter!(m::WEBHOOK_DELIVERIES, "route" => route, "outcome" => outcome)
                .increment(0);
        }
        // A sink's loops fail together (the table is shared, and so is the
        // server): one back-off and one incident for them all.
        let trouble = Arc::new(Trouble::new());
        for _ in 0..sink.settings.max_concurrency.min(LOOPS_PER_SINK) {
            loops.spawn(retry_loop(
                Arc::clone(sink),
                Arc::clone(&trouble),
                shutdown.clone(),
            ));
        }
    }
    if let Some(first) = sinks.first() {
        let routes: Vec<String> = sinks.iter().map(|s| s.settings.name.clone()).collect();
        loops.spawn(sample_loop(Arc::clone(first), routes, shutdown.clone()));
    }
    while loops.join_next().await.is_some() {}
}

/// Waits `pause`, or less when a stop is asked for; returns whether to stop.
async fn pause_or_stop(pause: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => return true,
        () = tokio::time::sleep(pause) => false,
    };
    stopped || *shutdown.borrow()
}

/// The retry loops of one sink that cannot use the delivery table. They
/// fail together (one table, one server), so one of them, the prober,
/// tries again as the back-off says, and the others wait until it
/// succeeds (or [`LONGEST_RETRY`] passed): a sink's failing tries are
/// those of one loop backing off, not of all its loops.
struct Trouble {
    state: Mutex<TroubleState>,
    /// Bumped whenever an incident ends: the waiting loops go on.
    healed: watch::Sender<u64>,
}

struct TroubleState {
    backoff: Backoff,
    incident: Incident,
    /// A loop is the prober.
    probing: bool,
}

impl TroubleState {
    /// The decision after a failed try of a loop (`prober`: whether it is
    /// the prober) while the healing count is `healed`: the prober, or the
    /// first loop to fail, probes after the back-off's next delay; the
    /// others wait for it.
    fn after_failure(&mut self, prober: bool, healed: u64) -> Next {
        if prober || !self.probing {
            self.probing = true;
            Next::Probe(self.backoff.next_delay())
        } else {
            Next::AwaitHealing(healed)
        }
    }
}

/// What a loop does after a failed try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// It is the prober: try again after this delay.
    Probe(Duration),
    /// Wait for the prober to succeed (the healing count moves past this).
    AwaitHealing(u64),
}

/// The first wait after the worker failed to use the delivery table.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest: a dropped table or a revoked privilege is tried about twice
/// a minute, and a server that is back is used again within that.
const LONGEST_RETRY: Duration = Duration::from_secs(30);

impl Trouble {
    fn new() -> Trouble {
        Trouble {
            state: Mutex::new(TroubleState {
                backoff: Backoff::new(FIRST_RETRY, LONGEST_RETRY, 3),
                incident: Incident::default(),
                probing: false,
            }),
            healed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TroubleState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A try on the delivery table failed (`what`: what the loop was doing;
    /// `prober`: whether this loop is the prober): counted, logged once per
    /// incident, and what the loop does next.
    fn failed(&self, sink: &SinkRuntime, prober: bool, what: &str, error: &PgError) -> Next {
        events::RetryWorkerTableFailing::count();
        let mut t = self.lock();
        let next = t.after_failure(prober, *self.healed.borrow());
        if let Some(still) = t.incident.failed(Instant::now()) {
            events::RetryWorkerTableFailing {
                route: &sink.settings.name,
                table: &sink.table.quoted(),
                what,
                error,
                still,
            }
            .emit();
        }
        next
    }

    /// A try on the delivery table worked: the back-off starts over, and an
    /// incident that ends says so and lets the waiting loops go on.
    fn worked(&self, sink: &SinkRuntime) {
        let mut t = self.lock();
        t.backoff.reset();
        t.probing = false;
        if let Some(end) = t.incident.recovered(Instant::now()) {
            events::RetryWorkerTableWorks {
                route: &sink.settings.name,
                table: &sink.table.quoted(),
                end,
            }
            .emit();
            self.healed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Carries out `next`; returns whether to stop. Sets `prober`.
    async fn wait(
        &self,
        next: Next,
        prober: &mut bool,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        match next {
            Next::Probe(delay) => {
                *prober = true;
                pause_or_stop(delay, shutdown).await
            }
            Next::AwaitHealing(seen) => {
                *prober = false;
                let mut healed = self.healed.subscribe();
                let stopped = tokio::select! {
                    _ = shutdown.wait_for(|stop| *stop) => return true,
                    _ = healed.wait_for(|n| *n != seen) => false,
                    // Should the prober be stuck elsewhere, try anyway.
                    () = tokio::time::sleep(LONGEST_RETRY) => false,
                };
                stopped || *shutdown.borrow()
            }
        }
    }
}

async fn retry_loop(
    sink: Arc<SinkRuntime>,
    trouble: Arc<Trouble>,
    mut shutdown: watch::Receiver<bool>,
) {
    let name = sink.settings.name.clone();
    let mut conn: Option<Session> = None;
    let mut prober = false;
    while !*shutdown.borrow() {
        let c = match &mut conn {
            Some(c) => c,
            None => match Session::connect(sink.pool_settings(), &sink.table).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    let next = trouble.failed(&sink, prober, "connect", &e);
                    if trouble.wait(next, &mut prober, &mut shutdown).await {
                        return;
                    }
                    continue;
                }
            },
        };
        // Connecting is not enough to end an incident: the table may be
        // what is missing. A claim that works is.
        let claimed = match store::claim(c, &name).await {
            Ok(claimed) => {
                if prober || trouble.lock().incident.is_open() {
                    trouble.worked(&sink);
                }
                prober = false;
                claimed
            }
            Err(e) => {
                conn = None;
                let next = trouble.failed(&sink, prober, "claim rows", &e);
                if trouble.wait(next, &mut prober, &mut shutdown).await {
                    return;
                }
                continue;
            }
        };
        let Some(row) = claimed else {
            if pause_or_stop(sink.settings.retry_poll, &mut shutdown).await {
                return;
            }
            continue;
        };
        let answer = {
            let _permit = sink.limit().acquire().await;
            sink.client.post(&row.event).await
        };
        let how = decide(
            &sink.settings.schedule,
            row.attempts,
            row.max_attempts,
            &answer,
            rand::random::<f64>(),
        );
        let outcome = match &how {
            Finish::Sent { .. } => webhook_outcome::DELIVERED,
            Finish::Dead { .. } => webhook_outcome::DEAD,
            Finish::Again { .. } => webhook_outcome::FAILED,
        };
        metrics::counter!(m::WEBHOOK_DELIVERIES, "route" => name.clone(), "outcome" => outcome)
            .increment(1);
        if let Finish::Dead { error, .. } = &how {
            events::WebhookDead {
                route: &name,
                event_id: &row.event.id,
                error,
                parks: store::holds(store::DEAD, row.event.after_dead_letter),
            }
            .emit();
        }
        if let Err(e) = store::finish(c, row.id, &how).await {
            // The try is not recorded: the row is tried again later.
            conn = None;
            let next = trouble.failed(&sink, prober, "record a try", &e);
            if trouble.wait(next, &mut prober, &mut shutdown).await {
                return;
            }
        }
    }
}

/// How the try of a row that had `attempts` of `max_attempts` ends.
pub fn decide(
    schedule: &Schedule,
    attempts: u32,
    max_attempts: u32,
    answer: &Result<Answer, TransportError>,
    unit: f64,
) -> Finish {
    let (status, error, retry_after) = match answer {
        Ok(a) => match classify(a.status) {
            Outcome::Delivered => return Finish::Sent { status: a.status },
            Outcome::Permanent => {
                return Finish::Dead {
                    status: Some(a.status),
                    error: format!("HTTP {}", a.status),
                };
            }
            Outcome::Retry => (Some(a.status), format!("HTTP {}", a.status), a.retry_after),
        },
        Err(e) => (None, e.0.clone(), None),
    };
    match schedule.next_delay(attempts + 1, max_attempts, unit, retry_after) {
        Some(delay) => Finish::Again {
            delay,
            status,
            error,
        },
        None => Finish::Dead {
            status,
            error: format!("{error} (after {} attempts)", attempts + 1),
        },
    }
}

async fn sample_loop(
    sink: Arc<SinkRuntime>,
    routes: Vec<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conn: Option<Session> = None;
    loop {
        if conn.is_none() {
            conn = Session::connect(sink.pool_settings(), &sink.table)
                .await
                .ok();
        }
        if let Some(c) = &mut conn {
            match store::stats(c).await {
                Ok(stats) => {
                    for route in &routes {
                        let s = stats
                            .iter()
                            .find(|s| s.route == *route)
                            .cloned()
                            .unwrap_or_default();
                        let label = route.clone();
                        metrics::gauge!(m::WEBHOOK_PENDING, "route" => label.clone())
                            .set(s.pending as f64);
                        metrics::gauge!(m::WEBHOOK_PENDING_STUCK, "route" => label.clone())
                            .set(s.pending_over_10m as f64);
                        metrics::gauge!(m::WEBHOOK_DEAD, "route" => label.clone())
                            .set(s.dead as f64);
                        metrics::gauge!(m::WEBHOOK_OLDEST_PENDING_AGE, "route" => label)
                            .set(s.oldest_pending_secs);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "sampling the delivery table failed");
                    conn = None;
                }
            }
        }
        if pause_or_stop(SAMPLE_EVERY, &mut shutdown).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> Schedule {
        Schedule {
            inline: 2,
            delays: vec![Duration::from_secs(10), Duration::from_secs(20)],
        }
    }

    fn answer(status: u16) -> Result<Answer, TransportError> {
        Ok(Answer {
            status,
            retry_after: None,
        })
    }

    #[test]
    fn one_loop_probes_and_the_others_wait_for_it() {
        let mut state = TroubleState {
            backoff: Backoff::seeded(FIRST_RETRY, LONGEST_RETRY, 3, 1),
            incident: Incident::default(),
            probing: false,
        };
        // The first loop to fail probes; the others, failing on the same
        // cause, wait for its success instead of trying too.
        assert!(matches!(state.after_failure(false, 0), Next::Probe(d) if d >= FIRST_RETRY));
        assert_eq!(state.after_failure(false, 0), Next::AwaitHealing(0));
        assert_eq!(state.after_failure(false, 0), Next::AwaitHealing(0));
        // The prober goes on backing off, up to the cap.
        let mut longest = Duration::ZERO;
        for _ in 0..20 {
            match state.after_failure(true, 0) {
                Next::Probe(d) => longest = longest.max(d),
                other => panic!("the prober waits for nobody: {other:?}"),
            }
        }
        assert!(
            longest > 3 * FIRST_RETRY && longest <= LONGEST_RETRY,
            "{longest:?}"
        );
        // After a success (`worked`), the next failure probes again.
        state.probing = false;
        state.backoff.reset();
        assert!(matches!(state.after_failure(false, 1), Next::Probe(d) if d <= 3 * FIRST_RETRY));
    }

    #[test]
    fn outcomes() {
        let s = schedule();
        assert_eq!(
            decide(&s, 2, 4, &answer(204), 0.0),
            Finish::Sent { status: 204 }
        );
        assert!(matches!(
            decide(&s, 2, 4, &answer(410), 0.0),
            Finish::Dead {
                status: Some(410),
                ..
            }
        ));
        assert_eq!(
            decide(&s, 2, 4, &answer(503), 0.0),
            Finish::Again {
                delay: Duration::from_secs(20),
                status: Some(503),
                error: "HTTP 503".into()
            }
        );
        // The last try failed: out of attempts.
        assert!(matches!(
            decide(&s, 3, 4, &answer(503), 0.0),
            Finish::Dead {
                status: Some(503),
                ..
            }
        ));
        assert!(matches!(
            decide(&s, 2, 4, &Err(TransportError("refused".into())), 0.0),
            Finish::Again { status: None, .. }
        ));
        let slow = Ok(Answer {
            status: 429,
            retry_after: Some(Duration::from_secs(90)),
        });
        assert!(matches!(
            decide(&s, 2, 4, &slow, 0.0),
            Finish::Again { delay, .. } if delay == Duration::from_secs(90)
        ));
    }
}
