//! Test-only encoder: the inverse of [`super::decode`], for round-trip
//! property tests and hand-built protocol messages. Compiled for this crate's
//! tests, and for other crates' tests with the `test-encoder` feature; never
//! in the relay's build, which has no use for writing pgoutput.
//!
//! Writes exactly the layouts the decoder reads. A streamed xid is written
//! when the message's `xid` is `Some`, and Stream Abort's parallel fields when
//! `parallel` is `Some`; [`context_for`] gives the matching [`DecodeContext`].

use bytes::{BufMut, Bytes, BytesMut};

use super::DecodeContext;
use super::message::*;

/// The context under which `decode(encode(message))` reads `message` back.
pub fn context_for(message: &Message) -> DecodeContext {
    let in_stream = match message {
        Message::Relation(m) => m.xid.is_some(),
        Message::Type(m) => m.xid.is_some(),
        Message::Insert(m) => m.xid.is_some(),
        Message::Update(m) => m.xid.is_some(),
        Message::Delete(m) => m.xid.is_some(),
        Message::Truncate(m) => m.xid.is_some(),
        Message::Message(m) => m.xid.is_some(),
        _ => false,
    };
    let parallel_streaming = matches!(
        message,
        Message::StreamAbort(StreamAbort {
            parallel: Some(_),
            ..
        })
    );
    DecodeContext {
        protocol_version: 4,
        in_stream,
        parallel_streaming,
    }
}

pub fn encode(message: &Message) -> Bytes {
    let mut out = BytesMut::new();
    match message {
        Message::Begin(m) => {
            out.put_u8(b'B');
            out.put_u64(m.final_lsn.0);
            out.put_i64(m.commit_time);
            out.put_u32(m.xid);
        }
        Message::Commit(m) => {
            out.put_u8(b'C');
            out.put_u8(m.flags);
            out.put_u64(m.commit_lsn.0);
            out.put_u64(m.end_lsn.0);
            out.put_i64(m.commit_time);
        }
        Message::Origin(m) => {
            out.put_u8(b'O');
            out.put_u64(m.commit_lsn.0);
            put_cstr(&mut out, &m.name);
        }
        Message::Relation(m) => {
            out.put_u8(b'R');
            put_xid(&mut out, m.xid);
            out.put_u32(m.relation_id);
            put_cstr(&mut out, &m.namespace);
            put_cstr(&mut out, &m.name);
            out.put_u8(m.replica_identity);
            put_count16(&mut out, m.columns.len());
            for column in &m.columns {
                out.put_u8(column.flags);
                put_cstr(&mut out, &column.name);
                out.put_u32(column.type_oid);
                out.put_i32(column.type_modifier);
            }
        }
        Message::Type(m) => {
            out.put_u8(b'Y');
            put_xid(&mut out, m.xid);
            out.put_u32(m.type_oid);
            put_cstr(&mut out, &m.namespace);
            put_cstr(&mut out, &m.name);
        }
        Message::Insert(m) => {
            out.put_u8(b'I');
            put_xid(&mut out, m.xid);
            out.put_u32(m.relation_id);
            out.put_u8(b'N');
            put_tuple(&mut out, &m.tuple);
        }
        Message::Update(m) => {
            out.put_u8(b'U');
            put_xid(&mut out, m.xid);
            out.put_u32(m.relation_id);
            if let Some(old) = &m.old {
                put_old(&mut out, old);
            }
            out.put_u8(b'N');
            put_tuple(&mut out, &m.new);
        }
        Message::Delete(m) => {
            out.put_u8(b'D');
            put_xid(&mut out, m.xid);
            out.put_u32(m.relation_id);
            put_old(&mut out, &m.old);
        }
        Message::Truncate(m) => {
            out.put_u8(b'T');
            put_xid(&mut out, m.xid);
            put_count32(&mut out, m.relation_ids.len());
            out.put_u8(m.options);
            for id in &m.relation_ids {
                out.put_u32(*id);
            }
        }
        Message::Message(m) => {
            out.put_u8(b'M');
            put_xid(&mut out, m.xid);
            out.put_u8(u8::from(m.transactional));
            out.put_u64(m.lsn.0);
            put_cstr(&mut out, &m.prefix);
            put_count32(&mut out, m.content.len());
            out.put_slice(&m.content);
        }
        Message::StreamStart(m) => {
            out.put_u8(b'S');
            out.put_u32(m.xid);
            out.put_u8(u8::from(m.first_segment));
        }
        Message::StreamStop => out.put_u8(b'E'),
        Message::StreamCommit(m) => {
            out.put_u8(b'c');
            out.put_u32(m.xid);
            out.put_u8(m.flags);
            out.put_u64(m.commit_lsn.0);
            out.put_u64(m.end_lsn.0);
            out.put_i64(m.commit_time);
        }
        Message::StreamAbort(m) => {
            out.put_u8(b'A');
            out.put_u32(m.xid);
            out.put_u32(m.subxid);
            if let Some(parallel) = m.parallel {
                out.put_u64(parallel.abort_lsn.0);
                out.put_i64(parallel.abort_time);
            }
        }
        Message::BeginPrepare(m) => {
            out.put_u8(b'b');
            out.put_u64(m.prepare_lsn.0);
            out.put_u64(m.end_lsn.0);
            out.put_i64(m.prepare_time);
            out.put_u32(m.xid);
            put_cstr(&mut out, &m.gid);
        }
        Message::Prepare(m) => put_prepare(&mut out, b'P', m),
        Message::StreamPrepare(m) => put_prepare(&mut out, b'p', m),
        Message::CommitPrepared(m) => {
            out.put_u8(b'K');
            out.put_u8(m.flags);
            out.put_u64(m.commit_lsn.0);
            out.put_u64(m.end_lsn.0);
            out.put_i64(m.commit_time);
            out.put_u32(m.xid);
            put_cstr(&mut out, &m.gid);
        }
        Message::RollbackPrepared(m) => {
            out.put_u8(b'r');
            out.put_u8(m.flags);
            out.put_u64(m.prepare_end_lsn.0);
            out.put_u64(m.rollback_end_lsn.0);
            out.put_i64(m.prepare_time);
            out.put_i64(m.rollback_time);
            out.put_u32(m.xid);
            put_cstr(&mut out, &m.gid);
        }
    }
    out.freeze()
}

