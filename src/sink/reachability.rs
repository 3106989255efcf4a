//! Whether the producer reaches a Kafka broker, and what to log about it.
//!
//! librdkafka reports connection trouble through its client error callback,
//! once per failed attempt: with `kafka.brokers` on a closed port that is
//! many errors a second (`BrokerTransportFailure`, `AllBrokersDown`, each
//! possibly twice), for as long as it lasts. [`Reachability`] turns that
//! stream, and the signs that a broker answers (a delivery, a metadata
//! answer, a broker `UP` in librdkafka's statistics), into
//!
//! * the state behind `/ready`: [`Change::Unreachable`] once librdkafka says
//!   every broker is down (or the start probe got no answer),
//!   [`Change::Reachable`] once a broker answers;
//! * a few log lines per incident instead of one per error ([`Line`]).
//!
//! Invariants: an incident logs at most one WARN line when it starts (the
//! [`Line::Unreachable`] line once every broker is down, or
//! [`Line::Degraded`] once errors went on for [`DEGRADED_AFTER`] with some
//! broker still up), then at most one summary per [`SUMMARY_EVERY`]; an
//! incident that said the brokers were unreachable ends with one INFO line
//! when a broker answers. A lone error that librdkafka recovers from at once
//! logs nothing above debug. Pure: the caller passes the time and logs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Deserialize;

/// At most one summary line per incident this often.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(30);

/// Errors with some broker still up are said once they went on this long:
/// librdkafka often recovers from one by itself, and when the last broker
/// is down the `AllBrokersDown` error follows within milliseconds.
pub const DEGRADED_AFTER: Duration = Duration::from_secs(2);

/// An incident with some broker up ends silently after this long without
/// an error (no delivery says "all is well again" while one broker of a
/// cluster is down: the others answer throughout).
pub const QUIET_ENDS: Duration = Duration::from_secs(60);

/// What one client error says about the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// `AllBrokersDown`, or the start probe got no answer.
    AllDown,
    /// Anything else librdkafka retries (a connection to one broker failed
    /// or broke, a name did not resolve, a request timed out).
    Degraded,
}

/// A line to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// WARN: no broker answers; events wait.
    Unreachable { reason: String },
    /// WARN: client errors went on for [`DEGRADED_AFTER`], some broker up.
    Degraded { reason: String, errors: u64 },
    /// WARN: still no broker, `errors` more errors since the last line.
    StillUnreachable {
        down_for: Duration,
        errors: u64,
        reason: String,
    },
    /// WARN: still client errors, `errors` since the last line.
    StillDegraded {
        for_: Duration,
        errors: u64,
        reason: String,
    },
    /// INFO: a broker answers again after the brokers were unreachable.
    Answered { after: Duration, errors: u64 },
}

/// A change of the state behind `/ready`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Unreachable(String),
    Reachable,
}

/// What one input leads to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub line: Option<Line>,
    pub change: Option<Change>,
}

#[derive(Debug)]
struct Incident {
    started: Instant,
    last_error: Instant,
    /// When a line about it was last logged; `None` while none was.
    last_line: Option<Instant>,
    errors: u64,
    errors_since_line: u64,
    /// librdkafka said every broker is down.
    all_down: bool,
    /// The latest error's text.
    reason: String,
}

/// The decision: see the module docs.
#[derive(Debug, Default)]
pub struct Reachability {
    incident: Option<Incident>,
    /// `None` until something said either way.
    reachable: Option<bool>,
}

impl Reachability {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a broker answers: `None` until something said either way.
    pub fn reachable(&self) -> Option<bool> {
        self.reachable
    }

    /// Whether a sign that a broker answers would change anything: false
    /// only while it is known to answer (the hot path checks this first).
    pub fn awaits_answer(&self) -> bool {
        self.reachable != Some(true)
    }

    /// The text of the incident's latest error (its latest specific one
    /// once every broker is down), while it lasts.
    pub fn last_reason(&self) -> Option<&str> {
        self.incident.as_ref().map(|i| i.reason.as_str())
    }

