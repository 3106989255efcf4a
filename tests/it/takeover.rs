//! More than one relay, or another server: with the relay lock off, a
//! second relay on the slot waits while the first holds it and takes over
//! exactly once (with the lock, see standby.rs); after a
//! failover to a promoted standby, new commits are not taken for replays;
//! a slot advanced behind the relay's back is warned about and counted.

use std::collections::HashMap;
use std::time::Instant;

use crate::support::proxy::StallProxy;
use crate::support::*;
use crate::support::{http, services};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_relay_on_the_slot_waits_then_takes_over_exactly_once() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    // The slot itself keeps the second relay out, without the relay lock.
    let config = outbox.write_config("[relay]\nstandby_lock = false");
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();

    let mut a = Relay::process(&config);
    wait_until("relay A to hold the slot", DEADLINE, || {
        outbox.slot_active()
    })
    .await;
    let a_walsender = outbox.walsender_pid().await;
    let mut committed = outbox
        .commit_events(&mut writer, 100, 2, 20, &mut seqs)
        .await;
    consume_all_ids(&topic, &committed, DEADLINE).await;

    let mut b = Relay::process(&config);
    b.wait_for_event("slot_in_use", DEADLINE).await;
    committed.extend(
        outbox
            .commit_events(&mut writer, 100, 2, 20, &mut seqs)
            .await,
    );
    consume_all_ids(&topic, &committed, DEADLINE).await;
    // B keeps waiting (it retries, and is refused again), and A still holds
    // the slot: the same walsender as before B started.
    wait_until(
        "relay B to retry and be refused again",
        DEADLINE,
        || async { b.event_lines("slot_in_use").len() >= 2 },
    )
    .await;
    assert_eq!(outbox.walsender_pid().await, a_walsender);
    assert!(
        b.event_lines("streaming").is_empty(),
        "relay B streamed while A held the slot:\n{}",
        b.log_text()
    );
    let both_running = consume_to_end(&topic).await;
    let summary = check_delivery("two-relays-both-running", &committed, &both_running);
    assert_eq!(summary.duplicated, 0, "never both produce");
    assert_eq!(both_running.len(), committed.len());

    let status = a.terminate().await;
    assert!(status.success(), "relay A stops gracefully: {status:?}");
    b.wait_for_event("streaming", DEADLINE).await;
    committed.extend(
        outbox
            .commit_events(&mut writer, 100, 2, 20, &mut seqs)
            .await,
    );
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = b.terminate().await;
    assert!(status.success(), "relay B stops gracefully: {status:?}");
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("two-relays-takeover", &committed, &received);
    assert_eq!(
        summary.duplicated, 0,
        "a graceful hand-over sends nothing twice"
    );
    outbox.drop_all().await;
    report_wall_time("two-relays", started);
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

// The slot advanced by someone else while the relay was cut off:
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

