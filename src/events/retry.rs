//! The outer loop's events: each time round that failed and is tried
//! again, and the relay's stop. The supervisor (`relay/supervisor.rs`)
//! decides which, without I/O, and returns it as a [`Retry`] or a
//! [`Stopped`]; the loop emits it. Each retry counts itself under its
//! counter and `reason` label and tells /health.

use pgoutput::lsn::Lsn;

use super::{Event, event, say};
use crate::metrics::{self as m, Health};

/// What /health is told about a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthNote {
    /// `Health::retrying`.
    Retrying,
    /// `Health::producer_retrying`: /ready stays 503 in the next session
    /// until it confirms something.
    ProducerRetrying,
    /// No longer a standby (out of reach of PostgreSQL, it could not take
    /// over), then `Health::retrying`.
    RetryingNoStandby,
}

/// The relay lock could not be tried; retrying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayLockUntried {
    pub error: String,
    pub attempt: u32,
}
event!(RelayLockUntried, "relay_lock_untried", WARN, Fault);

/// The schema registry did not answer when the contracts' schemas were
/// fetched: nothing is sent until it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaRegistryUnreachable {
    pub error: String,
    pub attempt: u32,
}
event!(
    SchemaRegistryUnreachable,
    "schema_registry_unreachable",
    WARN,
    Fault
);

/// Exactly-once: the Kafka transactions could not be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionsUnprepared {
    pub error: String,
    pub attempt: u32,
}
event!(
    TransactionsUnprepared,
    "transactions_unprepared",
    WARN,
    Notice
);

/// Holding the relay lock, the slot is still read by its previous reader
/// (told to end when the lock was taken): said once at info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingForSlotReader {
    pub error: String,
}
event!(
    WaitingForSlotReader,
    "waiting_for_slot_reader",
    INFO,
    Lifecycle
);

/// The same wait, each time round after the first: at debug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StillWaitingForSlotReader {
    pub error: String,
    pub attempt: u32,
}
event!(
    StillWaitingForSlotReader,
    "still_waiting_for_slot_reader",
    DEBUG,
    Lifecycle
);

/// Another process reads the slot (the relay holds no relay lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInUse {
    pub error: String,
}
event!(SlotInUse, "slot_in_use", WARN, Fault);

/// The stream could not connect (PostgreSQL away, refused for now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectFailed {
    pub error: String,
    pub attempt: u32,
}
event!(ConnectFailed, "connect_failed", WARN, Fault);

/// The relay lock was lost in a session: it stopped producing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayLockLost {
    pub error: String,
    pub confirmed: Lsn,
}
event!(RelayLockLost, "relay_lock_lost", WARN, Fault);

/// A delivery failed (`reason`: one of [`m::DELIVERY_FAILURE_REASONS`]):
/// the producer is rebuilt and the relay replays from `confirmed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryFailed {
    pub reason: &'static str,
    pub error: String,
    pub confirmed: Lsn,
}
event!(DeliveryFailed, "delivery_failed", WARN, Fault);

/// Exactly-once: a Kafka transaction failed; the relay replays from the
/// last committed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionFailed {
    pub error: String,
    pub checkpoint: Lsn,
}
event!(TransactionFailed, "transaction_failed", WARN, Notice);

/// The replication stream broke (the walsender ended, the server
/// restarted, the route went silent): reconnecting from `confirmed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamBroke {
    pub error: String,
    pub confirmed: Lsn,
}
event!(StreamBroke, "stream_broke", WARN, Fault);

/// One retry of the outer loop, as the supervisor decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retry {
    RelayLockUntried(RelayLockUntried),
    SchemaRegistryUnreachable(SchemaRegistryUnreachable),
    TransactionsUnprepared(TransactionsUnprepared),
    WaitingForSlotReader(WaitingForSlotReader),
    StillWaitingForSlotReader(StillWaitingForSlotReader),
    SlotInUse(SlotInUse),
    ConnectFailed(ConnectFailed),
    RelayLockLost(RelayLockLost),
    DeliveryFailed(DeliveryFailed),
    TransactionFailed(TransactionFailed),
    StreamBroke(StreamBroke),
}

/// `$body` with `$e` bound to the retry's event, whichever it is.
macro_rules! each {
    ($retry:expr, $e:ident => $body:expr) => {
        match $retry {
            Retry::RelayLockUntried($e) => $body,
            Retry::SchemaRegistryUnreachable($e) => $body,
            Retry::TransactionsUnprepared($e) => $body,
            Retry::WaitingForSlotReader($e) => $body,
            Retry::StillWaitingForSlotReader($e) => $body,
            Retry::SlotInUse($e) => $body,
            Retry::ConnectFailed($e) => $body,
            Retry::RelayLockLost($e) => $body,
            Retry::DeliveryFailed($e) => $body,
            Retry::TransactionFailed($e) => $body,
            Retry::StreamBroke($e) => $body,
        }
    };
}

