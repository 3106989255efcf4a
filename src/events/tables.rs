//! The events of the relay's own tables (the parking table, the webhook
//! sinks' delivery table, the outbox rows the cleanup deletes) and of the
//! webhook sinks' deliveries.
//!
//! A table's failures come in incidents: each failed try is counted
//! (`count`), and a line is written when the emitter's
//! [`Incident`](crate::backoff::Incident) lets one through (`emit`): when
//! the incident starts and every `Incident::LOG_EVERY` while it lasts; its
//! end is an event of its own, at info.

use std::fmt::Display;
use std::time::Duration;

use super::{event, say};
use crate::backoff::{Incident, Recovered, Still};
use crate::metrics as m;

/// A write to (or read of) the parking table failed: nothing behind the
/// parked events is confirmed until it works.
pub struct ParkingTableUnwritable<'a> {
    pub table: &'a dyn Display,
    pub error: &'a dyn Display,
    pub still: Still,
}
event!(
    ParkingTableUnwritable<'_>,
    "parking_table_unwritable",
    WARN,
    Notice
);

impl ParkingTableUnwritable<'_> {
    /// Counts one failed try.
    pub fn count() {
        metrics::counter!(m::RECONNECTS, "reason" => m::reason::PARKED_TABLE).increment(1);
    }

    pub fn emit(&self) {
        say!(
            reason = m::reason::PARKED_TABLE,
            table = %self.table,
            error = %self.error,
            failures = self.still.failures,
            lasting_secs = self.still.lasting.as_secs(),
            "parking table write failed; trying again, backing off, nothing behind the parked \
             events is confirmed meanwhile (logged again every {}s while it lasts)",
            Incident::LOG_EVERY.as_secs()
        );
    }
}

/// The parking table works again.
pub struct ParkingTableWorks<'a> {
    pub table: &'a dyn Display,
    pub end: Recovered,
}
event!(
    ParkingTableWorks<'_>,
    "parking_table_works",
    INFO,
    Lifecycle
);

impl ParkingTableWorks<'_> {
    pub fn emit(&self) {
        say!(
            table = %self.table,
            failures = self.end.failures,
            lasted_secs = self.end.lasted.as_secs(),
            "the parking table works again"
        );
    }
}

/// The parked gauges cannot read the parking table (`fix` says what to
/// do); they keep their last values.
pub struct ParkedGaugesUnread<'a> {
    pub table: &'a dyn Display,
    pub error: &'a dyn Display,
    pub fix: &'a str,
    pub still: Still,
}
event!(ParkedGaugesUnread<'_>, "parked_gauges_unread", WARN, Fault);

impl ParkedGaugesUnread<'_> {
    pub fn emit(&self) {
        say!(
            table = %self.table,
            error = %self.error,
            failures = self.still.failures,
            since_last_line = self.still.since_last_line,
            lasting_secs = self.still.lasting.as_secs(),
            "cannot read the parking table for the parked gauges, which keep their last values; \
             {} (trying again, backing off; logged again every {}s while it lasts)",
            self.fix,
            Incident::LOG_EVERY.as_secs()
        );
    }
}

/// The parked gauges read the parking table again.
pub struct ParkedGaugesRead<'a> {
    pub table: &'a dyn Display,
    pub end: Recovered,
}
event!(ParkedGaugesRead<'_>, "parked_gauges_read", INFO, Lifecycle);

impl ParkedGaugesRead<'_> {
    pub fn emit(&self) {
        say!(
            table = %self.table,
            failures = self.end.failures,
            lasted_secs = self.end.lasted.as_secs(),
            "the parked gauges read the parking table again"
        );
    }
}

/// The dispatcher (in line with the stream) could not use the webhook
/// sinks' delivery table (`what`: what it was doing).
pub struct DeliveryTableFailing<'a> {
    pub route: &'a str,
    pub table: &'a dyn Display,
    pub what: &'a str,
    pub error: &'a dyn Display,
    pub still: Still,
}
event!(
    DeliveryTableFailing<'_>,
    "delivery_table_failing",
    WARN,
    Notice
);

impl DeliveryTableFailing<'_> {
    /// Counts one failed try.
    pub fn count() {
        metrics::counter!(m::RECONNECTS, "reason" => m::reason::DELIVERY_TABLE).increment(1);
    }

    pub fn emit(&self) {
        let what = self.what;
        say!(
            reason = m::reason::DELIVERY_TABLE,
            route = self.route,
            table = %self.table,
            error = %self.error,
            failures = self.still.failures,
            since_last_line = self.still.since_last_line,
            lasting_secs = self.still.lasting.as_secs(),
            "delivery table {what} failed; trying again, backing off (logged again every {}s \
             while it lasts)",
            Incident::LOG_EVERY.as_secs()
        );
    }
}

