//! `postgres.cleanup = "delete-after-ack"` against real PostgreSQL: rows are
//! deleted once confirmed and never before. The broker outage runs on
//! librdkafka's mock cluster (a broker of the test's own); the sustained
//! load runs against the real broker.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use outbox_relay::cleanup::{Cleanup, Deletable, DeleterSettings, spawn_deleter};
use outbox_relay::relay::RelaySettings;

use crate::support::mixed::ids_in_table;
use crate::support::mock::{Mock, mock_with_topic, read_mock_to_end};
use crate::support::services;
use crate::support::*;

async fn rows_in_table(outbox: &TestOutbox) -> i64 {
    outbox
        .admin
        .query_one(
            &format!("SELECT count(*) FROM public.{}", outbox.table),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until the table is empty, or panics after [`DEADLINE`] saying
/// where its rows are stuck: a slot behind the WAL means the relay stopped
/// confirming; a slot at the end with rows left means the deleter stopped
/// deleting, and the relay role's sessions on the table say what they wait on.
async fn wait_for_empty_table(outbox: &TestOutbox, what: &str) {
    wait_until_explained(
        what,
        DEADLINE,
        || async { rows_in_table(outbox).await == 0 },
        || async {
            let left = rows_in_table(outbox).await;
            let confirmed = outbox.confirmed_flush_lsn().await;
            let wal_end = outbox.current_wal_lsn().await;
            let sessions: Vec<String> = outbox
                .admin
                .query(
                    "SELECT format('pid %s %s, waiting on %s/%s: %s', pid, state, \
                            wait_event_type, wait_event, left(query, 120)) \
                     FROM pg_stat_activity WHERE usename = 'relay' AND strpos(query, $1) > 0",
                    &[&outbox.table],
                )
                .await
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                .unwrap_or_default();
            format!(
                "{left} rows left; slot confirmed {confirmed:?}, WAL at {wal_end}; \
                 the relay's sessions on the table: {sessions:?}"
            )
        },
    )
    .await
}

/// The outbox with cleanup on, the relay's role allowed to delete.
async fn outbox_with_cleanup() -> TestOutbox {
    let outbox = TestOutbox::create("jsonb").await;
    outbox
        .admin
        .batch_execute(&format!("GRANT DELETE ON public.{} TO relay", outbox.table))
        .await
        .unwrap();
    outbox
}

fn cleanup_settings(outbox: &TestOutbox) -> RelaySettings {
    let mut settings = outbox.settings();
    settings.source.cleanup = Cleanup::DeleteAfterAck;
    settings
}

/// Every row the broker has not acknowledged, and every row committed after
/// it, stays in the table while a mock broker is down; once it is back, the
/// table empties and the topic holds every event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_the_broker_does_not_hold_stay_in_the_table() {
    let outbox = outbox_with_cleanup().await;
    let topic = outbox.topic("order");
    let mock: Mock = mock_with_topic(3, &topic, 6);
    // Brokers 1, 2, 3 lead partitions {0, 3}, {1, 4}, {2, 5}.
    for p in 0..6 {
        mock.partition_leader(&topic, p, Some(p % 3 + 1)).unwrap();
    }
    let mut settings = cleanup_settings(&outbox);
    settings.sink.brokers = mock.bootstrap_servers();
    // See faults_broker.rs: the mock checks sequences only with one request
    // in flight per connection.
    settings
        .sink
        .properties
        .push(("max.in.flight.requests.per.connection".into(), "1".into()));
    settings.sink.message_timeout_ms = 2000;
    let relay = Relay::in_process(settings);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();

    // Cleanup works: confirmed rows go.
    let mut committed = outbox
        .commit_events(&mut writer, 50, 2, 60, &mut seqs)
        .await;
    wait_until("the confirmed rows to be deleted", DEADLINE, || async {
        rows_in_table(&outbox).await == 0
    })
    .await;

    mock.broker_down(1).unwrap();
    // Every transaction touches all 60 aggregates, so partitions led by
    // broker 1: none can be confirmed while it is down, though brokers 2
    // and 3 acknowledge their share of each.
    let held = outbox
        .commit_events(&mut writer, 20, 60, 60, &mut seqs)
        .await;
    let held_ids: HashSet<String> = held.iter().map(|c| c.id.clone()).collect();
    committed.extend(held);
    // Watch the table while the relay goes round its retry loop (its
    // producer times out, it rewinds, and again: two new walsenders).
    let mut pids = HashSet::new();
    let mut samples = 0;
    let first_pid = outbox.walsender_pid().await;
    let fault_deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while pids.len() < 2 {
        assert!(
            tokio::time::Instant::now() < fault_deadline,
            "the relay did not rewind twice within 60 s of broker 1 going down"
        );
        let present = ids_in_table(&outbox).await;
        let missing = held_ids.difference(&present).count();
        assert_eq!(
            missing, 0,
            "{missing} rows deleted whose transactions the broker did not fully hold"
        );
        samples += 1;
        if let Some(pid) = outbox
            .walsender_pid()
            .await
            .filter(|p| Some(*p) != first_pid)
        {
            pids.insert(pid);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "broker 1 down: {samples} samples of the table, all {} unconfirmed rows present",
        held_ids.len()
    );
    mock.broker_up(1).unwrap();

    wait_for_empty_table(&outbox, "the table to empty after recovery").await;
    relay.stop().await.expect("graceful stop");
    let received = read_mock_to_end(&mock.bootstrap_servers(), &topic).await;
    check_delivery("cleanup-broker-down", &committed, &received);
    outbox.drop_all().await;
}

/// A writer commits 20 000 events for a while; the relay deletes behind it,
/// so the table holds a small window of them, never the backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_stays_small_under_sustained_load() {
    let outbox = outbox_with_cleanup().await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 6).await;
    let relay = Relay::in_process(cleanup_settings(&outbox));
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = Vec::new();
    let mut most = 0;
    let started = std::time::Instant::now();
    for _ in 0..40 {
        committed.extend(
            outbox
                .commit_events(&mut writer, 100, 5, 100, &mut seqs)
                .await,
        );
        most = most.max(rows_in_table(&outbox).await);
    }
    let wrote_for = started.elapsed();
    let total = committed.len() as i64;
    wait_for_empty_table(&outbox, "the table to empty").await;
    let size: i64 = outbox
        .admin
        .query_one(
            &format!("SELECT pg_total_relation_size('public.{}')", outbox.table),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    println!(
        "sustained load: {total} events in {wrote_for:?}; at most {most} rows in the table \
         (sampled after each 500), 0 at the end; table with index and TOAST {size} bytes"
    );
    assert!(
        most < total / 4,
        "the table held {most} of {total} rows at once: cleanup fell behind"
    );
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    relay.stop().await.expect("graceful stop");
    check_delivery("cleanup-sustained", &committed, &received);
    outbox.drop_all().await;
}

/// PostgreSQL sends a transaction to the slot once its commit is flushed, a
/// moment before other sessions can see it; a relay that publishes and
/// confirms within that moment (a busy machine, a fast broker) hands the
/// deleter rows its DELETE cannot see yet. Here without the timing: the
/// deleter is handed the ids of one open transaction's rows and the xid of
/// another's, runs its DELETEs (which find nothing), and only then do the
/// transactions commit. Their rows must still go: a deleter that took
/// "nothing deleted" as done leaves them in the table for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_not_yet_visible_when_the_deleter_runs_are_deleted_once_visible() {
    let outbox = outbox_with_cleanup().await;
    let settings = cleanup_settings(&outbox);
    let (mut deleter, task) = spawn_deleter(DeleterSettings {
        connection: settings.replication.connection.clone(),
        table: settings.table.clone(),
        id_column: settings.columns.id.clone(),
        aggregate_id_column: settings.columns.aggregate_id.clone(),
        shard: settings.source.shard,
    });
    let insert = |id: &str| {
        format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload)
             VALUES ('{id}', 'order', 'g1', 'Placed', '{{}}')",
            outbox.table
        )
    };
    // By id: five rows whose ids the deleter gets.
    let mut by_id = outbox.writer().await;
    let by_id = by_id.transaction().await.unwrap();
    let ids: Vec<String> = (0..5).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    for id in &ids {
        by_id.batch_execute(&insert(id)).await.unwrap();
    }
    // By xmin (a transaction too large to hold its ids): three rows, only
    // the transaction's id handed over.
    let mut by_xmin = outbox.writer().await;
    let by_xmin = by_xmin.transaction().await.unwrap();
    for _ in 0..3 {
        let id = uuid::Uuid::new_v4().to_string();
        by_xmin.batch_execute(&insert(&id)).await.unwrap();
    }
    let xid: i64 = by_xmin
        .query_one("SELECT txid_current()", &[])
        .await
        .unwrap()
        .get(0);
    // The delete by xmin is a sequential scan of the table (the one the
    // test runs before its own count): the table's scan count, which the
    // deleter's session reports once its statement ended, tells that it
    // ran. (Its text in pg_stat_activity does not: the session shows the
    // statement as soon as it prepares it.)
    let scans = async || -> i64 {
        outbox
            .admin
            .query_one(
                "SELECT coalesce(seq_scan, 0) FROM pg_stat_user_tables \
                 WHERE relid = to_regclass($1)",
                &[&format!("public.{}", outbox.table)],
            )
            .await
            .unwrap()
            .get(0)
    };
    let scans_before = scans().await;
    deleter.hand_over(Some(Deletable {
        ids: ids.clone(),
        xids: vec![xid as u32],
        keep: Vec::new(),
    }));
    // The deleter ran both DELETEs (the xmin one runs after the id one): it
    // found nothing, the rows being invisible to it.
    wait_until("the deleter's first DELETEs to run", DEADLINE, || async {
        scans().await > scans_before
    })
    .await;
    by_id.commit().await.unwrap();
    by_xmin.commit().await.unwrap();
    assert_eq!(rows_in_table(&outbox).await, 8, "both transactions' rows");
    wait_for_empty_table(&outbox, "the rows to be deleted once visible").await;
    drop(deleter);
    tokio::time::timeout(DEADLINE, task)
        .await
        .expect("the deleter ends once its session is gone")
        .unwrap();
    outbox.drop_all().await;
}

