//! Faults of PostgreSQL and Kafka themselves, against the relay: the
//! broker gone for several message timeouts (on the mock cluster), PostgreSQL restarted fast and
//! immediate, PostgreSQL unreachable behind a stalled route, the walsender
//! terminated again and again; and the slot gone: missing at start
//! (in-process and as a process), dropped while streaming, invalidated by
//! `max_slot_wal_keep_size` before and during streaming.
//!
//! The tests that stop a service, change a server-wide setting or
//! invalidate slots hold the services lock exclusively
//! ([`services::exclusive`]) for their whole run, so no other test runs
//! beside them, and a guard restores the service or the setting on every
//! exit path, a failed assertion included. Children (relay, load generator)
//! are killed when a test ends without stopping them.
//!
//! Each test prints the checker's summary line; the faults themselves (the
//! broker kept down, PostgreSQL kept down) are timed sleeps, everything else
//! waits on a condition with a deadline.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::mock::{mock_with_topic, read_mock_to_end};
use crate::support::proxy::StallProxy;
use crate::support::services::{self, ServiceDown, WalKeepLimit};
use crate::support::*;

/// A relay config for `outbox` with `kafka_extra` lines added to `[kafka]`
/// and, when given, another PostgreSQL URL.
fn relay_config(outbox: &TestOutbox, kafka_extra: &str, url: Option<&str>) -> PathBuf {
    let path = outbox.write_config("");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text = text.replacen("[kafka]\n", &format!("[kafka]\n{kafka_extra}\n"), 1);
    if let Some(url) = url {
        text = text.replace(&env("PG_RELAY_URL"), url);
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Reads `topic` until it holds at least `n` records; fails after `within`.
async fn wait_for_records(topic: &str, n: usize, within: Duration) {
    let got = consume(topic, within, move |r| r.len() >= n).await;
    assert!(
        got.len() >= n,
        "only {} of {n} records on {topic} after {within:?}",
        got.len()
    );
}

/// Reads until every committed id is on `topic`; fails after `within`.
async fn wait_for_all(topic: &str, committed: &[Committed], within: Duration) {
    let got = consume_all_ids(topic, committed, within).await;
    let seen: std::collections::HashSet<&str> =
        got.iter().filter_map(|r| r.header("ce_id")).collect();
    let missing = committed
        .iter()
        .filter(|c| !seen.contains(c.id.as_str()))
        .count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} events not on {topic} after {within:?}",
        committed.len()
    );
}

async fn slot_exists(outbox: &TestOutbox) -> bool {
    outbox.slot().await.is_some()
}

async fn wal_status(outbox: &TestOutbox) -> Option<String> {
    outbox.slot().await.and_then(|s| s.wal_status)
}

/// Ends the relay with SIGTERM (it must exit 0), reads the topic to its end
/// and runs the checker.
async fn stop_and_check(
    case: &str,
    outbox: &TestOutbox,
    relay: &mut Relay,
    committed: &[Committed],
) -> Summary {
    let status = relay.terminate().await;
    assert!(
        status.success(),
        "{case}: graceful stop exits 0, got {status:?}; log:\n{}",
        relay.log_text()
    );
    let log = relay.log_text();
    assert!(
        !log.contains("relay-test-password"),
        "{case}: the password leaked into the log"
    );
    let received = consume_to_end(&outbox.topic("order")).await;
    check_delivery(case, committed, &received)
}

// -------------------------------------------------------------- the broker down

/// The relay's `kafka.message_timeout_ms` while the broker is down: short,
/// so that the outage expires records several times over and the "delivery
/// failed → rebuild the producer → replay from the confirmed LSN" path runs
/// again and again.
const OUTAGE_MESSAGE_TIMEOUT_MS: u64 = 2_000;

/// How many replays (each a new walsender) the outage lasts.
const OUTAGE_REPLAYS: usize = 3;

