//! Exactly-once: how the checkpoint read at a session's start merges with
//! the position carried from the last session, decided here where the
//! model test sees it; the outer loop (`round.rs`) reads the checkpoint,
//! logs, and starts the session where this says.
//!
//! Invariants: a usable checkpoint is the last word on what Kafka holds,
//! so it replaces the carried position; without one, what this process
//! confirmed is kept. The part of a transaction a checkpoint says is in
//! Kafka counts only for a session that starts at that checkpoint's
//! position (a session that starts elsewhere, the slot ahead or another
//! server, has no such part to skip).

use crate::relay::exactly_once::checkpoint::Partial;
use crate::relay::position::Position;
use pgoutput::lsn::Lsn;

/// The position to carry into the session, and what comes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carry {
    /// Where the session starts from, if anywhere but the slot.
    pub carried: Option<Position>,
    /// The part of a transaction in Kafka, with the position of the
    /// checkpoint that says so ([`partial_at`] keeps it or not).
    pub partial: Option<(Partial, Lsn)>,
    /// Neither a checkpoint nor a carried position: the relay starts from
    /// the slot, as on its first start on a checkpoint topic (said at info).
    pub none_found: bool,
}

/// Merges `checkpoint` (the usable one read at start, with the part of a
/// transaction it says is in Kafka) into `carried`.
pub fn merge_checkpoint(
    carried: Option<Position>,
    checkpoint: Option<Position>,
    partial: Option<Partial>,
) -> Carry {
    let partial = partial
        .zip(checkpoint.as_ref())
        .map(|(partial, position)| (partial, position.confirmed));
    match checkpoint {
        Some(position) => Carry {
            carried: Some(position),
            partial,
            none_found: false,
        },
        // Keep what this process committed.
        None => Carry {
            none_found: carried.is_none(),
            carried,
            partial,
        },
    }
}

/// The part of a transaction in Kafka that a session starting at `start`
/// skips: only one written with the checkpoint it starts at.
pub fn partial_at(partial: Option<(Partial, Lsn)>, start: Lsn) -> Option<Partial> {
    partial
        .filter(|(_, at)| *at == start)
        .map(|(partial, _)| partial)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::ServerIdentity;

    fn at(lsn: u64) -> Position {
        Position {
            server: ServerIdentity {
                system_id: "7000".into(),
                timeline: 1,
            },
            confirmed: Lsn(lsn),
        }
    }

    const PART: Partial = Partial {
        commit_lsn: Lsn(0x500),
        events: 3,
    };

    #[test]
    fn a_checkpoint_replaces_the_carried_position_with_its_part_of_a_transaction() {
        let carry = merge_checkpoint(Some(at(0x100)), Some(at(0x400)), Some(PART));
        assert_eq!(carry.carried, Some(at(0x400)));
        assert_eq!(carry.partial, Some((PART, Lsn(0x400))));
        assert!(!carry.none_found);
        // Below the carried position too: the checkpoint is what Kafka holds.
        let carry = merge_checkpoint(Some(at(0x800)), Some(at(0x400)), None);
        assert_eq!(carry.carried, Some(at(0x400)));
        assert_eq!(carry.partial, None);
    }

    #[test]
    fn without_a_checkpoint_the_carried_position_is_kept_and_none_is_said_only_without_either() {
        let carry = merge_checkpoint(Some(at(0x100)), None, None);
        assert_eq!(carry.carried, Some(at(0x100)));
        assert!(!carry.none_found, "this process committed: nothing to say");
        let carry = merge_checkpoint(None, None, None);
        assert_eq!(carry.carried, None);
        assert!(carry.none_found);
        // A part without its checkpoint says nothing.
        assert_eq!(merge_checkpoint(None, None, Some(PART)).partial, None);
    }

    #[test]
    fn the_part_of_a_transaction_counts_only_from_its_own_checkpoint() {
        let partial = Some((PART, Lsn(0x400)));
        assert_eq!(partial_at(partial, Lsn(0x400)), Some(PART));
        assert_eq!(partial_at(partial, Lsn(0x600)), None, "the slot was ahead");
        assert_eq!(partial_at(None, Lsn(0x400)), None);
    }
}
