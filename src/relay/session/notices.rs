//! The machine's notices, logged: the machine decides that a line is due
//! (and that a once-per-session one was not said yet) and returns it as a
//! [`Notice`]; the shell emits it here as its event (`crate::events`).

use super::Session;
use crate::events;
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
    /// Emits the notice as its event (`crate::events::notices`): its line,
    /// at its level, with its fields.
    pub(super) fn log(&self) {
        match self {
            Notice::RowsInMessagesMode { table } => events::RowsInMessagesMode { table }.emit(),
            Notice::MessagesOff { prefix } => events::MessagesOff { prefix }.emit(),
            Notice::TraceContextDropped { part, event_id } => {
                events::TraceContextDropped { part, event_id }.emit();
            }
            Notice::NonTransactionalMessage { prefix, lsn, bytes } => {
                events::NonTransactionalMessage {
                    prefix,
                    lsn: *lsn,
                    bytes: *bytes,
                }
                .emit();
            }
            Notice::OutboxRenamed {
                configured,
                now,
                oid,
            } => events::OutboxRenamed {
                configured,
                now,
                oid: *oid,
            }
            .emit(),
            Notice::OutboxByPublication {
                relation,
                oid,
                outbox,
            } => events::OutboxByPublication {
                relation,
                oid: *oid,
                outbox,
            }
            .emit(),
            Notice::UnknownRelation {
                relation,
                oid,
                publication,
            } => events::UnknownRelation {
                relation,
                oid: *oid,
                publication,
            }
            .emit(),
            Notice::CheckpointAhead {
                commit_lsn,
                missing,
            } => events::CheckpointAhead {
                commit_lsn: *commit_lsn,
                missing: *missing,
            }
            .emit(),
        }
    }
}
