use tokio::sync::mpsc;

use super::*;
use crate::outbox::shard::Shard;
use crate::pg::{ConnectSettings, Conninfo};
use pgoutput::lsn::Lsn;

/// The final LSN of transaction `xid`'s Begin, in these tests.
fn at(xid: u32) -> Lsn {
    Lsn(0x1_0000 + u64::from(xid))
}

fn ids(d: &Deletable) -> Vec<&str> {
    d.ids.iter().map(String::as_str).collect()
}

#[test]
fn rows_are_released_only_once_confirmed_past_their_commit() {
    let mut c = Collector::new();
    c.begin(10, at(10));
    c.row(Some("a"));
    c.row(Some("b"));
    c.commit(Lsn(0x200));
    c.begin(11, at(11));
    c.commit(Lsn(0x300)); // no outbox rows: nothing to hold
    c.begin(12, at(12));
    c.row(Some("c"));
    c.commit(Lsn(0x400));
    c.begin(13, at(13));
    c.row(Some("open"));
    assert_eq!(c.waiting_txns(), 2);
    assert_eq!(c.release(Lsn(0x1ff)), None, "below the first end LSN");
    assert_eq!(ids(&c.release(Lsn(0x200)).unwrap()), ["a", "b"]);
    assert_eq!(c.release(Lsn(0x3ff)), None);
    // Far past everything closed: the open transaction still waits.
    assert_eq!(ids(&c.release(Lsn(0x10_000)).unwrap()), ["c"]);
    assert_eq!(c.release(Lsn(u64::MAX)), None);
    assert_eq!(c.held_ids(), 1);
    c.commit(Lsn(0x500));
    assert_eq!(ids(&c.release(Lsn(0x500)).unwrap()), ["open"]);
    assert_eq!(c.held_ids(), 0);
}

#[test]
fn a_transaction_that_outgrows_the_cap_falls_back_to_its_xid() {
    let mut c = Collector::new();
    c.begin(7, at(7));
    for i in 0..MAX_HELD_IDS + 10 {
        c.row(Some(&i.to_string()));
    }
    assert_eq!(c.held_ids(), MAX_HELD_IDS);
    c.commit(Lsn(0x100));
    // The next transaction's ids do not fit either while those wait.
    c.begin(8, at(8));
    c.row(Some("x"));
    c.commit(Lsn(0x200));
    assert_eq!(c.held_ids(), MAX_HELD_IDS);
    let d = c.release(Lsn(0x100)).unwrap();
    assert_eq!((d.ids.len(), d.xids.as_slice()), (MAX_HELD_IDS, &[7][..]));
    let d = c.release(Lsn(0x200)).unwrap();
    assert_eq!((d.ids.len(), d.xids.as_slice()), (0, &[8][..]));
    // An unreadable id also falls back.
    c.begin(9, at(9));
    c.row(None);
    c.commit(Lsn(0x300));
    assert_eq!(c.release(Lsn(0x300)).unwrap().xids, [9]);
    assert_eq!(c.held_ids(), 0);
}

#[test]
fn waiting_transactions_are_bounded() {
    let mut c = Collector::new();
    for i in 0..MAX_HELD_TXNS as u64 + 5 {
        c.begin(i as u32, at(i as u32));
        c.row(Some("r"));
        c.commit(Lsn(0x100 + i));
    }
    assert_eq!(c.waiting_txns(), MAX_HELD_TXNS);
    assert_eq!(c.held_ids(), MAX_HELD_TXNS);
    let d = c.release(Lsn(u64::MAX)).unwrap();
    assert_eq!(d.ids.len(), MAX_HELD_TXNS);
    assert_eq!(c.held_ids(), 0);
}

#[test]
fn a_begin_without_commit_forgets_the_open_rows() {
    // The replay after a failed session starts a new machine; within one
    // session a Begin always follows a Commit, but the count stays right.
    let mut c = Collector::new();
    c.begin(1, at(1));
    c.row(Some("a"));
    c.begin(2, at(2));
    assert_eq!(c.held_ids(), 0);
}

/// A row whose dead letter lost its payload is never released, in the
/// open transaction or in one waiting for its confirmation; its
/// transaction-mates are.
#[test]
fn a_kept_row_is_never_released() {
    let mut c = Collector::new();
    c.begin(1, at(1));
    c.row(Some("a"));
    c.row(Some("big"));
    c.row(Some("b"));
    c.keep(at(1), "big");
    c.commit(Lsn(100));
    c.begin(2, at(2));
    c.row(Some("c"));
    c.row(Some("big2"));
    c.commit(Lsn(200));
    c.keep(at(2), "big2");
    let released = c.release(Lsn(200)).expect("rows released");
    let mut ids = ids(&released);
    ids.sort_unstable();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(released.xids.is_empty());
    assert_eq!(c.held_ids(), 0);
}

