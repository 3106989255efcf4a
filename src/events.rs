//! What the relay tells the people who run it, as types: one type per
//! operational event (a fault, a notice, a step of its life) that a person
//! or an alert cares about.
//!
//! Each type has a stable machine name ([`Event::NAME`], snake case, never
//! reworded), its level ([`Event::LEVEL`]), its kind ([`Event::KIND`]) and
//! its fields, and one `emit` that does everything the event means:
//! * logs its line at its level, with its fields and `event = NAME` (text
//!   logs show `event=slot_in_use`, JSON logs `"event":"slot_in_use"`): a log
//!   search, an alert or a test matches the name, not the wording;
//! * bumps its counters (the names of [`crate::metrics`], unchanged);
//! * tells /health where the event changes what it answers (the retries of
//!   the outer loop take the [`Health`](crate::metrics::Health) to tell).
//!
//! Invariants:
//! * a field holds names, positions, counts, ids and error texts, never a
//!   payload nor a secret (the error texts name what to fix and hide
//!   secrets already: `crate::redact`);
//! * an event that can repeat fast is rate-limited by whoever emits it, with
//!   a limiter of its own (the incident clocks of `crate::backoff`, the
//!   dead-letter [`Burst`], the once-per-incident reachability of the
//!   Kafka client): the types say what a line is, the emitter when it is due;
//! * every type is listed in [`ALL`] (a test reads the sources to check),
//!   and every [`Kind::Fault`] has its row in docs/operations.md's table
//!   "What each fault logs" (`tests/it/docs.rs` checks both ways).

mod kafka;
mod limit;
mod notices;
mod recorder;
mod retry;
mod run;
mod stream;
mod tables;

pub use kafka::*;
pub use limit::Burst;
pub use notices::*;
pub use recorder::{Recorded, Recorder};
pub use retry::*;
pub use run::*;
pub use stream::*;
pub use tables::*;

use tracing::Level;

/// What an event is to the person reading the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Something is wrong and someone has to look (or an alert fires):
    /// every fault has a row in docs/operations.md's fault table.
    Fault,
    /// Something the relay noticed and rode out, or a setting that does
    /// not fit what it sees; said so that a person can act before it hurts.
    Notice,
    /// A step of the relay's life: started streaming, stood by, stopped,
    /// made progress, something works again.
    Lifecycle,
}

/// One operational event: its name, level and kind. The fields and the
/// `emit` are the type's own.
pub trait Event {
    /// The stable machine name: the `event` field of the log line.
    const NAME: &'static str;
    /// The level the line is logged at.
    const LEVEL: Level;
    const KIND: Kind;
}

/// An event type's name, level and kind, for the catalogue [`ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    pub name: &'static str,
    pub level: Level,
    pub kind: Kind,
}

impl Info {
    pub const fn of<E: Event>() -> Info {
        Info {
            name: E::NAME,
            level: E::LEVEL,
            kind: E::KIND,
        }
    }
}

/// Logs one line of the event type `Self` at its level, with
/// `event = NAME` before the fields given. Used inside an `emit`.
macro_rules! say {
    ($($arg:tt)+) => {{
        use $crate::events::Event as _;
        let level = Self::LEVEL;
        if level == tracing::Level::ERROR {
            tracing::error!(event = %Self::NAME, $($arg)+)
        } else if level == tracing::Level::WARN {
            tracing::warn!(event = %Self::NAME, $($arg)+)
        } else if level == tracing::Level::INFO {
            tracing::info!(event = %Self::NAME, $($arg)+)
        } else {
            tracing::debug!(event = %Self::NAME, $($arg)+)
        }
    }};
}
use say;

/// Declares the types' names, levels and kinds in one statement each.
macro_rules! event {
    ($ty:ty, $name:literal, $level:ident, $kind:ident) => {
        impl $crate::events::Event for $ty {
            const NAME: &'static str = $name;
            const LEVEL: tracing::Level = tracing::Level::$level;
            const KIND: $crate::events::Kind = $crate::events::Kind::$kind;
        }
    };
}
use event;

