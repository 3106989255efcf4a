use tokio::sync::mpsc;

use super::*;
use crate::outbox::shard::Shard;
use crate::pg::{ConnectSettings, Conninfo};
use pgoutput::lsn::Lsn;

fn ids(d: &Deletable) -> Vec<&str> {
    d.ids.iter().map(String::as_str).collect()
}

#[test]
fn rows_are_released_only_once_confirmed_past_their_commit() {
    let mut c = Collector::new();
    c.begin(10);
    c.row(Some("a"));
    c.row(Some("b"));
    c.commit(Lsn(0x200));
    c.begin(11);
    c.commit(Lsn(0x300)); // no outbox rows: nothing to hold
    c.begin(12);
    c.row(Some("c"));
    c.commit(Lsn(0x400));
    c.begin(13);
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
    c.begin(7);
    for i in 0..MAX_HELD_IDS + 10 {
        c.row(Some(&i.to_string()));
    }
    assert_eq!(c.held_ids(), MAX_HELD_IDS);
    c.commit(Lsn(0x100));
    // The next transaction's ids do not fit either while those wait.
    c.begin(8);
    c.row(Some("x"));
    c.commit(Lsn(0x200));
    assert_eq!(c.held_ids(), MAX_HELD_IDS);
    let d = c.release(Lsn(0x100)).unwrap();
    assert_eq!((d.ids.len(), d.xids.as_slice()), (MAX_HELD_IDS, &[7][..]));
    let d = c.release(Lsn(0x200)).unwrap();
    assert_eq!((d.ids.len(), d.xids.as_slice()), (0, &[8][..]));
    // An unreadable id also falls back.
    c.begin(9);
    c.row(None);
    c.commit(Lsn(0x300));
    assert_eq!(c.release(Lsn(0x300)).unwrap().xids, [9]);
    assert_eq!(c.held_ids(), 0);
}

#[test]
fn waiting_transactions_are_bounded() {
    let mut c = Collector::new();
    for i in 0..MAX_HELD_TXNS as u64 + 5 {
        c.begin(i as u32);
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
    c.begin(1);
    c.row(Some("a"));
    c.begin(2);
    assert_eq!(c.held_ids(), 0);
}

/// A row whose dead letter lost its payload is never released, in the
/// open transaction or in one waiting for its confirmation; its
/// transaction-mates are.
#[test]
fn a_kept_row_is_never_released() {
    let mut c = Collector::new();
    c.begin(1);
    c.row(Some("a"));
    c.row(Some("big"));
    c.row(Some("b"));
    c.keep("big");
    c.commit(Lsn(100));
    c.begin(2);
    c.row(Some("c"));
    c.row(Some("big2"));
    c.commit(Lsn(200));
    c.keep("big2");
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
    c.begin(7);
    c.row(Some("a"));
    c.row(None);
    c.keep("@0/0/anonymous");
    c.commit(Lsn(100));
    let released = c.release(Lsn(100)).expect("the held id is released");
    assert_eq!(ids(&released), ["a"]);
    assert!(released.xids.is_empty(), "{released:?}");
    // Without the keep, the same transaction goes by xmin.
    c.begin(8);
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
    c.begin(1);
    c.leave();
    c.leave();
    c.commit(Lsn(100));
    assert_eq!(c.waiting_txns(), 0);
    assert_eq!(c.release(Lsn(100)), None);
}

#[test]
fn the_delete_names_ids_as_literals_and_xids_by_xmin() {
    let settings = DeleterSettings {
        connection: ConnectSettings::new(Conninfo::parse("host=h user=u").unwrap()),
        table: ("app".into(), "Out box".into()),
        id_column: "id".into(),
        aggregate_id_column: "Agg Id".into(),
        shard: Shard::default(),
    };
    let sql = delete_ids_sql(&settings, &["a'b".into(), "c".into()]);
    assert_eq!(
        sql,
        "DELETE FROM \"app\".\"Out box\" WHERE \"id\" IN ('a''b', 'c') RETURNING \"id\"::text"
    );
    let sql = delete_xids_sql(&settings, &[42, 7]);
    assert!(sql.contains("DELETE FROM \"app\".\"Out box\""), "{sql}");
    assert!(sql.contains("xmin IN ('42'::xid, '7'::xid)"), "{sql}");
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
        delete_xids_sql(&settings, &[42]),
        "WITH d AS (DELETE FROM \"public\".\"outbox\" WHERE xmin IN ('42'::xid) \
         AND (coalesce(abs(hashtext(\"aggregateid\")::bigint) % 2, 0) = 1) \
         RETURNING xmin::text AS x) SELECT x, count(*) FROM d GROUP BY x"
    );
    // The publication's filter, character for character.
    assert!(
        delete_xids_sql(&settings, &[42]).contains(&crate::admin::shards::filter_sql(
            "aggregateid",
            2,
            1
        ))
    );
    // By id, the rows are the shard's already: they came through its slot.
    assert!(!delete_ids_sql(&settings, &["a".into()]).contains("hashtext"));
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
        xids: Vec::new(),
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
