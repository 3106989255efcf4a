use proptest::prelude::*;

use super::*;

#[test]
fn frame_puts_magic_and_big_endian_id_before_the_body() {
    assert_eq!(
        frame(0x0102_0304, b"body"),
        [0, 1, 2, 3, 4, b'b', b'o', b'd', b'y']
    );
    assert_eq!(frame(7, b""), [0, 0, 0, 0, 7]);
    let framed = frame(u32::MAX, &[9]);
    assert_eq!(
        unframe(&framed),
        Ok(Unframed {
            schema_id: u32::MAX,
            message_indexes: vec![],
            body: &[9]
        })
    );
}

#[test]
fn protobuf_message_indexes_are_written_as_confluents_serializer_writes_them() {
    // Bytes as io.confluent.kafka.serializers.protobuf's MessageIndexes
    // writes them: [0] is the single byte 0; otherwise the count, then each
    // index, as zigzag varints (2n).
    let cases: &[(&[u32], &[u8])] = &[
        (&[0], &[0]),
        (&[], &[0]),
        (&[1], &[2, 2]),
        (&[0, 0], &[4, 0, 0]),
        (&[2, 1], &[4, 4, 2]),
        (&[64], &[2, 0x80, 0x01]),
        (&[300], &[2, 0xd8, 0x04]),
    ];
    for (indexes, bytes) in cases {
        let mut out = Vec::new();
        encode_message_indexes(indexes, &mut out);
        assert_eq!(out, *bytes, "{indexes:?}");
        let framed = frame_protobuf(42, indexes, b"pb");
        assert_eq!(framed[..5], [0, 0, 0, 0, 42]);
        assert_eq!(&framed[5..5 + bytes.len()], *bytes);
        let back = unframe_protobuf(&framed).unwrap();
        let want: &[u32] = if indexes.is_empty() { &[0] } else { indexes };
        assert_eq!(
            (back.schema_id, &back.message_indexes[..], back.body),
            (42, want, &b"pb"[..])
        );
    }
}

#[test]
fn malformed_frames_are_refused() {
    assert_eq!(unframe(&[0, 0, 0, 1]), Err(WireError::TooShort(4)));
    assert_eq!(unframe(b"{\"a\":1}"), Err(WireError::Magic(b'{')));
    // A negative index (zigzag 1 = -1), a count beyond the bytes left, a
    // varint that never ends, an index above i32::MAX.
    for bad in [
        &[0, 0, 0, 0, 1, 2, 1][..],
        &[0, 0, 0, 0, 1, 8, 2],
        &[0, 0, 0, 0, 1, 2, 0x80, 0x80],
        &[0, 0, 0, 0, 1, 2, 0x80, 0x80, 0x80, 0x80, 0x10],
    ] {
        assert_eq!(
            unframe_protobuf(bad),
            Err(WireError::MessageIndexes),
            "{bad:?}"
        );
    }
}

proptest! {
    #[test]
    fn protobuf_frames_round_trip(
        id in any::<u32>(),
        indexes in prop::collection::vec(0..=i32::MAX as u32, 1..6),
        body in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let framed = frame_protobuf(id, &indexes, &body);
        let back = unframe_protobuf(&framed).unwrap();
        prop_assert_eq!(back.schema_id, id);
        prop_assert_eq!(back.message_indexes, indexes);
        prop_assert_eq!(back.body, &body[..]);
    }
}