/// Ids are values of the user's id column, whatever they contain: quotes,
/// backslashes, braces and commas, the word NULL. The deleter sends them as
/// parameters of its prepared DELETEs, never in the statement's text (which
/// `pg_stat_activity` shows), deletes exactly those by id, and by `xmin`
/// spares exactly the kept ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_of_any_text_go_as_parameters_and_kept_ids_are_spared() {
    let outbox = outbox_with_cleanup().await;
    let table = format!("{}_text_ids", outbox.table);
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE TABLE public.{table} (id text PRIMARY KEY, aggregateid text); \
             GRANT SELECT, DELETE ON public.{table} TO relay;"
        ))
        .await
        .unwrap();
    let by_id = ["it's", "back\\'slash", "{brace,comma}", "say \"hi\""];
    let by_xmin = ["x'1", "NULL", "kept 'one'", "a\\b"];
    let writer = outbox.writer().await;
    let insert = format!("INSERT INTO public.{table} (id) SELECT unnest($1::text[])");
    writer.execute(&insert, &[&&by_id[..]]).await.unwrap();
    let xid: i64 = writer
        .query(
            &format!("{insert} RETURNING xmin::text::bigint"),
            &[&&by_xmin[..]],
        )
        .await
        .unwrap()[0]
        .get(0);
    let settings = cleanup_settings(&outbox);
    let (mut deleter, task) = spawn_deleter(DeleterSettings {
        connection: settings.replication.connection.clone(),
        table: ("public".to_owned(), table.clone()),
        id_column: "id".to_owned(),
        aggregate_id_column: "aggregateid".to_owned(),
        shard: settings.source.shard,
    });
    deleter.hand_over(Some(Deletable {
        ids: by_id.iter().map(|s| (*s).to_owned()).collect(),
        xids: vec![u32::try_from(xid).unwrap()],
        keep: vec!["kept 'one'".to_owned(), "a\\b".to_owned()],
    }));
    let left = async || -> Vec<String> {
        let rows = outbox
            .admin
            .query(&format!("SELECT id FROM public.{table} ORDER BY id"), &[])
            .await
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    };
    wait_until(
        "the deleter to delete all but the kept rows",
        DEADLINE,
        || async { left().await.len() == 2 },
    )
    .await;
    assert_eq!(left().await, ["a\\b", "kept 'one'"]);
    // The statements the relay's sessions ran name no id.
    let texts: Vec<String> = outbox
        .admin
        .query(
            "SELECT query FROM pg_stat_activity WHERE usename = 'relay' AND strpos(query, $1) > 0",
            &[&table],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        !texts.is_empty(),
        "the deleter's session shows its last DELETE"
    );
    for text in &texts {
        assert!(
            !text.contains("kept") && !text.contains("brace") && text.contains("$1"),
            "{text}"
        );
    }
    drop(deleter);
    tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap();
    outbox
        .admin
        .batch_execute(&format!("DROP TABLE public.{table}"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

/// `ALTER ROLE relay CONNECTION LIMIT 0` for the test: the relay's role can
/// open no new session. Lifted when dropped, whatever happened, so a failing
/// test never leaves the shared role locked out.
struct RoleLockedOut;

impl RoleLockedOut {
    async fn set(admin: &tokio_postgres::Client) -> Self {
        let guard = RoleLockedOut;
        admin
            .batch_execute("ALTER ROLE relay CONNECTION LIMIT 0")
            .await
            .expect("limit the relay role's connections");
        guard
    }
}

impl Drop for RoleLockedOut {
    fn drop(&mut self) {
        // psql: a Drop cannot await, and this must also run while a panic unwinds.
        let ok = psql_as_superuser(&["ALTER ROLE relay CONNECTION LIMIT -1"]);
        if !ok {
            eprintln!("could not lift the relay role's connection limit");
        }
    }
}

/// The tests here hold the services alone ([`services::exclusive`]):
/// `make test` runs them after the others, one at a time.
mod alone {
    use super::*;

    /// The deleter loses its session and cannot open another for a few
    /// seconds (the role's connection slots are taken, as on a busy server or
    /// during a restart): the confirmed rows wait, none is deleted early, and
    /// once sessions can be opened again they are deleted. A deleter that
    /// gave up within a second would leave them in the table for good.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn confirmed_rows_are_deleted_after_the_database_refused_sessions_for_a_while() {
        // Exclusive: the relay role's connection limit is server-wide.
        let serial = services::exclusive().await;
        let outbox = TestOutbox::create_exclusive(&serial, "jsonb").await;
        outbox
            .admin
            .batch_execute(&format!("GRANT DELETE ON public.{} TO relay", outbox.table))
            .await
            .unwrap();
        let topic = outbox.topic("order");
        outbox.create_topic(&topic, 3).await;
        // Without the relay lock: its session is an ordinary one too, and
        // losing it stops the stream (whether the held rows were confirmed
        // first was a race); this test is about the deleter.
        let mut settings = cleanup_settings(&outbox);
        settings.lock.enabled = false;
        let relay = Relay::in_process(settings);
        let mut writer = outbox.writer().await;
        let mut seqs = HashMap::new();

        let mut committed = outbox
            .commit_events(&mut writer, 10, 5, 10, &mut seqs)
            .await;
        wait_until("the deleter's first batches", DEADLINE, || async {
            rows_in_table(&outbox).await == 0
        })
        .await;

        let locked_out = RoleLockedOut::set(&outbox.admin).await;
        // The relay role's ordinary sessions (the deleter's, the catalog's),
        // not its walsender: the stream goes on.
        let terminated: i64 = outbox
            .admin
            .query_one(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE usename = 'relay' AND backend_type = 'client backend') t",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(terminated >= 1, "the deleter had no session to terminate");
        let held = outbox
            .commit_events(&mut writer, 10, 5, 10, &mut seqs)
            .await;
        let held_ids: HashSet<String> = held.iter().map(|c| c.id.clone()).collect();
        committed.extend(held);
        let after_last_commit = outbox.current_wal_lsn().await;
        wait_until("the slot to confirm the held rows", DEADLINE, || async {
            outbox
                .confirmed_flush_lsn()
                .await
                .is_some_and(|c| c >= after_last_commit)
        })
        .await;
        // The outage itself: sessions stay refused for 3 s after the rows were
        // confirmed and handed to the deleter.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let present = ids_in_table(&outbox).await;
        assert!(
            held_ids.is_subset(&present),
            "rows went while the relay role could open no session"
        );
        drop(locked_out);

        wait_until(
            "the confirmed rows to be deleted once sessions open again",
            DEADLINE,
            || async { rows_in_table(&outbox).await == 0 },
        )
        .await;
        relay.stop().await.expect("graceful stop");
        let received = consume_all_ids(&topic, &committed, DEADLINE).await;
        check_delivery("cleanup-sessions-refused", &committed, &received);
        outbox.drop_all().await;
    }
}

/// How fast the deleter empties the table, by id and by `xmin`: not a check
/// (ignored), a measurement. Inserts `OUTBOX_CLEANUP_BENCH_ROWS` rows
/// (200,000 unless set) in transactions of 1,000, hands the deleter their
/// ids (1,000 per hand-over, one DELETE's worth: its queue holds 256
/// hand-overs, and more than [`outbox_relay::cleanup::MAX_HELD_IDS`] ids
/// waiting would be dropped) and times until the table is empty (looked at
/// every 10 ms); then the same rows again, handed over by their
/// transactions' ids. Prints rows per second. Run:
/// `cargo test --test it -- --ignored --nocapture outbox_cleanup::deleter_throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn deleter_throughput() {
    let rows: usize = std::env::var("OUTBOX_CLEANUP_BENCH_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let outbox = outbox_with_cleanup().await;
    let settings = cleanup_settings(&outbox);
    // No slot: the bench's inserts need not be kept in WAL for anyone.
    outbox
        .admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
        .await
        .unwrap();
    let fill = async || -> (Vec<String>, Vec<u32>) {
        let mut ids = Vec::with_capacity(rows);
        let mut xids = Vec::new();
        let writer = outbox.writer().await;
        for _ in 0..rows.div_ceil(1_000) {
            let batch = writer
                .query(
                    &format!(
                        "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                         SELECT gen_random_uuid(), 'order', 'g' || i, 'Placed', '{{}}' \
                         FROM generate_series(1, 1000) AS i \
                         RETURNING id::text, xmin::text",
                        outbox.table
                    ),
                    &[],
                )
                .await
                .unwrap();
            ids.extend(batch.iter().map(|r| r.get::<_, String>(0)));
            xids.push(batch[0].get::<_, String>(1).parse().unwrap());
        }
        outbox
            .admin
            .batch_execute(&format!("VACUUM ANALYZE public.{}", outbox.table))
            .await
            .unwrap();
        (ids, xids)
    };
    let (ids, _) = fill().await;
    let (mut deleter, task) = spawn_deleter(DeleterSettings {
        connection: settings.replication.connection.clone(),
        table: settings.table.clone(),
        id_column: settings.columns.id.clone(),
        aggregate_id_column: settings.columns.aggregate_id.clone(),
        shard: settings.source.shard,
    });
    let started = tokio::time::Instant::now();
    for chunk in ids.chunks(1_000) {
        deleter.hand_over(Some(Deletable {
            ids: chunk.to_vec(),
            ..Deletable::default()
        }));
        tokio::task::yield_now().await;
    }
    let by_id = emptied_after(&outbox, started).await;

    let (_, xids) = fill().await;
    let started = tokio::time::Instant::now();
    for xid in xids {
        deleter.hand_over(Some(Deletable {
            xids: vec![xid],
            ..Deletable::default()
        }));
        tokio::task::yield_now().await;
    }
    let by_xmin = emptied_after(&outbox, started).await;
    drop(deleter);
    task.await.unwrap();
    let rate = |d: Duration| rows as f64 / d.as_secs_f64();
    println!(
        "deleter throughput, {rows} rows: by id {:.2} s = {:.0} rows/s; by xmin {:.2} s = \
         {:.0} rows/s",
        by_id.as_secs_f64(),
        rate(by_id),
        by_xmin.as_secs_f64(),
        rate(by_xmin)
    );
    outbox.drop_all().await;
}

/// How long after `started` the table was first seen empty, looking every
/// 10 ms (finer than [`wait_until`]'s 100 ms: a delete by `xmin` of 200,000
/// rows takes a few tenths of a second).
async fn emptied_after(outbox: &TestOutbox, started: tokio::time::Instant) -> Duration {
    let empty = format!("SELECT NOT EXISTS (SELECT 1 FROM public.{})", outbox.table);
    loop {
        let done: bool = outbox.admin.query_one(&empty, &[]).await.unwrap().get(0);
        if done {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the deleter did not empty the table within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
