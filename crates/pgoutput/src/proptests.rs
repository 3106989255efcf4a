//! Property tests: every message survives encode → decode unchanged, and no
//! byte string makes either decoder panic.

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;

use super::encode::{context_for, encode};
use super::*;
use crate::lsn::Lsn;

fn lsn() -> impl Strategy<Value = Lsn> {
    any::<u64>().prop_map(Lsn)
}

/// PostgreSQL strings are NUL-terminated, so they cannot contain NUL.
fn name() -> impl Strategy<Value = String> {
    "[^\u{0}]{0,12}"
}

fn payload() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..48).prop_map(Bytes::from)
}

fn tuple() -> impl Strategy<Value = TupleData> {
    let value = prop_oneof![
        Just(TupleValue::Null),
        Just(TupleValue::UnchangedToast),
        payload().prop_map(TupleValue::Text),
        payload().prop_map(TupleValue::Binary),
    ];
    vec(value, 0..8).prop_map(|columns| TupleData { columns })
}

fn old_tuple() -> impl Strategy<Value = OldTuple> {
    prop_oneof![
        tuple().prop_map(OldTuple::Key),
        tuple().prop_map(OldTuple::Full)
    ]
}

fn column() -> impl Strategy<Value = Column> {
    (any::<u8>(), name(), any::<u32>(), any::<i32>()).prop_map(
        |(flags, name, type_oid, type_modifier)| Column {
            flags,
            name,
            type_oid,
            type_modifier,
        },
    )
}

fn prepare_body() -> impl Strategy<Value = PrepareBody> {
    (
        any::<u8>(),
        lsn(),
        lsn(),
        any::<i64>(),
        any::<u32>(),
        name(),
    )
        .prop_map(
            |(flags, prepare_lsn, end_lsn, prepare_time, xid, gid)| PrepareBody {
                flags,
                prepare_lsn,
                end_lsn,
                prepare_time,
                xid,
                gid,
            },
        )
}

fn message() -> impl Strategy<Value = Message> {
    let xid = any::<Option<u32>>;
    prop_oneof![
        (lsn(), any::<i64>(), any::<u32>()).prop_map(|(final_lsn, commit_time, xid)| {
            Message::Begin(Begin {
                final_lsn,
                commit_time,
                xid,
            })
        }),
        (any::<u8>(), lsn(), lsn(), any::<i64>()).prop_map(
            |(flags, commit_lsn, end_lsn, commit_time)| {
                Message::Commit(Commit {
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                })
            }
        ),
        (lsn(), name()).prop_map(|(commit_lsn, name)| Message::Origin(Origin { commit_lsn, name })),
        (
            xid(),
            any::<u32>(),
            name(),
            name(),
            any::<u8>(),
            vec(column(), 0..6)
        )
            .prop_map(
                |(xid, relation_id, namespace, name, replica_identity, columns)| {
                    Message::Relation(RelationBody {
                        xid,
                        relation_id,
                        namespace,
                        name,
                        replica_identity,
                        columns,
                    })
                }
            ),
        (xid(), any::<u32>(), name(), name()).prop_map(|(xid, type_oid, namespace, name)| {
            Message::Type(TypeBody {
                xid,
                type_oid,
                namespace,
                name,
            })
        }),
        (xid(), any::<u32>(), tuple()).prop_map(|(xid, relation_id, tuple)| {
            Message::Insert(Insert {
                xid,
                relation_id,
                tuple,
            })
        }),
        (
            xid(),
            any::<u32>(),
            proptest::option::of(old_tuple()),
            tuple()
        )
            .prop_map(|(xid, relation_id, old, new)| Message::Update(Update {
                xid,
                relation_id,
                old,
                new
            })),
        (xid(), any::<u32>(), old_tuple()).prop_map(|(xid, relation_id, old)| {
            Message::Delete(Delete {
                xid,
                relation_id,
                old,
            })
        }),
        (xid(), any::<u8>(), vec(any::<u32>(), 0..6)).prop_map(|(xid, options, relation_ids)| {
            Message::Truncate(Truncate {
                xid,
                options,
                relation_ids,
            })
        }),
        (xid(), any::<bool>(), lsn(), name(), payload()).prop_map(
            |(xid, transactional, lsn, prefix, content)| {
                Message::Message(LogicalMessage {
                    xid,
                    transactional,
                    lsn,
                    prefix,
                    content,
                })
            }
        ),
        (any::<u32>(), any::<bool>()).prop_map(|(xid, first_segment)| {
            Message::StreamStart(StreamStart { xid, first_segment })
        }),
        Just(Message::StreamStop),
        (any::<u32>(), any::<u8>(), lsn(), lsn(), any::<i64>()).prop_map(
            |(xid, flags, commit_lsn, end_lsn, commit_time)| {
                Message::StreamCommit(StreamCommit {
                    xid,
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                })
            }
        ),
        (
            any::<u32>(),
            any::<u32>(),
            proptest::option::of((lsn(), any::<i64>()))
        )
            .prop_map(|(xid, subxid, parallel)| {
                Message::StreamAbort(StreamAbort {
                    xid,
                    subxid,
                    parallel: parallel.map(|(abort_lsn, abort_time)| ParallelAbort {
                        abort_lsn,
                        abort_time,
                    }),
                })
            }),
        (lsn(), lsn(), any::<i64>(), any::<u32>(), name()).prop_map(
            |(prepare_lsn, end_lsn, prepare_time, xid, gid)| {
                Message::BeginPrepare(BeginPrepare {
                    prepare_lsn,
                    end_lsn,
                    prepare_time,
                    xid,
                    gid,
                })
            }
        ),
        prepare_body().prop_map(Message::Prepare),
        (
            any::<u8>(),
            lsn(),
            lsn(),
            any::<i64>(),
            any::<u32>(),
            name()
        )
            .prop_map(|(flags, commit_lsn, end_lsn, commit_time, xid, gid)| {
                Message::CommitPrepared(CommitPrepared {
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                    xid,
                    gid,
                })
            }),
        (
            any::<u8>(),
            lsn(),
            lsn(),
            any::<i64>(),
            any::<i64>(),
            any::<u32>(),
            name()
        )
            .prop_map(
                |(
                    flags,
                    prepare_end_lsn,
                    rollback_end_lsn,
                    prepare_time,
                    rollback_time,
                    xid,
                    gid,
                )| {
                    Message::RollbackPrepared(RollbackPrepared {
                        flags,
                        prepare_end_lsn,
                        rollback_end_lsn,
                        prepare_time,
                        rollback_time,
                        xid,
                        gid,
                    })
                }
            ),
        prepare_body().prop_map(Message::StreamPrepare),
    ]
}

