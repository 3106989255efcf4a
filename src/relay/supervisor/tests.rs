//! The supervisor's policy on its own, and the outer loop driven by a
//! scripted sequence of rounds on tokio's paused clock (no PostgreSQL, no
//! Kafka).

use std::collections::VecDeque;

use tokio::sync::watch;
use tokio::time::Instant;

use super::*;
use crate::events::{Event, HealthNote};
use crate::metrics::{self as m, Health};
use crate::relay::{Rounds, Side, supervise};
use crate::sink::DeliveryError;
use tracing::Level;

const SLOT: &str = "outbox_slot";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The policy with a back-off without jitter: 100 ms, 300 ms, 900 ms, ...
/// up to 30 s, so the delays can be told exactly.
fn supervisor() -> Supervisor {
    Supervisor::new(SLOT, Backoff::exact(ms(100), ms(30_000), 3))
}

fn closed() -> PgError {
    PgError::Closed {
        target: "db:5432".to_owned(),
        action: "streaming",
    }
}

fn unconnected() -> Outcome {
    Outcome::Unconnected {
        error: closed(),
        holding_lock: false,
    }
}

/// The slot read by another process; `holding_lock`: this relay holds the
/// relay lock (and told that process to end).
fn slot_busy(holding_lock: bool) -> Outcome {
    Outcome::Unconnected {
        error: PgError::SlotInUse {
            slot: SLOT.to_owned(),
            active_pid: Some(42),
        },
        holding_lock,
    }
}

fn failed(error: SessionError, progressed: bool) -> Outcome {
    Outcome::Failed {
        error,
        progressed,
        confirmed: Lsn::from(0x100),
        lock_lost: false,
        lease: None,
    }
}

fn stream_broke(progressed: bool) -> Outcome {
    failed(SessionError::Replication(closed()), progressed)
}

fn fenced() -> SessionError {
    SessionError::Transaction(TxnFailure::Fenced {
        transactional_id: "relay-1".to_owned(),
        detail: "epoch bumped".to_owned(),
    })
}

fn lock_lost() -> Outcome {
    lease_lost(HEALTHY_LEASE)
}

/// The relay lock lost after a lease of `lease`.
fn lease_lost(lease: Duration) -> Outcome {
    Outcome::Failed {
        error: SessionError::LockLost {
            slot: SLOT.to_owned(),
        },
        progressed: false,
        confirmed: Lsn::from(0x100),
        lock_lost: true,
        lease: Some(lease),
    }
}

/// The wait of a stand-by; panics on any other action.
fn stand_by(action: Action) -> Duration {
    match action {
        Action::StandBy { after, .. } => after,
        other => panic!("expected to stand by, got {other:?}"),
    }
}

/// The delay of a retry; panics on any other action.
fn retry(action: Action) -> (Duration, Report) {
    match action {
        Action::Retry { after, report } => (after, report),
        other => panic!("expected a retry, got {other:?}"),
    }
}

fn exit(action: Action) -> RelayError {
    match action {
        Action::Exit(error) => error,
        other => panic!("expected an exit, got {other:?}"),
    }
}

#[test]
fn retry_delays_grow_and_start_over_after_progress() {
    let mut s = supervisor();
    let mut delays = Vec::new();
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let (after, report) = retry(s.decide(unconnected()));
        delays.push(after);
        attempts.push(report.attempt());
    }
    // A session that confirmed nothing new backs off further.
    delays.push(retry(s.decide(stream_broke(false))).0);
    assert_eq!(delays, [ms(100), ms(300), ms(900), ms(2_700)]);
    assert_eq!(attempts, [Some(0), Some(1), Some(2)]);
    // One that did starts over, and so does the count of tries.
    assert_eq!(retry(s.decide(stream_broke(true))).0, ms(100));
    let (after, report) = retry(s.decide(unconnected()));
    assert!(after > ms(100), "a step of the back-off: {after:?}");
    assert_eq!(report.attempt(), Some(1));
}

