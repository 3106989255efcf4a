//! What the machine counted, for the shell to add to the metrics: the
//! machine bumps no metric itself (it does no I/O), it tallies here, and
//! the shell takes the tally ([`SessionMachine::take_counts`]) after every
//! call that can count, before an error it returned ends the session, and
//! adds it to the counters `crate::metrics` names.
//!
//! Invariant: every count is taken once: taking leaves zeros behind.

use super::SessionMachine;

/// Counts by label, for a labelled counter: a few labels in a fixed array,
/// so counting on the hot path does not allocate.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    counts: [(&'static str, u64); 8],
}

impl Tally {
    /// One more under `label`.
    pub(super) fn add(&mut self, label: &'static str) {
        for slot in &mut self.counts {
            if slot.0 == label || slot.0.is_empty() {
                slot.0 = label;
                slot.1 += 1;
                return;
            }
        }
        // Each counter has fewer labels than slots; more is a bug here,
        // and a count lost is better than a session ended for it.
        debug_assert!(false, "more labels than a Tally holds: {label}");
    }

    /// The labels counted, each with its count.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().copied().filter(|(_, n)| *n > 0)
    }

    /// The count under `label`.
    pub fn get(&self, label: &str) -> u64 {
        self.iter().find(|(l, _)| *l == label).map_or(0, |(_, n)| n)
    }
}

/// What the machine counted since the shell last took it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Transactions whose events were handed over
    /// (`outbox_relay_transactions_total`).
    pub transactions: u64,
    /// Changes not published, by kind (`outbox_relay_changes_ignored_total`).
    pub ignored: Tally,
    /// Non-transactional outbox messages refused
    /// (`outbox_relay_messages_refused_total`).
    pub messages_refused: u64,
    /// Malformed trace contexts left out of an event, by part
    /// (`outbox_relay_trace_context_dropped_total`).
    pub trace_context_dropped: Tally,
}

impl SessionMachine<'_> {
    /// What was counted since the last call; the shell adds it to the
    /// metrics.
    pub fn take_counts(&mut self) -> Counts {
        std::mem::take(&mut self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_by_label_and_keeps_each_label_once() {
        let mut tally = Tally::default();
        assert_eq!(tally.iter().count(), 0);
        tally.add("update");
        tally.add("delete");
        tally.add("update");
        assert_eq!(
            tally.iter().collect::<Vec<_>>(),
            [("update", 2), ("delete", 1)]
        );
        assert_eq!(tally.get("update"), 2);
        assert_eq!(tally.get("truncate"), 0);
    }
}
