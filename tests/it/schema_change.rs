//! The outbox's shape and the objects around it: ALTER TABLE while events
//! stream (a column added streams on, a mapped column dropped dead-letters
//! naming it), a partitioned outbox (with and without
//! `publish_via_partition_root`, a partition attached while streaming), a
//! renamed outbox table, a publication FOR ALL TABLES; and what the relay
//! refuses at start: a publication without the outbox table, a missing
//! table, a two-phase slot.

use std::time::{Duration, Instant};

use crate::support::services;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_add_column_streams_on_and_dropped_mapped_column_dead_letters() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let relay = Relay::in_process(outbox.settings());
    let t = outbox.table.clone();

    // (a) A nullable column added while events stream.
    let mut loadgen =
        outbox.start_loadgen(&["--events", "3000", "--rate", "1000", "--aggregates", "20"]);
    wait_until("the first events to commit", DEADLINE, || async {
        committed_rows(&outbox).await >= 1000
    })
    .await;
    outbox
        .admin
        .batch_execute(&format!("ALTER TABLE public.{t} ADD COLUMN note text"))
        .await
        .unwrap();
    wait_child(&mut loadgen, DEADLINE).await;
    let noted = uuid::Uuid::new_v4().to_string();
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload, note)
             VALUES ('{noted}', 'order', 'noted', 'OrderPlaced', '{{\"seq\":1}}', 'set')"
        ))
        .await
        .unwrap();
    let committed = outbox.committed_from_table().await;
    assert_eq!(committed.len(), 3001);
    consume_all_ids(&topic, &committed, DEADLINE).await;

    // (b) A mapped column dropped: every later row dead-letters, naming it.
    outbox
        .admin
        .batch_execute(&format!("ALTER TABLE public.{t} DROP COLUMN type"))
        .await
        .unwrap();
    let mut dead: Vec<String> = Vec::new();
    let writer = outbox.writer().await;
    for i in 0..20 {
        let id = uuid::Uuid::new_v4().to_string();
        writer
            .execute(
                &format!(
                    "INSERT INTO public.{t} (id, aggregatetype, aggregateid, payload)
                     VALUES ($1::text::uuid, 'order', 'after-drop', jsonb_build_object('seq', $2::int))"
                ),
                &[&id, &i],
            )
            .await
            .unwrap();
        dead.push(id);
    }
    let after_drop = outbox.current_wal_lsn().await;
    let want = dead.len();
    let dlq = consume(&outbox.dlq_topic, DEADLINE, move |r| r.len() >= want).await;
    assert_eq!(
        dlq.len(),
        dead.len(),
        "every row after the drop dead-letters"
    );
    for (r, id) in dlq.iter().zip(&dead) {
        assert_eq!(r.header("id"), Some(id.as_str()), "in commit order");
        let reason = r.header("dlq_reason").expect("dlq_reason header");
        assert!(
            reason.contains("\"type\""),
            "reason names the column: {reason}"
        );
        assert_eq!(r.header("dlq_reason_code"), Some("missing_column"));
        assert!(r.header("lsn").is_some(), "lsn header");
    }
    // The stream goes on: the slot advances past the dead-lettered rows.
    wait_until(
        "the slot to confirm past the dropped-column rows",
        DEADLINE,
        || async {
            outbox
                .confirmed_flush_lsn()
                .await
                .is_some_and(|c| c >= after_drop)
        },
    )
    .await;
    relay.stop().await.expect("graceful stop");
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("alter-table", &committed, &received);
    assert_eq!(summary.duplicated, 0);
    assert_eq!(
        received.len(),
        committed.len(),
        "nothing after the drop reaches the event topic"
    );
    Summary {
        case: "alter-table-dropped-column".into(),
        committed: dead.len(),
        delivered: 0,
        lost: 0,
        duplicated: 0,
        dead_lettered: dlq.len(),
    }
    .print();
    outbox.drop_all().await;
    report_wall_time("alter-table", started);
}

// --------------------------------------------------------- a partitioned outbox

