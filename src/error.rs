//! The one classification every error of the relay gets: what the outer
//! loop does about it.
//!
//! Each module keeps its own typed error (`PgError`, `SinkError`,
//! `DeliveryError`, `SessionError`, `ConfigError`); each of them answers
//! `kind()` with an [`ErrorKind`], so the relay decides from one method,
//! never by matching another module's variants.

/// What the relay does about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Reconnect or rebuild with backoff and resume from the confirmed
    /// position; nothing is lost (the slot re-sends everything after it).
    Transient,
    /// Another process streams from the slot: wait and retry, never read
    /// concurrently.
    SlotBusy,
    /// Retrying cannot help; a person has to act on the message.
    Fatal,
}
