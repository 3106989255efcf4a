//! Unit, property and model-based tests for the ack tracker.

use super::*;
use proptest::prelude::*;

fn lsn(n: u64) -> Lsn {
    Lsn(n)
}

#[test]
fn starts_from_the_slot_position() {
    let tracker = AckTracker::new(lsn(100));
    assert_eq!(tracker.confirmed(), lsn(100));
    assert!(!tracker.in_flight());
    assert_eq!(tracker.pending_events(), 0);
}

#[test]
fn empty_transaction_is_confirmed_at_close() {
    let mut t = AckTracker::new(lsn(100));
    let a = t.open();
    assert!(t.in_flight());
    t.close(a, lsn(200)).unwrap();
    assert_eq!(t.confirmed(), lsn(200));
    assert!(!t.in_flight());
}

#[test]
fn confirms_only_after_close_and_every_ack() {
    let mut t = AckTracker::new(lsn(100));
    let a = t.open();
    t.add_event(a).unwrap();
    t.add_event(a).unwrap();
    t.ack_event(a).unwrap();
    t.ack_event(a).unwrap();
    // Every event acked, but the Commit has not arrived: more may come.
    assert_eq!(t.confirmed(), lsn(100));
    assert!(t.in_flight());
    t.close(a, lsn(200)).unwrap();
    assert_eq!(t.confirmed(), lsn(200));
}

#[test]
fn out_of_order_acks_wait_for_the_earlier_transaction() {
    let mut t = AckTracker::new(lsn(100));
    let a = t.open();
    t.add_event(a).unwrap();
    t.add_event(a).unwrap();
    t.close(a, lsn(200)).unwrap();
    let b = t.open();
    t.add_event(b).unwrap();
    t.close(b, lsn(300)).unwrap();
    assert_eq!(t.pending_events(), 3);

    t.ack_event(b).unwrap();
    assert_eq!(t.confirmed(), lsn(100), "b is acked but a is not");
    t.ack_event(a).unwrap();
    assert_eq!(t.confirmed(), lsn(100));
    t.ack_event(a).unwrap();
    assert_eq!(t.confirmed(), lsn(300), "a and b done: confirm b's end");
    assert_eq!(t.pending_events(), 0);
    assert!(!t.in_flight());
}

#[test]
fn misuse_is_a_typed_error() {
    let mut t = AckTracker::new(lsn(0));
    let a = t.open();
    let never = TxnId(99);
    assert_eq!(t.add_event(never), Err(AckError::UnknownTxn(never)));
    assert_eq!(t.ack_event(never), Err(AckError::UnknownTxn(never)));
    assert_eq!(t.close(never, lsn(1)), Err(AckError::UnknownTxn(never)));

    assert_eq!(t.ack_event(a), Err(AckError::TooManyAcks(a)));
    t.add_event(a).unwrap();
    let b = t.open();
    assert_eq!(
        t.close(b, lsn(10)),
        Err(AckError::CloseOutOfOrder { txn: b, earlier: a })
    );
    t.close(a, lsn(10)).unwrap();
    assert_eq!(t.close(a, lsn(11)), Err(AckError::AlreadyClosed(a)));
    assert_eq!(t.add_event(a), Err(AckError::EventAfterClose(a)));
    assert_eq!(
        t.close(b, lsn(9)),
        Err(AckError::EndLsnBackwards {
            txn: b,
            end_lsn: lsn(9),
            previous: lsn(10)
        })
    );
    t.ack_event(a).unwrap();
    // `a` is finished and released: its id still answers precisely.
    assert_eq!(t.ack_event(a), Err(AckError::TooManyAcks(a)));
    assert_eq!(t.close(a, lsn(12)), Err(AckError::AlreadyClosed(a)));
    assert_eq!(t.add_event(a), Err(AckError::EventAfterClose(a)));
    // Equal end LSNs are not "lower".
    t.close(b, lsn(10)).unwrap();
    assert_eq!(t.confirmed(), lsn(10));
    // Errors left the state untouched.
    assert!(!t.in_flight());
    assert_eq!(t.pending_events(), 0);
}

#[test]
fn error_messages_name_the_transaction() {
    let err = AckError::EndLsnBackwards {
        txn: TxnId(3),
        end_lsn: lsn(0x1_0000_0010),
        previous: lsn(0x1_0000_0020),
    };
    let text = err.to_string();
    assert!(
        text.contains("txn#3") && text.contains("1/10") && text.contains("1/20"),
        "{text}"
    );
}

#[test]
fn idle_advance_only_when_nothing_is_in_flight() {
    let mut t = AckTracker::new(lsn(100));
    assert!(t.idle_advance(lsn(150)));
    assert_eq!(t.confirmed(), lsn(150));
    assert!(!t.idle_advance(lsn(120)), "never backwards");
    assert!(!t.idle_advance(lsn(150)), "not a move");
    assert_eq!(t.confirmed(), lsn(150));

    let a = t.open();
    assert!(!t.idle_advance(lsn(400)), "open transaction");
    t.add_event(a).unwrap();
    t.close(a, lsn(200)).unwrap();
    assert!(!t.idle_advance(lsn(400)), "unacked event");
    assert_eq!(t.confirmed(), lsn(150));
    t.ack_event(a).unwrap();
    assert_eq!(t.confirmed(), lsn(200));
    assert!(t.idle_advance(lsn(400)));
    assert_eq!(t.confirmed(), lsn(400));
}

