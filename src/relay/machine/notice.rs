//! What the machine has to tell the operator, as data: the machine decides
//! that a line is due (and that a once-per-session line was not said yet);
//! the shell takes the notices ([`SessionMachine::take_notices`]) and logs
//! them (`session/notices.rs`). The machine itself does no I/O, logging
//! included.
//!
//! Invariant: a notice holds names, OIDs, positions and counts, never a
//! payload (an event id at most).

use super::SessionMachine;
use pgoutput::lsn::Lsn;

/// One line the shell logs for the machine. Each says at what level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// WARN, once per session: rows arrive in the outbox table while
    /// `postgres.source = "messages"`; they are published all the same.
    RowsInMessagesMode { table: String },
    /// WARN, once per session: outbox messages arrive while
    /// `postgres.source = "table"`; they are not published.
    MessagesOff { prefix: String },
    /// WARN, once per session: an event's trace context (`part`) was
    /// malformed and left out.
    TraceContextDropped {
        part: &'static str,
        event_id: String,
    },
    /// ERROR: a non-transactional logical message with the outbox prefix,
    /// never published.
    NonTransactionalMessage {
        prefix: String,
        lsn: Lsn,
        bytes: usize,
    },
    /// WARN: the outbox table is streamed under another name than the
    /// configured one.
    OutboxRenamed {
        configured: String,
        now: String,
        oid: u32,
    },
    /// WARN: a relation outside the outbox's partition tree taken as the
    /// outbox's, since the publication publishes nothing else.
    OutboxByPublication {
        relation: String,
        oid: u32,
        outbox: String,
    },
    /// ERROR: a relation dropped since, which the catalog cannot classify;
    /// its rows are skipped.
    UnknownRelation {
        relation: String,
        oid: u32,
        publication: String,
    },
    /// ERROR: the checkpoint counted more of a transaction's events in
    /// Kafka than the transaction has now.
    CheckpointAhead { commit_lsn: Lsn, missing: u64 },
}

impl SessionMachine<'_> {
    /// Notes a line for the shell to log.
    pub(super) fn notify(&mut self, notice: Notice) {
        self.notices.push(notice);
    }

    /// The notices since the last call, oldest first. The shell takes them
    /// after every [`SessionMachine::on_wal`] and
    /// [`SessionMachine::relation_classified`], the only calls that make
    /// them.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }
}