#[test]
fn a_persistent_failure_backs_off_to_its_cap() {
    let mut s = supervisor();
    let delays: Vec<Duration> = (0..12)
        .map(|_| retry(s.decide(stream_broke(false))).0)
        .collect();
    assert_eq!(delays[6..], [ms(30_000); 6], "{delays:?}");
    // With the relay's own back-off (jittered): never past the cap, never
    // a spin, and after a while seldom.
    for seed in 0..20 {
        let mut s = Supervisor::new(SLOT, Backoff::seeded(ms(100), ms(30_000), 3, seed));
        let delays: Vec<Duration> = (0..40).map(|_| retry(s.decide(unconnected())).0).collect();
        assert!(delays.iter().all(|d| (ms(100)..=ms(30_000)).contains(d)));
        let late: Duration = delays[20..].iter().sum();
        assert!(
            late > Duration::from_secs(20 * 5),
            "seed {seed}: {delays:?}"
        );
    }
}

#[test]
fn a_lost_lock_stands_by_without_backoff() {
    let mut s = supervisor();
    assert_eq!(retry(s.decide(unconnected())).0, ms(100));
    let Action::StandBy { after, report } = s.decide(lock_lost()) else {
        panic!("a lost lock stands by");
    };
    assert_eq!(after, Duration::ZERO);
    let report = report.expect("a lost lock is reported");
    assert_eq!(
        (report.counter(), report.reason(), report.health()),
        (m::RECONNECTS, m::reason::LOCK_LOST, HealthNote::Retrying)
    );
    assert_eq!(report.level(), Level::WARN);
    // Fenced by the relay that took the lock over: the same.
    let fenced_without_lock = Outcome::Failed {
        error: fenced(),
        progressed: false,
        confirmed: Lsn::from(0x100),
        lock_lost: true,
        lease: Some(HEALTHY_LEASE),
    };
    let Action::StandBy { after, report } = s.decide(fenced_without_lock) else {
        panic!("fenced after the lock was lost stands by");
    };
    assert_eq!(after, Duration::ZERO);
    assert_eq!(report.unwrap().reason(), m::reason::LOCK_LOST);
    // Another relay holds the lock: look again at the lock's pace, quietly.
    let Action::StandBy { after, report } = s.decide(Outcome::StandingBy { poll: ms(300) }) else {
        panic!("standing by");
    };
    assert_eq!((after, report), (ms(300), None));
    // None of it moved the back-off on.
    assert_eq!(retry(s.decide(unconnected())).0, ms(300));
}

#[test]
fn a_fatal_error_exits_on_its_side_whatever_the_backoff() {
    let mut s = supervisor();
    for _ in 0..5 {
        retry(s.decide(unconnected()));
    }
    // Exit codes: Source 3, Sink 4 (main.rs).
    let table_missing = Outcome::Unconnected {
        error: PgError::TableMissing {
            table: "public.outbox".to_owned(),
            database: "app".to_owned(),
        },
        holding_lock: true,
    };
    assert_eq!(exit(s.decide(table_missing)).side(), Side::Source);
    let unsupported = Outcome::LockUntried(LockError::Unsupported {
        slot: SLOT.to_owned(),
        detail: "42704".to_owned(),
    });
    assert_eq!(exit(s.decide(unsupported)).side(), Side::Source);
    // Fenced while holding the lock: another relay has this relay's
    // transactional id.
    assert_eq!(exit(s.decide(failed(fenced(), true))).side(), Side::Sink);
    let unprepared = Outcome::Unprepared(SessionError::Transaction(TxnFailure::Fatal(
        "transactional id not authorized".to_owned(),
    )));
    assert_eq!(exit(s.decide(unprepared)).side(), Side::Sink);
}

