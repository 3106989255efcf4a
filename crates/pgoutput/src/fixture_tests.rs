//! Decodes every message captured from PostgreSQL 15 by
//! `scripts/capture-pgoutput-fixtures` and checks real fields: table and
//! column names, values, and the LSN relationships the relay relies on.
//!
//! A fixture file holds one case's messages in order, each preceded by its
//! length as a big-endian u32 (see `tests/fixtures/README.md` in this crate).

use std::sync::Arc;

use bytes::{Buf, Bytes};

use super::*;
use crate::assembler::{AssemblyError, TransactionAssembler, TxEvent};
use crate::lsn::Lsn;

/// The raw messages of one captured case.
pub(crate) fn load(case: &str) -> Vec<Bytes> {
    let path = format!("{}/tests/fixtures/{case}.bin", env!("CARGO_MANIFEST_DIR"));
    let mut stream = Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")));
    let mut messages = Vec::new();
    while stream.remaining() >= 4 {
        let len = stream.get_u32() as usize;
        assert!(len <= stream.len(), "{path}: record longer than the file");
        messages.push(stream.split_to(len));
    }
    assert!(stream.is_empty(), "{path}: trailing bytes");
    assert!(!messages.is_empty(), "{path} holds no messages");
    messages
}

/// Decodes a case the way a client would, tracking streamed blocks.
fn decode_case(case: &str, protocol_version: u32) -> Vec<Message> {
    let mut ctx = DecodeContext::new(protocol_version);
    load(case)
        .into_iter()
        .enumerate()
        .map(|(i, mut bytes)| {
            let message =
                decode(&mut bytes, &ctx).unwrap_or_else(|e| panic!("{case} message {i}: {e}"));
            assert!(bytes.is_empty());
            ctx.observe(&message);
            message
        })
        .collect()
}

fn tags(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| match m {
            Message::Begin(_) => 'B',
            Message::Commit(_) => 'C',
            Message::Origin(_) => 'O',
            Message::Relation(_) => 'R',
            Message::Type(_) => 'Y',
            Message::Insert(_) => 'I',
            Message::Update(_) => 'U',
            Message::Delete(_) => 'D',
            Message::Truncate(_) => 'T',
            Message::Message(_) => 'M',
            Message::StreamStart(_) => 'S',
            Message::StreamStop => 'E',
            Message::StreamCommit(_) => 'c',
            Message::StreamAbort(_) => 'A',
            Message::BeginPrepare(_) => 'b',
            Message::Prepare(_) => 'P',
            Message::CommitPrepared(_) => 'K',
            Message::RollbackPrepared(_) => 'r',
            Message::StreamPrepare(_) => 'p',
        })
        .collect()
}

fn text(value: &TupleValue) -> &str {
    match value {
        TupleValue::Text(bytes) => std::str::from_utf8(bytes).expect("utf-8 text value"),
        other => panic!("expected a text value, got {other:?}"),
    }
}

fn texts(tuple: &TupleData) -> Vec<Option<&str>> {
    tuple
        .columns
        .iter()
        .map(|v| match v {
            TupleValue::Null => None,
            v => Some(text(v)),
        })
        .collect()
}

/// Begin/Commit pairs agree, and transactions come in WAL order.
fn check_v1_framing(messages: &[Message]) -> usize {
    let mut open: Option<&Begin> = None;
    let mut last_end = Lsn::ZERO;
    let mut transactions = 0;
    for message in messages {
        match message {
            Message::Begin(begin) => {
                assert!(open.is_none(), "nested Begin");
                open = Some(begin);
            }
            Message::Commit(commit) => {
                let begin = open.take().expect("Commit without Begin");
                assert_eq!(begin.final_lsn, commit.commit_lsn);
                assert!(commit.end_lsn > commit.commit_lsn);
                assert_eq!(begin.commit_time, commit.commit_time);
                assert!(commit.commit_lsn > last_end, "transactions in commit order");
                assert!(pg_timestamp_to_utc(commit.commit_time).is_some());
                last_end = commit.end_lsn;
                transactions += 1;
            }
            _ => {}
        }
    }
    assert!(open.is_none(), "unterminated transaction");
    transactions
}

