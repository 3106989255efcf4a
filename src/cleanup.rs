//! Cleanup of a table outbox (`postgres.cleanup = "delete-after-ack"`): the
//! relay deletes outbox rows once the broker holds their events, so the
//! table stays small without a cron job.
//!
//! Role: [`Collector`] (`collector.rs`: pure, inside the session machine)
//! notes the ids of the outbox rows of each transaction and releases them
//! once the ack tracker's confirmed position has passed the transaction's
//! end LSN; [`spawn_deleter`] (`deleter.rs`) runs a background task that
//! deletes released rows in batches on an ordinary SQL connection.
//!
//! Invariants:
//! * Never a row above the confirmed position: a transaction's rows are
//!   released only when [`Collector::release`] is given a confirmed
//!   position at or past its Commit's end LSN (the ack tracker's: every
//!   event of it and of every transaction before it acknowledged). What is
//!   not confirmed stays in the table, where `outbox-relay status` counts it
//!   and from where it can be re-published should the slot ever be lost.
//! * Bounded memory. Ids wait between their Commit and its confirmation:
//!   normally about `relay.channel_capacity` of them, but transactions whose
//!   events are all acknowledged keep arriving while an earlier one waits
//!   (a slow partition), and a single transaction may hold a million rows.
//!   So at most [`MAX_HELD_IDS`] ids are held in all. A transaction whose
//!   ids do not fit keeps its transaction id instead, and its rows are
//!   deleted by `xmin` (the inserting transaction; a scan, but only for
//!   transactions that outgrow the cap, like a backfill). The fallback
//!   never deletes another transaction's rows: a row's `xmin` is the
//!   transaction that inserted it. It misses rows inserted in a savepoint
//!   of such a transaction (their `xmin` is the subtransaction's, which
//!   pgoutput does not send): those stay, which errs on the safe side. With
//!   `postgres.shards`, it also keeps to this shard's rows (the
//!   publication's row filter, in the DELETE): the transaction may hold
//!   rows of other shards that their relays have not published yet. At
//!   most [`MAX_HELD_TXNS`] transactions wait; beyond that their rows are
//!   left in the table and counted (`outbox_relay_cleanup_skipped_rows_total`).
//! * Never a row left on purpose, by id or by `xmin`: a row whose dead
//!   letter went without its payload ([`Collector::keep`]: the table holds
//!   the only copy) and a row an earlier session wrote to Kafka
//!   ([`Collector::leave`]: exactly-once resuming inside a transaction).
//!   Their ids travel with the transaction's xid ([`Deletable::keep`]) and
//!   the delete by `xmin` spares them; they count among the
//!   [`MAX_HELD_IDS`] (when all are taken, the transaction gives up one of
//!   the ids it holds, whose row goes by `xmin` anyway). A row that cannot
//!   be spared so (its id unreadable, or no room) turns the delete by
//!   `xmin` of its transaction off: its rows beyond the ids held stay.
//! * Never slows the stream: released rows go to the deleter through a
//!   bounded channel with `try_send`; when the deleter lags they wait in
//!   the session for the next hand-over, up to [`MAX_HELD_IDS`] ids; beyond
//!   that (a slow or unreachable database) they are left in the table and
//!   counted, like rows the deleter could not delete. Rows left behind are safe to delete
//!   by hand once `outbox-relay status` shows the relay past them.
//! * Rows not visible yet are not given up. The walsender sends a
//!   transaction once its commit is flushed, a moment before other
//!   sessions see it, so a DELETE of confirmed rows can find nothing. Each
//!   DELETE returns what it deleted and what it did not find is looked for
//!   again, backing off, for [`LOOK_AGAIN_FOR`](deleter::LOOK_AGAIN_FOR); then it is taken as deleted
//!   by something else and counted (`outbox_relay_cleanup_not_found_rows_total`).
//! * A crash loses what was released and not yet deleted (at most a few
//!   batches): those rows stay, and are counted by nobody. Rows the relay
//!   had not confirmed come back with the replay and are deleted then.

mod collector;
mod deleter;

pub use collector::{Cleanup, Collector, Deletable, MAX_HELD_IDS, MAX_HELD_TXNS};
pub use deleter::{Deleter, DeleterSettings, delete_ids_sql, delete_xids_sql, spawn_deleter};

#[cfg(test)]
mod tests;