async fn wal_lsn(client: &tokio_postgres::Client) -> pgoutput::lsn::Lsn {
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

// Failover to a promoted standby, the slot recreated there by
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

/// Resets the primary's synchronized_standby_slots when dropped, also when
/// the test fails: left set, every logical walsender of the cluster would
/// wait for a standby that is gone.
struct StandbySlotsReset;

impl Drop for StandbySlotsReset {
    fn drop(&mut self) {
        let psql = format!("{}/psql", env("PG_BINDIR"));
        for sql in [
            "ALTER SYSTEM RESET synchronized_standby_slots",
            "SELECT pg_reload_conf()",
        ] {
            let _ = std::process::Command::new(&psql)
                .args([env("PG_URL").as_str(), "-Atc", sql])
                .status();
        }
    }
}

// PostgreSQL 17+ failover slots: the slot made with failover = true (as
// `init` makes it there), a physical standby with sync_replication_slots,
// hot_standby_feedback and its own physical slot, named in the primary's
// synchronized_standby_slots. The standby is promoted while the relay
// streams; the relay's address moves to it, and the relay goes on from the
// synchronized slot: every event committed on either server is delivered,
// in per-aggregate order. Skips itself, saying so, before PostgreSQL 17.

/// The tests here hold the services alone ([`services::exclusive`]):
/// `make test` runs them after the others, one at a time.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failover_slot_lets_the_relay_follow_a_promoted_standby_with_nothing_lost() {
        let serial = services::exclusive().await;
        let primary = pg_admin().await;
        let version: i32 = primary
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .await
            .unwrap()
            .get(0);
        if version < 170_000 {
            println!(
                "skipped: failover slots need PostgreSQL 17+, the test cluster is {version} \
                 (PG_VERSION=17 scripts/services up, or make test-matrix)"
            );
            return;
        }
        let outbox = TestOutbox::create_exclusive(&serial, "jsonb").await;
        let topic = outbox.topic("order");
        outbox.create_topic(&topic, 3).await;
        // The slot made by init, as on 17 it makes it: a failover slot
        // (nothing committed yet, so a new slot skips nothing).
        primary
            .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
            .await
            .unwrap();
        let config = outbox.write_config("");
        let init = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args([
                "init",
                "--allow-new-slot",
                "--admin-url",
                &env("PG_URL"),
                "--config",
            ])
            .arg(&config)
            .env_remove("OUTBOX_RELAY_ADMIN_URL")
            .output()
            .unwrap();
        assert!(init.status.success(), "{init:?}");
        let failover: bool = primary
            .query_one(
                "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
                &[&outbox.slot],
            )
            .await
            .unwrap()
            .get(0);
        assert!(failover, "init makes a failover slot on 17+");
        let physical = random_name("standby_slot");
        primary
            .execute(
                "SELECT pg_create_physical_replication_slot($1, true)",
                &[&physical],
            )
            .await
            .unwrap();
        let standby = random_name("fslot");
        let standby_port = services::standby_create(&standby);
        let on_standby = connect_port(&standby_port).await;
        // One statement each: ALTER SYSTEM refuses a transaction block.
        for sql in [
            format!("ALTER SYSTEM SET primary_slot_name = '{physical}'"),
            "ALTER SYSTEM SET hot_standby_feedback = on".to_owned(),
            "ALTER SYSTEM SET sync_replication_slots = on".to_owned(),
            // Written here, not taken from pg_basebackup -R: slot
            // synchronization needs a dbname, and the server's own libpq may
            // not know every option a newer pg_basebackup writes.
            format!(
                "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port={} user=postgres \
                 dbname=postgres application_name={standby}'",
                env("PG_PORT")
            ),
        ] {
            on_standby.batch_execute(&sql).await.unwrap();
        }
        on_standby
            .execute("SELECT pg_reload_conf()", &[])
            .await
            .unwrap();
        let reset = StandbySlotsReset;
        primary
            .batch_execute(&format!(
                "ALTER SYSTEM SET synchronized_standby_slots = '{physical}'"
            ))
            .await
            .unwrap();
        primary
            .execute("SELECT pg_reload_conf()", &[])
            .await
            .unwrap();

        let proxy = StallProxy::start(pg_addr(&env("PG_PORT"))).await;
        let (relay, metrics_port) = start_relay_behind(&outbox, &proxy);
        let mut writer = outbox.writer().await;
        let mut seqs = HashMap::new();
        let mut committed = outbox
            .commit_events(&mut writer, 50, 2, 10, &mut seqs)
            .await;
        consume_all_ids(&topic, &committed, DEADLINE).await;
        wait_until(
            "the standby to hold a synchronized copy of the slot",
            DEADLINE,
            || async {
                on_standby
                    .query_opt(
                        "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND synced \
                     AND confirmed_flush_lsn IS NOT NULL",
                        &[&outbox.slot],
                    )
                    .await
                    .unwrap()
                    .is_some()
            },
        )
        .await;
        // More events while the relay streams; the standby has received them
        // (a planned failover), the relay may not have confirmed them all.
        committed.extend(
            outbox
                .commit_events(&mut writer, 50, 2, 10, &mut seqs)
                .await,
        );
        let end = wal_lsn(&primary).await;
        wait_until(
            "the standby to replay the last commit",
            DEADLINE,
            || async {
                let row = on_standby
                    .query_one("SELECT pg_last_wal_replay_lsn()::text", &[])
                    .await
                    .unwrap();
                row.get::<_, String>(0)
                    .parse::<pgoutput::lsn::Lsn>()
                    .unwrap()
                    >= end
            },
        )
        .await;
        services::standby_promote(&standby);
        proxy.redirect(pg_addr(&standby_port));
        let mut new_writer = connect_port(&standby_port).await;
        let new_outbox = outbox.on_server(connect_port(&standby_port).await);
        committed.extend(
            new_outbox
                .commit_events(&mut new_writer, 50, 2, 10, &mut seqs)
                .await,
        );
        let received = consume_all_ids(&topic, &committed, DEADLINE).await;
        let summary = check_delivery("failover-slot", &committed, &received);
        println!("failover-slot: duplicates {}", summary.duplicated);
        wait_until("the server change to be counted", DEADLINE, || async {
            metric(metrics_port, "outbox_relay_server_changes_total").await >= 1.0
        })
        .await;
        relay.kill9();

        drop(new_outbox);
        drop(reset);
        services::standby_remove(&standby);
        let _ = primary
            .execute("SELECT pg_drop_replication_slot($1)", &[&physical])
            .await;
        outbox.drop_all().await;
    }
}