fn relations(messages: &[Message]) -> Vec<&RelationBody> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Relation(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn inserts(messages: &[Message]) -> Vec<&Insert> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Insert(i) => Some(i),
            _ => None,
        })
        .collect()
}

#[test]
fn v1_dml_inserts_updates_deletes() {
    let m = decode_case("v1-dml", 1);
    assert_eq!(tags(&m), "BRICBUCBUCBDCBIIRICBUCBDC");
    assert_eq!(check_v1_framing(&m), 7);

    let rels = relations(&m);
    let items = rels[0];
    assert_eq!(
        (items.namespace.as_str(), items.name.as_str()),
        ("fixture", "items")
    );
    assert_eq!(items.replica_identity, b'd');
    let cols: Vec<_> = items
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_oid, c.flags))
        .collect();
    assert_eq!(
        cols,
        [
            ("id", 23, 1),
            ("name", 25, 0),
            ("qty", 23, 0),
            ("note", 25, 0)
        ]
    );
    let audit = rels[1];
    assert_eq!(audit.name, "audit");
    assert_eq!(audit.replica_identity, b'f');

    let Message::Insert(first) = &m[2] else {
        panic!()
    };
    assert_eq!(first.relation_id, items.relation_id);
    assert_eq!(first.xid, None);
    let values = texts(&first.tuple);
    assert_eq!(&values[..3], [Some("1"), Some("apple"), Some("3")]);
    assert_eq!(values[3], Some("n".repeat(4000).as_str()));

    // The out-of-line note column is not resent when an UPDATE leaves it alone.
    let Message::Update(qty) = &m[5] else {
        panic!()
    };
    assert_eq!(qty.old, None);
    assert_eq!(
        qty.new.columns[2],
        TupleValue::Text(Bytes::from_static(b"4"))
    );
    assert_eq!(qty.new.columns[3], TupleValue::UnchangedToast);

    // A key change sends the old key; non-key columns of it are null.
    let Message::Update(rekey) = &m[8] else {
        panic!()
    };
    let Some(OldTuple::Key(old)) = &rekey.old else {
        panic!("expected old key")
    };
    assert_eq!(texts(old), [Some("1"), None, None, None]);
    assert_eq!(text(&rekey.new.columns[0]), "2");

    let Message::Delete(delete) = &m[11] else {
        panic!()
    };
    let OldTuple::Key(key) = &delete.old else {
        panic!("expected key")
    };
    assert_eq!(texts(key), [Some("2"), None, None, None]);

    let multi = inserts(&m);
    assert_eq!(
        texts(&multi[1].tuple),
        [Some("3"), None, Some("1"), Some("short")]
    );
    assert_eq!(
        texts(&multi[2].tuple),
        [Some("4"), Some("pear"), None, None]
    );

    // REPLICA IDENTITY FULL: the whole old row.
    let Message::Update(full) = &m[20] else {
        panic!()
    };
    assert_eq!(full.relation_id, audit.relation_id);
    let Some(OldTuple::Full(old)) = &full.old else {
        panic!("expected full old row")
    };
    assert_eq!(texts(old), [Some("1"), Some("created")]);
    assert_eq!(texts(&full.new), [Some("1"), Some("changed")]);
    let Message::Delete(gone) = &m[23] else {
        panic!()
    };
    assert!(matches!(&gone.old, OldTuple::Full(t) if texts(t) == [Some("1"), Some("changed")]));
}

#[test]
fn column_values_are_slices_of_the_message() {
    let raw = load("v1-dml");
    let mut bytes = raw[2].clone();
    let range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
    let Message::Insert(insert) = decode(&mut bytes, &DecodeContext::V1).unwrap() else {
        panic!()
    };
    for value in &insert.tuple.columns {
        if let TupleValue::Text(b) = value {
            assert!(
                range.contains(&(b.as_ptr() as usize)),
                "value copied out of the message"
            );
        }
    }
}

