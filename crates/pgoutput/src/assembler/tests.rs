//! Framing rules with hand-built messages; the same rules against bytes
//! captured from PostgreSQL (including ALTER TABLE mid-stream) are in
//! `fixture_tests`.

use bytes::Bytes;

use super::*;
use crate::{Begin, Commit, Delete, Insert, OldTuple, StreamStart, Truncate, TupleValue, TypeBody};

const OID: u32 = 16384;

fn relation_msg(columns: &[&str]) -> Message {
    Message::Relation(RelationBody {
        xid: None,
        relation_id: OID,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns: columns
            .iter()
            .map(|name| Column {
                flags: 0,
                name: (*name).into(),
                type_oid: 25,
                type_modifier: -1,
            })
            .collect(),
    })
}

fn begin(xid: u32, final_lsn: u64) -> Message {
    Message::Begin(Begin {
        final_lsn: Lsn(final_lsn),
        commit_time: 1,
        xid,
    })
}

fn commit(commit_lsn: u64, end_lsn: u64) -> Message {
    Message::Commit(Commit {
        flags: 0,
        commit_lsn: Lsn(commit_lsn),
        end_lsn: Lsn(end_lsn),
        commit_time: 1,
    })
}

fn insert(relation_id: u32, values: &[&str]) -> Message {
    Message::Insert(Insert {
        xid: None,
        relation_id,
        tuple: TupleData {
            columns: values
                .iter()
                .map(|v| TupleValue::Text(Bytes::copy_from_slice(v.as_bytes())))
                .collect(),
        },
    })
}

#[test]
fn frames_a_transaction_and_confirms_end_lsn() {
    let mut asm = TransactionAssembler::new();
    assert_eq!(
        asm.push(begin(7, 100)).unwrap(),
        Some(TxEvent::Begin {
            xid: 7,
            final_lsn: Lsn(100),
            commit_time: 1
        })
    );
    assert!(asm.in_transaction());
    let Some(TxEvent::Relation(described)) = asm.push(relation_msg(&["id", "payload"])).unwrap()
    else {
        panic!("expected Relation");
    };
    assert_eq!(described.oid, OID);
    let Some(TxEvent::Insert { relation, tuple }) = asm.push(insert(OID, &["1", "{}"])).unwrap()
    else {
        panic!("expected Insert");
    };
    assert_eq!(relation.qualified_name(), "public.outbox");
    assert_eq!(relation.column_index("payload"), Some(1));
    assert_eq!(relation.column_index("missing"), None);
    assert_eq!(tuple.columns.len(), 2);
    assert_eq!(
        asm.push(commit(100, 120)).unwrap(),
        Some(TxEvent::Commit {
            xid: 7,
            commit_lsn: Lsn(100),
            end_lsn: Lsn(120),
            commit_time: 1
        })
    );
    assert!(!asm.in_transaction());
}

#[test]
fn nested_begin_is_an_error() {
    let mut asm = TransactionAssembler::new();
    asm.push(begin(7, 100)).unwrap();
    let err = asm.push(begin(8, 200)).unwrap_err();
    assert_eq!(
        err,
        AssemblyError::NestedBegin {
            open_xid: 7,
            new_xid: 8
        }
    );
    assert!(err.to_string().contains("lost a Commit"));
}

#[test]
fn changes_and_commit_outside_a_transaction_are_errors() {
    let mut asm = TransactionAssembler::new();
    asm.push(relation_msg(&["id"])).unwrap();
    assert_eq!(
        asm.push(insert(OID, &["1"])).unwrap_err(),
        AssemblyError::OutsideTransaction { message: "Insert" }
    );
    assert_eq!(
        asm.push(commit(1, 2)).unwrap_err(),
        AssemblyError::OutsideTransaction { message: "Commit" }
    );
    let delete = Message::Delete(Delete {
        xid: None,
        relation_id: OID,
        old: OldTuple::Key(TupleData::default()),
    });
    assert!(matches!(
        asm.push(delete),
        Err(AssemblyError::OutsideTransaction { .. })
    ));
    let transactional = Message::Message(LogicalMessage {
        xid: None,
        transactional: true,
        lsn: Lsn(5),
        prefix: "p".into(),
        content: Bytes::new(),
    });
    assert!(matches!(
        asm.push(transactional),
        Err(AssemblyError::OutsideTransaction { .. })
    ));
}

