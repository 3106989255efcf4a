//! The parked gauges: beside the sessions, for the life of the relay, one
//! task reads the parking table's figures ([`store::stats`]) every
//! [`SAMPLE_EVERY`] and sets `outbox_relay_parked_aggregates`,
//! `outbox_relay_parked_events` and
//! `outbox_relay_parked_oldest_head_age_seconds`; /health shows the same
//! figures ([`Health::set_parked`]).
//!
//! Invariants:
//! * The gauges exist from start-up, at 0 until the first sample that
//!   works: an alert on them never waits for a series to appear, and a
//!   table that does not exist yet reads as nothing parked.
//! * A sample that fails leaves the last figures in place: a server that is
//!   away for a while does not make parked aggregates look released (which
//!   would resolve the alert on them).
//! * Sampling never holds up the sessions: one read-only statement of
//!   counts on a connection of its own, no row locked.
//! * A failure is logged once per incident at warn (again every 30 s while
//!   it lasts, [`Incident`]), and at info once it ends; the tries back off
//!   from [`SAMPLE_EVERY`] to [`LONGEST_RETRY`]. A healthy run logs
//!   nothing.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::store::{self, ParkedTable, Stats};
use crate::backoff::{Backoff, Incident, Recovered, Still};
use crate::events;
use crate::metrics::{self as m, Health};
use crate::pg::{ConnectSettings, PgClient, PgError};

/// How often the figures are read while the table can be read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The longest wait between two tries while the table cannot be read.
pub const LONGEST_RETRY: Duration = Duration::from_secs(30);

/// SQLSTATE `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";
/// SQLSTATE `insufficient_privilege`.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// Starts the sampler on its own connection (`connection`: the relay's
/// PostgreSQL settings); it runs until `shutdown` turns true.
pub fn spawn(
    connection: ConnectSettings,
    table: ParkedTable,
    health: Health,
    shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let quoted = table.quoted();
        let mut source = Table {
            connection,
            table,
            conn: None,
        };
        sample(&mut source, &quoted, &health, shutdown).await;
    })
}

/// Where the figures come from: the table, or a test's script.
trait Source {
    async fn read(&mut self) -> Result<Stats, PgError>;
}

/// The parking table, on a connection of the sampler's own.
struct Table {
    connection: ConnectSettings,
    table: ParkedTable,
    conn: Option<PgClient>,
}

impl Source for Table {
    async fn read(&mut self) -> Result<Stats, PgError> {
        let live = match &mut self.conn {
            Some(live) => live,
            None => self.conn.insert(PgClient::connect(&self.connection).await?),
        };
        let stats = store::stats(live, &self.table).await;
        if stats.is_err() {
            // A failed statement may leave the connection unusable: the
            // next try starts on a new one.
            self.conn = None;
        }
        stats
    }
}

/// The sampling loop (`quoted`: the table's name, for the log).
async fn sample(
    source: &mut impl Source,
    quoted: &str,
    health: &Health,
    mut shutdown: watch::Receiver<bool>,
) {
    publish(&Stats::default());
    let mut trouble = Trouble::new();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let pause = match source.read().await {
            Ok(stats) => {
                publish(&stats);
                health.set_parked(stats);
                if let Some(end) = trouble.worked(Instant::now()) {
                    events::ParkedGaugesRead {
                        table: &quoted,
                        end,
                    }
                    .emit();
                }
                SAMPLE_EVERY
            }
            Err(error) => {
                let (pause, line) = trouble.failed(Instant::now());
                if let Some(still) = line {
                    events::ParkedGaugesUnread {
                        table: &quoted,
                        error: &error,
                        fix: fix(&error),
                        still,
                    }
                    .emit();
                }
                pause
            }
        };
        let stop = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => true,
            () = tokio::time::sleep(pause) => false,
        };
        if stop {
            return;
        }
    }
}

/// Sets the three gauges.
fn publish(stats: &Stats) {
    metrics::gauge!(m::PARKED_AGGREGATES).set(stats.aggregates as f64);
    metrics::gauge!(m::PARKED_EVENTS).set(stats.events as f64);
    metrics::gauge!(m::PARKED_OLDEST_HEAD_AGE).set(stats.oldest_head_secs);
}

/// What to do about `error`, for the log line.
fn fix(error: &PgError) -> &'static str {
    match error.sqlstate() {
        Some(UNDEFINED_TABLE) => {
            "the table does not exist: `outbox-relay init` creates it (postgres.parked_table names it)"
        }
        Some(INSUFFICIENT_PRIVILEGE) => {
            "the relay's role may not read it: `outbox-relay init --grant ROLE` grants it"
        }
        _ => "check that PostgreSQL is reachable",
    }
}

