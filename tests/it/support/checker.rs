//! The checker: what a topic holds against what was committed. Nothing may
//! be lost, first occurrences keep per-aggregate commit order, duplicates
//! are counted (each test judges them against what its fault allows). Every
//! verdict prints one line, `summary: case=… committed=… delivered=… lost=…
//! duplicated=… dead-lettered=…`, which `make test` shows.

use std::collections::HashMap;
use std::time::Instant;

use super::{Committed, Received};

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