#[test]
fn each_failure_is_counted_logged_and_told_as_its_kind() {
    let mut s = supervisor();
    let delivery = SessionError::Delivery {
        reason: m::reason::MESSAGE_TIMEOUT,
        error: DeliveryError::ProducerFatal("gone".to_owned()),
    };
    let (_, r) = retry(s.decide(failed(delivery, false)));
    assert_eq!(
        (r.counter(), r.reason(), r.health()),
        (
            m::DELIVERY_FAILURES,
            m::reason::MESSAGE_TIMEOUT,
            HealthNote::ProducerRetrying
        )
    );
    assert_eq!(r.confirmed(), Some(Lsn::from(0x100)));
    assert_eq!(r.error(), "the producer hit a fatal error: gone");
    let aborted = SessionError::Transaction(TxnFailure::Abortable("timed out".to_owned()));
    let (_, r) = retry(s.decide(failed(aborted, false)));
    assert_eq!(r.reason(), m::reason::PRODUCER_FATAL);
    assert_eq!(
        (r.checkpoint(), r.confirmed()),
        (Some(Lsn::from(0x100)), None)
    );
    let (_, r) = retry(s.decide(stream_broke(false)));
    assert_eq!(
        (r.counter(), r.reason(), r.health()),
        (m::RECONNECTS, m::reason::STREAM_BROKE, HealthNote::Retrying)
    );
    let untried = Outcome::LockUntried(LockError::Connection {
        slot: SLOT.to_owned(),
        source: closed(),
    });
    let (_, r) = retry(s.decide(untried));
    assert_eq!(
        (r.reason(), r.health(), r.level()),
        (
            m::reason::CONNECT_FAILED,
            HealthNote::RetryingNoStandby,
            Level::WARN
        )
    );
    // The slot still read by a relay that lost the lock: it was told to
    // end, so the new holder waits the shortest delay, and says so at info.
    let (after, r) = retry(s.decide(slot_busy(true)));
    assert_eq!(
        (after, r.reason(), r.level()),
        (ms(100), m::reason::SLOT_BUSY, Level::INFO)
    );
    assert_eq!(r.name(), events::WaitingForSlotReader::NAME);
    let (after, r) = retry(s.decide(slot_busy(false)));
    assert!(after > ms(100), "a step of the back-off: {after:?}");
    assert_eq!(
        (r.level(), r.name()),
        (Level::WARN, events::SlotInUse::NAME)
    );
}

/// A slot still read by another process while this relay holds the lock:
/// a short first wait (the reader was told to end), then longer and longer
/// ones up to the cap (one that does not end: a relay without the lock,
/// a stopped process). Said once at info, then at debug; waiting was no
/// failure, and once something else happened a new wait starts over.
#[test]
fn waiting_for_the_previous_reader_backs_off_quietly() {
    let mut s = supervisor();
    let waits: Vec<(Duration, Level)> = (0..9)
        .map(|_| {
            let (after, report) = retry(s.decide(slot_busy(true)));
            assert_eq!(report.reason(), m::reason::SLOT_BUSY);
            (after, report.level())
        })
        .collect();
    let delays: Vec<Duration> = waits.iter().map(|(d, _)| *d).collect();
    assert_eq!(
        delays,
        [100, 300, 900, 2_700, 8_100, 24_300, 30_000, 30_000, 30_000].map(ms)
    );
    let levels: Vec<Level> = waits.iter().map(|(_, l)| *l).collect();
    assert_eq!(levels[0], Level::INFO);
    assert!(
        levels[1..].iter().all(|l| *l == Level::DEBUG),
        "one line at info, then quiet: {levels:?}"
    );
    // The new holder's first failure waits the first delay, not the
    // tenth: waiting for the old reader to exit was no failure.
    assert_eq!(retry(s.decide(stream_broke(false))).0, ms(100));
    // A later busy slot is a new wait: short, and said again.
    let (after, report) = retry(s.decide(slot_busy(true)));
    assert_eq!((after, report.level()), (ms(100), Level::INFO));
}