/// Every broker goes away under a steady writer, for several message
/// timeouts, and comes back. While it is down nothing can be acknowledged,
/// so the slot's confirmed_flush_lsn stands still while the WAL moves on;
/// records expire after the message timeout and the relay rebuilds its
/// producer and replays from the confirmed LSN, over and over (each replay
/// a new walsender), without giving up. Once the broker is back it catches
/// up: nothing lost, order kept, duplicates counted.
///
/// The broker is librdkafka's mock cluster with every broker down: to the
/// relay that is what a stopped broker is (connections refused, requests in
/// flight cut), and it holds no shared service, so the test runs beside
/// others. A real broker's stop and start are in the exactly-once fault test
/// and the soak.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_freezes_the_slot_then_catches_up() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let mock = mock_with_topic(1, &topic, 4);
    let mut settings = outbox.settings();
    settings.sink.brokers = mock.bootstrap_servers();
    // The mock checks sequences only with one request in flight per
    // connection (see broker_faults.rs).
    settings
        .sink
        .properties
        .push(("max.in.flight.requests.per.connection".into(), "1".into()));
    settings.sink.message_timeout_ms = OUTAGE_MESSAGE_TIMEOUT_MS;
    let relay = Relay::in_process(settings);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox
        .commit_events(&mut writer, 50, 4, 50, &mut seqs)
        .await;
    wait_until("the relay to stream", DEADLINE, || async {
        outbox.walsender_pid().await.is_some()
    })
    .await;
    let before_stop = outbox.confirmed_flush_lsn().await.expect("slot");
    let first_pid = outbox.walsender_pid().await;

    mock.broker_down(-1).expect("brokers down");
    let down_at = Instant::now();
    // The writer keeps writing through the outage; the slot must not move
    // once the first replay showed that records in flight had failed.
    let mut pids = Vec::new();
    let mut frozen = None;
    let mut samples = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while pids.len() < OUTAGE_REPLAYS {
        assert!(
            Instant::now() < deadline,
            "the relay replayed {} times in 120 s of outage, not {OUTAGE_REPLAYS}",
            pids.len()
        );
        committed.extend(outbox.commit_events(&mut writer, 2, 4, 50, &mut seqs).await);
        let now = outbox.confirmed_flush_lsn().await.expect("slot");
        assert!(
            now >= before_stop,
            "the slot went back: {before_stop} -> {now}"
        );
        match frozen {
            Some(frozen) => {
                assert_eq!(
                    now,
                    frozen,
                    "confirmed_flush_lsn moved while the broker was down (after {:?})",
                    down_at.elapsed()
                );
                samples += 1;
            }
            None if !pids.is_empty() => frozen = Some(now),
            None => {}
        }
        if let Some(pid) = outbox.walsender_pid().await
            && Some(pid) != first_pid
            && !pids.contains(&pid)
        {
            pids.push(pid);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let frozen = frozen.expect("a reference after the first replay");
    let wal_during = outbox.current_wal_lsn().await;
    assert!(
        wal_during > frozen,
        "the writer kept writing, so the WAL moved past the frozen slot"
    );
    assert!(samples > 0, "the slot was sampled after the first replay");
    println!(
        "broker down {:.1} s: confirmed_flush_lsn held at {frozen} over {samples} samples while the WAL reached {wal_during}; {} replays",
        down_at.elapsed().as_secs_f64(),
        pids.len()
    );

    mock.broker_up(-1).expect("brokers up");
    committed.extend(
        outbox
            .commit_events(&mut writer, 20, 4, 50, &mut seqs)
            .await,
    );
    let bootstrap = mock.bootstrap_servers();
    let ids: HashSet<&str> = committed.iter().map(|c| c.id.as_str()).collect();
    wait_until("every committed event on the topic", DEADLINE, || async {
        let received = read_mock_to_end(&bootstrap, &topic).await;
        let seen: HashSet<&str> = received.iter().filter_map(|r| r.header("ce_id")).collect();
        ids.is_subset(&seen)
    })
    .await;
    relay.stop().await.expect("graceful stop");
    let received = read_mock_to_end(&mock.bootstrap_servers(), &topic).await;
    let summary = check_delivery("broker-down", &committed, &received);
    assert_eq!(summary.lost, 0);
    outbox.drop_all().await;
    report_wall_time("broker-down", started);
}

// ------------------ PostgreSQL restarted, unreachable, its walsender terminated

/// PostgreSQL stops (`mode`) under load and starts again. The relay
/// must neither exit nor lose anything: it reconnects with backoff by itself
/// and resumes from the slot; the writer dies with the server and is started
/// again afterwards.
async fn postgres_restart(mode: &'static str) {
    let serial = services::exclusive().await;
    let started = Instant::now();
    let case = format!("pg-restart-{mode}");
    let mut outbox = TestOutbox::create_exclusive(&serial, "jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 4).await;
    let config = relay_config(&outbox, "", None);
    let mut relay = Relay::process(&config);
    let mut loadgen = Loadgen::start(
        &outbox,
        &[
            "--events",
            "0",
            "--rate",
            "500",
            "--connections",
            "2",
            "--aggregates",
            "50",
        ],
    );
    wait_for_records(&topic, 500, DEADLINE).await;

    let pg = ServiceDown::stop(&["stop-pg", mode], "start-pg").await;
    // The writer loses its server; how it exits does not matter, the table
    // is the record of what committed.
    loadgen.wait(Duration::from_secs(30)).await;
    // The fault: PostgreSQL stays down for a few seconds, long enough for
    // several reconnect attempts to be refused.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        relay.running(),
        "{case}: the relay must outlive the outage:\n{}",
        relay.log_text()
    );
    pg.start().await;
    // The old admin connection died with the server.
    outbox.admin = pg_admin().await;
    wait_until("the relay to hold the slot again", DEADLINE, || {
        outbox.slot_active()
    })
    .await;

    let mut loadgen = Loadgen::start(
        &outbox,
        &[
            "--events",
            "1000",
            "--rate",
            "1000",
            "--connections",
            "2",
            "--aggregates",
            "50",
        ],
    );
    let status = loadgen.wait(DEADLINE).await;
    assert!(
        status.success(),
        "{case}: writer after the restart: {status:?}"
    );
    let committed = outbox.committed_from_table().await;
    wait_for_all(&topic, &committed, DEADLINE).await;
    let log = relay.log_text();
    // Which of the relay's sessions notices the restart first, the stream
    // or the relay lock's, is a race: the stream reconnects, or the relay
    // stands by and takes the lock again. Either way nothing is lost (the
    // checker, below, decides), and nobody is asked to act: a restart is
    // degraded-and-retrying (WARN), never an ERROR. (Before the producer
    // was discarded with a grace for its records in flight, the lock's
    // path purged them and librdkafka logged a fatal gap-less error.)
    let incident_lines = [
        "reconnecting from the confirmed position",
        "the relay lock was lost",
    ];
    assert!(
        incident_lines.iter().any(|line| log.contains(line)),
        "{case}: the relay should report the broken stream; log:\n{log}"
    );
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("ERROR"))
        .collect();
    assert!(
        errors.is_empty(),
        "{case}: a PostgreSQL restart logged ERROR lines:\n{}",
        errors.join("\n")
    );
    let retry_lines = [
        "cannot stream from PostgreSQL; retrying",
        "cannot try the relay lock; retrying",
    ];
    let retries: usize = retry_lines
        .iter()
        .map(|line| log.matches(line).count())
        .sum();
    println!("{case}: relay reconnected after {retries} refused attempts");
    let summary = stop_and_check(&case, &outbox, &mut relay, &committed).await;
    assert_eq!(summary.lost, 0);
    outbox.drop_all().await;
    report_wall_time(&case, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walsender_terminated_repeatedly_reconnects_and_loses_nothing() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let relay = Relay::in_process(outbox.settings());
    let mut loadgen = outbox.start_loadgen(&[
        "--events",
        "20000",
        "--rate",
        "1500",
        "--connections",
        "2",
        "--aggregates",
        "40",
    ]);
    let mut last_pid = None;
    let mut confirmed_at_kill = outbox.confirmed_flush_lsn().await.expect("slot");
    for kill in 0..5 {
        // Each kill comes after the current session made progress: it
        // confirmed something beyond what was confirmed at the last kill.
        wait_until(
            &format!("the session before kill {kill} to confirm progress"),
            DEADLINE,
            || async { outbox.confirmed_flush_lsn().await > Some(confirmed_at_kill) },
        )
        .await;
        confirmed_at_kill = outbox.confirmed_flush_lsn().await.unwrap();
        last_pid = Some(outbox.terminate_walsender(last_pid, DEADLINE).await);
    }
    // The relay reconnects after the last kill too: a new walsender.
    wait_until("a new walsender after the last kill", DEADLINE, || async {
        outbox
            .walsender_pid()
            .await
            .is_some_and(|p| Some(p) != last_pid)
    })
    .await;
    wait_child(&mut loadgen, DEADLINE).await;
    let committed = outbox.committed_from_table().await;
    assert_eq!(committed.len(), 20_000);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    relay
        .stop()
        .await
        .expect("the relay survives walsender kills and stops gracefully");
    let received = consume_to_end(&topic).await;
    // Duplicates are allowed (a kill drops unconfirmed transactions, which
    // the slot re-sends); loss and reordering are not (the checker panics).
    let summary = check_delivery("walsender-terminated", &committed, &received);
    assert_eq!(summary.lost, 0);
    outbox.drop_all().await;
    report_wall_time("walsender-terminated", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_slot_is_a_fatal_error_naming_it() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox
        .admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
        .await
        .unwrap();
    let relay = Relay::in_process(outbox.settings());
    let err = relay
        .join(Duration::from_secs(30))
        .await
        .expect_err("a missing slot is fatal");
    let msg = err.to_string();
    assert!(msg.contains(&outbox.slot), "{msg}");
    // And the relay did not create it behind our back.
    assert!(outbox.confirmed_flush_lsn().await.is_none());
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_slot_exits_non_zero_naming_the_slot() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox
        .admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
        .await
        .unwrap();
    let config = outbox.write_config("");
    let mut relay = Relay::process(&config);
    let status = relay.wait(Duration::from_secs(30)).await;
    assert!(!status.success());
    let log = relay.log_text();
    assert!(log.contains(&outbox.slot), "{log}");
    assert!(!log.contains("relay-test-password"), "no secret in logs");
    outbox.drop_all().await;
}

// ---------------------------------------------------------------- the slot gone

/// Writes WAL, switches segments and checkpoints until the slot's
/// `wal_status` is `lost` (needs `max_slot_wal_keep_size` below a segment).
async fn invalidate_slot(outbox: &TestOutbox, scratch: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rounds = 0;
    loop {
        rounds += 1;
        outbox
            .admin
            .batch_execute(&format!(
                "INSERT INTO public.{scratch} SELECT repeat('x', 1000) FROM generate_series(1, 2000);
                 SELECT pg_switch_wal();
                 CHECKPOINT;"
            ))
            .await
            .expect("write WAL and checkpoint");
        if wal_status(outbox).await.as_deref() == Some("lost") {
            return rounds;
        }
        assert!(
            Instant::now() < deadline,
            "slot {} not invalidated after {rounds} rounds (wal_status {:?})",
            outbox.slot,
            wal_status(outbox).await
        );
    }
}

/// What a relay that met an invalidated slot must have said and done.
async fn assert_invalidated_exit(case: &str, outbox: &TestOutbox, relay: &mut Relay) {
    let status = relay.wait(Duration::from_secs(30)).await;
    let log = relay.log_text();
    assert_eq!(
        status.code(),
        Some(EXIT_SOURCE),
        "{case}: invalidated slot is fatal; log:\n{log}"
    );
    assert_fatal_cause(&log, "slot_invalidated");
    let named = format!("replication slot \"{}\" is invalidated", outbox.slot);
    assert!(
        log.contains(&named) && log.contains("wal_status = lost"),
        "{case}: the message names the slot and its wal_status; log:\n{log}"
    );
    assert_eq!(
        wal_status(outbox).await.as_deref(),
        Some("lost"),
        "{case}: the relay must not drop and recreate the slot"
    );
}

/// The tests here hold the services alone ([`services::exclusive`]):
/// `make test` runs them after the others, one at a time.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_fast_restart_reconnects_and_loses_nothing() {
        postgres_restart("fast").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_immediate_restart_reconnects_and_loses_nothing() {
        postgres_restart("immediate").await;
    }

    /// The route to PostgreSQL goes silent (no RST, no FIN) under a
    /// stalling proxy. The relay's own read timeout must notice (PostgreSQL
    /// meanwhile ends the silent walsender after wal_sender_timeout, freeing the
    /// slot); its reconnects through the still-stalled route must time out too
    /// rather than hang; once the route flows again it catches up. Nothing is
    /// confirmed while stalled, nothing is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stalled_route_to_postgres_times_out_reconnects_and_catches_up() {
        let serial = services::exclusive().await;
        let started = Instant::now();
        let case = "pg-stalled-route";
        let outbox = TestOutbox::create_exclusive(&serial, "jsonb").await;
        let topic = outbox.topic("order");
        outbox.create_topic(&topic, 4).await;
        let upstream = format!("127.0.0.1:{}", env("PG_PORT")).parse().unwrap();
        let proxy = StallProxy::start(upstream).await;
        let url = format!(
            "postgres://relay:relay-test-password@127.0.0.1:{}/postgres",
            proxy.addr().port()
        );
        let config = relay_config(&outbox, "", Some(&url));
        // The stream's own timeouts, which the relay lock (standby.rs) would
        // overtake by ending the session when its lease runs out.
        let text = std::fs::read_to_string(&config).unwrap() + "[relay]\nstandby_lock = false\n";
        std::fs::write(&config, text).unwrap();
        let mut relay = Relay::process(&config);
        let mut writer = outbox.writer().await;
        let mut seqs = HashMap::new();
        let mut committed = outbox
            .commit_events(&mut writer, 100, 2, 20, &mut seqs)
            .await;
        wait_for_all(&topic, &committed, DEADLINE).await;
        wait_until("the slot to be held", DEADLINE, || outbox.slot_active()).await;

        proxy.stall();
        let stalled_at = Instant::now();
        let frozen = outbox.confirmed_flush_lsn().await.expect("slot");
        // Written straight to PostgreSQL: the stall is between relay and server.
        committed.extend(
            outbox
                .commit_events(&mut writer, 100, 2, 20, &mut seqs)
                .await,
        );
        wait_until(
            "the relay's read timeout",
            Duration::from_secs(45),
            || async { relay.log_text().contains("did not answer a reply request") },
        )
        .await;
        let detected_after = stalled_at.elapsed();
        // The server's side: the silent walsender is ended by wal_sender_timeout
        // and nothing can take the slot through the stalled route.
        wait_until(
            "PostgreSQL to free the slot",
            Duration::from_secs(45),
            || async { !outbox.slot_active().await },
        )
        .await;
        // A reconnect through the stalled route hangs in the handshake; the
        // relay's connect timeout must end it (no RST or FIN will).
        let connect_timed_out = format!(
            "connecting to PostgreSQL at 127.0.0.1:{} timed out",
            proxy.addr().port()
        );
        wait_until(
            "a reconnect to time out",
            Duration::from_secs(45),
            || async { relay.log_text().contains(&connect_timed_out) },
        )
        .await;
        assert!(
            relay.running(),
            "{case}: the relay must keep trying:\n{}",
            relay.log_text()
        );
        assert_eq!(
            outbox.confirmed_flush_lsn().await.expect("slot"),
            frozen,
            "{case}: nothing can be confirmed through a stalled route"
        );
        println!(
            "{case}: read timeout fired {:.1} s after the stall; stalled for {:.1} s",
            detected_after.as_secs_f64(),
            stalled_at.elapsed().as_secs_f64()
        );
        assert!(
            detected_after < Duration::from_secs(30),
            "{case}: the read timeout should follow wal_sender_timeout (10 s), took {detected_after:?}"
        );

        proxy.resume();
        committed.extend(
            outbox
                .commit_events(&mut writer, 50, 2, 20, &mut seqs)
                .await,
        );
        wait_for_all(&topic, &committed, DEADLINE).await;
        let summary = stop_and_check(case, &outbox, &mut relay, &committed).await;
        assert_eq!(summary.lost, 0);
        drop(proxy);
        outbox.drop_all().await;
        report_wall_time(case, started);
    }

    /// The slot is dropped under a streaming relay (its
    /// walsender terminated, then the slot dropped, retried until the drop wins
    /// the race with the relay's reconnect). The relay must exit non-zero naming
    /// the slot, and never create it again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slot_dropped_while_streaming_is_fatal_and_never_recreated() {
        let serial = services::exclusive().await;
        let started = Instant::now();
        let case = "slot-dropped";
        let outbox = TestOutbox::create_exclusive(&serial, "jsonb").await;
        let topic = outbox.topic("order");
        let config = relay_config(&outbox, "", None);
        let mut relay = Relay::process(&config);
        let mut writer = outbox.writer().await;
        let mut seqs = HashMap::new();
        let committed = outbox
            .commit_events(&mut writer, 50, 2, 10, &mut seqs)
            .await;
        wait_for_all(&topic, &committed, DEADLINE).await;
        wait_until("the slot to be held", DEADLINE, || outbox.slot_active()).await;

        let deadline = Instant::now() + Duration::from_secs(30);
        let mut tries = 0;
        loop {
            tries += 1;
            outbox.terminate_slot_holder().await;
            match outbox
                .admin
                .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
                .await
            {
                Ok(_) => break,
                // "is active for PID": the walsender is still exiting, or the
                // relay's reconnect took the slot back.
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "could not drop the slot in 30 s ({tries} tries): {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let status = relay.wait(Duration::from_secs(30)).await;
        let log = relay.log_text();
        assert!(
            !status.success(),
            "{case}: a dropped slot is fatal; log:\n{log}"
        );
        assert_eq!(
            status.code(),
            Some(EXIT_SOURCE),
            "{case}: a lost slot exits with the source code"
        );
        assert!(
            log.contains(&format!(
                "replication slot \"{}\" does not exist",
                outbox.slot
            )),
            "{case}: the message names the slot; log:\n{log}"
        );
        assert!(
            log.contains("replication stream broke"),
            "{case}: the drop happened under a streaming relay; log:\n{log}"
        );
        assert!(
            !slot_exists(&outbox).await,
            "{case}: the relay must never recreate the slot"
        );
        println!("{case}: dropped after {tries} terminate+drop rounds; relay exited with {status}");
        let received = consume_to_end(&topic).await;
        check_delivery(case, &committed, &received);
        outbox.drop_all().await;
        report_wall_time(case, started);
    }

    /// The slot lost its WAL while no relay was connected. Starting the
    /// relay must fail fast, naming the slot and `wal_status = lost`, and leave
    /// the slot as it is (no silent re-snapshot).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slot_invalidated_while_stopped_is_fatal_at_start() {
        let serial = services::exclusive().await;
        let started = Instant::now();
        let case = "slot-invalidated-at-start";
        let outbox = TestOutbox::create_exclusive(&serial, "jsonb").await;
        let topic = outbox.topic("order");
        let scratch = format!("{}_wal", outbox.table);
        outbox
            .admin
            .batch_execute(&format!("CREATE TABLE public.{scratch} (filler text)"))
            .await
            .unwrap();
        let config = relay_config(&outbox, "", None);
        // A first run delivers what was committed, and stops cleanly.
        let mut relay = Relay::process(&config);
        let mut writer = outbox.writer().await;
        let committed = outbox
            .commit_events(&mut writer, 50, 2, 10, &mut HashMap::new())
            .await;
        wait_for_all(&topic, &committed, DEADLINE).await;
        let summary = stop_and_check(case, &outbox, &mut relay, &committed).await;
        assert_eq!(summary.duplicated, 0);

        let limit = WalKeepLimit::set(&outbox.admin, "1MB").await;
        let rounds = invalidate_slot(&outbox, &scratch).await;
        let mut relay = Relay::process(&config);
        let launched = Instant::now();
        assert_invalidated_exit(case, &outbox, &mut relay).await;
        let took = launched.elapsed();
        assert!(
            took < Duration::from_secs(15),
            "{case}: exit should be fast, took {took:?}"
        );
        println!(
            "{case}: invalidated after {rounds} WAL rounds; relay exited 1 after {:.1} s",
            took.as_secs_f64()
        );
        drop(limit);
        let _ = outbox
            .admin
            .batch_execute(&format!("DROP TABLE IF EXISTS public.{scratch}"))
            .await;
        outbox.drop_all().await;
        report_wall_time(case, started);
    }

    /// The slot is invalidated under a streaming relay.
    /// An open transaction pins the slot's restart_lsn so the invalidation is
    /// certain; the checkpointer then terminates the walsender, and the relay's
    /// reconnect must find `wal_status = lost` and exit fatally.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slot_invalidated_while_streaming_is_fatal() {
        let serial = services::exclusive().await;
        let started = Instant::now();
        let case = "slot-invalidated-streaming";
        let outbox = TestOutbox::create_exclusive(&serial, "jsonb").await;
        let topic = outbox.topic("order");
        let scratch = format!("{}_wal", outbox.table);
        outbox
            .admin
            .batch_execute(&format!("CREATE TABLE public.{scratch} (filler text)"))
            .await
            .unwrap();
        let config = relay_config(&outbox, "", None);
        let mut relay = Relay::process(&config);
        let mut writer = outbox.writer().await;
        let committed = outbox
            .commit_events(&mut writer, 50, 2, 10, &mut HashMap::new())
            .await;
        wait_for_all(&topic, &committed, DEADLINE).await;
        wait_until("the slot to be held", DEADLINE, || outbox.slot_active()).await;

        // Logical decoding restarts at the oldest open transaction, so while
        // this one stays open the slot's restart_lsn cannot leave its segment.
        let pin = pg_admin().await;
        pin.batch_execute(&format!(
            "BEGIN; INSERT INTO public.{scratch} VALUES ('pin')"
        ))
        .await
        .unwrap();
        let limit = WalKeepLimit::set(&outbox.admin, "1MB").await;
        let rounds = invalidate_slot(&outbox, &scratch).await;
        assert_invalidated_exit(case, &outbox, &mut relay).await;
        let log = relay.log_text();
        assert!(
            log.contains("replication stream broke"),
            "{case}: the checkpointer ends the streaming walsender first; log:\n{log}"
        );
        println!("{case}: invalidated after {rounds} WAL rounds while streaming");
        let _ = pin.batch_execute("ROLLBACK").await;
        drop(limit);
        let received = consume_to_end(&topic).await;
        check_delivery(case, &committed, &received);
        let _ = outbox
            .admin
            .batch_execute(&format!("DROP TABLE IF EXISTS public.{scratch}"))
            .await;
        outbox.drop_all().await;
        report_wall_time(case, started);
    }
}
