//! The session machine's share of the event sources beside table rows:
//! outbox logical messages (`postgres.source`), and the trace context an
//! event carries (its produce span, a malformed context dropped).
//!
//! Invariants: an outbox message counts in its transaction like a row (so
//! the order of a key holds across both); a non-transactional one is never
//! published; with `postgres.shards`, only the shard of its aggregate id
//! publishes it (by the row filter's function, `crate::outbox::shard`); a
//! malformed trace context never costs the event.

use super::{Notice, Producer, SessionMachine, SessionResult, TxnState};
use crate::metrics as m;
use crate::relay::delivery_tag::DeliveryTag;
use crate::relay::error::SessionError;
use pgoutput::LogicalMessage;
use pgoutput::assembler::AssemblyError;

impl SessionMachine<'_> {
    /// A logical decoding message: an outbox event when it carries the
    /// outbox prefix inside a transaction whose events are being sent.
    pub(super) fn on_message(
        &mut self,
        msg: &LogicalMessage,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        let ours = msg.prefix == self.settings.source.message_prefix;
        if !msg.transactional {
            if ours {
                // Written whether or not its transaction commits, and
                // decoded at once: not atomic with any business write.
                self.counts.messages_refused += 1;
                self.notify(Notice::NonTransactionalMessage {
                    prefix: msg.prefix.clone(),
                    lsn: msg.lsn,
                    bytes: msg.content.len(),
                });
            }
            // A non-transactional message (the heartbeat, or anyone's)
            // arrives when it is decoded: every transaction committed
            // before it has been received. With nothing in flight, the
            // slot may move up to it.
            self.advance_when_idle(msg.lsn);
            return Ok(());
        }
        if !ours {
            return Ok(());
        }
        let commit = match self.txn {
            TxnState::Delivering(commit) => commit,
            TxnState::Replaying => return Ok(()),
            TxnState::Idle => {
                return Err(SessionError::OutOfStep {
                    slot: self.settings.replication.slot.clone(),
                    source: AssemblyError::OutsideTransaction { message: "Message" },
                });
            }
        };
        if !self.settings.source.kind.messages() {
            self.counts.ignored.add("message");
            if !self.warned_messages_off {
                self.warned_messages_off = true;
                self.notify(Notice::MessagesOff {
                    prefix: msg.prefix.clone(),
                });
            }
            return Ok(());
        }
        if !self.settings.source.shard.owns_message(&msg.content) {
            // Every shard's slot receives every message: the one whose
            // aggregate is this shard's publishes it, the others skip it.
            self.counts.ignored.add(m::ignored::OTHER_SHARD);
            return Ok(());
        }
        self.rows_seen += 1;
        if self.written_before() {
            return Ok(());
        }
        let routed = self
            .router
            .route_message(&msg.content, msg.lsn, &commit, self.refusals);
        self.deliver(routed, producer)
    }

    /// A malformed trace context was left out of an event: counted always,
    /// logged at warn the first time in a session (a service that writes
    /// garbage in every row must not flood the log).
    pub(super) fn trace_context_dropped(&mut self, part: &'static str, event_id: &str) {
        self.counts.trace_context_dropped.add(part);
        if !self.warned_trace_context {
            self.warned_trace_context = true;
            self.notify(Notice::TraceContextDropped {
                part,
                event_id: event_id.to_owned(),
            });
        }
    }

    /// Ends the produce span of `tag`'s record, if it has one.
    pub(super) fn end_span(&self, tag: &mut DeliveryTag, error: Option<String>) {
        if let (Some(span), Some(tracer)) = (tag.span.take(), &self.tracer) {
            tracer.end(*span, error);
        }
    }
}