#[test]
fn v1_truncate_lists_relations_and_options() {
    let m = decode_case("v1-truncate", 1);
    assert_eq!(tags(&m), "BRICBRICBRRTC");
    check_v1_framing(&m);
    let rels = relations(&m);
    let Message::Truncate(truncate) = &m[11] else {
        panic!()
    };
    assert_eq!(
        truncate.relation_ids,
        [rels[2].relation_id, rels[3].relation_id]
    );
    assert_eq!(
        (rels[2].name.as_str(), rels[3].name.as_str()),
        ("counters", "audit")
    );
    assert!(truncate.cascade() && truncate.restart_identity());
    assert_eq!(truncate.xid, None);
}

#[test]
fn v1_type_precedes_relation_using_it() {
    let m = decode_case("v1-type", 1);
    assert_eq!(tags(&m), "BYRIC");
    let Message::Type(ty) = &m[1] else { panic!() };
    assert_eq!(
        (ty.namespace.as_str(), ty.name.as_str()),
        ("fixture", "mood")
    );
    let Message::Relation(moods) = &m[2] else {
        panic!()
    };
    assert_eq!(moods.columns[1].name, "mood");
    assert_eq!(moods.columns[1].type_oid, ty.type_oid);
    assert_eq!(texts(&inserts(&m)[0].tuple), [Some("1"), Some("happy")]);
}

#[test]
fn v1_origin_names_the_replication_origin() {
    let m = decode_case("v1-origin", 1);
    assert_eq!(tags(&m), "BORIC");
    check_v1_framing(&m);
    let Message::Origin(origin) = &m[1] else {
        panic!()
    };
    assert_eq!(origin.name, "fixture_origin");
    assert_eq!(origin.commit_lsn, "0/ABCDEF".parse::<Lsn>().unwrap());
    // pg_replication_origin_xact_setup set the commit timestamp.
    let Message::Begin(begin) = &m[0] else {
        panic!()
    };
    let time = pg_timestamp_to_utc(begin.commit_time).unwrap();
    assert_eq!(time.to_rfc3339(), "2024-01-02T03:04:05+00:00");
}

#[test]
fn v1_logical_messages_inside_and_outside_transactions() {
    let m = decode_case("v1-messages", 1);
    assert_eq!(tags(&m), "BRIMCMBMC");
    assert_eq!(check_v1_framing(&m), 2);
    let Message::Message(inside) = &m[3] else {
        panic!()
    };
    assert!(inside.transactional);
    assert_eq!(inside.prefix, "fixture");
    assert_eq!(&inside.content[..], b"inside the transaction");
    let Message::Message(outside) = &m[5] else {
        panic!()
    };
    assert!(!outside.transactional);
    assert_eq!(outside.prefix, "fixture-heartbeat");
    assert_eq!(&outside.content[..], b"outside");
    let Message::Message(raw) = &m[7] else {
        panic!()
    };
    assert_eq!(&raw.content[..], [0x00, 0xFF, 0x10]);
    assert!(outside.lsn > inside.lsn);
}

#[test]
fn v1_binary_values() {
    let m = decode_case("v1-binary", 1);
    assert_eq!(tags(&m), "BRIC");
    let columns = &inserts(&m)[0].tuple.columns;
    assert_eq!(
        columns[0],
        TupleValue::Binary(Bytes::copy_from_slice(&40i32.to_be_bytes()))
    );
    assert_eq!(
        columns[1],
        TupleValue::Binary(Bytes::from_static(b"binary"))
    );
    assert_eq!(
        columns[2],
        TupleValue::Binary(Bytes::copy_from_slice(&258i32.to_be_bytes()))
    );
    assert_eq!(columns[3], TupleValue::Null);
}

#[test]
fn v1_alter_table_resends_relation_and_assembler_follows() {
    let m = decode_case("v1-alter-table", 1);
    assert_eq!(tags(&m), "BRICBRIC");
    let rels = relations(&m);
    assert_eq!(rels[0].relation_id, rels[1].relation_id);
    assert_eq!(rels[0].columns.len(), 2);
    let added = &rels[1].columns[2];
    assert_eq!((added.name.as_str(), added.type_oid), ("b", 23));

    let mut asm = TransactionAssembler::new();
    let mut shapes: Vec<Arc<crate::assembler::Relation>> = Vec::new();
    for message in m {
        if let Some(TxEvent::Insert { relation, tuple }) = asm.push(message).unwrap() {
            assert_eq!(tuple.columns.len(), relation.columns.len());
            shapes.push(relation);
        }
    }
    assert_eq!(shapes.len(), 2);
    assert_eq!(shapes[0].qualified_name(), "fixture.evolving");
    assert_eq!(
        shapes[0].column_index("b"),
        None,
        "in-flight event keeps the old shape"
    );
    assert_eq!(shapes[1].column_index("b"), Some(2));
}

