//! `decode`: one pgoutput message from its bytes.
//!
//! Pure and sans-IO. The caller passes the `data` of one XLogData (each
//! carries exactly one pgoutput message) and a [`DecodeContext`] saying what
//! the stream was started with; the decoder keeps no state of its own.
//!
//! Invariants: never panics; every count and length is checked against the
//! remaining bytes before anything is allocated for it; a message must be
//! consumed exactly (leftover bytes are an error, because they mean decoder
//! and server disagree on the format); column values are slices of the input.

use bytes::Bytes;

use super::DecodeError;
use super::message::*;
use super::reader::Reader;

/// What the stream was started with, which decides the layout of some
/// messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeContext {
    /// The `proto_version` option given to START_REPLICATION (1–4).
    pub protocol_version: u32,
    /// Between a Stream Start and its Stream Stop: change, Relation, Type and
    /// Message messages then carry a leading xid. [`DecodeContext::observe`]
    /// keeps this up to date.
    pub in_stream: bool,
    /// `streaming = parallel` (protocol 4): Stream Abort then carries the
    /// abort LSN and time.
    pub parallel_streaming: bool,
}

impl DecodeContext {
    /// Protocol version 1, no streaming: what the relay asks for.
    pub const V1: DecodeContext = DecodeContext {
        protocol_version: 1,
        in_stream: false,
        parallel_streaming: false,
    };

    pub const fn new(protocol_version: u32) -> Self {
        DecodeContext {
            protocol_version,
            in_stream: false,
            parallel_streaming: false,
        }
    }

    /// Tracks streamed blocks: call with every decoded message.
    pub fn observe(&mut self, message: &Message) {
        match message {
            Message::StreamStart(_) => self.in_stream = true,
            Message::StreamStop => self.in_stream = false,
            _ => {}
        }
    }
}

impl Default for DecodeContext {
    fn default() -> Self {
        DecodeContext::V1
    }
}

/// Decodes the one pgoutput message in `buf`. On success `buf` is left empty;
/// on error it is left unchanged.
///
/// # Errors
/// [`DecodeError`] names what was malformed and its offset in the message.
pub fn decode(buf: &mut Bytes, ctx: &DecodeContext) -> Result<Message, DecodeError> {
    // Bytes::clone is a refcount bump; decoding a clone leaves `buf` intact on error.
    let mut r = Reader::new(buf.clone());
    let message = decode_message(&mut r, ctx)?;
    r.finish(message.kind())?;
    buf.clear();
    Ok(message)
}