/// Every event type the relay emits.
pub const ALL: &[Info] = &[
    // The outer loop's retries and stops (`retry.rs`).
    Info::of::<RelayLockUntried>(),
    Info::of::<SchemaRegistryUnreachable>(),
    Info::of::<TransactionsUnprepared>(),
    Info::of::<WaitingForSlotReader>(),
    Info::of::<StillWaitingForSlotReader>(),
    Info::of::<SlotInUse>(),
    Info::of::<ConnectFailed>(),
    Info::of::<RelayLockLost>(),
    Info::of::<DeliveryFailed>(),
    Info::of::<TransactionFailed>(),
    Info::of::<StreamBroke>(),
    Info::of::<StoppedDrained>(),
    Info::of::<StoppedUndrained>(),
    // The relay process (`run.rs`).
    Info::of::<Starting>(),
    Info::of::<ServingMetrics>(),
    Info::of::<StopRequested>(),
    Info::of::<ConfigWarning>(),
    Info::of::<FatalError>(),
    Info::of::<StoppedBeforeStreaming>(),
    Info::of::<Progress>(),
    Info::of::<DeadLetterTopicUnchecked>(),
    Info::of::<OtlpUnreachable>(),
    Info::of::<OtlpAnswers>(),
    // The slot, the stream, the relay lock, the position (`stream.rs`).
    Info::of::<StreamStarted>(),
    Info::of::<StreamStopped>(),
    Info::of::<EndpointFailed>(),
    Info::of::<ServerNotice>(),
    Info::of::<Streaming>(),
    Info::of::<StandingBy>(),
    Info::of::<RelayLockHeld>(),
    Info::of::<RelayLockLostBetweenSessions>(),
    Info::of::<RelayLockSessionFailed>(),
    Info::of::<RelayLockRenewalLate>(),
    Info::of::<SlotReaderEnded>(),
    Info::of::<SlotReaderNotEnded>(),
    Info::of::<SlotReaderEndTimedOut>(),
    Info::of::<SlotAhead>(),
    Info::of::<ConfirmedAboveServerWal>(),
    Info::of::<ServerChanged>(),
    Info::of::<SlotLagUnsampled>(),
    Info::of::<SlotLagSampled>(),
    Info::of::<HeartbeatFailed>(),
    Info::of::<StopMidTransaction>(),
    Info::of::<StopDeadlineMidTransaction>(),
    Info::of::<DrainDeadlinePassed>(),
    Info::of::<DrainStatusUpdateFailed>(),
    Info::of::<FinalStatusUpdateFailed>(),
    // Kafka: the brokers, dead letters, exactly-once (`kafka.rs`).
    Info::of::<BrokersUnreachable>(),
    Info::of::<BrokersStillUnreachable>(),
    Info::of::<KafkaClientDegraded>(),
    Info::of::<KafkaClientStillDegraded>(),
    Info::of::<BrokerAnswers>(),
    Info::of::<KafkaClientError>(),
    Info::of::<DeadLettered>(),
    Info::of::<NoCheckpoint>(),
    Info::of::<CheckpointResumed>(),
    Info::of::<CheckpointUnreadable>(),
    Info::of::<CheckpointOtherCluster>(),
    Info::of::<CheckpointOtherSlot>(),
    Info::of::<CheckpointAboveServerWal>(),
    Info::of::<CheckpointTopicWarning>(),
    Info::of::<PartialTransactionCommitted>(),
    // The relay's own tables and the webhook sinks (`tables.rs`).
    Info::of::<ParkingTableUnwritable>(),
    Info::of::<ParkingTableWorks>(),
    Info::of::<ParkedGaugesUnread>(),
    Info::of::<ParkedGaugesRead>(),
    Info::of::<DeliveryTableFailing>(),
    Info::of::<DeliveryTableWorks>(),
    Info::of::<RetryWorkerTableFailing>(),
    Info::of::<RetryWorkerTableWorks>(),
    Info::of::<DeliveryTableUnchecked>(),
    Info::of::<WebhookRefused>(),
    Info::of::<WebhookParked>(),
    Info::of::<WebhookDead>(),
    Info::of::<CleanupRefused>(),
    Info::of::<CleanupBatchSkipped>(),
    Info::of::<CleanupRetrying>(),
    Info::of::<CleanupWorks>(),
    Info::of::<CleanupRowsNotFound>(),
    // What the session machine notices (`notices.rs`).
    Info::of::<RowsInMessagesMode>(),
    Info::of::<MessagesOff>(),
    Info::of::<TraceContextDropped>(),
    Info::of::<NonTransactionalMessage>(),
    Info::of::<OutboxRenamed>(),
    Info::of::<OutboxByPublication>(),
    Info::of::<UnknownRelation>(),
    Info::of::<CheckpointAhead>(),
];

/// The event type named `name`, if there is one.
pub fn named(name: &str) -> Option<Info> {
    ALL.iter().copied().find(|info| info.name == name)
}

#[cfg(test)]
mod tests;
