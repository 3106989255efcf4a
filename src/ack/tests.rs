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

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap()
}

#[test]
fn commit_times_follow_the_transactions_that_wait_for_the_broker() {
    let mut t = AckTracker::new(lsn(100));
    let a = t.open_at(at(10));
    t.add_event(a).unwrap();
    t.add_event(a).unwrap();
    t.close(a, lsn(200)).unwrap();
    // An empty transaction between them waits for nothing.
    let empty = t.open_at(at(15));
    t.close(empty, lsn(250)).unwrap();
    let b = t.open_at(at(20));
    t.add_event(b).unwrap();
    t.close(b, lsn(300)).unwrap();
    let c = t.open_at(at(30));
    t.add_event(c).unwrap();
    assert_eq!(t.oldest_unacked_commit_time(), Some(at(10)));
    assert_eq!(t.commit_time(a), Some(at(10)));
    assert_eq!(t.commit_time(b), Some(at(20)));
    assert_eq!(t.commit_time(c), Some(at(30)));

    // b is acknowledged first: a still waits and stays the oldest.
    t.ack_event(b).unwrap();
    assert_eq!(t.commit_time(b), None, "done: nothing of it waits");
    assert_eq!(t.oldest_unacked_commit_time(), Some(at(10)));
    t.ack_event(a).unwrap();
    assert_eq!(
        t.oldest_unacked_commit_time(),
        Some(at(10)),
        "one of a's two waits"
    );
    t.ack_event(a).unwrap();
    // a, the empty one and b are confirmed; c (still open) waits.
    assert_eq!(t.confirmed(), lsn(300));
    assert_eq!(t.oldest_unacked_commit_time(), Some(at(30)));
    t.ack_event(c).unwrap();
    assert_eq!(
        t.oldest_unacked_commit_time(),
        None,
        "c is open, nothing waits"
    );
    assert_eq!(
        t.commit_time(c),
        Some(at(30)),
        "open: it may get more events"
    );
    t.close(c, lsn(400)).unwrap();
    assert_eq!(t.commit_time(c), None);
    assert_eq!(t.commit_time(TxnId(99)), None, "never opened");

    // Opened without a time: none to give.
    let d = t.open();
    t.add_event(d).unwrap();
    assert_eq!(t.commit_time(d), None);
    assert_eq!(t.oldest_unacked_commit_time(), None);
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

/// The bytes in flight follow what the caller holds: added as records go,
/// changed when one is replaced under the same acknowledgement, freed by
/// acknowledgements in any order, and forgotten by a reset.
#[test]
fn bytes_in_flight_follow_the_records_held() {
    let mut t = AckTracker::new(lsn(100));
    let a = t.open();
    t.add_event(a).unwrap();
    t.hold_bytes(0, 1_000);
    t.add_event(a).unwrap();
    t.hold_bytes(0, 500);
    assert_eq!(t.pending_bytes(), 1_500);
    // The second record is replaced by a 40-byte stand-in.
    t.hold_bytes(500, 40);
    assert_eq!(t.pending_bytes(), 1_040);
    t.ack_event(a).unwrap();
    t.release_bytes(40);
    assert_eq!(t.pending_bytes(), 1_000);
    t.ack_event(a).unwrap();
    t.release_bytes(1_000);
    assert_eq!(t.pending_bytes(), 0);
    t.release_bytes(7);
    assert_eq!(t.pending_bytes(), 0, "never below nothing");
    t.add_event(a).unwrap();
    t.hold_bytes(0, 300);
    t.reset();
    assert_eq!(t.pending_bytes(), 0);
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
    assert_eq!(t.queued_transactions(), 1, "one transaction, one entry");
    t.close(a, lsn(7)).unwrap();
    for _ in 0..1_000 {
        t.ack_event(a).unwrap();
    }
    assert_eq!(t.confirmed(), lsn(7));
    assert_eq!(t.queued_transactions(), 0, "one transaction, released");
}

#[test]
fn empty_transactions_behind_a_blocked_head_take_constant_space() {
    let mut t = AckTracker::new(lsn(100));
    let head = t.open();
    t.add_event(head).unwrap();
    t.close(head, lsn(200)).unwrap();
    // A busy database: transactions on other tables, nothing for the outbox,
    // while the head's event waits for its broker.
    let mut end = 200;
    let mut most = 0;
    for _ in 0..100_000 {
        let id = t.open();
        end += 10;
        t.close(id, lsn(end)).unwrap();
        most = most.max(t.queued_transactions());
    }
    assert!(most <= 2, "the queue grew to {most} entries");
    assert_eq!(t.queued_transactions(), 2);
    assert_eq!(t.confirmed(), lsn(100), "the head is not acked yet");
    t.ack_event(head).unwrap();
    assert_eq!(t.confirmed(), lsn(end));
    assert!(!t.in_flight());
    assert_eq!(t.queued_transactions(), 0);
}

#[test]
fn acked_transactions_behind_a_blocked_head_take_constant_space() {
    // Transactions with events, each acked after its close (other
    // partitions answer), interleaved with empty ones: done entries on both
    // sides of the one that becomes done must merge with it.
    let mut t = AckTracker::new(lsn(0));
    let head = t.open();
    t.add_event(head).unwrap();
    t.close(head, lsn(10)).unwrap();
    let mut end = 10;
    let mut most = 0;
    for _ in 0..20_000 {
        let with_event = t.open();
        t.add_event(with_event).unwrap();
        end += 10;
        t.close(with_event, lsn(end)).unwrap();
        let empty = t.open();
        end += 10;
        t.close(empty, lsn(end)).unwrap();
        most = most.max(t.queued_transactions());
        t.ack_event(with_event).unwrap();
        most = most.max(t.queued_transactions());
    }
    assert!(most <= 4, "the queue grew to {most} entries");
    assert_eq!(t.queued_transactions(), 2);
    assert_eq!(t.confirmed(), lsn(0));
    t.ack_event(head).unwrap();
    assert_eq!(t.confirmed(), lsn(end));
    assert!(!t.in_flight());
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
    /// Open and at once close a transaction, `step` past the WAL position:
    /// one that touched only other tables.
    Empty(u64),
    /// A keepalive whose WAL end is `pos + delta - 50` (may lag).
    Idle(u64),
    Reset,
    /// Ack a transaction forgotten by a reset.
    StaleAck(prop::sample::Index),
    /// Call `what` (0 add, 1 ack, 2 close `step` past the WAL position) on
    /// the n-th transaction ever opened, whatever its state: the result
    /// (an error, or a change) must be the one the model predicts.
    Any(u8, prop::sample::Index, u64),
    /// Close the oldest unclosed transaction below the last end LSN.
    CloseBackwards(u64),
    /// Call `what` on an id never issued, `k` past the last.
    Unknown(u8, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Open),
        8 => any::<prop::sample::Index>().prop_map(Op::Add),
        8 => any::<prop::sample::Index>().prop_map(Op::Ack),
        3 => (1u64..1000).prop_map(Op::Close),
        3 => (1u64..1000).prop_map(Op::Empty),
        2 => (0u64..200).prop_map(Op::Idle),
        1 => Just(Op::Reset),
        1 => any::<prop::sample::Index>().prop_map(Op::StaleAck),
        3 => (0u8..3, any::<prop::sample::Index>(), 1u64..1000)
            .prop_map(|(what, i, step)| Op::Any(what, i, step)),
        1 => (0u64..100).prop_map(Op::CloseBackwards),
        1 => (0u8..3, 0u64..3).prop_map(|(what, k)| Op::Unknown(what, k)),
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

impl ModelTxn {
    fn done(&self) -> bool {
        self.end.is_some() && self.acked == self.events
    }
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

    fn get(&mut self, id: TxnId) -> &mut ModelTxn {
        &mut self.txns.iter_mut().find(|(x, _)| *x == id).unwrap().1
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
        self.live().any(|(_, t)| !t.done())
    }

    fn pending(&self) -> u64 {
        self.live().map(|(_, t)| t.events - t.acked).sum()
    }

    /// The oldest live transaction not yet closed.
    fn oldest_open(&self) -> Option<TxnId> {
        self.live()
            .find(|(_, x)| x.end.is_none())
            .map(|(id, _)| *id)
    }

    /// End LSN of the last close since the last reset.
    fn last_end(&self) -> Option<u64> {
        self.live().filter_map(|(_, x)| x.end).last()
    }

    /// The entries a fully collapsed tracker holds: the done prefix is
    /// released; after it, one per transaction still in flight and one per
    /// maximal run of done transactions.
    fn entries(&self) -> usize {
        let mut entries = 0;
        let mut previous_done = true; // the released prefix
        for (_, t) in self.live() {
            if !t.done() || !previous_done {
                entries += 1;
            }
            previous_done = t.done();
        }
        entries
    }

    /// What `add_event` must answer for `id`.
    fn add_result(&self, id: TxnId) -> Result<(), AckError> {
        match self.txns.iter().find(|(x, _)| *x == id) {
            None => Err(AckError::UnknownTxn(id)),
            Some((_, x)) if x.forgotten => Err(AckError::Stale(id)),
            Some((_, x)) if x.end.is_some() => Err(AckError::EventAfterClose(id)),
            Some(_) => Ok(()),
        }
    }

    /// What `ack_event` must answer for `id`.
    fn ack_result(&self, id: TxnId) -> Result<(), AckError> {
        match self.txns.iter().find(|(x, _)| *x == id) {
            None => Err(AckError::UnknownTxn(id)),
            Some((_, x)) if x.forgotten => Err(AckError::Stale(id)),
            Some((_, x)) if x.acked == x.events => Err(AckError::TooManyAcks(id)),
            Some(_) => Ok(()),
        }
    }

    /// What `close` must answer for `id` at `end_lsn`.
    fn close_result(&self, id: TxnId, end_lsn: u64) -> Result<(), AckError> {
        match self.txns.iter().find(|(x, _)| *x == id) {
            None => return Err(AckError::UnknownTxn(id)),
            Some((_, x)) if x.forgotten => return Err(AckError::Stale(id)),
            Some((_, x)) if x.end.is_some() => return Err(AckError::AlreadyClosed(id)),
            Some(_) => {}
        }
        let earlier = self.oldest_open().unwrap();
        if earlier != id {
            return Err(AckError::CloseOutOfOrder { txn: id, earlier });
        }
        match self.last_end() {
            Some(previous) if end_lsn < previous => Err(AckError::EndLsnBackwards {
                txn: id,
                end_lsn: lsn(end_lsn),
                previous: lsn(previous),
            }),
            _ => Ok(()),
        }
    }
}

/// Where a random run left off, for tests that go on from there.
struct Ran {
    tracker: AckTracker,
    model: Model,
    /// WAL position: end LSNs are issued above it.
    pos: u64,
    /// One entry per event handed over and not acked yet.
    outstanding: Vec<TxnId>,
}

fn fail(e: AckError) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Runs `ops` against the tracker and the model, checking the properties
/// after every step.
fn run(start: u64, ops: &[Op]) -> Result<Ran, TestCaseError> {
    let mut t = AckTracker::new(lsn(start));
    let mut m = Model {
        confirmed: start,
        txns: Vec::new(),
    };
    let mut pos = start;
    let mut outstanding: Vec<TxnId> = Vec::new();
    let mut stale: Vec<TxnId> = Vec::new();
    for op in ops {
        let before = t.confirmed();
        let was_in_flight = t.in_flight();
        let open = |t: &mut AckTracker, m: &mut Model| {
            let id = t.open();
            if let Some((last, _)) = m.txns.last() {
                prop_assert!(id > *last, "ids are monotonic: {} after {}", id, last);
            }
            m.txns.push((id, ModelTxn::default()));
            Ok(id)
        };
        match op {
            Op::Open => {
                open(&mut t, &mut m)?;
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
                t.add_event(id).map_err(fail)?;
                m.get(id).events += 1;
                outstanding.push(id);
            }
            Op::Ack(i) => {
                if outstanding.is_empty() {
                    continue;
                }
                let id = outstanding.swap_remove(i.index(outstanding.len()));
                t.ack_event(id).map_err(fail)?;
                m.get(id).acked += 1;
            }
            Op::Close(step) => {
                let Some(id) = m.oldest_open() else {
                    continue;
                };
                pos += step;
                t.close(id, lsn(pos)).map_err(fail)?;
                m.get(id).end = Some(pos);
            }
            Op::Empty(step) => {
                // Only as the relay does it: with nothing else open.
                if m.oldest_open().is_some() {
                    continue;
                }
                let id = open(&mut t, &mut m)?;
                pos += step;
                t.close(id, lsn(pos)).map_err(fail)?;
                m.get(id).end = Some(pos);
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
            Op::Any(what, i, step) => {
                if m.txns.is_empty() {
                    continue;
                }
                let id = m.txns[i.index(m.txns.len())].0;
                match what {
                    0 => {
                        let expected = m.add_result(id);
                        prop_assert_eq!(t.add_event(id), expected.clone(), "add {}", id);
                        if expected.is_ok() {
                            m.get(id).events += 1;
                            outstanding.push(id);
                        }
                    }
                    1 => {
                        let expected = m.ack_result(id);
                        prop_assert_eq!(t.ack_event(id), expected.clone(), "ack {}", id);
                        if expected.is_ok() {
                            m.get(id).acked += 1;
                            let k = outstanding.iter().position(|x| *x == id).unwrap();
                            outstanding.swap_remove(k);
                        }
                    }
                    _ => {
                        let end = pos + step;
                        let expected = m.close_result(id, end);
                        prop_assert_eq!(t.close(id, lsn(end)), expected.clone(), "close {}", id);
                        if expected.is_ok() {
                            m.get(id).end = Some(end);
                            pos = end;
                        }
                    }
                }
            }
            Op::CloseBackwards(step) => {
                let (Some(id), Some(last)) = (m.oldest_open(), m.last_end()) else {
                    continue;
                };
                let end = last.saturating_sub(1 + step);
                if end >= last {
                    continue;
                }
                let expected = m.close_result(id, end);
                let backwards = matches!(expected, Err(AckError::EndLsnBackwards { .. }));
                prop_assert!(backwards, "{:?}", expected);
                prop_assert_eq!(t.close(id, lsn(end)), expected);
            }
            Op::Unknown(what, k) => {
                let id = TxnId(m.txns.last().map_or(0, |(TxnId(n), _)| n + 1) + k);
                let result = match what {
                    0 => t.add_event(id),
                    1 => t.ack_event(id),
                    _ => t.close(id, lsn(pos + 1)),
                };
                prop_assert_eq!(result, Err(AckError::UnknownTxn(id)));
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
        // Fully collapsed: done transactions take no more room than the
        // runs they form between those still in flight.
        prop_assert_eq!(
            t.queued_transactions(),
            m.entries(),
            "entries held after {:?}",
            op
        );
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
    Ok(Ran {
        tracker: t,
        model: m,
        pos,
        outstanding,
    })
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
        let Ran { tracker: mut t, model, mut pos, mut outstanding } = run(start, &ops)?;
        // Finish: an empty transaction and a few with events, then close
        // every open transaction and ack everything left in a scrambled order.
        let mut unclosed: Vec<TxnId> = model
            .live()
            .filter(|(_, x)| x.end.is_none())
            .map(|(id, _)| *id)
            .collect();
        unclosed.push(t.open());
        for _ in 0..3 {
            let id = t.open();
            t.add_event(id).unwrap();
            t.add_event(id).unwrap();
            outstanding.extend([id, id]);
            unclosed.push(id);
        }
        let mut last = 0;
        for id in unclosed {
            pos += 10;
            t.close(id, lsn(pos)).unwrap();
            last = pos;
        }
        prop_assert!(t.confirmed().0 < last);
        let n = outstanding.len();
        outstanding.rotate_left(ack_order.index(n.max(1)) % n.max(1));
        outstanding.reverse();
        for id in outstanding {
            t.ack_event(id).unwrap();
        }
        prop_assert!(!t.in_flight());
        prop_assert_eq!(t.pending_events(), 0);
        prop_assert_eq!(t.queued_transactions(), 0);
        prop_assert_eq!(t.confirmed(), lsn(last));
    }
}