/// Keeping a row of a transaction deleted by `xmin` (its id not among
/// those held, or not readable) turns the `xmin` delete off: the kept
/// row may be one of those it would delete.
#[test]
fn keeping_a_row_not_held_by_id_turns_off_the_xmin_delete() {
    let mut c = Collector::new();
    c.begin(7, at(7));
    c.row(Some("a"));
    c.row(None);
    c.keep(at(7), "@0/0/anonymous");
    c.commit(Lsn(100));
    let released = c.release(Lsn(100)).expect("the held id is released");
    assert_eq!(ids(&released), ["a"]);
    assert!(released.xids.is_empty(), "{released:?}");
    // Without the keep, the same transaction goes by xmin.
    c.begin(8, at(8));
    c.row(Some("b"));
    c.row(None);
    c.commit(Lsn(200));
    assert_eq!(c.release(Lsn(200)).unwrap().xids, [8]);
}

/// Rows left on purpose (written by an earlier session) are not
/// deleted; a transaction with nothing else is not held at all.
#[test]
fn rows_left_are_not_held() {
    let mut c = Collector::new();
    c.begin(1, at(1));
    c.leave(Some("x"));
    c.leave(None);
    c.commit(Lsn(100));
    assert_eq!(c.waiting_txns(), 0);
    assert_eq!(c.release(Lsn(100)), None);
}

/// `n` rows with readable ids `{prefix}{i}` in the open transaction.
fn rows(c: &mut Collector, prefix: &str, n: usize) {
    for i in 0..n {
        c.row(Some(&format!("{prefix}{i}")));
    }
}

/// A kept row of a transaction deleted by `xmin` (it outgrew the ids
/// held) is spared by that delete, wherever its id was: among the ids
/// held or past them, kept while the transaction is open or once it
/// waits for its confirmation.
#[test]
fn a_kept_row_is_spared_by_the_delete_by_xmin() {
    // (the kept row first or last in its transaction, kept after its Commit)
    for (first, after_commit) in [(true, false), (false, false), (true, true), (false, true)] {
        let case = format!("kept row first: {first}, kept after the Commit: {after_commit}");
        let mut c = Collector::new();
        c.begin(7, at(7));
        if first {
            c.row(Some("big"));
        }
        rows(&mut c, "r", MAX_HELD_IDS + 1);
        if !first {
            c.row(Some("big"));
        }
        if !after_commit {
            c.keep(at(7), "big");
        }
        c.commit(Lsn(0x100));
        if after_commit {
            c.keep(at(7), "big");
        }
        assert_eq!(c.held_ids(), MAX_HELD_IDS, "{case}: within the bound");
        let d = c.release(Lsn(0x100)).expect(&case);
        assert_eq!(d.xids, [7], "{case}");
        assert_eq!(d.keep, ["big"], "{case}: the delete by xmin spares it");
        assert!(!d.ids.iter().any(|id| id == "big"), "{case}");
        assert_eq!(c.held_ids(), 0, "{case}");
    }
}

/// The kept row cannot be told by its id (its transaction has rows whose
/// id cannot be read, and its key may be one of theirs), or there is no
/// room left to hold its id: the transaction is not deleted by `xmin` at
/// all, also when the row is kept after its Commit.
#[test]
fn a_kept_row_that_cannot_be_spared_turns_off_the_delete_by_xmin() {
    let mut c = Collector::new();
    c.begin(7, at(7));
    c.row(Some("a"));
    c.row(None);
    c.commit(Lsn(0x100));
    c.keep(at(7), "@0/0/anonymous");
    let d = c.release(Lsn(0x100)).expect("the held id");
    assert_eq!((ids(&d), d.xids.len()), (vec!["a"], 0));
    // Every id held is taken by another transaction, and this one has
    // none to give up: no room for the kept id, nor for a left one.
    c.begin(8, at(8));
    rows(&mut c, "r", MAX_HELD_IDS);
    c.commit(Lsn(0x200));
    c.begin(9, at(9));
    rows(&mut c, "s", 3);
    c.keep(at(9), "s1");
    c.commit(Lsn(0x201));
    c.begin(10, at(10));
    c.leave(Some("l"));
    rows(&mut c, "t", 3);
    c.commit(Lsn(0x202));
    assert_eq!(c.held_ids(), MAX_HELD_IDS);
    let d = c.release(Lsn(0x202)).expect("the held ids");
    assert_eq!((d.ids.len(), d.xids.len()), (MAX_HELD_IDS, 0));
    assert_eq!(c.held_ids(), 0);
    // A keep naming another transaction, or none held, touches nothing.
    c.begin(11, at(11));
    rows(&mut c, "u", MAX_HELD_IDS + 1);
    c.keep(at(12), "u0");
    c.commit(Lsn(0x300));
    let d = c.release(Lsn(0x300)).unwrap();
    assert_eq!((d.ids.len(), d.xids.as_slice()), (MAX_HELD_IDS, &[11][..]));
    assert!(d.keep.is_empty());
}

