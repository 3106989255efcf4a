//! The checker: what a topic holds against what was committed. Nothing may
//! be lost, first occurrences keep per-aggregate commit order, duplicates
//! are counted (each test judges them against what its fault allows). Every
//! verdict prints one line, `summary: case=… committed=… delivered=… lost=…
//! duplicated=… dead-lettered=…`, which `make test` shows.

use std::collections::HashMap;
use std::time::Instant;

use super::{Committed, Received};

#[cfg(test)]
mod tests {
    use super::*;

    fn record(at: i64, source: &str) -> Received {
        Received {
            topic: String::new(),
            partition: 0,
            offset: at,
            key: None,
            value: None,
            headers: HashMap::from([("ce_source".to_owned(), source.as_bytes().to_vec())]),
            timestamp: Some(at),
        }
    }

    /// The check passes turns taken one after the other, a holder that
    /// produced nothing included, and fails on interleaving: it can fail.
    #[test]
    fn the_single_producer_check_fails_on_interleaved_producers() {
        let turns: Vec<String> = ["a", "b", "c", "a"].map(String::from).to_vec();
        let taking_turns = [
            record(1, "a"),
            record(2, "a"),
            record(5, "c"),
            record(9, "a"),
        ];
        check_single_producer("turns", &taking_turns, "ce_source", &turns);
        let interleaved = [
            record(1, "a"),
            record(2, "b"),
            record(3, "a"),
            record(4, "b"),
        ];
        let failed = std::panic::catch_unwind(|| {
            check_single_producer("interleaved", &interleaved, "ce_source", &turns)
        });
        assert!(failed.is_err(), "a, b, a, b is more turns than a then b");
    }
}

/// The checker's verdict on one case: nothing lost, per aggregate first
/// occurrences in commit order, and how many duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub case: String,
    pub committed: usize,
    pub delivered: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub dead_lettered: usize,
}

impl Summary {
    pub fn print(&self) {
        println!(
            "summary: case={} committed={} delivered={} lost={} duplicated={} dead-lettered={}",
            self.case,
            self.committed,
            self.delivered,
            self.lost,
            self.duplicated,
            self.dead_lettered
        );
    }
}

/// Checks records read from the topic against what was committed. Panics
/// (naming an example) on loss or on a per-aggregate order violation among
/// first occurrences; returns the counts, duplicates included, for the caller
/// to judge against its crash windows.
pub fn check_delivery(case: &str, committed: &[Committed], received: &[Received]) -> Summary {
    let mut first_seen: HashMap<&str, (i32, i64)> = HashMap::new();
    let mut duplicated = 0;
    for r in received {
        let id = r.header("ce_id").expect("ce_id header");
        if first_seen.contains_key(id) {
            duplicated += 1;
        } else {
            first_seen.insert(id, (r.partition, r.offset));
        }
    }
    let lost: Vec<&Committed> = committed
        .iter()
        .filter(|c| !first_seen.contains_key(c.id.as_str()))
        .collect();
    let summary = Summary {
        case: case.to_string(),
        committed: committed.len(),
        delivered: received.len(),
        lost: lost.len(),
        duplicated,
        dead_lettered: 0,
    };
    summary.print();
    assert!(
        lost.is_empty(),
        "{case}: {} events lost, e.g. {:?}",
        lost.len(),
        lost[0]
    );
    // Per aggregate, first occurrences sit in one partition in commit order.
    let mut last: HashMap<&str, (i32, i64, i64)> = HashMap::new();
    for c in committed {
        let (partition, offset) = first_seen[c.id.as_str()];
        if let Some((p, o, seq)) = last.get(c.aggregate.as_str()) {
            assert_eq!(
                *p, partition,
                "{case}: aggregate {} changed partition",
                c.aggregate
            );
            assert!(
                offset > *o,
                "{case}: aggregate {} seq {} (offset {offset}) arrived before seq {seq} (offset {o})",
                c.aggregate,
                c.seq
            );
        }
        last.insert(&c.aggregate, (partition, offset, c.seq));
    }
    summary
}

/// Checks that relays took turns producing, never produced side by side:
/// the records ordered by the time the broker appended them (a topic with
/// `message.timestamp.type = LogAppendTime`), grouped into runs by producer
/// (`header`, e.g. `ce_source`, one value per relay), must name the
/// producers in the order they became active (`holders`, the order the
/// test saw them take over; a holder may have produced nothing). Two relays
/// producing at once interleave their records and make more runs than
/// turns. Returns the runs as `(producer, records)`.
pub fn check_single_producer(
    case: &str,
    received: &[Received],
    header: &str,
    holders: &[String],
) -> Vec<(String, usize)> {
    let mut ordered: Vec<(i64, &str)> = received
        .iter()
        .map(|r| {
            let at = r.timestamp.expect("records carry their append time");
            (at, r.header(header).expect("producer header"))
        })
        .collect();
    ordered.sort_by_key(|(at, _)| *at);
    let mut runs: Vec<(String, usize)> = Vec::new();
    for (_, producer) in ordered {
        match runs.last_mut() {
            Some((last, n)) if last == producer => *n += 1,
            _ => runs.push((producer.to_owned(), 1)),
        }
    }
    println!(
        "producer-runs: case={case} turns={} runs={runs:?}",
        holders.len()
    );
    let mut turns = holders.iter();
    for (producer, n) in &runs {
        assert!(
            turns.any(|h| h == producer),
            "{case}: {n} records of {producer} appended out of its turn: two relays produced at \
             once (runs {runs:?}, turns {holders:?})"
        );
    }
    runs
}

/// Prints how long a case took, `wall-time: case=… secs=…`.
pub fn report_wall_time(case: &str, started: Instant) {
    println!(
        "wall-time: case={case} secs={:.1}",
        started.elapsed().as_secs_f64()
    );
}

/// [`check_delivery`] for `kafka.delivery = "exactly-once"` read with a
/// read_committed consumer: nothing lost, order kept, and no duplicate at
/// all, whatever the faults (panics naming the first duplicated id).
pub fn check_exactly_once(case: &str, committed: &[Committed], received: &[Received]) -> Summary {
    let summary = check_delivery(case, committed, received);
    if summary.duplicated > 0 {
        let mut seen = std::collections::HashSet::new();
        let first = received
            .iter()
            .filter_map(|r| r.header("ce_id"))
            .find(|id| !seen.insert(*id));
        panic!(
            "{case}: {} duplicates under exactly-once, e.g. event {first:?}",
            summary.duplicated
        );
    }
    assert_eq!(
        received.len(),
        committed.len(),
        "{case}: a read_committed consumer sees each committed event once"
    );
    summary
}