    /// librdkafka reported a client error (or the start probe failed:
    /// [`Trouble::AllDown`]).
    pub fn client_error(&mut self, now: Instant, trouble: Trouble, reason: &str) -> Outcome {
        if self.incident.as_ref().is_some_and(|i| {
            !i.all_down && now.saturating_duration_since(i.last_error) >= QUIET_ENDS
        }) {
            self.incident = None;
        }
        let incident = self.incident.get_or_insert_with(|| Incident {
            started: now,
            last_error: now,
            last_line: None,
            errors: 0,
            errors_since_line: 0,
            all_down: false,
            reason: String::new(),
        });
        incident.errors += 1;
        incident.errors_since_line += 1;
        incident.last_error = now;
        // "1/1 brokers are down" says less than the failure before it
        // ("Connect to ... failed: Connection refused"): that one is kept.
        if trouble == Trouble::Degraded || incident.reason.is_empty() {
            reason.clone_into(&mut incident.reason);
        }
        let reason = incident.reason.clone();
        let mut outcome = Outcome::default();
        let line = if trouble == Trouble::AllDown && !incident.all_down {
            incident.all_down = true;
            self.reachable = Some(false);
            outcome.change = Some(Change::Unreachable(reason.clone()));
            Some(Line::Unreachable { reason })
        } else {
            match incident.last_line {
                None if now.saturating_duration_since(incident.started) >= DEGRADED_AFTER => {
                    Some(Line::Degraded {
                        reason,
                        errors: incident.errors,
                    })
                }
                None => None,
                Some(last) if now.saturating_duration_since(last) >= SUMMARY_EVERY => {
                    let lasted = now.saturating_duration_since(incident.started);
                    let errors = incident.errors_since_line;
                    Some(if incident.all_down {
                        Line::StillUnreachable {
                            down_for: lasted,
                            errors,
                            reason,
                        }
                    } else {
                        Line::StillDegraded {
                            for_: lasted,
                            errors,
                            reason,
                        }
                    })
                }
                Some(_) => None,
            }
        };
        if line.is_some() {
            incident.last_line = Some(now);
            incident.errors_since_line = 0;
        }
        outcome.line = line;
        outcome
    }

    /// A broker answered: a delivery, a metadata answer, a broker `UP` in
    /// the statistics.
    pub fn answered(&mut self, now: Instant) -> Outcome {
        let mut outcome = Outcome::default();
        if self.reachable != Some(true) {
            self.reachable = Some(true);
            outcome.change = Some(Change::Reachable);
        }
        match &self.incident {
            Some(i) if i.all_down => {
                outcome.line = Some(Line::Answered {
                    after: now.saturating_duration_since(i.started),
                    errors: i.errors,
                });
                self.incident = None;
            }
            // Errors with some broker up: another broker answering says
            // nothing about the failing one; it ends when quiet
            // (QUIET_ENDS).
            _ => {}
        }
        outcome
    }
}

