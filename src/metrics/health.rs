//! The state behind `/health` (liveness) and `/ready` (readiness).
//!
//! `/health` answers 200 while the relay streams and makes progress; 503
//! when it does not stream, or when a retry loop (reconnecting, rebuilding
//! the producer) has gone on for `relay.unhealthy_after_secs` without
//! progress, with the last reason in the body. A restart may cure that.
//!
//! A standby relay (another relay holds the relay lock) is healthy:
//! `/health` 200 `standby`, `/ready` 503 `standby: ...`; restarting it would
//! not make it the active one. `/ready?standby=ok` answers 200 `standby`
//! instead, for orchestrators that count ready replicas (a Kubernetes
//! rolling update or PodDisruptionBudget would otherwise wait forever for
//! a standby to become ready).
//!
//! `/ready` answers 200 only while a session streams with a producer that
//! works; otherwise 503 with what the relay does instead: `connecting`,
//! `retrying <reason>` (between sessions), `producer retrying <reason>` (a
//! delivery failed and the replay has not confirmed anything yet) or
//! `stopping`; or, while streaming, `kafka unreachable: <brokers> (<reason>)`
//! when the producer reaches no broker (events wait in the relay until one
//! answers: `sink::broker_watch` says when). It turns 503 at once, without
//! the grace period of /health:
//! it says "events flow now", for a load balancer, a rollout or an alert
//! (the `outbox_relay_ready` gauge carries the same answer).
//!
//! Progress is the confirmed LSN moving, or the stream showing that nothing
//! is left to confirm; a session that starts, sends and fails again is not
//! progress. No Kafka broker answering counts as a retry loop of its own
//! (librdkafka's): it turns /health 503 once it lasted
//! `relay.unhealthy_after_secs`, progress or not (an idle relay is "caught
//! up" while it could not deliver a single event), until a broker answers. Recording progress is two atomic loads on the hot path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;

use super::{DEFAULT_UNHEALTHY_AFTER, READY};

/// The parked figures: aggregates with a live head, events waiting behind
/// them, and the age of the oldest live head (read from the parking table
/// by `parking::gauges`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ParkedStats {
    pub aggregates: u64,
    pub events: u64,
    pub oldest_head_secs: f64,
}

/// Longest failure text /health and /ready show.
const MAX_REASON_LEN: usize = 300;

/// Shared state behind /health and /ready. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Health(Arc<HealthState>);

#[derive(Debug)]
struct HealthState {
    streaming: AtomicBool,
    /// A session has streamed in this process (set once, never cleared).
    streamed: AtomicBool,
    /// Another relay holds the relay lock: this one waits for it.
    standby: AtomicBool,
    /// A stop was asked for: draining, then exit.
    stopping: AtomicBool,
    /// The last failure was the producer's (a delivery failed), and nothing
    /// was confirmed since.
    producer_failing: AtomicBool,
    origin: Instant,
    /// Milliseconds since `origin` of the first failure since the last
    /// progress, plus one; 0 when there is none.
    failing_since: AtomicU64,
    unhealthy_after_ms: AtomicU64,
    reason: Mutex<String>,
    /// Like `failing_since`, for no Kafka broker answering; only a broker
    /// answering clears it.
    kafka_down_since: AtomicU64,
    kafka_reason: Mutex<String>,
    /// The parking table's figures at the last sample that worked; `None`
    /// before one did.
    parked: Mutex<Option<ParkedStats>>,
}