/// A relay lock lost again and again (a flapping connection to the lock's
/// server, a lease too short for the server's pace): the first loss stands
/// by at once, the next ones after a growing wait, so that the producer and
/// the stream are not rebuilt at every lease; a healthy lease starts over.
#[test]
fn a_lock_lost_again_and_again_backs_off_between_leases() {
    let mut s = supervisor();
    let short = ms(2_000);
    let waits: Vec<Duration> = (0..8)
        .map(|_| stand_by(s.decide(lease_lost(short))))
        .collect();
    assert_eq!(
        waits,
        [0, 100, 300, 900, 2_700, 8_100, 24_300, 30_000].map(ms)
    );
    // A lease that lasted: its loss stands by at once, and the next short
    // one waits the first delay again.
    assert_eq!(
        stand_by(s.decide(lease_lost(HEALTHY_LEASE))),
        Duration::ZERO
    );
    assert_eq!(stand_by(s.decide(lease_lost(short))), ms(100));
    // None of it stepped the failures' back-off.
    assert_eq!(retry(s.decide(unconnected())).0, ms(100));
}

#[test]
fn a_graceful_stop_ends_and_says_whether_it_drained() {
    let mut s = supervisor();
    let stop = |stopped| Outcome::Stopped {
        stopped,
        confirmed: Lsn::from(0x200),
    };
    let Action::Stop { stopped, said } = s.decide(stop(Stopped::Drained)) else {
        panic!("a graceful stop stops");
    };
    assert_eq!((stopped, said.level()), (Stopped::Drained, Level::INFO));
    let undrained = Stopped::Undrained { pending: 7 };
    let Action::Stop { stopped, said } = s.decide(stop(undrained)) else {
        panic!("a graceful stop stops");
    };
    assert_eq!(stopped, undrained);
    assert_eq!(
        said,
        events::Stopped::Undrained(events::StoppedUndrained {
            pending: 7,
            confirmed: Lsn::from(0x200),
        })
    );
    assert_eq!(said.level(), Level::WARN);
}

/// Rounds that end as scripted, recording when each started; a stop when
/// the script runs out.
struct Script {
    outcomes: VecDeque<Outcome>,
    started: Instant,
    rounds_at: Vec<Duration>,
    let_go: usize,
}

impl Script {
    fn new(outcomes: impl IntoIterator<Item = Outcome>) -> Script {
        Script {
            outcomes: outcomes.into_iter().collect(),
            started: Instant::now(),
            rounds_at: Vec::new(),
            let_go: 0,
        }
    }
}

impl Rounds for &mut Script {
    async fn round(&mut self, _shutdown: &mut watch::Receiver<bool>) -> Outcome {
        self.rounds_at.push(self.started.elapsed());
        self.outcomes.pop_front().unwrap_or(Outcome::Stopped {
            stopped: Stopped::Drained,
            confirmed: Lsn::from(0x300),
        })
    }

    fn let_go_of_lock(&mut self) {
        self.let_go += 1;
    }
}