/// A range-partitioned outbox (by `created_at`, one partition per month of
/// 2026 from January to March), its business table, a publication with or
/// without `publish_via_partition_root`, and a slot.
async fn partitioned_outbox(via_root: bool) -> TestOutbox {
    let services = services::shared().await;
    let admin = pg_admin().await;
    let table = random_name("outbox");
    let publication = random_name("pub");
    let slot = random_name("slot");
    let mut ddl = format!(
        "CREATE TABLE public.{table} (
            id uuid NOT NULL,
            aggregatetype text NOT NULL,
            aggregateid text,
            type text NOT NULL,
            payload jsonb,
            \"timestamp\" timestamptz NOT NULL DEFAULT now(),
            tracingspancontext text,
            seq bigint,
            created_at date NOT NULL,
            PRIMARY KEY (id, created_at)
         ) PARTITION BY RANGE (created_at);
         CREATE TABLE public.{table}_orders (id bigserial PRIMARY KEY, aggregateid text, seq bigint);"
    );
    for month in 1..=3 {
        ddl.push_str(&format!(
            "CREATE TABLE public.{table}_m{month} PARTITION OF public.{table}
               FOR VALUES FROM ('2026-{month:02}-01') TO ('2026-{next:02}-01');",
            next = month + 1
        ));
    }
    ddl.push_str(&format!(
        "CREATE PUBLICATION {publication} FOR TABLE public.{table}
           WITH (publish = 'insert', publish_via_partition_root = {via_root});"
    ));
    admin.batch_execute(&ddl).await.expect("partitioned outbox");
    admin
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .expect("create slot");
    TestOutbox::from_parts(services, admin, table, publication, slot)
}

/// Commits `txns` transactions of `rows` outbox rows each, the rows spread
/// over the months in `months` (so over their partitions) and over ten
/// aggregates; returns them in commit order.
async fn commit_to_partitions(
    outbox: &TestOutbox,
    writer: &mut tokio_postgres::Client,
    txns: usize,
    rows: usize,
    months: &[u32],
    seqs: &mut std::collections::HashMap<String, i64>,
) -> Vec<Committed> {
    let insert = writer
        .prepare(&format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq, created_at)
             VALUES ($1::text::uuid, 'order', $2, 'OrderPlaced', $3::text::jsonb, $4, $5::text::date)",
            outbox.table
        ))
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut n: usize = seqs.values().map(|v| *v as usize).sum();
    for _ in 0..txns {
        let tx = writer.transaction().await.unwrap();
        for _ in 0..rows {
            let aggregate = format!("agg-{}", n % 10);
            let month = months[n % months.len()];
            n += 1;
            let seq = seqs.entry(aggregate.clone()).or_insert(0);
            *seq += 1;
            let id = uuid::Uuid::new_v4().to_string();
            let payload = format!(r#"{{"aggregate":"{aggregate}","seq":{seq}}}"#);
            let day = format!("2026-{month:02}-15");
            tx.execute(&insert, &[&id, &aggregate, &payload, &*seq, &day])
                .await
                .unwrap();
            out.push(Committed {
                id,
                aggregate,
                seq: *seq,
            });
        }
        tx.commit().await.unwrap();
    }
    out
}

async fn partitioned_outbox_delivers_every_row_once_in_order(via_root: bool) {
    let case = format!("partitioned-via-root-{via_root}");
    let outbox = partitioned_outbox(via_root).await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let relay = Relay::in_process(outbox.settings());
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let mut committed =
        commit_to_partitions(&outbox, &mut writer, 30, 5, &[1, 2, 3], &mut seqs).await;
    // A partition attached while the relay streams: its rows are the outbox's too.
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE TABLE public.{t}_m4 (LIKE public.{t} INCLUDING DEFAULTS);
             ALTER TABLE public.{t} ATTACH PARTITION public.{t}_m4
               FOR VALUES FROM ('2026-04-01') TO ('2026-05-01');",
            t = outbox.table
        ))
        .await
        .expect("attach a partition");
    committed
        .extend(commit_to_partitions(&outbox, &mut writer, 30, 5, &[4, 1, 4], &mut seqs).await);
    let want = committed.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    relay.stop().await.expect("graceful stop");
    let received_all = consume_to_end(&topic).await;
    let summary = check_delivery(&case, &committed, &received_all);
    assert_eq!(summary.duplicated, 0, "{case}: exactly once");
    assert_eq!(received.len(), committed.len(), "{case}: nothing extra");
    let slot = outbox.confirmed_flush_lsn().await.expect("slot");
    assert!(slot > pgoutput::lsn::Lsn::ZERO);
    outbox.drop_all().await;
}

// A partitioned outbox, publication without publish_via_partition_root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_outbox_with_leaf_relations_delivers_every_row_once_in_order() {
    partitioned_outbox_delivers_every_row_once_in_order(false).await;
}

// A partitioned outbox, publication with publish_via_partition_root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_outbox_via_root_delivers_every_row_once_in_order() {
    partitioned_outbox_delivers_every_row_once_in_order(true).await;
}

// -------------------------------- a renamed table, a publication for all tables

