//! Hand-built messages: protocol-4 fields no PostgreSQL 15 server can send,
//! and malformed input, with the error and offset each must produce.

use bytes::{BufMut, Bytes, BytesMut};

use super::*;
use crate::lsn::Lsn;

fn parallel_v4() -> DecodeContext {
    DecodeContext {
        protocol_version: 4,
        in_stream: false,
        parallel_streaming: true,
    }
}

/// Stream Abort as documented for protocol 4 with `streaming = parallel`:
/// xid, subxid, then abort LSN and abort timestamp.
#[test]
fn v4_parallel_stream_abort_carries_lsn_and_time() {
    let mut raw = BytesMut::new();
    raw.put_u8(b'A');
    raw.put_u32(900);
    raw.put_u32(901);
    raw.put_u64(0x16_B374_D848);
    let abort_time = chrono::DateTime::parse_from_rfc3339("2024-05-01T00:00:00.123456Z").unwrap();
    raw.put_i64(utc_to_pg_timestamp(abort_time.to_utc()));
    let mut bytes = raw.freeze();
    let Message::StreamAbort(abort) = decode(&mut bytes.clone(), &parallel_v4()).unwrap() else {
        panic!("expected Stream Abort")
    };
    assert_eq!((abort.xid, abort.subxid), (900, 901));
    let parallel = abort.parallel.expect("parallel fields");
    assert_eq!(parallel.abort_lsn.to_string(), "16/B374D848");
    assert_eq!(
        pg_timestamp_to_utc(parallel.abort_time)
            .unwrap()
            .to_rfc3339(),
        "2024-05-01T00:00:00.123456+00:00"
    );

    // Protocol 4 without parallel streaming: the same bytes have 16 too many.
    let plain_v4 = DecodeContext::new(4);
    assert_eq!(
        decode(&mut bytes, &plain_v4),
        Err(DecodeError::TrailingBytes {
            message: "Stream Abort",
            count: 16,
            offset: 9
        })
    );
}

#[test]
fn parallel_fields_need_protocol_4() {
    let mut raw = vec![b'A'];
    raw.extend(7u32.to_be_bytes());
    raw.extend(7u32.to_be_bytes());
    // A context that claims parallel streaming on protocol 3 reads the v2 layout.
    let ctx = DecodeContext {
        protocol_version: 3,
        in_stream: false,
        parallel_streaming: true,
    };
    let Message::StreamAbort(abort) = decode(&mut Bytes::from(raw), &ctx).unwrap() else {
        panic!()
    };
    assert_eq!(abort.parallel, None);
}

#[test]
fn parallel_abort_truncated_reports_offset() {
    let mut raw = vec![b'A'];
    raw.extend([0u8; 8]);
    raw.extend([0u8; 3]);
    assert_eq!(
        decode(&mut Bytes::from(raw), &parallel_v4()),
        Err(DecodeError::Truncated {
            what: "Stream Abort LSN",
            needed: 5,
            offset: 9
        })
    );
}

#[test]
fn empty_and_unknown_messages() {
    assert_eq!(
        decode(&mut Bytes::new(), &DecodeContext::V1),
        Err(DecodeError::Truncated {
            what: "message tag",
            needed: 1,
            offset: 0
        })
    );
    let err = decode(&mut Bytes::from_static(b"Z"), &DecodeContext::V1).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnknownMessage {
            tag: b'Z',
            offset: 0
        }
    );
    assert!(err.to_string().contains("'Z'"), "{err}");
}

fn insert_prefix() -> BytesMut {
    let mut raw = BytesMut::new();
    raw.put_u8(b'I');
    raw.put_u32(16384);
    raw.put_u8(b'N');
    raw
}

#[test]
fn negative_column_count_is_rejected() {
    let mut raw = insert_prefix();
    raw.put_i16(-1);
    assert_eq!(
        decode(&mut raw.freeze(), &DecodeContext::V1),
        Err(DecodeError::InvalidLength {
            what: "tuple column count",
            len: -1,
            offset: 6
        })
    );
}

#[test]
fn column_count_beyond_message_is_rejected_before_allocating() {
    let mut raw = insert_prefix();
    raw.put_i16(i16::MAX);
    raw.put_u8(b'n');
    assert_eq!(
        decode(&mut raw.freeze(), &DecodeContext::V1),
        Err(DecodeError::InvalidLength {
            what: "tuple column count",
            len: 32767,
            offset: 6
        })
    );
}

