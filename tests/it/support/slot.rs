//! The test's view of a replication slot. [`slot_state`] is the one query of
//! `pg_replication_slots`; every slot check in the tests goes through it
//! (the [`TestOutbox`] methods below are shorthands for the test's own
//! slot). Also: ending the walsender that holds a slot, and temporary
//! `test_decoding` slots that tell where a transaction's commit ends.

use std::time::Duration;

use pgoutput::lsn::Lsn;
use tokio_postgres::Client;

use super::{TestOutbox, random_name};

/// One row of `pg_replication_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    /// A walsender holds the slot.
    pub active: bool,
    /// The pid of that walsender; a new pid means the relay reconnected.
    pub active_pid: Option<i32>,
    /// What the consumer confirmed; the relay's only durable position.
    pub confirmed_flush_lsn: Option<Lsn>,
    /// The oldest WAL the slot keeps.
    pub restart_lsn: Option<Lsn>,
    /// `reserved`, `extended`, `unreserved` or `lost` (invalidated).
    pub wal_status: Option<String>,
    /// The output plugin (`pgoutput` for the relay's slots; none for a
    /// physical slot).
    pub plugin: Option<String>,
    /// `logical` or `physical`.
    pub slot_type: String,
    /// Whether the slot decodes prepared transactions at PREPARE (the relay
    /// wants commits only).
    pub two_phase: bool,
}

/// The slot `slot` as `pg_replication_slots` shows it now; `None` when there
/// is no such slot.
pub async fn slot_state(client: &Client, slot: &str) -> Option<SlotState> {
    let row = client
        .query_opt(
            "SELECT active, active_pid, confirmed_flush_lsn::text, restart_lsn::text, wal_status,
                    plugin::text, slot_type, two_phase
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .expect("read pg_replication_slots")?;
    let lsn = |i: usize| {
        row.get::<_, Option<String>>(i)
            .map(|t| t.parse::<Lsn>().expect("lsn"))
    };
    Some(SlotState {
        active: row.get(0),
        active_pid: row.get(1),
        confirmed_flush_lsn: lsn(2),
        restart_lsn: lsn(3),
        wal_status: row.get(4),
        plugin: row.get(5),
        slot_type: row.get(6),
        two_phase: row.get(7),
    })
}

impl TestOutbox {
    /// The test's slot now (`None` once it was dropped).
    pub async fn slot(&self) -> Option<SlotState> {
        slot_state(&self.admin, &self.slot).await
    }

    pub async fn confirmed_flush_lsn(&self) -> Option<Lsn> {
        self.slot().await.and_then(|s| s.confirmed_flush_lsn)
    }

    /// Whether a walsender holds the slot (false when the slot is gone).
    pub async fn slot_active(&self) -> bool {
        self.slot().await.is_some_and(|s| s.active)
    }

    /// The pid of the walsender holding this test's slot, if one does.
    pub async fn walsender_pid(&self) -> Option<i32> {
        self.slot().await.and_then(|s| s.active_pid)
    }

    /// Waits for a walsender to hold the slot (a pid other than `not`), then
    /// terminates it with `pg_terminate_backend`; returns its pid.
    pub async fn terminate_walsender(&self, not: Option<i32>, within: Duration) -> i32 {
        let deadline = tokio::time::Instant::now() + within;
        let pid = loop {
            if let Some(pid) = self.walsender_pid().await.filter(|p| Some(*p) != not) {
                break pid;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no walsender took the slot within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let done: bool = self
            .admin
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap()
            .get(0);
        assert!(done, "pg_terminate_backend({pid}) failed");
        pid
    }

    /// Terminates the walsender holding the slot right now, if any (no
    /// waiting); returns its pid.
    pub async fn terminate_slot_holder(&self) -> Option<i32> {
        let pid = self.walsender_pid().await?;
        self.admin
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .expect("pg_terminate_backend");
        Some(pid)
    }

    /// A temporary `test_decoding` slot of the test's own, opened before the
    /// transactions whose commit position the test needs to know.
    pub async fn open_commit_watch(&self) -> String {
        let watch = random_name("watch");
        self.admin
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'test_decoding', true)",
                &[&watch],
            )
            .await
            .expect("create the commit-watch slot");
        watch
    }

    /// The end LSN of the first outbox transaction committed since `watch`
    /// was opened: confirming it (or anything past its commit record) would
    /// tell PostgreSQL that transaction is done. Drops the watch slot.
    pub async fn first_outbox_commit_end(&self, watch: &str) -> Lsn {
        let row = self
            .admin
            .query_one(
                &format!(
                    "WITH c AS (SELECT lsn, xid, data FROM pg_logical_slot_peek_changes($1, NULL, NULL))
                     SELECT min(lsn)::text FROM c
                     WHERE data LIKE 'COMMIT%'
                       AND xid IN (SELECT xid FROM c WHERE data LIKE 'table public.{}:%')",
                    self.table
                ),
                &[&watch],
            )
            .await
            .expect("peek the commit-watch slot");
        let end: Option<String> = row.get(0);
        self.admin
            .execute("SELECT pg_drop_replication_slot($1)", &[&watch])
            .await
            .expect("drop the commit-watch slot");
        end.expect("an outbox transaction committed")
            .parse()
            .expect("lsn")
    }
}

/// Inserts one outbox row for `aggregate_type` in its own transaction;
/// returns its id and the transaction's commit end.
pub async fn insert_watched(outbox: &TestOutbox, aggregate_type: &str) -> (String, Lsn) {
    let watch = outbox.open_commit_watch().await;
    let id = uuid::Uuid::new_v4().to_string();
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload)
             VALUES ('{id}', '{aggregate_type}', 'g1', 'Placed', '{{\"where\": \"{aggregate_type}\"}}')",
            outbox.table
        ))
        .await
        .unwrap();
    (id, outbox.first_outbox_commit_end(&watch).await)
}
