//! Carries out [`super::reach`]'s decisions for one producer: feeds it
//! librdkafka's client errors, deliveries, statistics and the start probe,
//! logs the lines it asks for, and tells the observer (the relay's /ready)
//! when the brokers turn unreachable or reachable.
//!
//! Invariants: called from librdkafka's threads (error, stats and delivery
//! callbacks) and the relay's; one mutex orders them, so the observer sees
//! the changes in the order they were decided, the state at the time it was
//! set included. A delivery costs one atomic load while a broker answers.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::reachability::{Change, Line, Outcome, Reachability, Trouble};
use super::refusal_kind::{RefusalClass, classify_error};
use crate::events;

/// Told `Some(reason)` when no broker answers, `None` when one does.
pub type ReachObserver = Box<dyn Fn(Option<&str>) + Send + Sync>;

pub(super) struct BrokerWatch {
    /// `kafka.brokers`, named in the lines.
    brokers: String,
    shared: Mutex<Shared>,
    /// [`Reachability::awaits_answer`], readable without the lock.
    awaiting: AtomicBool,
}

struct Shared {
    reach: Reachability,
    observer: Option<ReachObserver>,
}

/// What a client error says about reaching the cluster; `None` for one a
/// person must act on (credentials refused), which stays an ERROR line of
/// its own, and for a fatal producer error (the relay reports it as the
/// records it fails come back).
fn trouble(error: &KafkaError) -> Option<Trouble> {
    match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::AllBrokersDown) => Some(Trouble::AllDown),
        Some(RDKafkaErrorCode::Fatal) => None,
        _ if classify_error(error).is_some_and(|k| k.class() == RefusalClass::Unauthorized) => None,
        _ => Some(Trouble::Degraded),
    }
}

impl BrokerWatch {
    pub(super) fn new(brokers: &str) -> Self {
        Self {
            brokers: brokers.to_owned(),
            shared: Mutex::new(Shared {
                reach: Reachability::new(),
                observer: None,
            }),
            awaiting: AtomicBool::new(true),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// librdkafka's error callback. Returns false for an error this does
    /// not cover (the caller logs it at ERROR).
    pub(super) fn client_error(&self, error: &KafkaError, reason: &str) -> bool {
        let Some(trouble) = trouble(error) else {
            return false;
        };
        tracing::debug!(target: "librdkafka", "librdkafka: {error}: {reason}");
        let mut shared = self.lock();
        let outcome = shared.reach.client_error(Instant::now(), trouble, reason);
        self.apply(&mut shared, outcome);
        true
    }

    /// A metadata request at start got no answer within its timeout.
    pub(super) fn probe_failed(&self, error: &str) {
        let mut shared = self.lock();
        let reason = shared.reach.last_reason().unwrap_or(error).to_owned();
        let outcome = shared
            .reach
            .client_error(Instant::now(), Trouble::AllDown, &reason);
        self.apply(&mut shared, outcome);
    }

    /// Whether no broker is known to answer since the last trouble: then
    /// the producer's answer probe asks the cluster once a second.
    pub(super) fn awaiting(&self) -> bool {
        self.awaiting.load(Ordering::Acquire)
    }

    /// A broker answered (a delivery, a metadata answer).
    pub(super) fn answered(&self) {
        if !self.awaiting.load(Ordering::Acquire) {
            return;
        }
        let mut shared = self.lock();
        let outcome = shared.reach.answered(Instant::now());
        self.apply(&mut shared, outcome);
    }

    /// librdkafka's statistics, when the operator turned them on
    /// (`statistics.interval.ms`): read only while no broker is known to
    /// answer.
    pub(super) fn statistics(&self, json: &[u8]) {
        if self.awaiting.load(Ordering::Acquire)
            && super::reachability::any_broker_up(json) == Some(true)
        {
            self.answered();
        }
    }

    /// Sets the observer, and tells it the state now if one is known.
    pub(super) fn observe(&self, observer: ReachObserver) {
        let mut shared = self.lock();
        match shared.reach.reachable() {
            Some(true) => observer(None),
            Some(false) => observer(Some(shared.reach.last_reason().unwrap_or_default())),
            // Nothing known yet: the observer keeps what it knew (from the
            // previous producer).
            None => {}
        }
        shared.observer = Some(observer);
    }

    fn apply(&self, shared: &mut Shared, outcome: Outcome) {
        self.awaiting
            .store(shared.reach.awaits_answer(), Ordering::Release);
        if let Some(line) = outcome.line {
            self.log(line);
        }
        if let (Some(change), Some(observer)) = (outcome.change, &shared.observer) {
            match change {
                Change::Unreachable(reason) => observer(Some(&reason)),
                Change::Reachable => observer(None),
            }
        }
    }

    fn log(&self, line: Line) {
        let brokers = &self.brokers;
        match line {
            Line::Unreachable { reason } => events::BrokersUnreachable {
                brokers,
                reason: &reason,
            }
            .emit(),
            Line::Degraded { reason, errors } => events::KafkaClientDegraded {
                brokers,
                errors,
                reason: &reason,
            }
            .emit(),
            Line::StillUnreachable {
                down_for,
                errors,
                reason,
            } => events::BrokersStillUnreachable {
                brokers,
                down_for,
                errors,
                reason: &reason,
            }
            .emit(),
            Line::StillDegraded {
                for_,
                errors,
                reason,
            } => events::KafkaClientStillDegraded {
                brokers,
                for_,
                errors,
                reason: &reason,
            }
            .emit(),
            Line::Answered { after, errors } => events::BrokerAnswers {
                brokers,
                after,
                errors,
            }
            .emit(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaching_the_cluster_is_not_a_person_s_job_but_credentials_are() {
        let all_down = KafkaError::Global(RDKafkaErrorCode::AllBrokersDown);
        assert_eq!(trouble(&all_down), Some(Trouble::AllDown));
        let transport = KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure);
        assert_eq!(trouble(&transport), Some(Trouble::Degraded));
        let resolve = KafkaError::Global(RDKafkaErrorCode::Resolve);
        assert_eq!(trouble(&resolve), Some(Trouble::Degraded));
        let sasl = KafkaError::Global(RDKafkaErrorCode::Authentication);
        assert_eq!(trouble(&sasl), None);
        assert_eq!(trouble(&KafkaError::Global(RDKafkaErrorCode::Fatal)), None);
    }

    #[test]
    fn the_observer_learns_the_state_it_missed_and_every_change() {
        let watch = BrokerWatch::new("127.0.0.1:1");
        let seen = std::sync::Arc::new(Mutex::new(Vec::<Option<String>>::new()));
        let all_down = KafkaError::Global(RDKafkaErrorCode::AllBrokersDown);
        assert!(watch.client_error(&all_down, "1/1 brokers are down"));
        let record = std::sync::Arc::clone(&seen);
        watch.observe(Box::new(move |r| {
            record.lock().unwrap().push(r.map(str::to_owned))
        }));
        watch.answered();
        watch.answered();
        assert_eq!(
            *seen.lock().unwrap(),
            vec![Some("1/1 brokers are down".to_owned()), None]
        );
        let sasl = KafkaError::Global(RDKafkaErrorCode::Authentication);
        assert!(!watch.client_error(&sasl, "SASL authentication error"));
    }
}