#[test]
fn v2_streamed_commit() {
    let m = decode_case("v2-stream-commit", 2);
    let Message::StreamStart(start) = &m[0] else {
        panic!()
    };
    assert!(start.first_segment);
    let starts: Vec<_> = m
        .iter()
        .filter_map(|x| match x {
            Message::StreamStart(s) => Some(s),
            _ => None,
        })
        .collect();
    assert!(
        starts.len() >= 2,
        "a transaction over logical_decoding_work_mem streams in blocks"
    );
    assert!(starts.iter().all(|s| s.xid == start.xid));
    assert!(starts[1..].iter().all(|s| !s.first_segment));
    let Message::Relation(rel) = &m[1] else {
        panic!()
    };
    assert_eq!((rel.xid, rel.name.as_str()), (Some(start.xid), "bulk"));
    let rows = inserts(&m);
    assert_eq!(rows.len(), 200);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.xid, Some(start.xid));
        assert_eq!(text(&row.tuple.columns[0]), (i + 1).to_string());
    }
    let Some(Message::StreamCommit(commit)) = m.last() else {
        panic!()
    };
    assert_eq!(commit.xid, start.xid);
    assert!(commit.end_lsn > commit.commit_lsn);
    assert!(matches!(m[m.len() - 2], Message::StreamStop));
}

#[test]
fn v2_streamed_aborts_of_transaction_and_subtransaction() {
    let m = decode_case("v2-stream-abort", 2);
    assert_eq!(&tags(&m)[..5], "SEASR");
    let Message::StreamStart(first) = &m[0] else {
        panic!()
    };
    let Message::StreamAbort(whole) = &m[2] else {
        panic!()
    };
    assert_eq!(
        (whole.xid, whole.subxid, whole.parallel),
        (first.xid, first.xid, None)
    );

    let Message::StreamStart(second) = &m[3] else {
        panic!()
    };
    let n = m.len();
    let Message::StreamAbort(sub) = &m[n - 2] else {
        panic!()
    };
    assert_eq!(sub.xid, second.xid);
    assert_ne!(sub.subxid, sub.xid);
    let rows = inserts(&m);
    assert_eq!(text(&rows[0].tuple.columns[1]), "kept");
    assert_eq!(rows[0].xid, Some(second.xid));
    // Changes made in the subtransaction carry its xid.
    assert!(rows[1..].iter().all(|r| r.xid == Some(sub.subxid)));
    let Message::StreamCommit(commit) = &m[n - 1] else {
        panic!()
    };
    assert_eq!(commit.xid, second.xid);
}

#[test]
fn v3_two_phase_prepare_commit_and_rollback() {
    let m = decode_case("v3-two-phase", 3);
    assert_eq!(tags(&m), "bRIPKbIPr");
    let (Message::BeginPrepare(b1), Message::Prepare(p1), Message::CommitPrepared(k)) =
        (&m[0], &m[3], &m[4])
    else {
        panic!()
    };
    assert_eq!(b1.gid, "fixture-commit");
    assert_eq!(
        (b1.xid, b1.prepare_lsn, b1.end_lsn),
        (p1.xid, p1.prepare_lsn, p1.end_lsn)
    );
    assert_eq!(
        (p1.gid.as_str(), k.gid.as_str(), k.xid),
        ("fixture-commit", "fixture-commit", p1.xid)
    );
    assert!(p1.end_lsn > p1.prepare_lsn);
    assert!(k.commit_lsn >= p1.end_lsn && k.end_lsn > k.commit_lsn);

    let (Message::BeginPrepare(b2), Message::Prepare(p2), Message::RollbackPrepared(r)) =
        (&m[5], &m[7], &m[8])
    else {
        panic!()
    };
    assert_eq!(
        (b2.gid.as_str(), r.gid.as_str()),
        ("fixture-rollback", "fixture-rollback")
    );
    assert_eq!(
        (r.xid, r.prepare_end_lsn, r.prepare_time),
        (p2.xid, p2.end_lsn, p2.prepare_time)
    );
    assert!(r.rollback_end_lsn > r.prepare_end_lsn);
    assert!(r.rollback_time >= r.prepare_time);
}