/// The event's name, level and the rest of what a retry says, from its type.
trait Said: Event {
    fn counter(&self) -> &'static str;
    fn reason(&self) -> &'static str;
    fn health(&self) -> HealthNote {
        HealthNote::Retrying
    }
    fn error(&self) -> &str;
    fn attempt(&self) -> Option<u32> {
        None
    }
    fn confirmed(&self) -> Option<Lsn> {
        None
    }
    fn checkpoint(&self) -> Option<Lsn> {
        None
    }
    /// Logs the line.
    fn log(&self);
}

impl Said for RelayLockUntried {
    fn counter(&self) -> &'static str {
        m::RECONNECTS
    }
    fn reason(&self) -> &'static str {
        m::reason::CONNECT_FAILED
    }
    fn health(&self) -> HealthNote {
        HealthNote::RetryingNoStandby
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn attempt(&self) -> Option<u32> {
        Some(self.attempt)
    }
    fn log(&self) {
        say!(
            reason = self.reason(),
            error = %self.error,
            attempt = self.attempt,
            "cannot try the relay lock; retrying"
        );
    }
}

impl Said for SchemaRegistryUnreachable {
    fn counter(&self) -> &'static str {
        m::RECONNECTS
    }
    fn reason(&self) -> &'static str {
        m::reason::SCHEMA_REGISTRY
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn attempt(&self) -> Option<u32> {
        Some(self.attempt)
    }
    fn log(&self) {
        say!(
            reason = self.reason(),
            error = %self.error,
            attempt = self.attempt,
            "cannot fetch the contracts' schemas from the schema registry; nothing is sent \
             until it answers; retrying"
        );
    }
}

impl Said for TransactionsUnprepared {
    fn counter(&self) -> &'static str {
        m::DELIVERY_FAILURES
    }
    fn reason(&self) -> &'static str {
        m::reason::PRODUCER_FATAL
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn attempt(&self) -> Option<u32> {
        Some(self.attempt)
    }
    fn log(&self) {
        say!(
            reason = self.reason(),
            error = %self.error,
            attempt = self.attempt,
            "cannot start the Kafka transactions; retrying"
        );
    }
}

impl Said for WaitingForSlotReader {
    fn counter(&self) -> &'static str {
        m::RECONNECTS
    }
    fn reason(&self) -> &'static str {
        m::reason::SLOT_BUSY
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn log(&self) {
        say!(
            error = %self.error,
            "holding the relay lock, waiting for the slot's previous reader to exit (trying \
             again, less and less often, quietly until it does)"
        );
    }
}

impl Said for StillWaitingForSlotReader {
    fn counter(&self) -> &'static str {
        m::RECONNECTS
    }
    fn reason(&self) -> &'static str {
        m::reason::SLOT_BUSY
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn attempt(&self) -> Option<u32> {
        Some(self.attempt)
    }
    fn log(&self) {
        say!(
            error = %self.error,
            attempt = self.attempt,
            "still waiting for the slot's previous reader to exit"
        );
    }
}

impl Said for SlotInUse {
    fn counter(&self) -> &'static str {
        m::RECONNECTS
    }
    fn reason(&self) -> &'static str {
        m::reason::SLOT_BUSY
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn log(&self) {
        say!(
            reason = self.reason(),
            error = %self.error,
            "another process reads the slot; waiting for it to let go"
        );
    }
}

impl Said for ConnectFailed {
    fn counter(&self) -> &'static str {
        m::RECONNECTS
    }
    fn reason(&self) -> &'static str {
        m::reason::CONNECT_FAILED
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn attempt(&self) -> Option<u32> {
        Some(self.attempt)
    }
    fn log(&self) {
        say!(
            reason = self.reason(),
            error = %self.error,
            attempt = self.attempt,
            "cannot stream from PostgreSQL; retrying"
        );
    }
}

impl Said for RelayLockLost {
    fn counter(&self) -> &'static str {
        m::RECONNECTS
    }
    fn reason(&self) -> &'static str {
        m::reason::LOCK_LOST
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn confirmed(&self) -> Option<Lsn> {
        Some(self.confirmed)
    }
    fn log(&self) {
        say!(
            reason = self.reason(),
            error = %self.error,
            confirmed = %self.confirmed,
            "the relay lock was lost: stopped producing; standing by unless it can be taken \
             again"
        );
    }
}

impl Said for DeliveryFailed {
    fn counter(&self) -> &'static str {
        m::DELIVERY_FAILURES
    }
    fn reason(&self) -> &'static str {
        self.reason
    }
    fn health(&self) -> HealthNote {
        HealthNote::ProducerRetrying
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn confirmed(&self) -> Option<Lsn> {
        Some(self.confirmed)
    }
    fn log(&self) {
        say!(
            reason = self.reason,
            error = %self.error,
            confirmed = %self.confirmed,
            "delivery failed; rebuilding the producer and replaying from the confirmed position"
        );
    }
}