// A renamed outbox keeps its OID: the relay streams on (and warns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_outbox_table_keeps_streaming() {
    let mut outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let relay = Relay::in_process(outbox.settings());
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 20, 2, 5, &mut seqs).await;
    // Streaming under the configured name first.
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let renamed = format!("{}_renamed", outbox.table);
    outbox
        .admin
        .batch_execute(&format!(
            "ALTER TABLE public.{} RENAME TO {renamed}",
            outbox.table
        ))
        .await
        .unwrap();
    let old_name = std::mem::replace(&mut outbox.table, renamed);
    // The business table keeps its name: commit_events writes to <table>_orders.
    outbox
        .admin
        .batch_execute(&format!(
            "ALTER TABLE public.{old_name}_orders RENAME TO {}_orders",
            outbox.table
        ))
        .await
        .unwrap();
    committed.extend(outbox.commit_events(&mut writer, 20, 2, 5, &mut seqs).await);
    // A reconnect after the rename must still find the table (by its OID;
    // the configured name is gone).
    wait_until("the relay to hold the slot", DEADLINE, || {
        outbox.slot_active()
    })
    .await;
    outbox.terminate_slot_holder().await;
    committed.extend(outbox.commit_events(&mut writer, 20, 2, 5, &mut seqs).await);
    let want = committed.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    relay.stop().await.expect("graceful stop");
    let summary = check_delivery("renamed-outbox", &committed, &received);
    assert_eq!(summary.duplicated, 0);
    outbox.drop_all().await;
}

// With a publication FOR ALL TABLES, the business rows arrive too: they are
// told apart by the catalog (a look-up per relation), counted, never published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_for_all_tables_publishes_only_the_outbox() {
    let outbox = TestOutbox::create("jsonb").await;
    let all = random_name("pub");
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE PUBLICATION {all} FOR ALL TABLES WITH (publish = 'insert')"
        ))
        .await
        .unwrap();
    // A slot older than its publication cannot decode a change committed
    // between the two (pgoutput looks the publication up as of the change),
    // and with FOR ALL TABLES any other test's write is such a change: the
    // slot is made again, after the publication.
    for sql in [
        "SELECT pg_drop_replication_slot($1)",
        "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
    ] {
        outbox
            .admin
            .execute(sql, &[&outbox.slot])
            .await
            .expect("recreate the slot after the publication");
    }
    let topic = outbox.topic("order");
    let mut settings = outbox.settings();
    settings.replication.publication = all.clone();
    let relay = Relay::in_process(settings);
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let committed = outbox.commit_events(&mut writer, 50, 2, 5, &mut seqs).await;
    let want = committed.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    relay.stop().await.expect("graceful stop");
    let summary = check_delivery("all-tables", &committed, &received);
    assert_eq!(summary.duplicated, 0);
    assert_eq!(
        received.len(),
        committed.len(),
        "business rows are not events"
    );
    outbox
        .admin
        .batch_execute(&format!("DROP PUBLICATION {all}"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

// ------------------------------------------------------------- refused at start

/// Runs the relay with `settings` and returns its fatal error's text.
async fn fatal_start_error(settings: outbox_relay::relay::RelaySettings) -> String {
    Relay::in_process(settings)
        .join(Duration::from_secs(30))
        .await
        .expect_err("the relay refuses to start")
        .to_string()
}

// A publication that does not contain the outbox would stream nothing,
// forever: refused at start with the SQL that fixes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_without_the_outbox_table_is_refused_with_the_fix() {
    let outbox = TestOutbox::create("jsonb").await;
    let other = random_name("pub");
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE PUBLICATION {other} FOR TABLE public.{}_orders WITH (publish = 'insert')",
            outbox.table
        ))
        .await
        .unwrap();
    let mut settings = outbox.settings();
    settings.replication.publication = other.clone();
    let text = fatal_start_error(settings).await;
    assert!(
        text.contains(&format!(
            "ALTER PUBLICATION {other} ADD TABLE public.{}",
            outbox.table
        )),
        "{text}"
    );
    outbox
        .admin
        .batch_execute(&format!("DROP PUBLICATION {other}"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_outbox_table_is_refused_naming_it() {
    let outbox = TestOutbox::create("jsonb").await;
    let gone = format!("{}_gone", outbox.table);
    let settings = outbox.settings_with_postgres(&[("table", &gone)]);
    let text = fatal_start_error(settings).await;
    assert!(
        text.contains(&format!("public.{}_gone", outbox.table)) && text.contains("postgres.table"),
        "{text}"
    );
    outbox.drop_all().await;
}

// A slot created for two-phase decoding is refused at start, naming the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_phase_slot_is_refused_at_start() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox
        .admin
        .batch_execute(&format!(
            "SELECT pg_drop_replication_slot('{s}');
             SELECT pg_create_logical_replication_slot('{s}', 'pgoutput', false, true);",
            s = outbox.slot
        ))
        .await
        .unwrap();
    let relay = Relay::in_process(outbox.settings());
    let err = relay
        .join(Duration::from_secs(30))
        .await
        .expect_err("a two-phase slot is fatal");
    let text = err.to_string();
    assert!(
        text.contains(&outbox.slot) && text.contains("two_phase"),
        "{text}"
    );
    outbox.drop_all().await;
}
