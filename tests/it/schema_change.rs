//! The edges around the core, against real PostgreSQL and Kafka: what the
//! relay does when the outbox is partitioned, when the server behind the
//! URL changes, when someone moves the slot, and how much a crash re-sends.

use std::time::Duration;

use crate::support::proxy::StallProxy;
use crate::support::{http, services};
use crate::support::*;


/// A relay config with the default status interval (10 s) instead of the
/// tests' 1 s, so that what a crash re-sends is what users would see.
fn config_with_default_status_interval(outbox: &TestOutbox, extra: &str) -> std::path::PathBuf {
    let path = outbox.write_config(extra);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("status_interval_secs = 1\n"),
        "config layout changed"
    );
    std::fs::write(
        &path,
        text.replace("status_interval_secs = 1\n", "status_interval_secs = 10\n"),
    )
    .unwrap();
    path
}

// Case 28: kill -9 under steady load re-sends at most about one second of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_steady_load_resends_at_most_about_a_second_of_it() {
    const RATE: i64 = 500;
    const KILLS: i64 = 4;
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 4).await;
    let config = config_with_default_status_interval(&outbox, "");
    let mut load = outbox.start_loadgen(&[
        "--events",
        "12000",
        "--rate",
        &RATE.to_string(),
        "--connections",
        "2",
        "--aggregates",
        "40",
    ]);
    for _ in 0..KILLS {
        let relay = Relay::process(&config);
        // Let it stream for about 1.5 s of load past what it found, then crash it.
        let target = topic_len(&topic).await + RATE * 3 / 2;
        wait_until("the relay to publish 1.5 s of load", DEADLINE, || async {
            topic_len(&topic).await >= target
        })
        .await;
        relay.kill9();
    }
    let mut relay = Relay::process(&config);
    wait_child(&mut load, DEADLINE).await;
    let committed = outbox.committed_from_table().await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(status.success(), "graceful exit: {status:?}");
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("kill-9-under-load", &committed, &received);
    let per_kill = summary.duplicated as i64 / KILLS;
    println!(
        "kill-9-under-load: {} duplicates over {KILLS} kills at {RATE} events/s: {per_kill} per kill",
        summary.duplicated
    );
    assert!(
        per_kill <= RATE,
        "a kill -9 re-sent {per_kill} events on average, more than one second of load ({RATE})"
    );
    outbox.drop_all().await;
}

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
    assert!(slot > outbox_relay::lsn::Lsn::ZERO);
    outbox.drop_all().await;
}

// Case 22: a partitioned outbox, publication without publish_via_partition_root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_outbox_with_leaf_relations_delivers_every_row_once_in_order() {
    partitioned_outbox_delivers_every_row_once_in_order(false).await;
}

// Case 22: a partitioned outbox, publication with publish_via_partition_root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_outbox_via_root_delivers_every_row_once_in_order() {
    partitioned_outbox_delivers_every_row_once_in_order(true).await;
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
    let mut settings = outbox.settings();
    settings.table.1 = format!("{}_gone", outbox.table);
    let text = fatal_start_error(settings).await;
    assert!(
        text.contains(&format!("public.{}_gone", outbox.table)) && text.contains("postgres.table"),
        "{text}"
    );
    outbox.drop_all().await;
}

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

/// A relay process behind `proxy`, serving /metrics on a port of its own.
fn start_relay_behind(outbox: &TestOutbox, proxy: &StallProxy) -> (Relay, u16) {
    let metrics_port = free_port();
    let url = format!(
        "postgres://relay:relay-test-password@127.0.0.1:{}/postgres",
        proxy.addr().port()
    );
    let config = outbox.write_config_with_url(
        &url,
        &format!("[relay]\nmetrics_addr = \"127.0.0.1:{metrics_port}\""),
    );
    (Relay::process(&config), metrics_port)
}

async fn metric(port: u16, name: &str) -> f64 {
    let (_, body) = http::http_get(port, "/metrics")
        .await
        .expect("/metrics answers");
    http::metric_value(&body, name, "")
}

/// An address nothing listens on: connections are refused at once.
async fn refused_addr() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

fn pg_addr(port: &str) -> std::net::SocketAddr {
    format!("127.0.0.1:{port}").parse().unwrap()
}