impl Said for TransactionFailed {
    fn counter(&self) -> &'static str {
        m::DELIVERY_FAILURES
    }
    fn reason(&self) -> &'static str {
        m::reason::PRODUCER_FATAL
    }
    fn health(&self) -> HealthNote {
        HealthNote::ProducerRetrying
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn checkpoint(&self) -> Option<Lsn> {
        Some(self.checkpoint)
    }
    fn log(&self) {
        say!(
            reason = self.reason(),
            error = %self.error,
            checkpoint = %self.checkpoint,
            "Kafka transaction failed; rebuilding the producer and replaying from the last \
             committed checkpoint"
        );
    }
}

impl Said for StreamBroke {
    fn counter(&self) -> &'static str {
        m::RECONNECTS
    }
    fn reason(&self) -> &'static str {
        m::reason::STREAM_BROKE
    }
    fn error(&self) -> &str {
        &self.error
    }
    fn confirmed(&self) -> Option<Lsn> {
        Some(self.confirmed)
    }
    fn log(&self) {
        say!(
            reason = self.reason(),
            error = %self.error,
            confirmed = %self.confirmed,
            "replication stream broke; reconnecting from the confirmed position"
        );
    }
}

impl Retry {
    /// Counts the retry under its counter and reason, logs its line and
    /// tells /health.
    pub fn emit(&self, health: &Health) {
        let (counter, reason) = (self.counter(), self.reason());
        metrics::counter!(counter, "reason" => reason).increment(1);
        each!(self, e => e.log());
        let detail = self.error();
        match self.health() {
            HealthNote::Retrying => health.retrying(reason, &detail),
            HealthNote::ProducerRetrying => health.producer_retrying(reason, &detail),
            HealthNote::RetryingNoStandby => {
                health.set_standby(false);
                health.retrying(reason, &detail);
            }
        }
    }

    /// The event's machine name.
    pub fn name(&self) -> &'static str {
        each!(self, e => event_name(e))
    }

    pub fn level(&self) -> tracing::Level {
        each!(self, e => event_level(e))
    }

    /// The counter: [`m::RECONNECTS`] or [`m::DELIVERY_FAILURES`].
    pub fn counter(&self) -> &'static str {
        each!(self, e => e.counter())
    }

    /// The counter's `reason` label, one of [`m::reason`]'s; also /health's.
    pub fn reason(&self) -> &'static str {
        each!(self, e => e.reason())
    }

    pub fn health(&self) -> HealthNote {
        each!(self, e => e.health())
    }

    /// The failure's text, as /health shows it.
    pub fn error(&self) -> &str {
        each!(self, e => e.error())
    }

    /// Times round since the last progress, where the line says it.
    pub fn attempt(&self) -> Option<u32> {
        each!(self, e => e.attempt())
    }

    /// The position confirmed, where the line says it.
    pub fn confirmed(&self) -> Option<Lsn> {
        each!(self, e => e.confirmed())
    }

    /// The last committed checkpoint, where the line says it.
    pub fn checkpoint(&self) -> Option<Lsn> {
        each!(self, e => e.checkpoint())
    }
}

fn event_name<E: Event>(_: &E) -> &'static str {
    E::NAME
}

fn event_level<E: Event>(_: &E) -> tracing::Level {
    E::LEVEL
}

/// Stopped after draining every event in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppedDrained {
    pub confirmed: Lsn,
}
event!(StoppedDrained, "stopped", INFO, Lifecycle);

/// Stopped with `pending` events unacknowledged: the next start sends them
/// again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppedUndrained {
    pub pending: u64,
    pub confirmed: Lsn,
}
event!(StoppedUndrained, "stopped_undrained", WARN, Notice);

/// How the relay stopped after a stop was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    Drained(StoppedDrained),
    Undrained(StoppedUndrained),
}

impl StoppedDrained {
    pub fn emit(&self) {
        say!(confirmed = %self.confirmed, "stopped after draining in-flight events");
    }
}

impl StoppedUndrained {
    pub fn emit(&self) {
        say!(
            pending = self.pending,
            confirmed = %self.confirmed,
            "stopped before every event was acknowledged; the slot stays at the confirmed \
             position and the next start sends them again"
        );
    }
}

impl Stopped {
    pub fn emit(&self) {
        match self {
            Stopped::Drained(e) => e.emit(),
            Stopped::Undrained(e) => e.emit(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Stopped::Drained(e) => event_name(e),
            Stopped::Undrained(e) => event_name(e),
        }
    }

    pub fn level(&self) -> tracing::Level {
        match self {
            Stopped::Drained(e) => event_level(e),
            Stopped::Undrained(e) => event_level(e),
        }
    }
}
