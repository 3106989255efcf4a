//! Every metric's description, as /metrics shows it in `# HELP` (and
//! its unit), registered once when the recorder is installed.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

use super::*;

/// Registers the description of every metric named in [`ALL`].
pub fn describe() {
    describe_counter!(
        EVENTS_PUBLISHED,
        "Outbox events acknowledged by the broker."
    );
    describe_counter!(
        EVENTS_DEAD_LETTERED,
        "Outbox rows written to the dead-letter topic, by reason."
    );
    describe_counter!(
        TRANSACTIONS,
        "Committed transactions decoded from the slot."
    );
    describe_counter!(
        CHANGES_IGNORED,
        "UPDATE, DELETE and TRUNCATE on the outbox, rows of other tables, and outbox messages not published (source off, another shard's), ignored by kind."
    );
    describe_counter!(
        DELIVERY_FAILURES,
        "Producer rebuilds: failed deliveries that made the relay rebuild the producer and replay from the confirmed LSN, by reason."
    );
    describe_counter!(
        RECONNECTS,
        "Reconnects to PostgreSQL after a transient error, by reason: the replication stream, and the retries of the webhook delivery table and of the cleanup."
    );
    describe_counter!(
        HEARTBEATS,
        "Heartbeat messages emitted while the outbox was idle."
    );
    describe_gauge!(
        CONFIRMED_LSN,
        "Flush LSN confirmed to PostgreSQL (as a number): the broker-acknowledged prefix."
    );
    describe_gauge!(RECEIVED_LSN, "Highest WAL position received from the slot.");
    describe_gauge!(
        EVENTS_IN_FLIGHT,
        "Events handed to the producer and not yet acknowledged."
    );
    describe_gauge!(
        EVENTS_IN_FLIGHT_BYTES,
        Unit::Bytes,
        "Bytes of the records handed to the producer or a webhook sink and not yet \
         acknowledged; relay.max_in_flight_bytes bounds it (one record over at most)."
    );
    describe_counter!(
        SERVER_CHANGES,
        "Sessions that found another server (system identifier or timeline) than the last one: a failover, or another cluster behind the URL."
    );
    describe_counter!(
        SLOT_JUMPS,
        "Sessions that found the slot ahead of the position this relay confirmed: someone else advanced or recreated it."
    );
    describe_counter!(
        MESSAGES_REFUSED,
        "Logical messages with the outbox prefix that are not transactional (not atomic with any business write): logged at error, never published."
    );
    describe_counter!(
        CLEANUP_DELETED_ROWS,
        "Outbox rows deleted after their events were confirmed (postgres.cleanup = \"delete-after-ack\")."
    );
    describe_counter!(
        CLEANUP_SKIPPED_ROWS,
        "Confirmed outbox rows the cleanup left in the table: it lagged, held too many, or its DELETE failed."
    );
    describe_counter!(
        CLEANUP_NOT_FOUND_ROWS,
        "Confirmed outbox rows the cleanup did not find, looking for 30 s: deleted by something else, or by this relay before a restart replayed them (a transaction deleted by xmin counts 1)."
    );
    describe_counter!(
        TRACE_CONTEXT_DROPPED,
        "Malformed traceparent or tracestate values (label part) left out of events; the events were published without them."
    );
    describe_counter!(
        WEBHOOK_DELIVERIES,
        "Webhook tries by route and outcome (delivered, failed, parked in the delivery table, queued behind a pending row, dead)."
    );
    describe_gauge!(
        WEBHOOK_PENDING,
        "PENDING rows of the delivery table per route: events waiting for a retry."
    );
    describe_gauge!(
        WEBHOOK_PENDING_STUCK,
        "PENDING rows of the delivery table per route created more than 10 minutes ago."
    );
    describe_gauge!(
        WEBHOOK_DEAD,
        "DEAD rows of the delivery table per route: events that need a person (outbox-relay dead list)."
    );
    describe_gauge!(
        WEBHOOK_OLDEST_PENDING_AGE,
        Unit::Seconds,
        "Age of the oldest PENDING row of the delivery table per route; 0 without one."
    );
    describe_gauge!(
        PARKED_AGGREGATES,
        "Aggregates parked behind a dead letter (after_dead_letter = park): their later events wait for outbox-relay dead retry or discard."
    );
    describe_gauge!(
        PARKED_EVENTS,
        "Events waiting in the parking table behind a parked aggregate's dead letter."
    );
    describe_gauge!(
        PARKED_OLDEST_HEAD_AGE,
        Unit::Seconds,
        "Age of the oldest dead letter an aggregate is parked behind; 0 without one."
    );
    describe_counter!(
        TRACE_SPANS_EXPORTED,
        "Produce spans exported to the OTLP collector."
    );
    describe_counter!(
        TRACE_SPANS_DROPPED,
        "Produce spans dropped: the export queue was full or the collector did not take them."
    );
    describe_counter!(
        BYTES_RECEIVED,
        Unit::Bytes,
        "Replication payload bytes received from PostgreSQL."
    );
    describe_counter!(
        PUBLISHED_BYTES,
        Unit::Bytes,
        "Bytes of records the broker acknowledged (key, value and headers, before compression), by topic; the dead-letter topic included."
    );
    describe_histogram!(
        COMMIT_TO_ACK,
        Unit::Seconds,
        "From the PostgreSQL transaction's commit time to the broker's acknowledgement, per event (clock skew between the hosts included)."
    );
    describe_gauge!(
        OLDEST_UNACKED_AGE,
        Unit::Seconds,
        "Age (since its transaction's commit) of the oldest event handed to the producer and not yet acknowledged; 0 when none waits."
    );
    describe_gauge!(
        SLOT_LAG,
        Unit::Bytes,
        "pg_current_wal_lsn() - confirmed_flush_lsn of the slot, sampled from the server every 5 s: the WAL the slot keeps."
    );
    describe_gauge!(
        SLOT_SAFE_WAL_SIZE,
        Unit::Bytes,
        "The slot's safe_wal_size: how much more WAL may be written before the slot is invalidated (absent when max_slot_wal_keep_size is unlimited)."
    );
    describe_counter!(
        SLOT_SAMPLE_FAILURES,
        "Samples of the slot's lag that failed (connection or query); the lag gauge keeps its last value meanwhile."
    );
    describe_counter!(
        KAFKA_TRANSACTIONS,
        "Kafka transactions of exactly-once delivery that ended, by outcome (committed, aborted, commit_failed)."
    );
    describe_gauge!(
        CHECKPOINT_LSN,
        "LSN (as a number) of the last checkpoint committed to the checkpoint topic, or read from it at start (exactly-once delivery)."
    );
    describe_counter!(
        POSITIONS_AHEAD,
        "Sessions that found the position to resume from (the last exactly-once checkpoint, or what this relay confirmed) above the server's WAL position (a database restored from a backup or snapshot) and started from the slot instead: Kafka may hold events the database no longer has."
    );
    describe_histogram!(
        KAFKA_COMMIT_DURATION,
        Unit::Seconds,
        "Duration of each Kafka transaction commit, the flush of its records included (exactly-once delivery)."
    );
    describe_gauge!(
        READY,
        "1 while /ready answers 200 (streaming, producer working), else 0."
    );
    describe_gauge!(
        ROLE_ACTIVE,
        "The relay's role among relays on one slot: 1 while it holds the relay lock (or, with relay.standby_lock = false, streams), 0 while it stands by."
    );
}
