//! The streaming replication envelope around pgoutput: the CopyData payloads
//! of a `START_REPLICATION` stream, and the standby status update sent back.
//!
//! Sans-IO like [`super::decode`]: bytes in, values out. Layouts follow
//! PostgreSQL's "Streaming Replication Protocol": XLogData 'w', Primary
//! keepalive 'k' from the server; Standby status update 'r' to it.
//!
//! The keepalive's `wal_end` is the last WAL position the server *sent*, not
//! one the relay has handled: confirming it is only safe when nothing is in
//! flight ("Keepalives answered, progress reported promptly" in
//! docs/design.md).

use bytes::{BufMut, Bytes, BytesMut};

use super::DecodeError;
use super::reader::Reader;
use crate::lsn::Lsn;

/// One CopyData payload from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicationMessage {
    /// 'w': WAL data; for a logical slot, `data` is one pgoutput message.
    XLogData {
        wal_start: Lsn,
        wal_end: Lsn,
        /// Server clock, microseconds since 2000-01-01.
        server_time: i64,
        data: Bytes,
    },
    /// 'k': the server is alive; answer at once when `reply_requested`.
    PrimaryKeepalive {
        wal_end: Lsn,
        server_time: i64,
        reply_requested: bool,
    },
}

/// Decodes one CopyData payload. On success `buf` is left empty (`data` is a
/// slice of it); on error it is left unchanged.
///
/// # Errors
/// [`DecodeError`] with offsets into the CopyData payload.
pub fn decode_copy_data(buf: &mut Bytes) -> Result<ReplicationMessage, DecodeError> {
    let mut r = Reader::new(buf.clone());
    let tag_offset = r.offset();
    let message = match r.u8("replication message tag")? {
        b'w' => ReplicationMessage::XLogData {
            wal_start: r.lsn("XLogData WAL start")?,
            wal_end: r.lsn("XLogData WAL end")?,
            server_time: r.i64("XLogData server time")?,
            data: r.take_rest(),
        },
        b'k' => {
            let message = ReplicationMessage::PrimaryKeepalive {
                wal_end: r.lsn("keepalive WAL end")?,
                server_time: r.i64("keepalive server time")?,
                reply_requested: r.u8("keepalive reply flag")? == 1,
            };
            r.finish("Primary keepalive")?;
            message
        }
        tag => {
            return Err(DecodeError::UnknownMessage {
                tag,
                offset: tag_offset,
            });
        }
    };
    buf.clear();
    Ok(message)
}

/// Length of a standby status update: tag + 4 × Int64 + Byte1.
const STANDBY_STATUS_UPDATE_LEN: usize = 1 + 8 * 4 + 1;

/// The 'r' Standby status update: WAL positions written, flushed and applied
/// by the client, its clock (µs since 2000-01-01) and whether the server
/// should reply at once. For a logical slot the server advances
/// `confirmed_flush_lsn` to `flush`.
pub fn encode_standby_status_update(
    write: Lsn,
    flush: Lsn,
    apply: Lsn,
    client_time: i64,
    reply_requested: bool,
) -> Bytes {
    let mut out = BytesMut::with_capacity(STANDBY_STATUS_UPDATE_LEN);
    out.put_u8(b'r');
    out.put_u64(write.as_u64());
    out.put_u64(flush.as_u64());
    out.put_u64(apply.as_u64());
    out.put_i64(client_time);
    out.put_u8(u8::from(reply_requested));
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_xlogdata_with_zero_copy_data() {
        let mut raw = vec![b'w'];
        raw.extend(0x10u64.to_be_bytes());
        raw.extend(0x20u64.to_be_bytes());
        raw.extend(7i64.to_be_bytes());
        raw.extend(b"Bpayload");
        let mut buf = Bytes::from(raw);
        let base = buf.as_ptr() as usize;
        let ReplicationMessage::XLogData {
            wal_start,
            wal_end,
            server_time,
            data,
        } = decode_copy_data(&mut buf).unwrap()
        else {
            panic!("expected XLogData");
        };
        assert_eq!((wal_start, wal_end, server_time), (Lsn(0x10), Lsn(0x20), 7));
        assert_eq!(&data[..], b"Bpayload");
        assert_eq!(
            data.as_ptr() as usize,
            base + 25,
            "data must be a slice of the input"
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn decodes_keepalive() {
        let mut raw = vec![b'k'];
        raw.extend(0x1_0000_0042u64.to_be_bytes());
        raw.extend(99i64.to_be_bytes());
        raw.push(1);
        assert_eq!(
            decode_copy_data(&mut Bytes::from(raw)).unwrap(),
            ReplicationMessage::PrimaryKeepalive {
                wal_end: Lsn(0x1_0000_0042),
                server_time: 99,
                reply_requested: true
            }
        );
    }

    #[test]
    fn rejects_truncated_and_unknown_and_trailing() {
        let mut buf = Bytes::from_static(b"k\0\0");
        assert!(matches!(
            decode_copy_data(&mut buf),
            Err(DecodeError::Truncated { offset: 1, .. })
        ));
        assert_eq!(buf.len(), 3, "buffer is left unchanged on error");
        assert_eq!(
            decode_copy_data(&mut Bytes::from_static(b"z")),
            Err(DecodeError::UnknownMessage {
                tag: b'z',
                offset: 0
            })
        );
        assert!(matches!(
            decode_copy_data(&mut Bytes::new()),
            Err(DecodeError::Truncated { offset: 0, .. })
        ));
        let mut raw = vec![b'k'];
        raw.extend([0u8; 17]);
        raw.push(0xEE);
        assert!(matches!(
            decode_copy_data(&mut Bytes::from(raw)),
            Err(DecodeError::TrailingBytes {
                count: 1,
                offset: 18,
                ..
            })
        ));
    }

    #[test]
    fn encodes_standby_status_update_layout() {
        let out = encode_standby_status_update(Lsn(1), Lsn(2), Lsn(3), 4, true);
        let mut expected = vec![b'r'];
        for v in [1u64, 2, 3, 4] {
            expected.extend(v.to_be_bytes());
        }
        expected.push(1);
        assert_eq!(&out[..], &expected[..]);
        assert_eq!(out.len(), STANDBY_STATUS_UPDATE_LEN);
        let out = encode_standby_status_update(Lsn::ZERO, Lsn::ZERO, Lsn::ZERO, 0, false);
        assert_eq!(out.last(), Some(&0));
    }
}