/// Whether librdkafka's statistics (`stats_cb` JSON) show a broker that is
/// connected (`UP`), leaving out its internal pseudo-broker; `None` when
/// the text is not the statistics.
pub fn any_broker_up(statistics: &[u8]) -> Option<bool> {
    #[derive(Deserialize)]
    struct Statistics {
        #[serde(default)]
        brokers: HashMap<String, Broker>,
    }
    #[derive(Deserialize)]
    struct Broker {
        #[serde(default)]
        source: String,
        #[serde(default)]
        state: String,
    }
    let statistics: Statistics = serde_json::from_slice(statistics).ok()?;
    Some(
        statistics
            .brokers
            .values()
            .any(|b| b.source != "internal" && b.state == "UP"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFUSED: &str =
        "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused";
    const ALL_DOWN: &str = "1/1 brokers are down";

    fn at(origin: Instant, millis: u64) -> Instant {
        origin + Duration::from_millis(millis)
    }

    #[test]
    fn a_closed_port_says_so_once_then_a_summary_every_30_s_then_the_recovery() {
        let t0 = Instant::now();
        let mut reach = Reachability::new();
        assert!(reach.awaits_answer());
        // The first attempt: a transport error, then all brokers down.
        let first = reach.client_error(t0, Trouble::Degraded, REFUSED);
        assert_eq!(
            first,
            Outcome::default(),
            "not yet: maybe one broker of many"
        );
        let down = reach.client_error(at(t0, 1), Trouble::AllDown, ALL_DOWN);
        // With the failure that says why, not librdkafka's "1/1 brokers".
        assert_eq!(
            down.line,
            Some(Line::Unreachable {
                reason: REFUSED.into()
            })
        );
        assert_eq!(down.change, Some(Change::Unreachable(REFUSED.into())));
        // librdkafka goes on: 20 errors a second for 65 s.
        let mut lines = Vec::new();
        for step in 1..=1300u64 {
            let (trouble, reason) = if step % 2 == 0 {
                (Trouble::AllDown, ALL_DOWN)
            } else {
                (Trouble::Degraded, REFUSED)
            };
            let outcome = reach.client_error(at(t0, 1 + step * 50), trouble, reason);
            assert_eq!(outcome.change, None, "still unreachable at step {step}");
            lines.extend(outcome.line);
        }
        assert_eq!(lines.len(), 2, "{lines:?}");
        match &lines[0] {
            Line::StillUnreachable {
                down_for, errors, ..
            } => {
                assert_eq!(*down_for, Duration::from_millis(30_001));
                assert_eq!(*errors, 600);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(lines[1], Line::StillUnreachable { .. }));
        assert_eq!(reach.last_reason(), Some(REFUSED));

        let back = reach.answered(at(t0, 70_000));
        assert_eq!(back.change, Some(Change::Reachable));
        assert_eq!(
            back.line,
            Some(Line::Answered {
                after: Duration::from_secs(70),
                errors: 1302
            })
        );
        assert!(!reach.awaits_answer());
        assert_eq!(reach.answered(at(t0, 70_001)), Outcome::default());
        assert_eq!(reach.last_reason(), None);
    }

    #[test]
    fn a_lone_error_librdkafka_recovers_from_logs_nothing() {
        let t0 = Instant::now();
        let mut reach = Reachability::new();
        assert_eq!(reach.answered(t0).change, Some(Change::Reachable));
        let error = reach.client_error(at(t0, 10), Trouble::Degraded, REFUSED);
        assert_eq!(error, Outcome::default());
        assert_eq!(reach.answered(at(t0, 500)), Outcome::default());
        // Another one much later starts a new incident: still silent.
        assert_eq!(
            reach.client_error(at(t0, 600_000), Trouble::Degraded, REFUSED),
            Outcome::default()
        );
    }

    #[test]
    fn one_broker_of_many_failing_warns_once_it_persists_and_ends_when_quiet() {
        let t0 = Instant::now();
        let mut reach = Reachability::new();
        reach.answered(t0);
        assert_eq!(
            reach.client_error(at(t0, 0), Trouble::Degraded, REFUSED),
            Outcome::default()
        );
        // The others answer meanwhile: that does not end it.
        reach.answered(at(t0, 1000));
        let later = reach.client_error(at(t0, 2000), Trouble::Degraded, REFUSED);
        assert_eq!(
            later.line,
            Some(Line::Degraded {
                reason: REFUSED.into(),
                errors: 2
            })
        );
        assert_eq!(later.change, None, "/ready stays: other brokers answer");
        assert_eq!(
            reach
                .client_error(at(t0, 20_000), Trouble::Degraded, REFUSED)
                .line,
            None
        );
        assert!(matches!(
            reach
                .client_error(at(t0, 32_000), Trouble::Degraded, REFUSED)
                .line,
            Some(Line::StillDegraded { errors: 2, .. })
        ));
        // A minute without an error: over. A new one starts from scratch.
        let again = reach.client_error(at(t0, 92_000), Trouble::Degraded, REFUSED);
        assert_eq!(again, Outcome::default());
    }

    #[test]
    fn a_probe_without_answer_is_unreachable_with_its_own_reason() {
        let t0 = Instant::now();
        let mut reach = Reachability::new();
        let timed_out = "Meta data fetch error: OperationTimedOut (Local: Timed out)";
        let probe = reach.client_error(t0, Trouble::AllDown, timed_out);
        assert_eq!(
            probe.line,
            Some(Line::Unreachable {
                reason: timed_out.into()
            })
        );
        // librdkafka saying the same afterwards adds no line.
        assert_eq!(
            reach.client_error(at(t0, 5), Trouble::AllDown, ALL_DOWN),
            Outcome::default()
        );
    }

    #[test]
    fn every_broker_going_down_after_a_degraded_start_still_says_so() {
        let t0 = Instant::now();
        let mut reach = Reachability::new();
        reach.client_error(t0, Trouble::Degraded, REFUSED);
        assert!(matches!(
            reach
                .client_error(at(t0, 3000), Trouble::Degraded, REFUSED)
                .line,
            Some(Line::Degraded { .. })
        ));
        let down = reach.client_error(at(t0, 4000), Trouble::AllDown, ALL_DOWN);
        assert!(matches!(down.line, Some(Line::Unreachable { .. })));
        assert!(matches!(down.change, Some(Change::Unreachable(_))));
    }

    #[test]
    fn statistics_count_a_connected_broker_but_not_the_internal_one() {
        let stats = |state: &str| {
            format!(
                r#"{{"name":"rdkafka#producer-1","type":"producer","brokers":{{
                ":0/internal":{{"name":":0/internal","nodeid":-1,"source":"internal","state":"UP"}},
                "127.0.0.1:1/bootstrap":{{"name":"127.0.0.1:1/bootstrap","nodeid":-1,
                  "source":"configured","state":"{state}","rtt":{{"avg":0}}}}}},"topics":{{}}}}"#
            )
        };
        assert_eq!(any_broker_up(stats("UP").as_bytes()), Some(true));
        for state in ["INIT", "CONNECT", "DOWN", "APIVERSION_QUERY"] {
            assert_eq!(
                any_broker_up(stats(state).as_bytes()),
                Some(false),
                "{state}"
            );
        }
        assert_eq!(any_broker_up(b"not json"), None);
    }
}