impl Default for Health {
    fn default() -> Self {
        Health(Arc::new(HealthState {
            streaming: AtomicBool::new(false),
            streamed: AtomicBool::new(false),
            standby: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            producer_failing: AtomicBool::new(false),
            origin: Instant::now(),
            failing_since: AtomicU64::new(0),
            unhealthy_after_ms: AtomicU64::new(millis(DEFAULT_UNHEALTHY_AFTER)),
            reason: Mutex::new(String::new()),
            kafka_down_since: AtomicU64::new(0),
            kafka_reason: Mutex::new(String::new()),
            parked: Mutex::new(None),
        }))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `text`, cut to [`MAX_REASON_LEN`] at a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > MAX_REASON_LEN {
        let mut end = MAX_REASON_LEN;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

impl Health {
    pub fn set_streaming(&self, streaming: bool) {
        self.0.streaming.store(streaming, Ordering::Relaxed);
        if streaming {
            self.0.streamed.store(true, Ordering::Relaxed);
        }
        self.publish_readiness();
    }

    /// Resolves `grace` after a stop was asked for (`stop` turned true)
    /// if no session has streamed in this process by then; never
    /// otherwise. A start-up step (a connect, the broker probe) may take its
    /// whole timeout before the relay looks at the stop; until a session
    /// streamed, nothing was sent, so nothing is left to drain or confirm
    /// and the process may stop without waiting for that step.
    pub async fn stopped_before_streaming(
        &self,
        mut stop: tokio::sync::watch::Receiver<bool>,
        grace: Duration,
    ) {
        if stop.wait_for(|stop| *stop).await.is_ok() {
            tokio::time::sleep(grace).await;
            if !self.0.streamed.load(Ordering::Relaxed) {
                // The caller says so (`events::StoppedBeforeStreaming`).
                return;
            }
        }
        std::future::pending().await
    }

    pub fn is_streaming(&self) -> bool {
        self.0.streaming.load(Ordering::Relaxed)
    }

    /// Whether this relay stands by (another holds the relay lock). Standing
    /// by is not a failure: it clears the retry clock of /health.
    pub fn set_standby(&self, standby: bool) {
        self.0.standby.store(standby, Ordering::Relaxed);
        if standby {
            self.0.failing_since.store(0, Ordering::Relaxed);
            self.0.producer_failing.store(false, Ordering::Relaxed);
            // A standby has no producer: what the last one met is over.
            self.0.kafka_down_since.store(0, Ordering::Relaxed);
        }
        self.publish_readiness();
    }

    pub fn is_standby(&self) -> bool {
        self.0.standby.load(Ordering::Relaxed)
    }

    /// A stop was asked for: /ready answers 503 `stopping` from now on.
    pub fn set_stopping(&self) {
        self.0.stopping.store(true, Ordering::Relaxed);
        self.publish_readiness();
    }

    /// How long a retry loop may go on without progress.
    pub fn set_unhealthy_after(&self, after: Duration) {
        self.0
            .unhealthy_after_ms
            .store(millis(after), Ordering::Relaxed);
    }

    /// A retry loop went round once more: `reason` is one of
    /// [`super::reason`]'s labels, `detail` the error (shown, cut, on
    /// /health and /ready).
    pub fn retrying(&self, reason: &str, detail: &dyn std::fmt::Display) {
        self.0.producer_failing.store(false, Ordering::Relaxed);
        self.record_failure(reason, detail);
    }

    /// A delivery failed and the producer is being rebuilt: like
    /// [`Health::retrying`], and /ready stays 503 in the next session until
    /// it confirms something.
    pub fn producer_retrying(&self, reason: &str, detail: &dyn std::fmt::Display) {
        self.0.producer_failing.store(true, Ordering::Relaxed);
        self.record_failure(reason, detail);
    }

    /// No Kafka broker answers (`detail` says where and why): /ready
    /// answers 503 while streaming, /health once it lasted
    /// `relay.unhealthy_after_secs`.
    pub fn kafka_unreachable(&self, detail: &dyn std::fmt::Display) {
        *self
            .0
            .kafka_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = cut(detail.to_string());
        let now = millis(self.0.origin.elapsed()) + 1;
        let _ =
            self.0
                .kafka_down_since
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        self.publish_readiness();
    }

    /// A Kafka broker answers (again).
    pub fn kafka_reachable(&self) {
        if self.0.kafka_down_since.swap(0, Ordering::Relaxed) != 0 {
            self.publish_readiness();
        }
    }

    /// Why no Kafka broker answers, while none does.
    fn kafka_down(&self) -> Option<String> {
        (self.0.kafka_down_since.load(Ordering::Relaxed) != 0).then(|| {
            self.0
                .kafka_reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        })
    }

    fn record_failure(&self, reason: &str, detail: &dyn std::fmt::Display) {
        let text = cut(format!("{reason}: {detail}"));
        *self.0.reason.lock().unwrap_or_else(|e| e.into_inner()) = text;
        let now = millis(self.0.origin.elapsed()) + 1;
        let _ = self
            .0
            .failing_since
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        self.publish_readiness();
    }

    /// The relay made progress: whatever failed before is over.
    pub fn progress(&self) {
        if self.0.failing_since.load(Ordering::Relaxed) != 0 {
            self.0.failing_since.store(0, Ordering::Relaxed);
            self.0.producer_failing.store(false, Ordering::Relaxed);
            self.publish_readiness();
        }
    }

    fn reason(&self) -> String {
        self.0
            .reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The parking table's figures, as the parked gauges last read them.
    pub fn set_parked(&self, stats: ParkedStats) {
        *self.0.parked.lock().unwrap_or_else(|e| e.into_inner()) = Some(stats);
    }

    /// The figures [`Health::set_parked`] was last given.
    pub fn parked(&self) -> Option<ParkedStats> {
        *self.0.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The /health answer: status code and body.
    pub fn status(&self) -> (StatusCode, String) {
        self.status_at(self.0.origin.elapsed())
    }

    /// The /health answer at `now` (time since this value was created):
    /// the relay's state, then what is parked (never changing the code).
    pub(super) fn status_at(&self, now: Duration) -> (StatusCode, String) {
        let (code, mut body) = self.liveness_at(now);
        if let Some(line) = self.parked().as_ref().and_then(parked_line) {
            body.push_str(&line);
        }
        (code, body)
    }

    /// The /health code and first line at `now`.
    fn liveness_at(&self, now: Duration) -> (StatusCode, String) {
        let limit = Duration::from_millis(self.0.unhealthy_after_ms.load(Ordering::Relaxed));
        let since = self.0.failing_since.load(Ordering::Relaxed);
        if since != 0 {
            let stalled = Duration::from_millis(millis(now).saturating_sub(since - 1));
            if stalled >= limit {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "unhealthy: no progress for {} s; last failure: {}\n",
                        stalled.as_secs(),
                        self.reason()
                    ),
                );
            }
        }
        // After the relay's own retry loop, which names its reason.
        let kafka_down = self.0.kafka_down_since.load(Ordering::Relaxed);
        if kafka_down != 0 {
            let down = Duration::from_millis(millis(now).saturating_sub(kafka_down - 1));
            if let Some(reason) = self.kafka_down().filter(|_| down >= limit) {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "unhealthy: no Kafka broker answered for {} s: {reason}\n",
                        down.as_secs()
                    ),
                );
            }
        }
        match (self.is_streaming(), since != 0) {
            (true, _) => (StatusCode::OK, "streaming\n".to_owned()),
            (false, false) if self.is_standby() => (StatusCode::OK, "standby\n".to_owned()),
            (false, false) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "not streaming\n".to_owned(),
            ),
            (false, true) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not streaming; retrying: {}\n", self.reason()),
            ),
        }
    }

    /// The /ready answer: status code and body (see the module docs).
    pub fn readiness(&self) -> (StatusCode, String) {
        self.readiness_with(false)
    }

    /// The /ready answer; a standby counts as ready when `standby_ok`
    /// (`/ready?standby=ok`).
    pub fn readiness_with(&self, standby_ok: bool) -> (StatusCode, String) {
        let unavailable = |body: String| (StatusCode::SERVICE_UNAVAILABLE, body);
        if self.0.stopping.load(Ordering::Relaxed) {
            return unavailable("stopping\n".to_owned());
        }
        let failing = self.0.failing_since.load(Ordering::Relaxed) != 0;
        if self.is_standby() && !self.is_streaming() {
            if standby_ok {
                return (StatusCode::OK, "standby\n".to_owned());
            }
            return unavailable(
                "standby: another relay holds the relay lock on this slot\n".to_owned(),
            );
        }
        if self.is_streaming() {
            if failing && self.0.producer_failing.load(Ordering::Relaxed) {
                return unavailable(format!("producer retrying {}\n", self.reason()));
            }
            if let Some(reason) = self.kafka_down() {
                return unavailable(format!("kafka unreachable: {reason}\n"));
            }
            return (StatusCode::OK, "ready: streaming\n".to_owned());
        }
        if failing {
            return unavailable(format!("retrying {}\n", self.reason()));
        }
        unavailable("connecting\n".to_owned())
    }

    /// Sets the [`READY`] gauge to the /ready answer.
    pub fn publish_readiness(&self) {
        let ready = self.readiness().0 == StatusCode::OK;
        metrics::gauge!(READY).set(if ready { 1.0 } else { 0.0 });
    }
}