/// The dispatcher uses the delivery table again.
pub struct DeliveryTableWorks<'a> {
    pub route: &'a str,
    pub table: &'a dyn Display,
    pub end: Recovered,
}
event!(
    DeliveryTableWorks<'_>,
    "delivery_table_works",
    INFO,
    Lifecycle
);

impl DeliveryTableWorks<'_> {
    pub fn emit(&self) {
        say!(
            route = self.route,
            table = %self.table,
            failures = self.end.failures,
            lasted_secs = self.end.lasted.as_secs(),
            "the delivery table works again"
        );
    }
}

/// A route's retry worker could not use the delivery table (`what`: what
/// it was doing); the rows wait there meanwhile.
pub struct RetryWorkerTableFailing<'a> {
    pub route: &'a str,
    pub table: &'a dyn Display,
    pub what: &'a str,
    pub error: &'a dyn Display,
    pub still: Still,
}
event!(
    RetryWorkerTableFailing<'_>,
    "retry_worker_table_failing",
    WARN,
    Fault
);

impl RetryWorkerTableFailing<'_> {
    /// Counts one failed try.
    pub fn count() {
        metrics::counter!(m::RECONNECTS, "reason" => m::reason::DELIVERY_TABLE).increment(1);
    }

    pub fn emit(&self) {
        let what = self.what;
        say!(
            reason = m::reason::DELIVERY_TABLE,
            route = self.route,
            table = %self.table,
            error = %self.error,
            failures = self.still.failures,
            since_last_line = self.still.since_last_line,
            lasting_secs = self.still.lasting.as_secs(),
            "retry worker cannot {what}; trying again, backing off (logged again every {}s \
             while it lasts)",
            Incident::LOG_EVERY.as_secs()
        );
    }
}

/// A route's retry worker uses the delivery table again.
pub struct RetryWorkerTableWorks<'a> {
    pub route: &'a str,
    pub table: &'a dyn Display,
    pub end: Recovered,
}
event!(
    RetryWorkerTableWorks<'_>,
    "retry_worker_table_works",
    INFO,
    Lifecycle
);

impl RetryWorkerTableWorks<'_> {
    pub fn emit(&self) {
        say!(
            route = self.route,
            table = %self.table,
            failures = self.end.failures,
            lasted_secs = self.end.lasted.as_secs(),
            "retry worker uses the delivery table again"
        );
    }
}

/// The delivery table could not be checked at start; the relay goes on.
pub struct DeliveryTableUnchecked<'a> {
    pub table: &'a dyn Display,
    pub error: &'a dyn Display,
}
event!(
    DeliveryTableUnchecked<'_>,
    "delivery_table_unchecked",
    WARN,
    Notice
);

impl DeliveryTableUnchecked<'_> {
    pub fn emit(&self) {
        say!(
            table = %self.table,
            error = %self.error,
            "could not check the delivery table at start; going on (the webhook retry worker \
             backs off until it can use it)"
        );
    }
}

/// A webhook refused an event for good in line: it is DEAD in the delivery
/// table; `parks`: its aggregate's later events wait behind it.
pub struct WebhookRefused<'a> {
    pub route: &'a str,
    pub event_id: &'a dyn Display,
    pub status: u16,
    pub parks: bool,
}
event!(WebhookRefused<'_>, "webhook_refused", WARN, Notice);

impl WebhookRefused<'_> {
    pub fn emit(&self) {
        if self.parks {
            say!(
                route = self.route,
                event_id = %self.event_id,
                status = self.status,
                "webhook refused the event for good; it is DEAD in the delivery table \
                 (outbox-relay dead list), and its aggregate's later events wait behind it \
                 (after_dead_letter = \"park\") until `outbox-relay dead retry` or `dead \
                 discard` of it"
            );
        } else {
            say!(
                route = self.route,
                event_id = %self.event_id,
                status = self.status,
                "webhook refused the event for good; it is DEAD in the delivery table \
                 (outbox-relay dead list)"
            );
        }
    }
}

/// A webhook did not take an event in line: moved to the delivery table
/// for retries.
pub struct WebhookParked<'a> {
    pub route: &'a str,
    pub event_id: &'a dyn Display,
    pub error: &'a dyn Display,
    pub retry_in: Duration,
}
event!(WebhookParked<'_>, "webhook_parked", INFO, Lifecycle);

impl WebhookParked<'_> {
    pub fn emit(&self) {
        say!(
            route = self.route,
            event_id = %self.event_id,
            error = %self.error,
            retry_in_ms = self.retry_in.as_millis() as u64,
            "webhook did not take the event; moved to the delivery table for retries"
        );
    }
}