#[test]
fn reset_forgets_in_flight_and_keeps_confirmed() {
    let mut t = AckTracker::new(lsn(100));
    let a = t.open();
    t.add_event(a).unwrap();
    t.close(a, lsn(200)).unwrap();
    t.ack_event(a).unwrap();
    let b = t.open();
    t.add_event(b).unwrap();
    t.add_event(b).unwrap();
    t.close(b, lsn(300)).unwrap();
    let c = t.open();
    t.add_event(c).unwrap();

    t.reset();
    assert_eq!(t.confirmed(), lsn(200));
    assert!(!t.in_flight());
    assert_eq!(t.pending_events(), 0);
    // Late reports from the replaced producer are recognisably stale.
    assert_eq!(t.ack_event(b), Err(AckError::Stale(b)));
    assert_eq!(t.ack_event(c), Err(AckError::Stale(c)));
    assert_eq!(t.close(c, lsn(400)), Err(AckError::Stale(c)));

    // The stream rewinds: `b` arrives again under a new id, with the same
    // end LSN, then a transaction the server had already been told about
    // (status update lost) closes below the confirmed position.
    let b2 = t.open();
    assert!(b2 > c, "ids are never reused");
    t.add_event(b2).unwrap();
    t.close(b2, lsn(300)).unwrap();
    t.ack_event(b2).unwrap();
    assert_eq!(t.confirmed(), lsn(300));
    t.reset();
    let old = t.open();
    t.close(old, lsn(250)).unwrap();
    assert_eq!(t.confirmed(), lsn(300), "never backwards");
}

#[test]
fn a_million_row_transaction_streams_through() {
    let mut t = AckTracker::new(lsn(0));
    let a = t.open();
    for _ in 0..1_000_000 {
        t.add_event(a).unwrap();
        t.ack_event(a).unwrap();
    }
    for _ in 0..1_000 {
        t.add_event(a).unwrap();
    }
    assert_eq!(t.pending_events(), 1_000);
    t.close(a, lsn(7)).unwrap();
    for _ in 0..1_000 {
        t.ack_event(a).unwrap();
    }
    assert_eq!(t.confirmed(), lsn(7));
    assert!(t.queue.capacity() < 16, "one transaction, one slot");
}

// ---- model-based and property tests ----

#[derive(Debug, Clone)]
enum Op {
    Open,
    /// Add an event to the n-th open (unclosed) transaction.
    Add(prop::sample::Index),
    /// Ack the n-th outstanding event: any order across transactions.
    Ack(prop::sample::Index),
    /// Close the oldest unclosed transaction, `step` past the WAL position.
    Close(u64),
    /// A keepalive whose WAL end is `pos + delta - 50` (may lag).
    Idle(u64),
    Reset,
    /// Ack a transaction forgotten by a reset.
    StaleAck(prop::sample::Index),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Open),
        8 => any::<prop::sample::Index>().prop_map(Op::Add),
        8 => any::<prop::sample::Index>().prop_map(Op::Ack),
        3 => (1u64..1000).prop_map(Op::Close),
        2 => (0u64..200).prop_map(Op::Idle),
        1 => Just(Op::Reset),
        1 => any::<prop::sample::Index>().prop_map(Op::StaleAck),
    ]
}

/// The naive reference: every transaction ever opened, scanned in full.
#[derive(Debug, Default)]
struct ModelTxn {
    events: u64,
    acked: u64,
    end: Option<u64>,
    forgotten: bool,
}

#[derive(Debug)]
struct Model {
    confirmed: u64,
    txns: Vec<(TxnId, ModelTxn)>,
}

impl Model {
    fn live(&self) -> impl Iterator<Item = &(TxnId, ModelTxn)> {
        self.txns.iter().filter(|(_, t)| !t.forgotten)
    }

    fn recompute(&mut self) {
        let mut confirmed = self.confirmed;
        for (_, t) in self.live() {
            match t.end {
                Some(end) if t.acked == t.events => confirmed = confirmed.max(end),
                _ => break,
            }
        }
        self.confirmed = confirmed;
    }

    fn in_flight(&self) -> bool {
        self.live()
            .any(|(_, t)| t.end.is_none() || t.acked < t.events)
    }

    fn pending(&self) -> u64 {
        self.live().map(|(_, t)| t.events - t.acked).sum()
    }
}

