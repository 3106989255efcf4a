//! What the session machine notices, as events: the machine returns a
//! `Notice` (it does no I/O, logging included); the session's shell turns
//! each into its event here and emits it. Each holds names, OIDs,
//! positions and counts, never a payload (an event id at most).

use pgoutput::lsn::Lsn;

use super::{event, say};

/// Once per session: rows arrive in the outbox table while
/// `postgres.source = "messages"`; they are published all the same.
pub struct RowsInMessagesMode<'a> {
    pub table: &'a str,
}
event!(RowsInMessagesMode<'_>, "rows_in_messages_mode", WARN, Fault);

impl RowsInMessagesMode<'_> {
    pub fn emit(&self) {
        say!(
            table = self.table,
            "rows arrive in the outbox table while postgres.source = \"messages\": they are \
             published (as with \"both\"), not skipped. Set postgres.source = \"both\" while \
             services still insert rows, or take the table out of the publication once none do"
        );
    }
}

/// Once per session: outbox messages arrive while `postgres.source =
/// "table"`; they are not published.
pub struct MessagesOff<'a> {
    pub prefix: &'a str,
}
event!(MessagesOff<'_>, "messages_off", WARN, Notice);

impl MessagesOff<'_> {
    pub fn emit(&self) {
        say!(
            prefix = self.prefix,
            "outbox logical messages arrive but postgres.source = \"table\": they are not \
             published. Set postgres.source = \"both\" (or \"messages\") to publish them"
        );
    }
}

/// Once per session: an event's trace context (`part`) was malformed and
/// left out (each one is counted by the machine).
pub struct TraceContextDropped<'a> {
    pub part: &'a str,
    pub event_id: &'a str,
}
event!(
    TraceContextDropped<'_>,
    "trace_context_dropped",
    WARN,
    Notice
);

impl TraceContextDropped<'_> {
    pub fn emit(&self) {
        let part = self.part;
        say!(
            event_id = self.event_id,
            part,
            "an outbox event's {part} is not valid W3C Trace Context: it is left out of the \
             event, which is published without it (counted in \
             outbox_relay_trace_context_dropped_total, logged once per session)"
        );
    }
}

/// A non-transactional logical message with the outbox prefix: never
/// published.
pub struct NonTransactionalMessage<'a> {
    pub prefix: &'a str,
    pub lsn: Lsn,
    pub bytes: usize,
}
event!(
    NonTransactionalMessage<'_>,
    "non_transactional_message",
    ERROR,
    Notice
);

impl NonTransactionalMessage<'_> {
    pub fn emit(&self) {
        say!(
            prefix = self.prefix,
            lsn = %self.lsn,
            bytes = self.bytes,
            "a non-transactional logical message with the outbox prefix is not published: it \
             is not atomic with the business write. Emit outbox messages with \
             pg_logical_emit_message(true, ...), as outbox_emit does"
        );
    }
}

/// The outbox table is streamed under another name than the configured
/// one.
pub struct OutboxRenamed<'a> {
    pub configured: &'a dyn std::fmt::Display,
    pub now: &'a dyn std::fmt::Display,
    pub oid: u32,
}
event!(OutboxRenamed<'_>, "outbox_renamed", WARN, Notice);

impl OutboxRenamed<'_> {
    pub fn emit(&self) {
        say!(
            configured = %self.configured,
            now = %self.now,
            oid = self.oid,
            "the outbox table was renamed; streaming on (same table). Set postgres.table to the \
             new name before the next restart"
        );
    }
}

/// A relation outside the outbox's partition tree taken as the outbox's,
/// since the publication publishes nothing else.
pub struct OutboxByPublication<'a> {
    pub relation: &'a str,
    pub oid: u32,
    pub outbox: &'a str,
}
event!(
    OutboxByPublication<'_>,
    "outbox_by_publication",
    WARN,
    Notice
);

impl OutboxByPublication<'_> {
    pub fn emit(&self) {
        say!(
            relation = self.relation,
            oid = self.oid,
            outbox = self.outbox,
            "relation is not in the outbox's partition tree now, but the publication publishes \
             nothing else: taking its rows as outbox rows (a partition detached or dropped \
             since)"
        );
    }
}

/// A relation dropped since, which the catalog cannot classify: its rows
/// are skipped.
pub struct UnknownRelation<'a> {
    pub relation: &'a str,
    pub oid: u32,
    pub publication: &'a str,
}
event!(UnknownRelation<'_>, "unknown_relation", ERROR, Notice);

impl UnknownRelation<'_> {
    pub fn emit(&self) {
        say!(
            relation = self.relation,
            oid = self.oid,
            publication = self.publication,
            "a relation in the stream was dropped since and the publication also publishes \
             other tables: the catalog cannot tell whether its rows were outbox rows, so they \
             are skipped. Give the relay a publication of its own (CREATE PUBLICATION ... FOR \
             TABLE <outbox> WITH (publish = 'insert'))"
        );
    }
}

/// The checkpoint counted more of a transaction's events in Kafka than
/// the transaction has now.
pub struct CheckpointAhead {
    pub commit_lsn: Lsn,
    pub missing: u64,
}
event!(CheckpointAhead, "checkpoint_ahead", ERROR, Notice);

impl CheckpointAhead {
    pub fn emit(&self) {
        say!(
            commit_lsn = %self.commit_lsn,
            missing = self.missing,
            "the checkpoint says more of this transaction's events are in Kafka than it has now \
             (postgres.source, the shards or the table changed since?): none of it was sent \
             again"
        );
    }
}
