//! The machine's notices, logged: the machine decides that a line is due
//! (and that a once-per-session one was not said yet) and returns it as a
//! [`Notice`]; the shell says it here, at the level the notice names.

use super::Session;
use crate::relay::machine::Notice;

impl Session<'_> {
    /// Logs what the machine noted since the last call. Called after every
    /// call that can note something ([`SessionMachine::on_wal`],
    /// [`SessionMachine::relation_classified`]), before an error it
    /// returned ends the session.
    ///
    /// [`SessionMachine::on_wal`]: crate::relay::SessionMachine::on_wal
    /// [`SessionMachine::relation_classified`]: crate::relay::SessionMachine::relation_classified
    pub(super) fn log_notices(&mut self) {
        for notice in self.machine.take_notices() {
            notice.log();
        }
    }
}

impl Notice {
    /// The notice's log line: its level, fields and text.
    pub(super) fn log(&self) {
        match self {
            Notice::RowsInMessagesMode { table } => tracing::warn!(
                table = %table,
                "rows arrive in the outbox table while postgres.source = \"messages\": they \
                 are published (as with \"both\"), not skipped. Set postgres.source = \"both\" \
                 while services still insert rows, or take the table out of the publication once \
                 none do"
            ),
            Notice::MessagesOff { prefix } => tracing::warn!(
                prefix = %prefix,
                "outbox logical messages arrive but postgres.source = \"table\": they are \
                 not published. Set postgres.source = \"both\" (or \"messages\") to \
                 publish them"
            ),
            Notice::TraceContextDropped { part, event_id } => tracing::warn!(
                event_id,
                part,
                "an outbox event's {part} is not valid W3C Trace Context: it is left out of \
                 the event, which is published without it (counted in \
                 outbox_relay_trace_context_dropped_total, logged once per session)"
            ),
            Notice::NonTransactionalMessage { prefix, lsn, bytes } => tracing::error!(
                prefix = %prefix,
                lsn = %lsn,
                bytes,
                "a non-transactional logical message with the outbox prefix is not \
                 published: it is not atomic with the business write. Emit outbox \
                 messages with pg_logical_emit_message(true, ...), as outbox_emit does"
            ),
            Notice::OutboxRenamed {
                configured,
                now,
                oid,
            } => tracing::warn!(
                configured = %configured,
                now = %now,
                oid,
                "the outbox table was renamed; streaming on (same table). Set \
                 postgres.table to the new name before the next restart"
            ),
            Notice::OutboxByPublication {
                relation,
                oid,
                outbox,
            } => tracing::warn!(
                relation = %relation,
                oid,
                outbox = %outbox,
                "relation is not in the outbox's partition tree now, but the publication \
                 publishes nothing else: taking its rows as outbox rows (a partition detached \
                 or dropped since)"
            ),
            Notice::UnknownRelation {
                relation,
                oid,
                publication,
            } => tracing::error!(
                relation = %relation,
                oid,
                publication = %publication,
                "a relation in the stream was dropped since and the publication also \
                 publishes other tables: the catalog cannot tell whether its rows were \
                 outbox rows, so they are skipped. Give the relay a publication of its own \
                 (CREATE PUBLICATION ... FOR TABLE <outbox> WITH (publish = 'insert'))"
            ),
            Notice::CheckpointAhead {
                commit_lsn,
                missing,
            } => tracing::error!(
                commit_lsn = %commit_lsn,
                missing,
                "the checkpoint says more of this transaction's events are in Kafka \
                 than it has now (postgres.source, the shards or the table changed \
                 since?): none of it was sent again"
            ),
        }
    }
}
