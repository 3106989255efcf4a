//! Transaction assembler: frames decoded pgoutput messages into transactions.
//!
//! Role: a small state machine between the decoder and the outbox mapping.
//! It checks the framing (Begin … changes … Commit), resolves relation ids to
//! the cached table shape, and turns each message into at most one
//! [`TxEvent`] right away. It never buffers a transaction, so a 1M-row
//! transaction streams through in constant memory ("Bounded memory" in
//! docs/design.md).
//!
//! Invariants:
//! * at most one transaction is open; a nested Begin, a change or Commit
//!   outside a transaction, or a Commit whose LSN is not the Begin's
//!   `final_lsn` is an error (the stream is then out of step: the relay ends
//!   the session and reconnects, and the next session builds a new
//!   assembler, to which the server resends every unconfirmed transaction
//!   from its Begin and describes each relation again);
//! * a change is only emitted for a relation the server described first, with
//!   a tuple of exactly that relation's column count;
//! * a Relation message replaces the cached shape with a new `Arc`, so events
//!   already handed out keep the shape they were decoded with (ALTER TABLE
//!   mid-stream);
//! * protocol-v1 framing only: streaming and two-phase messages are errors,
//!   because the relay never asks for them.

use std::collections::HashMap;
use std::sync::Arc;

use thiserror::Error;

use crate::lsn::Lsn;
use crate::{LogicalMessage, Message, RelationBody, TupleData};

pub use crate::Column;

/// A table's shape as last described by a Relation message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub oid: u32,
    pub namespace: String,
    pub name: String,
    /// `relreplident`: 'd' default, 'n' nothing, 'f' full, 'i' index.
    pub replica_identity: u8,
    pub columns: Vec<Column>,
}

impl Relation {
    /// Position of the column called `name`, which is also its position in
    /// every tuple of this relation.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|column| column.name == name)
    }

    /// `namespace.name`, e.g. `public.outbox`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.namespace, self.name)
    }
}

impl From<RelationBody> for Relation {
    fn from(body: RelationBody) -> Self {
        Relation {
            oid: body.relation_id,
            namespace: body.namespace,
            name: body.name,
            replica_identity: body.replica_identity,
            columns: body.columns,
        }
    }
}

/// What one input message means for the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxEvent {
    Begin {
        xid: u32,
        final_lsn: Lsn,
        commit_time: i64,
    },
    Insert {
        relation: Arc<Relation>,
        tuple: TupleData,
    },
    /// The server described a table (before its first change in this
    /// session, and again after its shape or publication changed): the
    /// moment to decide whether it is the outbox.
    Relation(Arc<Relation>),
    /// Updates, deletes and truncates are not events; the relay counts them.
    Update {
        relation: Arc<Relation>,
    },
    Delete {
        relation: Arc<Relation>,
    },
    Truncate {
        relations: Vec<Arc<Relation>>,
    },
    /// A logical decoding message: inside its transaction when transactional,
    /// anywhere otherwise.
    Message(LogicalMessage),
    Commit {
        xid: u32,
        commit_lsn: Lsn,
        /// The position to confirm once every event of the transaction is
        /// acknowledged ("Confirm the commit's end LSN").
        end_lsn: Lsn,
        commit_time: i64,
    },
}

/// The stream broke transaction framing or referenced something unknown.
/// Any of these means the stream and the relay are out of step: the relay
/// ends the session and reconnects with a new assembler.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AssemblyError {
    #[error(
        "Begin of transaction {new_xid} while transaction {open_xid} is still open: \
         the stream lost a Commit"
    )]
    NestedBegin { open_xid: u32, new_xid: u32 },
    #[error("{message} message outside a transaction (no Begin before it)")]
    OutsideTransaction { message: &'static str },
    #[error(
        "Commit of transaction {xid} at LSN {commit_lsn}, but its Begin announced final LSN \
         {final_lsn}: the stream is out of step"
    )]
    CommitLsnMismatch {
        xid: u32,
        final_lsn: Lsn,
        commit_lsn: Lsn,
    },
    #[error(
        "{message} for unknown relation oid {relation_id}: the server sends a Relation message \
         before a table's first change, so this is likely a decoder or connection bug"
    )]
    UnknownRelation {
        message: &'static str,
        relation_id: u32,
    },
    #[error(
        "{message} on {relation} has {tuple_columns} column(s) but its Relation message \
         announced {relation_columns}"
    )]
    ColumnCountMismatch {
        message: &'static str,
        relation: String,
        relation_columns: usize,
        tuple_columns: usize,
    },
    #[error(
        "unexpected {message} message: the relay does not request streaming or two-phase \
         decoding (proto_version 1, no 'streaming'/'two_phase' options)"
    )]
    Unsupported { message: &'static str },
}

#[derive(Debug, Clone, Copy)]
struct OpenTransaction {
    xid: u32,
    final_lsn: Lsn,
}

/// Frames pgoutput protocol-v1 messages into [`TxEvent`]s.
#[derive(Debug, Default)]
pub struct TransactionAssembler {
    relations: HashMap<u32, Arc<Relation>>,
    open: Option<OpenTransaction>,
}