/// The /health line of what is parked, while anything is.
fn parked_line(stats: &ParkedStats) -> Option<String> {
    if stats.aggregates == 0 && stats.events == 0 {
        return None;
    }
    Some(format!(
        "parked: {} aggregates behind a dead letter, {} events waiting, the oldest parked for \
         {} s (outbox-relay dead list)\n",
        stats.aggregates,
        stats.events,
        stats.oldest_head_secs.max(0.0).round() as u64
    ))
}

#[cfg(test)]
mod tests {
    use super::super::reason;
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_stop_before_any_session_streamed_ends_the_wait_after_the_grace() {
        let grace = Duration::from_millis(250);
        let health = Health::default();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let mut waiting = std::pin::pin!(health.stopped_before_streaming(rx.clone(), grace));
        // No stop asked for: it waits.
        assert!(
            tokio::time::timeout(10 * SEC, waiting.as_mut())
                .await
                .is_err()
        );
        stop.send(true).unwrap();
        let started = tokio::time::Instant::now();
        waiting.await;
        assert_eq!(started.elapsed(), grace);

        // Once a session streamed, a stop waits for the relay's own drain,
        // even between sessions.
        health.set_streaming(true);
        health.set_streaming(false);
        let after = health.stopped_before_streaming(rx, grace);
        assert!(tokio::time::timeout(10 * SEC, after).await.is_err());
    }