fn put_xid(out: &mut BytesMut, xid: Option<u32>) {
    if let Some(xid) = xid {
        out.put_u32(xid);
    }
}

fn put_cstr(out: &mut BytesMut, s: &str) {
    out.put_slice(s.as_bytes());
    out.put_u8(0);
}

fn put_count16(out: &mut BytesMut, n: usize) {
    out.put_i16(i16::try_from(n).expect("test message has at most i16::MAX items"));
}

fn put_count32(out: &mut BytesMut, n: usize) {
    out.put_i32(i32::try_from(n).expect("test message has at most i32::MAX items"));
}

fn put_old(out: &mut BytesMut, old: &OldTuple) {
    match old {
        OldTuple::Key(tuple) => {
            out.put_u8(b'K');
            put_tuple(out, tuple);
        }
        OldTuple::Full(tuple) => {
            out.put_u8(b'O');
            put_tuple(out, tuple);
        }
    }
}

fn put_tuple(out: &mut BytesMut, tuple: &TupleData) {
    put_count16(out, tuple.columns.len());
    for value in &tuple.columns {
        match value {
            TupleValue::Null => out.put_u8(b'n'),
            TupleValue::UnchangedToast => out.put_u8(b'u'),
            TupleValue::Text(bytes) => {
                out.put_u8(b't');
                put_count32(out, bytes.len());
                out.put_slice(bytes);
            }
            TupleValue::Binary(bytes) => {
                out.put_u8(b'b');
                put_count32(out, bytes.len());
                out.put_slice(bytes);
            }
        }
    }
}

fn put_prepare(out: &mut BytesMut, tag: u8, m: &PrepareBody) {
    out.put_u8(tag);
    out.put_u8(m.flags);
    out.put_u64(m.prepare_lsn.0);
    out.put_u64(m.end_lsn.0);
    out.put_i64(m.prepare_time);
    out.put_u32(m.xid);
    put_cstr(out, &m.gid);
}