fn decode_message(r: &mut Reader, ctx: &DecodeContext) -> Result<Message, DecodeError> {
    let tag_offset = r.offset();
    let tag = r.u8("message tag")?;
    let streamed_xid = |r: &mut Reader| -> Result<Option<u32>, DecodeError> {
        if ctx.in_stream {
            r.u32("streamed transaction xid").map(Some)
        } else {
            Ok(None)
        }
    };
    let message = match tag {
        b'B' => Message::Begin(Begin {
            final_lsn: r.lsn("Begin final LSN")?,
            commit_time: r.i64("Begin commit timestamp")?,
            xid: r.u32("Begin xid")?,
        }),
        b'C' => Message::Commit(Commit {
            flags: r.u8("Commit flags")?,
            commit_lsn: r.lsn("Commit LSN")?,
            end_lsn: r.lsn("Commit end LSN")?,
            commit_time: r.i64("Commit timestamp")?,
        }),
        b'O' => Message::Origin(Origin {
            commit_lsn: r.lsn("Origin commit LSN")?,
            name: r.cstr("Origin name")?,
        }),
        b'R' => {
            let xid = streamed_xid(r)?;
            decode_relation(r, xid)?
        }
        b'Y' => Message::Type(TypeBody {
            xid: streamed_xid(r)?,
            type_oid: r.u32("Type oid")?,
            namespace: r.cstr("Type namespace")?,
            name: r.cstr("Type name")?,
        }),
        b'I' => {
            let xid = streamed_xid(r)?;
            let relation_id = r.u32("Insert relation id")?;
            expect_marker(r, "Insert", b'N')?;
            Message::Insert(Insert {
                xid,
                relation_id,
                tuple: decode_tuple(r)?,
            })
        }
        b'U' => {
            let xid = streamed_xid(r)?;
            decode_update(r, xid)?
        }
        b'D' => {
            let xid = streamed_xid(r)?;
            let relation_id = r.u32("Delete relation id")?;
            let marker_offset = r.offset();
            let old = match r.u8("Delete tuple marker")? {
                b'K' => OldTuple::Key(decode_tuple(r)?),
                b'O' => OldTuple::Full(decode_tuple(r)?),
                marker => return Err(unexpected_marker("Delete", marker, marker_offset)),
            };
            Message::Delete(Delete {
                xid,
                relation_id,
                old,
            })
        }
        b'T' => {
            let xid = streamed_xid(r)?;
            let count = r.count_i32("Truncate relation count", 4)?;
            let options = r.u8("Truncate options")?;
            let mut relation_ids = Vec::with_capacity(count);
            for _ in 0..count {
                relation_ids.push(r.u32("Truncate relation id")?);
            }
            Message::Truncate(Truncate {
                xid,
                options,
                relation_ids,
            })
        }
        b'M' => {
            let xid = streamed_xid(r)?;
            let flags = r.u8("Message flags")?;
            let lsn = r.lsn("Message LSN")?;
            let prefix = r.cstr("Message prefix")?;
            let len = r.count_i32("Message content length", 1)?;
            Message::Message(LogicalMessage {
                xid,
                transactional: flags & 1 != 0,
                lsn,
                prefix,
                content: r.bytes("Message content", len)?,
            })
        }
        b'S' => {
            require_version(ctx, "Stream Start", 2)?;
            Message::StreamStart(StreamStart {
                xid: r.u32("Stream Start xid")?,
                first_segment: r.u8("Stream Start first-segment flag")? == 1,
            })
        }
        b'E' => {
            require_version(ctx, "Stream Stop", 2)?;
            Message::StreamStop
        }
        b'c' => {
            require_version(ctx, "Stream Commit", 2)?;
            Message::StreamCommit(StreamCommit {
                xid: r.u32("Stream Commit xid")?,
                flags: r.u8("Stream Commit flags")?,
                commit_lsn: r.lsn("Stream Commit LSN")?,
                end_lsn: r.lsn("Stream Commit end LSN")?,
                commit_time: r.i64("Stream Commit timestamp")?,
            })
        }
        b'A' => {
            require_version(ctx, "Stream Abort", 2)?;
            let xid = r.u32("Stream Abort xid")?;
            let subxid = r.u32("Stream Abort subtransaction xid")?;
            let parallel = if ctx.protocol_version >= 4 && ctx.parallel_streaming {
                Some(ParallelAbort {
                    abort_lsn: r.lsn("Stream Abort LSN")?,
                    abort_time: r.i64("Stream Abort timestamp")?,
                })
            } else {
                None
            };
            Message::StreamAbort(StreamAbort {
                xid,
                subxid,
                parallel,
            })
        }
        b'b' => {
            require_version(ctx, "Begin Prepare", 3)?;
            Message::BeginPrepare(BeginPrepare {
                prepare_lsn: r.lsn("Begin Prepare LSN")?,
                end_lsn: r.lsn("Begin Prepare end LSN")?,
                prepare_time: r.i64("Begin Prepare timestamp")?,
                xid: r.u32("Begin Prepare xid")?,
                gid: r.cstr("Begin Prepare gid")?,
            })
        }
        b'P' => {
            require_version(ctx, "Prepare", 3)?;
            Message::Prepare(decode_prepare(r)?)
        }
        b'K' => {
            require_version(ctx, "Commit Prepared", 3)?;
            Message::CommitPrepared(CommitPrepared {
                flags: r.u8("Commit Prepared flags")?,
                commit_lsn: r.lsn("Commit Prepared LSN")?,
                end_lsn: r.lsn("Commit Prepared end LSN")?,
                commit_time: r.i64("Commit Prepared timestamp")?,
                xid: r.u32("Commit Prepared xid")?,
                gid: r.cstr("Commit Prepared gid")?,
            })
        }
        b'r' => {
            require_version(ctx, "Rollback Prepared", 3)?;
            Message::RollbackPrepared(RollbackPrepared {
                flags: r.u8("Rollback Prepared flags")?,
                prepare_end_lsn: r.lsn("Rollback Prepared prepare end LSN")?,
                rollback_end_lsn: r.lsn("Rollback Prepared end LSN")?,
                prepare_time: r.i64("Rollback Prepared prepare timestamp")?,
                rollback_time: r.i64("Rollback Prepared timestamp")?,
                xid: r.u32("Rollback Prepared xid")?,
                gid: r.cstr("Rollback Prepared gid")?,
            })
        }
        b'p' => {
            require_version(ctx, "Stream Prepare", 3)?;
            Message::StreamPrepare(decode_prepare(r)?)
        }
        tag => {
            return Err(DecodeError::UnknownMessage {
                tag,
                offset: tag_offset,
            });
        }
    };
    Ok(message)
}