#[test]
fn value_length_negative_or_too_long_is_rejected() {
    for (len, expect_len) in [(-5i32, -5i64), (i32::MAX, i64::from(i32::MAX)), (4, 4)] {
        let mut raw = insert_prefix();
        raw.put_i16(1);
        raw.put_u8(b't');
        raw.put_i32(len);
        raw.put_slice(b"abc");
        assert_eq!(
            decode(&mut raw.freeze(), &DecodeContext::V1),
            Err(DecodeError::InvalidLength {
                what: "text column length",
                len: expect_len,
                offset: 9
            }),
            "length {len}"
        );
    }
}

#[test]
fn unknown_column_kind_and_marker() {
    let mut raw = insert_prefix();
    raw.put_i16(2);
    raw.put_u8(b'n');
    raw.put_u8(b'x');
    assert_eq!(
        decode(&mut raw.freeze(), &DecodeContext::V1),
        Err(DecodeError::UnknownColumnKind {
            kind: b'x',
            offset: 9
        })
    );

    let mut raw = BytesMut::new();
    raw.put_u8(b'U');
    raw.put_u32(1);
    raw.put_u8(b'Q');
    assert_eq!(
        decode(&mut raw.freeze(), &DecodeContext::V1),
        Err(DecodeError::UnexpectedTupleMarker {
            message: "Update",
            marker: b'Q',
            offset: 5
        })
    );

    let mut raw = BytesMut::new();
    raw.put_u8(b'D');
    raw.put_u32(1);
    raw.put_u8(b'N');
    assert!(matches!(
        decode(&mut raw.freeze(), &DecodeContext::V1),
        Err(DecodeError::UnexpectedTupleMarker {
            message: "Delete",
            marker: b'N',
            offset: 5
        })
    ));
}

#[test]
fn truncate_relation_count_is_checked() {
    for count in [-1i32, 3] {
        let mut raw = BytesMut::new();
        raw.put_u8(b'T');
        raw.put_i32(count);
        raw.put_u8(0);
        raw.put_u32(1);
        assert_eq!(
            decode(&mut raw.freeze(), &DecodeContext::V1),
            Err(DecodeError::InvalidLength {
                what: "Truncate relation count",
                len: count.into(),
                offset: 1
            })
        );
    }
}

#[test]
fn relation_column_count_is_checked() {
    let mut raw = BytesMut::new();
    raw.put_u8(b'R');
    raw.put_u32(1);
    raw.put_slice(b"public\0outbox\0d");
    raw.put_i16(2);
    raw.put_slice(&[0u8; 10]);
    assert_eq!(
        decode(&mut raw.freeze(), &DecodeContext::V1),
        Err(DecodeError::InvalidLength {
            what: "Relation column count",
            len: 2,
            offset: 20
        })
    );
}

#[test]
fn streamed_xid_is_read_only_in_stream() {
    let mut raw = BytesMut::new();
    raw.put_u8(b'M');
    raw.put_u32(77);
    raw.put_u8(1);
    raw.put_u64(5);
    raw.put_slice(b"p\0");
    raw.put_i32(0);
    let raw = raw.freeze();
    let ctx = DecodeContext {
        protocol_version: 2,
        in_stream: true,
        parallel_streaming: false,
    };
    let Message::Message(m) = decode(&mut raw.clone(), &ctx).unwrap() else {
        panic!()
    };
    assert_eq!((m.xid, m.lsn, m.prefix.as_str()), (Some(77), Lsn(5), "p"));
    // Outside a stream the same bytes misalign and must not decode silently.
    assert!(decode(&mut raw.clone(), &DecodeContext::new(2)).is_err());
}

#[test]
fn observe_tracks_stream_blocks() {
    let mut ctx = DecodeContext::new(2);
    ctx.observe(&Message::StreamStart(StreamStart {
        xid: 1,
        first_segment: true,
    }));
    assert!(ctx.in_stream);
    ctx.observe(&Message::StreamStop);
    assert!(!ctx.in_stream);
}

#[test]
fn error_leaves_buffer_untouched_and_success_consumes_it() {
    let mut bad = Bytes::from_static(b"B\0\0");
    assert!(decode(&mut bad, &DecodeContext::V1).is_err());
    assert_eq!(&bad[..], b"B\0\0");
    let mut raw = BytesMut::new();
    raw.put_u8(b'B');
    raw.put_u64(1);
    raw.put_i64(2);
    raw.put_u32(3);
    let mut good = raw.freeze();
    assert!(decode(&mut good, &DecodeContext::V1).is_ok());
    assert!(good.is_empty());
}