    #[test]
    fn health_turns_503_only_after_the_limit_without_progress() {
        let health = Health::default();
        health.set_unhealthy_after(Duration::from_secs(10));
        assert_eq!(health.status_at(SEC).0, StatusCode::SERVICE_UNAVAILABLE);
        health.set_streaming(true);
        assert_eq!(health.status_at(SEC).0, StatusCode::OK);

        // A failure starts the clock; more failures do not restart it.
        health.retrying(reason::MESSAGE_TIMEOUT, &"Local: Message timed out");
        let first = health.0.failing_since.load(Ordering::Relaxed);
        health.retrying(reason::MESSAGE_TIMEOUT, &"Local: Message timed out");
        assert_eq!(health.0.failing_since.load(Ordering::Relaxed), first);
        let at = |secs: u64| Duration::from_millis(first - 1) + Duration::from_secs(secs);
        assert_eq!(health.status_at(at(9)).0, StatusCode::OK);
        let (code, body) = health.status_at(at(10));
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("no progress for 10 s") && body.contains("message_timeout: Local"),
            "{body}"
        );
        // Between sessions, not streaming: 503 with the reason either way.
        health.set_streaming(false);
        assert!(
            health
                .status_at(at(1))
                .1
                .contains("retrying: message_timeout")
        );
        health.set_streaming(true);

