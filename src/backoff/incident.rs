//! When a retry loop logs: one WARN line when a run of failures (an
//! incident) starts, then at most one every [`Incident::LOG_EVERY`] while
//! it lasts (saying how many tries failed meanwhile), and one INFO line
//! when it ends. A loop that retries 30 times a second, or several loops
//! failing on one cause and sharing one `Incident`, write a few lines per
//! incident, not one per try.
//!
//! Pure: the caller passes the time (tokio's, so tests can pause it) and
//! writes the line itself, with its own words and fields.

use std::time::Duration;

use tokio::time::Instant;

/// A run of failures of one retry loop (or of loops that share a cause).
#[derive(Debug, Clone)]
pub struct Incident {
    every: Duration,
    open: Option<Open>,
}

#[derive(Debug, Clone)]
struct Open {
    since: Instant,
    logged_at: Instant,
    /// Failures since the incident started.
    failures: u64,
    /// Failures since the last line.
    unlogged: u64,
}

/// A failure to log: the first of an incident (`failures == 1`), or a
/// reminder that it goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Still {
    /// Failures since the incident started, this one included.
    pub failures: u64,
    /// Failures since the last line, this one included.
    pub since_last_line: u64,
    /// How long the incident has lasted.
    pub lasting: Duration,
}

impl Still {
    /// Whether this is the incident's first failure.
    pub fn is_first(&self) -> bool {
        self.failures == 1
    }
}

/// An incident that ended: log it at info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    pub failures: u64,
    pub lasted: Duration,
}

impl Default for Incident {
    fn default() -> Self {
        Incident::new(Incident::LOG_EVERY)
    }
}

impl Incident {
    /// How often a lasting incident is logged again.
    pub const LOG_EVERY: Duration = Duration::from_secs(30);

    /// Logs a lasting incident again at most every `every`.
    pub fn new(every: Duration) -> Incident {
        Incident { every, open: None }
    }

    /// A try failed at `now`: `Some` when that is worth a line.
    pub fn failed(&mut self, now: Instant) -> Option<Still> {
        let open = self.open.get_or_insert(Open {
            since: now,
            logged_at: now,
            failures: 0,
            unlogged: 0,
        });
        open.failures += 1;
        open.unlogged += 1;
        let first = open.failures == 1;
        if !first && now.saturating_duration_since(open.logged_at) < self.every {
            return None;
        }
        let still = Still {
            failures: open.failures,
            since_last_line: open.unlogged,
            lasting: now.saturating_duration_since(open.since),
        };
        open.logged_at = now;
        open.unlogged = 0;
        Some(still)
    }

    /// A try succeeded at `now`: `Some` when it ends an incident.
    pub fn recovered(&mut self, now: Instant) -> Option<Recovered> {
        self.open.take().map(|open| Recovered {
            failures: open.failures,
            lasted: now.saturating_duration_since(open.since),
        })
    }

    /// Whether failures are going on.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_incident_then_one_per_period_and_one_at_the_end() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut incident = Incident::new(Duration::from_secs(30));
        assert!(!incident.is_open());
        assert_eq!(incident.recovered(at(0)), None, "nothing to end");
        // 30 failures a second for 90 s: three warnings (and the info line
        // at the end), not 2,700.
        let mut lines = Vec::new();
        for i in 0..2_700u64 {
            if let Some(still) = incident.failed(at(i * 1_000 / 30)) {
                lines.push(still);
            }
        }
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].is_first());
        assert_eq!(lines[0].lasting, Duration::ZERO);
        assert_eq!(lines[1].since_last_line, 900);
        assert!(!lines[1].is_first());
        assert_eq!(lines[2].failures, 1_801);
        assert!(incident.is_open());
        let end = incident.recovered(at(90_000)).unwrap();
        assert_eq!(end.failures, 2_700);
        assert_eq!(end.lasted, Duration::from_secs(90));
        assert!(!incident.is_open());
        // The next failure starts a new incident, logged at once.
        assert!(incident.failed(at(90_001)).unwrap().is_first());
    }
}
