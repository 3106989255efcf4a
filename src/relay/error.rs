//! Why a session or the relay ended: one variant per cause, each with its
//! [`ErrorKind`], so the outer loop decides from `kind()` alone.

use crate::ack::AckError;
use crate::error::{Cause, ErrorKind};
use crate::pg::PgError;
use crate::relay::exactly_once::checkpoint_reader::CheckpointReadError;
use crate::relay::exactly_once::checkpoint_topic::CheckpointTopicRefused;
use crate::sink::http::table_access::DeliveryTableRefused;
use crate::sink::{DeliveryError, Refused, SinkError, TxnFailure};
use pgoutput::DecodeError;
use pgoutput::assembler::AssemblyError;

/// Why a streaming session ended without a graceful stop.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The replication connection failed (its own kind: transient, slot
    /// busy or fatal).
    #[error(transparent)]
    Replication(#[from] PgError),
    /// A message of the stream cannot be decoded: reading it again would
    /// fail the same way, so the relay stops and says why.
    #[error("cannot decode a pgoutput message from slot \"{slot}\": {source}")]
    Decode { slot: String, source: DecodeError },
    /// The stream broke transaction framing.
    #[error("replication stream out of step on slot \"{slot}\": {source}")]
    OutOfStep { slot: String, source: AssemblyError },
    /// The ack tracker refused an operation: a bug in the session.
    #[error("ack tracker: {0}")]
    Tracker(#[from] AckError),
    /// A delivery failed: the relay rebuilds the producer and replays from
    /// the confirmed position. `reason` is one of the metric labels in
    /// [`crate::metrics::reason`].
    #[error("{error}")]
    Delivery {
        reason: &'static str,
        error: DeliveryError,
    },
    /// Kafka refuses the relay in a way retrying cannot cure
    /// (unauthorized; unroutable under `on_unroutable = "stop"`).
    #[error(transparent)]
    Refused(Refused),
    /// Exactly-once: a Kafka transaction failed (replay from the last
    /// committed checkpoint), or the producer was fenced or failed for good.
    #[error(transparent)]
    Transaction(#[from] TxnFailure),
    /// Exactly-once: the checkpoint topic could not be read at start.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointReadError),
    /// Exactly-once: the checkpoint topic is missing or not compacted
    /// (checked at every session's start, before the producer names it).
    #[error(transparent)]
    CheckpointTopic(#[from] CheckpointTopicRefused),
    /// The relay lock was lost: the session stopped producing at once, so
    /// that the next holder never produces beside it.
    #[error("the relay lock on slot \"{slot}\" was lost; stopped producing")]
    LockLost { slot: String },
}

impl SessionError {
    /// What the relay does about it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SessionError::Replication(e) => e.kind(),
            SessionError::Delivery { error, .. } => error.kind(),
            SessionError::Checkpoint(e) if e.is_refusal() => ErrorKind::Fatal,
            SessionError::Transaction(TxnFailure::Abortable(_)) | SessionError::Checkpoint(_) => {
                ErrorKind::Transient
            }
            SessionError::Transaction(_) => ErrorKind::Fatal,
            SessionError::LockLost { .. } => ErrorKind::Transient,
            SessionError::Decode { .. }
            | SessionError::OutOfStep { .. }
            | SessionError::Tracker(_)
            | SessionError::Refused(_)
            | SessionError::CheckpointTopic(_) => ErrorKind::Fatal,
        }
    }

    /// Whether the relay stops for good on it.
    pub fn is_fatal(&self) -> bool {
        self.kind() == ErrorKind::Fatal
    }

    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> Cause {
        match self {
            SessionError::Replication(e) => e.cause(),
            SessionError::Decode { .. } | SessionError::OutOfStep { .. } => {
                Cause::StreamUndecodable
            }
            SessionError::Tracker(_) => Cause::InternalError,
            SessionError::Delivery { error, .. } => error.cause(),
            SessionError::Refused(r) => r.cause(),
            SessionError::Transaction(e) => e.cause(),
            SessionError::Checkpoint(e) => e.cause(),
            SessionError::CheckpointTopic(_) => Cause::CheckpointTopicUnusable,
            SessionError::LockLost { .. } => Cause::RelayLockLost,
        }
    }
}

/// Which side of the relay a fatal error is on, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// PostgreSQL: the slot, the publication, authentication, the stream.
    Source,
    /// Kafka: authorization, an unroutable topic, the producer.
    Sink,
}

/// Why the relay stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Connecting to PostgreSQL failed in a way retrying cannot cure.
    #[error(transparent)]
    Replication(#[from] PgError),
    /// The producer could not be built, or the cluster refuses the relay.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// A session ended with a fatal error.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A webhook sink could not be set up.
    #[error("cannot set up the webhook sink {0}")]
    Webhook(String),
    /// The relay lock cannot be used (see `relay.standby_lock`).
    #[error(transparent)]
    Lock(#[from] super::lock::LockError),
    /// Webhook routes, and their delivery table is missing or the relay's
    /// role may not use it (checked at start).
    #[error(transparent)]
    DeliveryTable(#[from] DeliveryTableRefused),
    /// A contract's schema cannot be had from the schema registry: the
    /// subject or version is missing, the schema cannot be used, the
    /// registry refuses the credentials.
    #[error("cannot fetch the schemas of [[contracts]]: {0}")]
    Contracts(#[from] crate::contracts::ResolveError),
    /// The parking table is missing (checked at every session's start).
    #[error(transparent)]
    Parking(#[from] crate::parking::LoadError),
}

impl RelayError {
    /// Its stable name: the `cause` of the `fatal_error` line.
    pub fn cause(&self) -> Cause {
        match self {
            RelayError::Replication(e) => e.cause(),
            RelayError::Sink(e) => e.cause(),
            RelayError::Session(e) => e.cause(),
            RelayError::Webhook(_) => Cause::WebhookSinkUnusable,
            RelayError::Lock(e) => e.cause(),
            RelayError::DeliveryTable(_) => Cause::DeliveryTableUnusable,
            RelayError::Contracts(_) => Cause::ContractsUnresolved,
            RelayError::Parking(e) => e.cause(),
        }
    }

    /// Which side failed.
    pub fn side(&self) -> Side {
        match self {
            RelayError::Replication(_) => Side::Source,
            RelayError::Sink(_) | RelayError::Webhook(_) | RelayError::Contracts(_) => Side::Sink,
            RelayError::Lock(_) | RelayError::DeliveryTable(_) | RelayError::Parking(_) => {
                Side::Source
            }
            RelayError::Session(e) => match e {
                SessionError::Replication(_)
                | SessionError::Decode { .. }
                | SessionError::OutOfStep { .. }
                | SessionError::Tracker(_)
                | SessionError::LockLost { .. } => Side::Source,
                SessionError::Delivery { .. }
                | SessionError::Refused(_)
                | SessionError::Transaction(_)
                | SessionError::Checkpoint(_)
                | SessionError::CheckpointTopic(_) => Side::Sink,
            },
        }
    }
}