#[tokio::test(start_paused = true)]
async fn the_loop_waits_as_the_policy_says() {
    let mut script = Script::new([
        unconnected(),
        unconnected(),
        unconnected(),
        stream_broke(true),
        unconnected(),
    ]);
    let (_stop, shutdown) = watch::channel(false);
    let health = Health::default();
    let stopped = supervise(supervisor(), &mut script, shutdown, &health).await;
    assert_eq!(stopped.unwrap(), Stopped::Drained);
    // 100, 300, 900 ms; progress: 100 ms again, then 300 ms.
    assert_eq!(
        script.rounds_at,
        [ms(0), ms(100), ms(400), ms(1_300), ms(1_400), ms(1_700)]
    );
    assert_eq!(script.let_go, 0);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lock_goes_round_again_at_once_and_lets_go() {
    let mut script = Script::new([
        lock_lost(),
        Outcome::StandingBy { poll: ms(300) },
        unconnected(),
    ]);
    let (_stop, shutdown) = watch::channel(false);
    let health = Health::default();
    let stopped = supervise(supervisor(), &mut script, shutdown, &health).await;
    assert_eq!(stopped.unwrap(), Stopped::Drained);
    assert_eq!(script.rounds_at, [ms(0), ms(0), ms(300), ms(400)]);
    assert_eq!(script.let_go, 2);
}

/// On the paused clock: the rounds against a slot that stays busy come
/// less and less often, and so do those after leases lost again and again.
#[tokio::test(start_paused = true)]
async fn the_loop_backs_off_on_a_busy_slot_and_on_leases_lost_soon() {
    let mut script = Script::new((0..6).map(|_| slot_busy(true)));
    let (_stop, shutdown) = watch::channel(false);
    let health = Health::default();
    let stopped = supervise(supervisor(), &mut script, shutdown, &health).await;
    assert_eq!(stopped.unwrap(), Stopped::Drained);
    assert_eq!(
        script.rounds_at,
        [0, 100, 400, 1_300, 4_000, 12_100, 36_400].map(ms)
    );
    let short = ms(500);
    let mut script = Script::new((0..4).map(|_| lease_lost(short)));
    let (_stop, shutdown) = watch::channel(false);
    let stopped = supervise(supervisor(), &mut script, shutdown, &health).await;
    assert_eq!(stopped.unwrap(), Stopped::Drained);
    assert_eq!(script.rounds_at, [0, 0, 100, 400, 1_300].map(ms));
    assert_eq!(script.let_go, 4);
}

#[tokio::test(start_paused = true)]
async fn a_fatal_error_ends_the_loop() {
    let mut script = Script::new([unconnected(), failed(fenced(), false), unconnected()]);
    let (_stop, shutdown) = watch::channel(false);
    let health = Health::default();
    let error = supervise(supervisor(), &mut script, shutdown, &health)
        .await
        .unwrap_err();
    assert_eq!(error.side(), Side::Sink);
    assert_eq!(script.rounds_at, [ms(0), ms(100)]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_a_backoff_wait_stops_at_once() {
    let mut script = Script::new([unconnected()]);
    let (stop, shutdown) = watch::channel(false);
    let health = Health::default();
    // The first wait is a minute; the stop comes after 5 s.
    let slow = Supervisor::new(SLOT, Backoff::exact(ms(60_000), ms(60_000), 2));
    tokio::spawn(async move {
        tokio::time::sleep(ms(5_000)).await;
        stop.send_replace(true);
    });
    let started = Instant::now();
    let stopped = supervise(slow, &mut script, shutdown, &health).await;
    assert_eq!(stopped.unwrap(), Stopped::Drained);
    assert_eq!(started.elapsed(), ms(5_000));
    assert_eq!(script.rounds_at, [ms(0)], "no round after the stop");
    assert_eq!(health.readiness().1, "stopping\n");
}

/// A registry that does not answer delays the start, counted and told to
/// /health, with the back-off of any retry; a missing subject exits.
#[test]
fn a_registry_that_does_not_answer_is_waited_for_and_a_missing_subject_exits() {
    use crate::contracts::ResolveError;
    use crate::registry::RegistryError;
    let mut s = supervisor();
    let away = || {
        Outcome::Unresolved(ResolveError::Registry(RegistryError::Unreachable {
            registry: "http://r".into(),
            reason: "connection refused".into(),
        }))
    };
    let (first, r) = retry(s.decide(away()));
    assert_eq!(
        (r.counter(), r.reason(), r.health()),
        (
            m::RECONNECTS,
            m::reason::SCHEMA_REGISTRY,
            HealthNote::Retrying
        )
    );
    assert_eq!(r.name(), events::SchemaRegistryUnreachable::NAME);
    let (second, _) = retry(s.decide(away()));
    assert!(second > first, "backs off: {first:?} then {second:?}");
    let missing = Outcome::Unresolved(ResolveError::Registry(RegistryError::SubjectNotFound {
        registry: "http://r".into(),
        subject: "orders-value".into(),
    }));
    let error = exit(s.decide(missing));
    assert_eq!(error.side(), Side::Sink);
    assert!(error.to_string().contains("orders-value"), "{error}");
}