fn require_version(
    ctx: &DecodeContext,
    message: &'static str,
    required: u32,
) -> Result<(), DecodeError> {
    if ctx.protocol_version >= required {
        Ok(())
    } else {
        Err(DecodeError::NotInProtocolVersion {
            message,
            required,
            negotiated: ctx.protocol_version,
        })
    }
}

fn decode_relation(r: &mut Reader, xid: Option<u32>) -> Result<Message, DecodeError> {
    let relation_id = r.u32("Relation id")?;
    let namespace = r.cstr("Relation namespace")?;
    let name = r.cstr("Relation name")?;
    let replica_identity = r.u8("Relation replica identity")?;
    // A column is at least flags (1) + name NUL (1) + type oid (4) + typmod (4).
    let count = r.count_i16("Relation column count", 10)?;
    let mut columns = Vec::with_capacity(count);
    for _ in 0..count {
        columns.push(Column {
            flags: r.u8("Relation column flags")?,
            name: r.cstr("Relation column name")?,
            type_oid: r.u32("Relation column type oid")?,
            type_modifier: r.i32("Relation column type modifier")?,
        });
    }
    Ok(Message::Relation(RelationBody {
        xid,
        relation_id,
        namespace,
        name,
        replica_identity,
        columns,
    }))
}

fn decode_update(r: &mut Reader, xid: Option<u32>) -> Result<Message, DecodeError> {
    let relation_id = r.u32("Update relation id")?;
    let marker_offset = r.offset();
    let (old, new) = match r.u8("Update tuple marker")? {
        b'K' => {
            let old = OldTuple::Key(decode_tuple(r)?);
            expect_marker(r, "Update", b'N')?;
            (Some(old), decode_tuple(r)?)
        }
        b'O' => {
            let old = OldTuple::Full(decode_tuple(r)?);
            expect_marker(r, "Update", b'N')?;
            (Some(old), decode_tuple(r)?)
        }
        b'N' => (None, decode_tuple(r)?),
        marker => return Err(unexpected_marker("Update", marker, marker_offset)),
    };
    Ok(Message::Update(Update {
        xid,
        relation_id,
        old,
        new,
    }))
}

fn decode_prepare(r: &mut Reader) -> Result<PrepareBody, DecodeError> {
    Ok(PrepareBody {
        flags: r.u8("Prepare flags")?,
        prepare_lsn: r.lsn("Prepare LSN")?,
        end_lsn: r.lsn("Prepare end LSN")?,
        prepare_time: r.i64("Prepare timestamp")?,
        xid: r.u32("Prepare xid")?,
        gid: r.cstr("Prepare gid")?,
    })
}

/// TupleData: an Int16 column count, then per column a kind byte and, for
/// 't' and 'b', an Int32 length and the value.
pub(crate) fn decode_tuple(r: &mut Reader) -> Result<TupleData, DecodeError> {
    // Every column takes at least its kind byte.
    let count = r.count_i16("tuple column count", 1)?;
    let mut columns = Vec::with_capacity(count);
    for _ in 0..count {
        let kind_offset = r.offset();
        let value = match r.u8("tuple column kind")? {
            b'n' => TupleValue::Null,
            b'u' => TupleValue::UnchangedToast,
            b't' => {
                let len = r.count_i32("text column length", 1)?;
                TupleValue::Text(r.bytes("text column value", len)?)
            }
            b'b' => {
                let len = r.count_i32("binary column length", 1)?;
                TupleValue::Binary(r.bytes("binary column value", len)?)
            }
            kind => {
                return Err(DecodeError::UnknownColumnKind {
                    kind,
                    offset: kind_offset,
                });
            }
        };
        columns.push(value);
    }
    Ok(TupleData { columns })
}

fn expect_marker(r: &mut Reader, message: &'static str, expected: u8) -> Result<(), DecodeError> {
    let offset = r.offset();
    match r.u8("tuple marker")? {
        marker if marker == expected => Ok(()),
        marker => Err(unexpected_marker(message, marker, offset)),
    }
}

fn unexpected_marker(message: &'static str, marker: u8, offset: usize) -> DecodeError {
    DecodeError::UnexpectedTupleMarker {
        message,
        marker,
        offset,
    }
}