/// Rows left on purpose (exactly-once resuming inside a transaction: the
/// rows an earlier session wrote) are spared by the transaction's delete
/// by `xmin`; one whose id cannot be read turns that delete off.
#[test]
fn rows_left_are_spared_by_the_delete_by_xmin() {
    let mut c = Collector::new();
    c.begin(1, at(1));
    c.leave(Some("l1"));
    c.leave(Some("l2"));
    rows(&mut c, "r", MAX_HELD_IDS + 1);
    c.commit(Lsn(0x100));
    let d = c.release(Lsn(0x100)).unwrap();
    assert_eq!(d.xids, [1]);
    assert_eq!(d.keep, ["l1", "l2"]);
    assert_eq!(
        d.ids.len(),
        MAX_HELD_IDS - 2,
        "the spared ids count as held"
    );
    assert!(!d.ids.iter().any(|id| id.starts_with('l')));
    assert_eq!(c.held_ids(), 0);
    c.begin(2, at(2));
    c.leave(None);
    rows(&mut c, "s", MAX_HELD_IDS + 1);
    c.commit(Lsn(0x200));
    let d = c.release(Lsn(0x200)).unwrap();
    assert_eq!((d.ids.len(), d.xids.len()), (MAX_HELD_IDS, 0));
    // Deleted by id alone, the left ids are not held past the Commit.
    c.begin(3, at(3));
    c.leave(Some("l3"));
    c.row(Some("t"));
    assert_eq!(c.held_ids(), 2);
    c.commit(Lsn(0x300));
    assert_eq!(c.held_ids(), 1);
    let d = c.release(Lsn(0x300)).unwrap();
    assert_eq!((ids(&d), d.keep.len()), (vec!["t"], 0));
}

#[test]
fn the_delete_by_xmin_spares_the_kept_ids() {
    let settings = DeleterSettings {
        connection: ConnectSettings::new(Conninfo::parse("host=h user=u").unwrap()),
        table: ("public".into(), "outbox".into()),
        id_column: "Id".into(),
        aggregate_id_column: "aggregateid".into(),
        shard: Shard::default(),
    };
    assert_eq!(
        delete_xids_sql(&settings),
        "WITH d AS (DELETE FROM \"public\".\"outbox\" WHERE xmin = ANY($1::xid[]) \
         AND \"Id\" <> ALL($2) \
         RETURNING xmin::text AS x) SELECT x, count(*) FROM d GROUP BY x"
    );
}

#[test]
fn the_delete_takes_ids_and_xids_as_parameters_never_in_its_text() {
    let settings = DeleterSettings {
        connection: ConnectSettings::new(Conninfo::parse("host=h user=u").unwrap()),
        table: ("app".into(), "Out box".into()),
        id_column: "id".into(),
        aggregate_id_column: "Agg Id".into(),
        shard: Shard::default(),
    };
    let sql = delete_ids_sql(&settings);
    assert_eq!(
        sql,
        "DELETE FROM \"app\".\"Out box\" WHERE \"id\" = ANY($1) RETURNING \"id\"::text"
    );
    let sql = delete_xids_sql(&settings);
    assert!(sql.contains("DELETE FROM \"app\".\"Out box\""), "{sql}");
    assert!(sql.contains("xmin = ANY($1::xid[])"), "{sql}");
    assert!(sql.contains("GROUP BY"), "{sql}");
    assert!(!sql.contains("hashtext"), "not sharded: every row: {sql}");
}

#[test]
fn a_sharded_delete_by_xmin_keeps_to_the_shards_rows() {
    let settings = DeleterSettings {
        connection: ConnectSettings::new(Conninfo::parse("host=h user=u").unwrap()),
        table: ("public".into(), "outbox".into()),
        id_column: "id".into(),
        aggregate_id_column: "aggregateid".into(),
        shard: Shard {
            shards: 2,
            shard: 1,
        },
    };
    assert_eq!(
        delete_xids_sql(&settings),
        "WITH d AS (DELETE FROM \"public\".\"outbox\" WHERE xmin = ANY($1::xid[]) \
         AND \"id\" <> ALL($2) AND (coalesce(abs(hashtext(\"aggregateid\")::bigint) % 2, 0) = 1) \
         RETURNING xmin::text AS x) SELECT x, count(*) FROM d GROUP BY x"
    );
    // The publication's filter, character for character.
    assert!(
        delete_xids_sql(&settings).contains(&crate::admin::shards::filter_sql("aggregateid", 2, 1))
    );
    // By id, the rows are the shard's already: they came through its slot.
    assert!(!delete_ids_sql(&settings).contains("hashtext"));
}

#[test]
fn rows_the_deleter_cannot_take_yet_wait_for_the_next_hand_over() {
    let (tx, mut rx) = mpsc::channel(1);
    let mut deleter = Deleter {
        tx,
        pending: Deletable::default(),
    };
    let rows = |id: &str| Deletable {
        ids: vec![id.to_owned()],
        ..Deletable::default()
    };
    deleter.hand_over(Some(rows("a")));
    // The queue is full: "b" waits, it is not left in the table.
    deleter.hand_over(Some(rows("b")));
    deleter.hand_over(Some(rows("c")));
    assert_eq!(rx.try_recv().unwrap().ids, ["a"]);
    assert!(rx.try_recv().is_err());
    // The next hand-over, with or without new rows, sends what waited.
    deleter.hand_over(None);
    assert_eq!(rx.try_recv().unwrap().ids, ["b", "c"]);
    deleter.hand_over(None);
    assert!(rx.try_recv().is_err(), "nothing twice");
}