/// Runs `ops` against the tracker and the model, checking the properties
/// after every step. Returns the tracker and model for final checks.
fn run(start: u64, ops: &[Op]) -> Result<(AckTracker, Model, u64), TestCaseError> {
    let mut t = AckTracker::new(lsn(start));
    let mut m = Model {
        confirmed: start,
        txns: Vec::new(),
    };
    let mut pos = start; // WAL position: end LSNs are issued above it
    let mut outstanding: Vec<TxnId> = Vec::new();
    let mut stale: Vec<TxnId> = Vec::new();
    for op in ops {
        let before = t.confirmed();
        let was_in_flight = t.in_flight();
        match op {
            Op::Open => {
                let id = t.open();
                m.txns.push((id, ModelTxn::default()));
            }
            Op::Add(i) => {
                let open: Vec<TxnId> = m
                    .live()
                    .filter(|(_, x)| x.end.is_none())
                    .map(|(id, _)| *id)
                    .collect();
                if open.is_empty() {
                    continue;
                }
                let id = open[i.index(open.len())];
                t.add_event(id)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                m.txns.iter_mut().find(|(x, _)| *x == id).unwrap().1.events += 1;
                outstanding.push(id);
            }
            Op::Ack(i) => {
                if outstanding.is_empty() {
                    continue;
                }
                let id = outstanding.swap_remove(i.index(outstanding.len()));
                t.ack_event(id)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                m.txns.iter_mut().find(|(x, _)| *x == id).unwrap().1.acked += 1;
            }
            Op::Close(step) => {
                let Some(id) = m.live().find(|(_, x)| x.end.is_none()).map(|(id, _)| *id) else {
                    continue;
                };
                pos += step;
                t.close(id, lsn(pos))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                m.txns.iter_mut().find(|(x, _)| *x == id).unwrap().1.end = Some(pos);
            }
            Op::Idle(delta) => {
                let wal_end = (pos + delta).saturating_sub(50);
                let moved = t.idle_advance(lsn(wal_end));
                if was_in_flight {
                    prop_assert!(!moved, "idle_advance moved while in flight");
                    prop_assert_eq!(t.confirmed(), before);
                } else {
                    prop_assert_eq!(moved, wal_end > before.0);
                    m.confirmed = m.confirmed.max(wal_end);
                }
                pos = pos.max(wal_end);
            }
            Op::Reset => {
                t.reset();
                for (id, x) in m.txns.iter_mut().filter(|(_, x)| !x.forgotten) {
                    x.forgotten = true;
                    stale.push(*id);
                }
                outstanding.clear();
            }
            Op::StaleAck(i) => {
                if stale.is_empty() {
                    continue;
                }
                let id = stale[i.index(stale.len())];
                prop_assert_eq!(t.ack_event(id), Err(AckError::Stale(id)));
            }
        }
        m.recompute();
        let now = t.confirmed();
        prop_assert!(
            now >= before,
            "confirmed moved backwards: {} -> {}",
            before,
            now
        );
        prop_assert_eq!(
            now.0,
            m.confirmed,
            "tracker disagrees with the model after {:?}",
            op
        );
        prop_assert_eq!(t.in_flight(), m.in_flight());
        prop_assert_eq!(t.pending_events(), m.pending());
        // Never past a live transaction that is incomplete: a closed one
        // with unacked events bounds it strictly from above.
        for (_, x) in m.live() {
            if let Some(end) = x.end
                && x.acked < x.events
            {
                prop_assert!(
                    now.0 < end,
                    "confirmed {} past incomplete txn ending {}",
                    now,
                    end
                );
            }
        }
    }
    Ok((t, m, pos))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn tracker_matches_model_and_keeps_invariants(
        start in 0u64..1_000_000,
        ops in prop::collection::vec(op(), 0..200),
    ) {
        run(start, &ops)?;
    }

    #[test]
    fn confirmed_equals_last_end_once_everything_is_acked(
        start in 0u64..1_000_000,
        ops in prop::collection::vec(op(), 0..200),
        ack_order in any::<prop::sample::Index>(),
    ) {
        let (mut t, _m, mut pos) = run(start, &ops)?;
        // Finish: an empty transaction and a few with events, then close
        // every open transaction and ack everything left in a scrambled order.
        t.open();
        for _ in 0..3 {
            let id = t.open();
            t.add_event(id).unwrap();
            t.add_event(id).unwrap();
        }
        let mut last = 0;
        while let Some(i) = t.queue.iter().position(|x| x.end_lsn.is_none()) {
            pos += 10;
            t.close(TxnId(t.front_id + i as u64), lsn(pos)).unwrap();
            last = pos;
        }
        prop_assert!(t.confirmed().0 < last);
        // Everything outstanding from the random prefix too.
        let mut rest: Vec<TxnId> = t
            .queue
            .iter()
            .enumerate()
            .flat_map(|(i, x)| std::iter::repeat_n(TxnId(t.front_id + i as u64), x.unacked as usize))
            .collect();
        let n = rest.len();
        rest.rotate_left(ack_order.index(n.max(1)) % n.max(1));
        rest.reverse();
        for id in rest {
            t.ack_event(id).unwrap();
        }
        prop_assert!(!t.in_flight());
        prop_assert_eq!(t.pending_events(), 0);
        prop_assert_eq!(t.confirmed(), lsn(last));
    }
}
