//! The pgoutput messages, as plain data.
//!
//! One struct per message of the logical replication protocol (versions 1–4),
//! field for field as in PostgreSQL's "Logical Replication Message Formats".
//! Timestamps stay PostgreSQL's raw microseconds since 2000-01-01 (see
//! [`super::pg_timestamp_to_utc`]); column values stay `Bytes` slices of the
//! received message. `xid` fields that are `Option` are present only inside a
//! streamed block (between Stream Start and Stream Stop, protocol ≥ 2).

use bytes::Bytes;

use crate::lsn::Lsn;

/// One decoded pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Begin(Begin),
    Commit(Commit),
    Origin(Origin),
    Relation(RelationBody),
    Type(TypeBody),
    Insert(Insert),
    Update(Update),
    Delete(Delete),
    Truncate(Truncate),
    /// A logical decoding message (`pg_logical_emit_message`).
    Message(LogicalMessage),
    StreamStart(StreamStart),
    StreamStop,
    StreamCommit(StreamCommit),
    StreamAbort(StreamAbort),
    BeginPrepare(BeginPrepare),
    Prepare(PrepareBody),
    CommitPrepared(CommitPrepared),
    RollbackPrepared(RollbackPrepared),
    StreamPrepare(PrepareBody),
}

impl Message {
    /// The message's name as in PostgreSQL's docs, for errors and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Begin(_) => "Begin",
            Message::Commit(_) => "Commit",
            Message::Origin(_) => "Origin",
            Message::Relation(_) => "Relation",
            Message::Type(_) => "Type",
            Message::Insert(_) => "Insert",
            Message::Update(_) => "Update",
            Message::Delete(_) => "Delete",
            Message::Truncate(_) => "Truncate",
            Message::Message(_) => "Message",
            Message::StreamStart(_) => "Stream Start",
            Message::StreamStop => "Stream Stop",
            Message::StreamCommit(_) => "Stream Commit",
            Message::StreamAbort(_) => "Stream Abort",
            Message::BeginPrepare(_) => "Begin Prepare",
            Message::Prepare(_) => "Prepare",
            Message::CommitPrepared(_) => "Commit Prepared",
            Message::RollbackPrepared(_) => "Rollback Prepared",
            Message::StreamPrepare(_) => "Stream Prepare",
        }
    }
}

/// 'B': start of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    /// LSN of the transaction's commit record; equals the Commit's `commit_lsn`.
    pub final_lsn: Lsn,
    /// Microseconds since 2000-01-01.
    pub commit_time: i64,
    pub xid: u32,
}

/// 'C': end of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// Currently unused by PostgreSQL (always 0).
    pub flags: u8,
    pub commit_lsn: Lsn,
    /// The LSN just past the commit record: the position to confirm.
    pub end_lsn: Lsn,
    pub commit_time: i64,
}

/// 'O': the transaction was replicated into this server from elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Commit LSN on the origin server.
    pub commit_lsn: Lsn,
    pub name: String,
}

/// 'R': a table's shape. Sent before the first change of a table in a
/// session and again after the table changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationBody {
    pub xid: Option<u32>,
    pub relation_id: u32,
    pub namespace: String,
    pub name: String,
    /// `relreplident`: 'd' default, 'n' nothing, 'f' full, 'i' index.
    pub replica_identity: u8,
    pub columns: Vec<Column>,
}

/// One column of a [`RelationBody`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// 1 when the column is part of the replica identity key.
    pub flags: u8,
    pub name: String,
    pub type_oid: u32,
    /// `atttypmod`, -1 when the type has none.
    pub type_modifier: i32,
}

/// 'Y': a non-built-in type used by a relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeBody {
    pub xid: Option<u32>,
    pub type_oid: u32,
    pub namespace: String,
    pub name: String,
}

/// 'I': a new row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    pub xid: Option<u32>,
    pub relation_id: u32,
    pub tuple: TupleData,
}

/// 'U': a changed row, with the old key or row when the replica identity
/// makes PostgreSQL send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub xid: Option<u32>,
    pub relation_id: u32,
    pub old: Option<OldTuple>,
    pub new: TupleData,
}

/// 'D': a removed row, identified by its key or its whole old row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    pub xid: Option<u32>,
    pub relation_id: u32,
    pub old: OldTuple,
}

/// The old row of an Update or Delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple {
    /// 'K': the replica identity key columns (others are null).
    Key(TupleData),
    /// 'O': the whole old row (REPLICA IDENTITY FULL).
    Full(TupleData),
}

/// 'T': tables truncated together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    pub xid: Option<u32>,
    /// Bit 1: CASCADE, bit 2: RESTART IDENTITY.
    pub options: u8,
    pub relation_ids: Vec<u32>,
}

impl Truncate {
    pub fn cascade(&self) -> bool {
        self.options & 1 != 0
    }

    pub fn restart_identity(&self) -> bool {
        self.options & 2 != 0
    }
}

/// 'M': a logical decoding message from `pg_logical_emit_message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalMessage {
    pub xid: Option<u32>,
    /// Transactional messages arrive inside their transaction; others arrive
    /// when written, outside any Begin/Commit.
    pub transactional: bool,
    pub lsn: Lsn,
    pub prefix: String,
    pub content: Bytes,
}

/// The columns of one row, in the relation's column order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TupleData {
    pub columns: Vec<TupleValue>,
}

/// One column value of a [`TupleData`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TupleValue {
    /// 'n'
    Null,
    /// 'u': a TOASTed value that did not change; its content is not sent.
    UnchangedToast,
    /// 't': the value in the type's text output format.
    Text(Bytes),
    /// 'b': the value in the type's binary format (`binary` option).
    Binary(Bytes),
}

/// 'S': start of a block of changes of a streamed, still uncommitted
/// transaction (protocol ≥ 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStart {
    pub xid: u32,
    /// True for the transaction's first block.
    pub first_segment: bool,
}

/// 'c': a streamed transaction committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCommit {
    pub xid: u32,
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_time: i64,
}

/// 'A': a streamed transaction (`subxid == xid`) or one of its
/// subtransactions aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamAbort {
    pub xid: u32,
    pub subxid: u32,
    /// Present only with protocol 4 and `streaming = parallel`.
    pub parallel: Option<ParallelAbort>,
}

/// The fields protocol 4 adds to Stream Abort under parallel streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParallelAbort {
    pub abort_lsn: Lsn,
    pub abort_time: i64,
}

/// 'b': start of a prepared transaction (protocol ≥ 3, two_phase).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginPrepare {
    pub prepare_lsn: Lsn,
    pub end_lsn: Lsn,
    pub prepare_time: i64,
    pub xid: u32,
    /// The global transaction id given to PREPARE TRANSACTION.
    pub gid: String,
}

/// 'P' (Prepare) and 'p' (Stream Prepare): the transaction was prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareBody {
    pub flags: u8,
    pub prepare_lsn: Lsn,
    pub end_lsn: Lsn,
    pub prepare_time: i64,
    pub xid: u32,
    pub gid: String,
}

/// 'K': COMMIT PREPARED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPrepared {
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_time: i64,
    pub xid: u32,
    pub gid: String,
}

/// 'r': ROLLBACK PREPARED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackPrepared {
    pub flags: u8,
    /// End LSN of the prepared transaction.
    pub prepare_end_lsn: Lsn,
    /// End LSN of the rollback.
    pub rollback_end_lsn: Lsn,
    pub prepare_time: i64,
    pub rollback_time: i64,
    pub xid: u32,
    pub gid: String,
}