        // Progress clears it.
        health.progress();
        assert_eq!(health.status_at(at(1000)).0, StatusCode::OK);
    }

    #[test]
    fn ready_only_while_streaming_and_says_what_it_does_instead() {
        let health = Health::default();
        let unavailable = |body: &str| (StatusCode::SERVICE_UNAVAILABLE, body.to_owned());
        assert_eq!(health.readiness(), unavailable("connecting\n"));
        health.set_streaming(true);
        assert_eq!(
            health.readiness(),
            (StatusCode::OK, "ready: streaming\n".to_owned())
        );
        // The session failed on the PostgreSQL side: retrying, with why.
        health.set_streaming(false);
        health.retrying(reason::SLOT_BUSY, &"slot \"s\" is active for PID 42");
        assert_eq!(
            health.readiness(),
            unavailable("retrying slot_busy: slot \"s\" is active for PID 42\n")
        );
        // Streaming again: ready at once, before any progress (nothing is
        // wrong with the producer).
        health.set_streaming(true);
        assert_eq!(health.readiness().0, StatusCode::OK);

        // A delivery failed: not ready, and not in the next session either
        // until it confirms something.
        health.set_streaming(false);
        health.producer_retrying(reason::MESSAGE_TIMEOUT, &"Local: Message timed out");
        let retrying = unavailable("retrying message_timeout: Local: Message timed out\n");
        assert_eq!(health.readiness(), retrying);
        health.set_streaming(true);
        assert_eq!(
            health.readiness(),
            unavailable("producer retrying message_timeout: Local: Message timed out\n")
        );
        health.progress();
        assert_eq!(health.readiness().0, StatusCode::OK);
        // A later PostgreSQL-side failure does not inherit the producer's.
        health.producer_retrying(reason::BROKER_ERROR, &"x");
        health.retrying(reason::STREAM_BROKE, &"y");
        assert_eq!(
            health.readiness().0,
            StatusCode::OK,
            "streaming, producer fine"
        );

        // A stop wins over everything, streaming included.
        health.set_stopping();
        assert_eq!(health.readiness(), unavailable("stopping\n"));
    }

    #[test]
    fn a_standby_is_alive_but_not_ready_and_never_turns_unhealthy() {
        let health = Health::default();
        health.set_unhealthy_after(Duration::from_secs(10));
        // The active relay was cut off: it lost the lock, then stands by.
        health.retrying(reason::LOCK_LOST, &"lease ran out");
        health.set_standby(true);
        let (code, body) = health.status_at(Duration::from_secs(3600));
        assert_eq!((code, body.as_str()), (StatusCode::OK, "standby\n"));
        let (code, body) = health.readiness();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.starts_with("standby"), "{body}");
        assert_eq!(
            health.readiness_with(true),
            (StatusCode::OK, "standby\n".to_owned()),
            "/ready?standby=ok"
        );
        // A standby that cannot reach PostgreSQL is no standby.
        health.set_standby(false);
        health.retrying(reason::CONNECT_FAILED, &"connection refused");
        assert_eq!(
            health.readiness_with(true).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        // Elected: streaming and ready.
        health.set_streaming(true);
        health.progress();
        assert_eq!(health.readiness().0, StatusCode::OK);
        assert_eq!(
            health.status_at(Duration::from_secs(3600)).0,
            StatusCode::OK
        );
    }

    #[test]
    fn no_kafka_broker_is_not_ready_at_once_and_unhealthy_after_the_limit_whatever_the_progress() {
        let health = Health::default();
        health.set_unhealthy_after(Duration::from_secs(10));
        health.set_streaming(true);
        let where_why = "127.0.0.1:1 (Connect to ipv4#127.0.0.1:1 failed: Connection refused)";
        health.kafka_unreachable(&where_why);
        assert_eq!(
            health.readiness(),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("kafka unreachable: {where_why}\n")
            )
        );
        let first = health.0.kafka_down_since.load(Ordering::Relaxed);
        health.kafka_unreachable(&"again");
        assert_eq!(
            health.0.kafka_down_since.load(Ordering::Relaxed),
            first,
            "the clock starts once"
        );
        let at = |secs: u64| Duration::from_millis(first - 1) + Duration::from_secs(secs);
        // Caught up on an idle outbox: progress, but nothing can be
        // delivered either.
        health.progress();
        assert_eq!(health.status_at(at(9)).0, StatusCode::OK);
        let (code, body) = health.status_at(at(10));
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            "unhealthy: no Kafka broker answered for 10 s: again\n"
        );

        health.kafka_reachable();
        assert_eq!(health.readiness().0, StatusCode::OK);
        assert_eq!(health.status_at(at(1000)).0, StatusCode::OK);

        // A relay standing by has no producer: nothing of the last one stays.
        health.kafka_unreachable(&where_why);
        health.set_streaming(false);
        health.set_standby(true);
        assert_eq!(health.status_at(at(5000)).0, StatusCode::OK);
    }

    #[test]
    fn health_reason_is_cut_at_a_character_boundary() {
        let health = Health::default();
        health.retrying(reason::BROKER_ERROR, &"é".repeat(400));
        let reason = health.reason();
        assert!(reason.len() <= MAX_REASON_LEN, "{}", reason.len());
        assert!(reason.starts_with("broker_error: é"));
    }

    #[test]
    fn parked_aggregates_are_shown_and_never_change_the_answer() {
        let health = Health::default();
        health.set_unhealthy_after(Duration::from_secs(10));
        health.set_streaming(true);
        // Nothing parked: the body is as before.
        health.set_parked(ParkedStats::default());
        assert_eq!(
            health.status_at(SEC),
            (StatusCode::OK, "streaming\n".to_owned())
        );
        // A day-old head: still 200, the figures on a line of their own.
        health.set_parked(ParkedStats {
            aggregates: 2,
            events: 7,
            oldest_head_secs: 86_400.4,
        });
        assert_eq!(
            health.status_at(SEC),
            (
                StatusCode::OK,
                "streaming\nparked: 2 aggregates behind a dead letter, 7 events waiting, the \
                 oldest parked for 86400 s (outbox-relay dead list)\n"
                    .to_owned()
            )
        );
        assert_eq!(health.readiness().0, StatusCode::OK);
        // Beside an unhealthy answer too: the code is the relay's.
        health.retrying(reason::STREAM_BROKE, &"walsender ended");
        let (code, body) = health.status_at(Duration::from_secs(3600));
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.starts_with("unhealthy: ") && body.ends_with("(outbox-relay dead list)\n"),
            "{body}"
        );
    }
}