#[test]
fn non_transactional_message_passes_outside_a_transaction() {
    let mut asm = TransactionAssembler::new();
    let message = LogicalMessage {
        xid: None,
        transactional: false,
        lsn: Lsn(5),
        prefix: "heartbeat".into(),
        content: Bytes::from_static(b"x"),
    };
    assert_eq!(
        asm.push(Message::Message(message.clone())).unwrap(),
        Some(TxEvent::Message(message))
    );
}

#[test]
fn commit_lsn_must_match_begin() {
    let mut asm = TransactionAssembler::new();
    asm.push(begin(7, 100)).unwrap();
    let err = asm.push(commit(99, 120)).unwrap_err();
    assert_eq!(
        err,
        AssemblyError::CommitLsnMismatch {
            xid: 7,
            final_lsn: Lsn(100),
            commit_lsn: Lsn(99)
        }
    );
    assert!(err.to_string().contains("0/64"), "{err}");
}

#[test]
fn unknown_relation_is_an_error_that_explains() {
    let mut asm = TransactionAssembler::new();
    asm.push(begin(7, 100)).unwrap();
    let err = asm.push(insert(999, &["1"])).unwrap_err();
    assert_eq!(
        err,
        AssemblyError::UnknownRelation {
            message: "Insert",
            relation_id: 999
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("999") && text.contains("Relation message"),
        "{text}"
    );
    let truncate = Message::Truncate(Truncate {
        xid: None,
        options: 0,
        relation_ids: vec![999],
    });
    assert!(matches!(
        asm.push(truncate),
        Err(AssemblyError::UnknownRelation {
            relation_id: 999,
            ..
        })
    ));
}

#[test]
fn column_count_must_match_relation() {
    let mut asm = TransactionAssembler::new();
    asm.push(relation_msg(&["id", "payload"])).unwrap();
    asm.push(begin(7, 100)).unwrap();
    let err = asm.push(insert(OID, &["1"])).unwrap_err();
    assert_eq!(
        err,
        AssemblyError::ColumnCountMismatch {
            message: "Insert",
            relation: "public.outbox".into(),
            relation_columns: 2,
            tuple_columns: 1
        }
    );
}

#[test]
fn streaming_and_two_phase_are_unsupported() {
    let mut asm = TransactionAssembler::new();
    let err = asm
        .push(Message::StreamStart(StreamStart {
            xid: 1,
            first_segment: true,
        }))
        .unwrap_err();
    assert_eq!(
        err,
        AssemblyError::Unsupported {
            message: "Stream Start"
        }
    );
    assert!(err.to_string().contains("streaming"));
    assert!(matches!(
        asm.push(Message::StreamStop),
        Err(AssemblyError::Unsupported {
            message: "Stream Stop"
        })
    ));
}

#[test]
fn relation_change_keeps_old_shape_for_events_in_flight() {
    let mut asm = TransactionAssembler::new();
    asm.push(relation_msg(&["id"])).unwrap();
    asm.push(begin(7, 100)).unwrap();
    let Some(TxEvent::Insert {
        relation: before, ..
    }) = asm.push(insert(OID, &["1"])).unwrap()
    else {
        panic!("expected Insert");
    };
    asm.push(relation_msg(&["id", "tenant"])).unwrap();
    let Some(TxEvent::Insert {
        relation: after, ..
    }) = asm.push(insert(OID, &["2", "t"])).unwrap()
    else {
        panic!("expected Insert");
    };
    assert_eq!(before.columns.len(), 1);
    assert_eq!(after.columns.len(), 2);
    assert_eq!(asm.relation(OID).map(|r| r.columns.len()), Some(2));
}

#[test]
fn origin_and_type_are_ignored() {
    let mut asm = TransactionAssembler::new();
    let ty = Message::Type(TypeBody {
        xid: None,
        type_oid: 1,
        namespace: "public".into(),
        name: "mood".into(),
    });
    assert_eq!(asm.push(ty).unwrap(), None);
}

#[test]
fn reset_forgets_open_transaction_and_relations() {
    let mut asm = TransactionAssembler::new();
    asm.push(relation_msg(&["id"])).unwrap();
    asm.push(begin(7, 100)).unwrap();
    asm.reset();
    assert!(!asm.in_transaction());
    assert!(asm.relation(OID).is_none());
    // After reset the server resends the transaction from its Begin.
    asm.push(begin(7, 100)).unwrap();
}