/// Every decoder configuration the fuzz target also exercises.
fn any_context() -> impl Strategy<Value = DecodeContext> {
    (1u32..=4, any::<bool>(), any::<bool>()).prop_map(
        |(protocol_version, in_stream, parallel_streaming)| DecodeContext {
            protocol_version,
            in_stream,
            parallel_streaming,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn every_message_round_trips(message in message()) {
        let ctx = context_for(&message);
        let mut bytes = encode(&message);
        let decoded = decode(&mut bytes, &ctx);
        prop_assert_eq!(decoded, Ok(message));
        prop_assert!(bytes.is_empty());
    }

    #[test]
    fn truncated_messages_are_errors_not_panics(message in message(), cut in any::<prop::sample::Index>()) {
        let ctx = context_for(&message);
        let full = encode(&message);
        let mut prefix = full.slice(..cut.index(full.len()));
        prop_assert!(decode(&mut prefix, &ctx).is_err());
    }

    #[test]
    fn decode_never_panics(raw in vec(any::<u8>(), 0..96), ctx in any_context()) {
        let mut buf = Bytes::from(raw);
        let before = buf.clone();
        if decode(&mut buf, &ctx).is_err() {
            prop_assert_eq!(buf, before, "an error leaves the buffer unchanged");
        }
    }

    #[test]
    fn decode_never_panics_on_known_tags(
        tag in prop::sample::select(b"BCORYIUDTMSEcAbPKrp".to_vec()),
        body in vec(any::<u8>(), 0..64),
        ctx in any_context(),
    ) {
        // Random bytes rarely start with a valid tag; this drives the field parsers.
        let mut raw = vec![tag];
        raw.extend(body);
        let _ = decode(&mut Bytes::from(raw), &ctx);
    }

    #[test]
    fn decode_copy_data_never_panics(
        tag in prop::sample::select(b"wkrz".to_vec()),
        body in vec(any::<u8>(), 0..64),
    ) {
        let mut raw = vec![tag];
        raw.extend(body);
        let mut buf = Bytes::from(raw);
        if let Ok(ReplicationMessage::XLogData { mut data, .. }) = decode_copy_data(&mut buf) {
            let _ = decode(&mut data, &DecodeContext::V1);
        }
    }

    #[test]
    fn standby_status_update_layout(
        write in lsn(), flush in lsn(), apply in lsn(), time in any::<i64>(), reply in any::<bool>()
    ) {
        let out = encode_standby_status_update(write, flush, apply, time, reply);
        prop_assert_eq!(out.len(), 34);
        prop_assert_eq!(out[0], b'r');
        prop_assert_eq!(&out[9..17], &flush.0.to_be_bytes()[..]);
        prop_assert_eq!(&out[25..33], &time.to_be_bytes()[..]);
        prop_assert_eq!(out[33], u8::from(reply));
    }
}