#[test]
fn v3_stream_prepare() {
    let m = decode_case("v3-stream-prepare", 3);
    let Message::StreamStart(start) = &m[0] else {
        panic!()
    };
    let n = m.len();
    let (Message::StreamPrepare(prepare), Message::CommitPrepared(commit)) = (&m[n - 2], &m[n - 1])
    else {
        panic!("expected Stream Prepare then Commit Prepared")
    };
    assert_eq!(
        (prepare.xid, prepare.gid.as_str()),
        (start.xid, "fixture-stream")
    );
    assert_eq!(
        (commit.xid, commit.gid.as_str()),
        (start.xid, "fixture-stream")
    );
    assert!(commit.commit_lsn >= prepare.end_lsn);
    assert_eq!(inserts(&m).len(), 200);
}

#[test]
fn outbox_stream_feeds_the_assembler() {
    let m = decode_case("outbox", 1);
    assert_eq!(check_v1_framing(&m), 1000);
    let rel = relations(&m);
    assert_eq!(rel.len(), 1, "a relation is described once per session");
    let names: Vec<_> = rel[0].columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["id", "aggregatetype", "aggregateid", "type", "payload"]
    );
    assert_eq!(rel[0].columns[0].type_oid, 2950, "uuid");

    let mut asm = TransactionAssembler::new();
    let (mut rows, mut commits) = (0, 0);
    for message in m {
        match asm.push(message).unwrap() {
            Some(TxEvent::Insert { relation, tuple }) => {
                rows += 1;
                let id = text(&tuple.columns[relation.column_index("aggregateid").unwrap()]);
                assert_eq!(id, format!("order-{rows}"));
                let payload = text(&tuple.columns[relation.column_index("payload").unwrap()]);
                assert!(
                    (150..400).contains(&payload.len()),
                    "payload of {} bytes",
                    payload.len()
                );
                let json: serde_json::Value = serde_json::from_str(payload).unwrap();
                assert_eq!(json["orderId"], id);
            }
            Some(TxEvent::Commit { .. }) => commits += 1,
            _ => {}
        }
    }
    assert_eq!((rows, commits), (1000, 1000));
    assert!(!asm.in_transaction());
}

#[test]
fn every_v1_fixture_passes_the_assembler() {
    for case in [
        "v1-dml",
        "v1-truncate",
        "v1-type",
        "v1-origin",
        "v1-messages",
        "v1-binary",
    ] {
        let mut asm = TransactionAssembler::new();
        let mut events = 0;
        for message in decode_case(case, 1) {
            events += usize::from(
                asm.push(message)
                    .unwrap_or_else(|e| panic!("{case}: {e}"))
                    .is_some(),
            );
        }
        assert!(events > 0 && !asm.in_transaction(), "{case}");
    }
}

#[test]
fn assembler_rejects_streamed_and_two_phase_fixtures() {
    for (case, version, first) in [
        ("v2-stream-commit", 2, "Stream Start"),
        ("v3-two-phase", 3, "Begin Prepare"),
    ] {
        let message = decode_case(case, version).remove(0);
        let err = TransactionAssembler::new().push(message).unwrap_err();
        assert_eq!(err, AssemblyError::Unsupported { message: first }, "{case}");
    }
}

#[test]
fn v1_decoder_rejects_streamed_messages() {
    let mut bytes = load("v2-stream-commit").remove(0);
    let err = decode(&mut bytes, &DecodeContext::V1).unwrap_err();
    assert_eq!(
        err,
        DecodeError::NotInProtocolVersion {
            message: "Stream Start",
            required: 2,
            negotiated: 1
        }
    );
}