impl TransactionAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one message; returns the event it makes, if any (Type and
    /// Origin make none).
    ///
    /// # Errors
    /// [`AssemblyError`] when the framing is broken; the assembler is then in
    /// an unspecified state and must be [`reset`](Self::reset) with the
    /// connection.
    pub fn push(&mut self, msg: Message) -> Result<Option<TxEvent>, AssemblyError> {
        let event = match msg {
            Message::Begin(begin) => {
                if let Some(open) = self.open {
                    return Err(AssemblyError::NestedBegin {
                        open_xid: open.xid,
                        new_xid: begin.xid,
                    });
                }
                self.open = Some(OpenTransaction {
                    xid: begin.xid,
                    final_lsn: begin.final_lsn,
                });
                TxEvent::Begin {
                    xid: begin.xid,
                    final_lsn: begin.final_lsn,
                    commit_time: begin.commit_time,
                }
            }
            Message::Commit(commit) => {
                let open = self.require_open("Commit")?;
                if commit.commit_lsn != open.final_lsn {
                    return Err(AssemblyError::CommitLsnMismatch {
                        xid: open.xid,
                        final_lsn: open.final_lsn,
                        commit_lsn: commit.commit_lsn,
                    });
                }
                self.open = None;
                TxEvent::Commit {
                    xid: open.xid,
                    commit_lsn: commit.commit_lsn,
                    end_lsn: commit.end_lsn,
                    commit_time: commit.commit_time,
                }
            }
            Message::Relation(body) => {
                let relation = Arc::new(Relation::from(body));
                self.relations.insert(relation.oid, Arc::clone(&relation));
                TxEvent::Relation(relation)
            }
            // Origin names where a replicated transaction came from; Type
            // describes a custom column type. The relay reads text values and
            // needs neither.
            Message::Origin(_) | Message::Type(_) => return Ok(None),
            Message::Insert(insert) => {
                self.require_open("Insert")?;
                let relation = self.lookup("Insert", insert.relation_id)?;
                check_columns("Insert", &relation, &insert.tuple)?;
                TxEvent::Insert {
                    relation,
                    tuple: insert.tuple,
                }
            }
            Message::Update(update) => {
                self.require_open("Update")?;
                let relation = self.lookup("Update", update.relation_id)?;
                check_columns("Update", &relation, &update.new)?;
                TxEvent::Update { relation }
            }
            Message::Delete(delete) => {
                self.require_open("Delete")?;
                let relation = self.lookup("Delete", delete.relation_id)?;
                TxEvent::Delete { relation }
            }
            Message::Truncate(truncate) => {
                self.require_open("Truncate")?;
                let relations = truncate
                    .relation_ids
                    .iter()
                    .map(|&id| self.lookup("Truncate", id))
                    .collect::<Result<Vec<_>, _>>()?;
                TxEvent::Truncate { relations }
            }
            Message::Message(message) => {
                // Non-transactional messages are sent as soon as they are
                // decoded, between transactions.
                if message.transactional {
                    self.require_open("transactional logical decoding Message")?;
                }
                TxEvent::Message(message)
            }
            other @ (Message::StreamStart(_)
            | Message::StreamStop
            | Message::StreamCommit(_)
            | Message::StreamAbort(_)
            | Message::BeginPrepare(_)
            | Message::Prepare(_)
            | Message::CommitPrepared(_)
            | Message::RollbackPrepared(_)
            | Message::StreamPrepare(_)) => {
                return Err(AssemblyError::Unsupported {
                    message: other.kind(),
                });
            }
        };
        Ok(Some(event))
    }

    /// The cached shape of relation `oid`, if the server described it.
    pub fn relation(&self, oid: u32) -> Option<&Arc<Relation>> {
        self.relations.get(&oid)
    }

    /// True between a Begin and its Commit.
    pub fn in_transaction(&self) -> bool {
        self.open.is_some()
    }

    /// Forgets the open transaction and the relation cache, as a new
    /// assembler would start. The relay does not call it: each session
    /// (one connection) builds its own assembler, and after a reconnect the
    /// server resends every unconfirmed transaction from its Begin and
    /// describes every relation again before using it.
    pub fn reset(&mut self) {
        self.open = None;
        self.relations.clear();
    }

    fn require_open(&self, message: &'static str) -> Result<OpenTransaction, AssemblyError> {
        self.open
            .ok_or(AssemblyError::OutsideTransaction { message })
    }

    fn lookup(
        &self,
        message: &'static str,
        relation_id: u32,
    ) -> Result<Arc<Relation>, AssemblyError> {
        self.relations
            .get(&relation_id)
            .cloned()
            .ok_or(AssemblyError::UnknownRelation {
                message,
                relation_id,
            })
    }
}

fn check_columns(
    message: &'static str,
    relation: &Relation,
    tuple: &TupleData,
) -> Result<(), AssemblyError> {
    if tuple.columns.len() == relation.columns.len() {
        Ok(())
    } else {
        Err(AssemblyError::ColumnCountMismatch {
            message,
            relation: relation.qualified_name(),
            relation_columns: relation.columns.len(),
            tuple_columns: tuple.columns.len(),
        })
    }
}

#[cfg(test)]
mod tests;