/// The retry worker gave an event up: it is DEAD; `parks`: its
/// aggregate's later events wait behind it.
pub struct WebhookDead<'a> {
    pub route: &'a str,
    pub event_id: &'a dyn Display,
    pub error: &'a dyn Display,
    pub parks: bool,
}
event!(WebhookDead<'_>, "webhook_dead", WARN, Notice);

impl WebhookDead<'_> {
    pub fn emit(&self) {
        if self.parks {
            say!(
                route = self.route,
                event_id = %self.event_id,
                error = %self.error,
                "webhook event is DEAD (outbox-relay dead list); its aggregate's later events \
                 wait behind it (after_dead_letter = \"park\") until `outbox-relay dead retry` \
                 or `dead discard` of it"
            );
        } else {
            say!(
                route = self.route,
                event_id = %self.event_id,
                error = %self.error,
                "webhook event is DEAD (outbox-relay dead list)"
            );
        }
    }
}

/// The cleanup may not delete outbox rows (a privilege missing).
pub struct CleanupRefused<'a> {
    pub table: &'a dyn Display,
    pub error: &'a dyn Display,
}
event!(CleanupRefused<'_>, "cleanup_refused", WARN, Notice);

impl CleanupRefused<'_> {
    pub fn emit(&self) {
        let table = self.table;
        say!(
            table = %table,
            error = %self.error,
            "cannot delete confirmed outbox rows; they stay in the table. The relay's role \
             needs DELETE on it: GRANT DELETE ON {table} TO <relay role>"
        );
    }
}

/// The cleanup gave a batch up after retrying: its rows stay.
pub struct CleanupBatchSkipped<'a> {
    pub table: &'a dyn Display,
    pub error: &'a dyn Display,
    pub rows: usize,
}
event!(
    CleanupBatchSkipped<'_>,
    "cleanup_batch_skipped",
    WARN,
    Notice
);

impl CleanupBatchSkipped<'_> {
    pub fn emit(&self) {
        say!(
            table = %self.table,
            error = %self.error,
            rows = self.rows,
            "cannot delete confirmed outbox rows; this batch stays in the table \
             (outbox_relay_cleanup_skipped_rows_total counts it; rows `outbox-relay status` \
             shows the relay past are safe to delete by hand)"
        );
    }
}

/// A cleanup DELETE failed and is tried again.
pub struct CleanupRetrying<'a> {
    pub table: &'a dyn Display,
    pub error: &'a dyn Display,
    pub failures: u64,
    pub retry_for: Duration,
}
event!(CleanupRetrying<'_>, "cleanup_retrying", WARN, Notice);

impl CleanupRetrying<'_> {
    /// Counts one retry.
    pub fn count() {
        metrics::counter!(m::RECONNECTS, "reason" => m::reason::CLEANUP_DELETE).increment(1);
    }

    pub fn emit(&self) {
        say!(
            reason = m::reason::CLEANUP_DELETE,
            table = %self.table,
            error = %self.error,
            failures = self.failures,
            retry_for_secs = self.retry_for.as_secs(),
            "cannot delete confirmed outbox rows yet; trying again, backing off"
        );
    }
}

/// Deleting confirmed outbox rows works again.
pub struct CleanupWorks<'a> {
    pub table: &'a dyn Display,
    pub end: Recovered,
}
event!(CleanupWorks<'_>, "cleanup_works", INFO, Lifecycle);

impl CleanupWorks<'_> {
    pub fn emit(&self) {
        say!(
            table = %self.table,
            failures = self.end.failures,
            lasted_secs = self.end.lasted.as_secs(),
            "deleting confirmed outbox rows works again"
        );
    }
}

/// Confirmed outbox rows were not found for deletion, and are no longer
/// looked for.
pub struct CleanupRowsNotFound {
    pub rows: usize,
}
event!(CleanupRowsNotFound, "cleanup_rows_not_found", INFO, Notice);

impl CleanupRowsNotFound {
    /// Counts them in [`m::CLEANUP_NOT_FOUND_ROWS`] and logs the line.
    pub fn emit(&self) {
        metrics::counter!(m::CLEANUP_NOT_FOUND_ROWS).increment(self.rows as u64);
        say!(
            rows = self.rows,
            "confirmed outbox rows not found for deletion (deleted by something else, or by \
             this relay before a restart replayed them); no longer looked for"
        );
    }
}