// Case 24: the slot advanced by someone else while the relay was cut off:
// the relay says so, with the gap, and counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_advanced_behind_the_relays_back_is_warned_and_counted() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let proxy = StallProxy::start(pg_addr(&env("PG_PORT"))).await;
    let (relay, metrics_port) = start_relay_behind(&outbox, &proxy);
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let before = outbox
        .commit_events(&mut writer, 50, 2, 10, &mut seqs)
        .await;
    consume_all_ids(&topic, &before, DEADLINE).await;

    // Cut off: every connection to PostgreSQL is refused for a while.
    proxy.redirect(refused_addr().await);
    wait_until("the walsender to let go of the slot", DEADLINE, || async {
        !outbox.slot_active().await
    })
    .await;
    let skipped = outbox
        .commit_events(&mut writer, 20, 2, 10, &mut seqs)
        .await;
    outbox
        .admin
        .execute(
            "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())",
            &[&outbox.slot],
        )
        .await
        .unwrap();
    proxy.redirect(pg_addr(&env("PG_PORT")));

    let after = outbox
        .commit_events(&mut writer, 50, 2, 10, &mut seqs)
        .await;
    let received = consume_all_ids(&topic, &after, DEADLINE).await;
    let mut committed = before.clone();
    committed.extend(after.iter().cloned());
    check_delivery("slot-advanced", &committed, &received);
    wait_until("the slot jump to be counted", DEADLINE, || async {
        metric(metrics_port, "outbox_relay_slot_jumps_total").await >= 1.0
    })
    .await;
    let log = relay.log_text();
    relay.kill9();
    let warning = log
        .lines()
        .find(|l| l.contains("the slot is ahead of the position this relay confirmed"))
        .unwrap_or_else(|| panic!("no warning about the slot jump in:\n{log}"));
    assert!(
        warning.contains("WARN") && warning.contains("gap_bytes="),
        "{warning}"
    );
    // What the warning is about: the rows in the gap were never read.
    let delivered: std::collections::HashSet<&str> =
        received.iter().filter_map(|r| r.header("ce_id")).collect();
    assert!(
        skipped.iter().all(|c| !delivered.contains(c.id.as_str())),
        "the slot was advanced past these rows, so the server never sent them"
    );
    outbox.drop_all().await;
}

async fn connect_port(port: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(
        &format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    client
}

async fn wal_lsn(client: &tokio_postgres::Client) -> outbox_relay::lsn::Lsn {
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

// Case 23: failover to a promoted standby, the slot recreated there by
// failover tooling, the relay's address moved to it. Everything committed on
// the new primary after its slot was created is delivered, although the
// relay had confirmed positions on the old primary far above those commits;
// the logs name the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_to_a_promoted_standby_new_commits_are_not_taken_for_replays() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let proxy = StallProxy::start(pg_addr(&env("PG_PORT"))).await;
    let (relay, metrics_port) = start_relay_behind(&outbox, &proxy);
    let mut writer = outbox.writer().await;
    let mut seqs = std::collections::HashMap::new();
    let mut on_old = outbox
        .commit_events(&mut writer, 50, 2, 10, &mut seqs)
        .await;
    consume_all_ids(&topic, &on_old, DEADLINE).await;

    let standby = random_name("failover");
    let standby_port = services::standby_create(&standby);
    services::standby_promote(&standby);
    // The old primary goes on for a while (as it does until fenced): the
    // relay confirms positions there far above the fork.
    let fork_seqs = seqs.clone();
    on_old.extend(
        outbox
            .commit_events(&mut writer, 40, 50, 10, &mut seqs)
            .await,
    );
    consume_all_ids(&topic, &on_old, DEADLINE).await;
    let old_confirmed = outbox.confirmed_flush_lsn().await.expect("old slot");

    // On the new primary: rows written before the failover tool recreates
    // the slot (never decoded by it), then the slot, then new rows.
    let new_primary = connect_port(&standby_port).await;
    let mut new_writer = connect_port(&standby_port).await;
    let mut new_seqs = fork_seqs;
    // Fresh aggregates on the new primary, so per-aggregate order is judged
    // on what the new primary committed alone.
    new_seqs.clear();
    let new_outbox = outbox.on_server(new_primary);
    let _before_slot = new_outbox
        .commit_events(&mut new_writer, 5, 2, 7, &mut new_seqs)
        .await;
    new_outbox
        .admin
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&outbox.slot],
        )
        .await
        .unwrap();
    let on_new = new_outbox
        .commit_events(&mut new_writer, 50, 2, 7, &mut new_seqs)
        .await;
    let new_position = wal_lsn(&new_outbox.admin).await;
    assert!(
        new_position < old_confirmed,
        "precondition: the new primary's commits ({new_position}) lie below what the relay \
         confirmed on the old one ({old_confirmed})"
    );

    proxy.redirect(pg_addr(&standby_port));
    let received_new = consume_all_ids(&topic, &on_new, DEADLINE).await;
    check_delivery("failover-new-primary", &on_new, &received_new);
    check_delivery("failover-old-primary", &on_old, &received_new);
    wait_until("the server change to be counted", DEADLINE, || async {
        metric(metrics_port, "outbox_relay_server_changes_total").await >= 1.0
    })
    .await;
    let log = relay.log_text();
    relay.kill9();
    let line = log
        .lines()
        .find(|l| l.contains("another PostgreSQL server answers"))
        .unwrap_or_else(|| panic!("no line naming the server change in:\n{log}"));
    assert!(
        line.contains("ERROR") && line.contains("timeline 2") && line.contains("timeline_fork="),
        "{line}"
    );

    drop(new_outbox);
    services::standby_remove(&standby);
    outbox.drop_all().await;
}