/// A run of failed readings: when to try again, and when to log.
struct Trouble {
    backoff: Backoff,
    incident: Incident,
}

impl Trouble {
    fn new() -> Trouble {
        Trouble {
            backoff: Backoff::new(SAMPLE_EVERY, LONGEST_RETRY, 2),
            incident: Incident::default(),
        }
    }

    /// A reading failed at `now`: how long to wait, and a line to log when
    /// one is due.
    fn failed(&mut self, now: Instant) -> (Duration, Option<Still>) {
        (self.backoff.next_delay(), self.incident.failed(now))
    }

    /// A reading worked at `now`: the back-off starts over; `Some` when
    /// that ends an incident.
    fn worked(&mut self, now: Instant) -> Option<Recovered> {
        self.backoff.reset();
        self.incident.recovered(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::ServerError;

    /// Readings in order, then a missing table; when each was asked for.
    struct Script {
        readings: Vec<Result<Stats, PgError>>,
        tries: Vec<Duration>,
        start: Instant,
    }

    impl Source for Script {
        async fn read(&mut self) -> Result<Stats, PgError> {
            self.tries.push(self.start.elapsed());
            if self.readings.is_empty() {
                return Err(missing_table());
            }
            self.readings.remove(0)
        }
    }

    fn missing_table() -> PgError {
        PgError::Server {
            target: "db:5432".into(),
            action: "count parked events",
            server: Box::new(ServerError {
                severity: "ERROR".into(),
                code: UNDEFINED_TABLE.into(),
                message: "relation \"public.outbox_parked\" does not exist".into(),
                detail: None,
                hint: None,
            }),
        }
    }

    #[test]
    fn a_lasting_failure_is_one_line_per_period_and_its_tries_back_off() {
        let t0 = Instant::now();
        let mut trouble = Trouble::new();
        let mut now = t0;
        let mut lines = 0;
        let mut pauses = Vec::new();
        // Five minutes of failures.
        while now < t0 + Duration::from_secs(300) {
            let (pause, line) = trouble.failed(now);
            lines += usize::from(line.is_some());
            pauses.push(pause);
            now += pause;
        }
        // A line at the start, then at most one per 30 s.
        assert!((1..=11).contains(&lines), "{lines} lines");
        assert!(
            pauses
                .iter()
                .all(|p| *p >= SAMPLE_EVERY && *p <= LONGEST_RETRY),
            "{pauses:?}"
        );
        assert!(pauses.len() < 60, "not a try per sample: {pauses:?}");
        // It ends: one recovery, and the next failure is a new incident.
        let end = trouble.worked(now).expect("the incident ends");
        assert_eq!(end.failures, pauses.len() as u64);
        assert_eq!(trouble.worked(now), None);
        let (pause, line) = trouble.failed(now);
        assert!(line.is_some_and(|l| l.is_first()));
        assert!(pause <= 2 * SAMPLE_EVERY, "{pause:?}");
    }

    #[test]
    fn the_line_names_the_fix_of_a_missing_table() {
        assert!(fix(&missing_table()).contains("outbox-relay init"));
    }

    /// On tokio's paused clock: a table that does not exist yet leaves
    /// /health without figures; once it is there, the figures come at the
    /// next sample, and a failure afterwards keeps them.
    #[tokio::test(start_paused = true)]
    async fn figures_come_with_the_first_reading_that_works_and_stay_through_a_failure() {
        let health = Health::default();
        let readings = vec![
            Err(missing_table()),
            Err(missing_table()),
            Ok(Stats {
                aggregates: 2,
                events: 5,
                oldest_head_secs: 61.0,
            }),
            Err(missing_table()),
        ];
        let (stop, stopped) = watch::channel(false);
        let mut script = Script {
            readings,
            tries: Vec::new(),
            start: Instant::now(),
        };
        let task = {
            let health = health.clone();
            tokio::spawn(async move {
                sample(
                    &mut script,
                    "\"public\".\"outbox_parked\"",
                    &health,
                    stopped,
                )
                .await;
                script.tries
            })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(health.parked(), None, "nothing read yet");
        tokio::time::sleep(Duration::from_secs(60)).await;
        let seen = health.parked().expect("the third reading worked");
        assert_eq!((seen.aggregates, seen.events), (2, 5));
        stop.send(true).unwrap();
        let tries = task.await.unwrap();
        // Failures back off from 5 s; a reading that works is followed by
        // one 5 s later.
        assert!(tries.len() >= 4, "{tries:?}");
        for pair in tries.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= SAMPLE_EVERY && gap <= LONGEST_RETRY, "{tries:?}");
        }
        assert_eq!(tries[3] - tries[2], SAMPLE_EVERY, "{tries:?}");
    }
}
