//! Fault and input cases of the test plan that need no service restart
//! (cases 6, 11, 12, 13, 15, 16, 18, 19, 20, 21), plus SIGTERM in the middle
//! of a large transaction (case 2's rule: a graceful stop sends nothing
//! twice), against the shared PostgreSQL and Kafka, each judged by the
//! checker.
//!
//! These tests run two at a time on the same servers: each one touches only
//! its own table, publication, slot, topics and roles, and never stops a
//! service or changes a server-wide setting.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use outbox_relay::envelope::ContentMode;
use outbox_relay::lsn::Lsn;
use crate::support::auth::*;
use crate::support::http::*;
use crate::support::*;

/// How long a refused start may take to exit: "fast", with room for a
/// loaded 2-core machine (connect timeout is 10 s; a retry loop would not
/// end at all).
const FAST_EXIT: Duration = Duration::from_secs(15);

/// Count of committed outbox rows now (what the writers have committed).
async fn committed_rows(outbox: &TestOutbox) -> i64 {
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

// ---------------------------------------------------------------------------
// Case 6: walsender terminated.

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

// ---------------------------------------------------------------------------
// Case 11: two relays on one slot.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_relay_on_the_slot_waits_then_takes_over_exactly_once() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let config = outbox.write_config("");
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
    b.wait_for_log("in use by another process", DEADLINE).await;
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
        || async { b.log_text().matches("in use by another process").count() >= 2 },
    )
    .await;
    assert_eq!(outbox.walsender_pid().await, a_walsender);
    assert!(
        !b.log_text().contains("streaming from the slot"),
        "relay B streamed while A held the slot:\n{}",
        b.log_text()
    );
    let both_running = consume_to_end(&topic).await;
    let summary = check_delivery("two-relays-both-running", &committed, &both_running);
    assert_eq!(summary.duplicated, 0, "never both produce");
    assert_eq!(both_running.len(), committed.len());

    let status = a.terminate().await;
    assert!(status.success(), "relay A stops gracefully: {status:?}");
    b.wait_for_log("streaming from the slot", DEADLINE).await;
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

// ---------------------------------------------------------------------------
// Case 12: long transaction interleaved with short ones, restart in between.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Sigterm,
    Kill9,
}

async fn long_transaction_across_a_relay_restart(stop: Stop) {
    let case = match stop {
        Stop::Sigterm => "long-txn-sigterm",
        Stop::Kill9 => "long-txn-kill-9",
    };
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let config = outbox.write_config("");
    let relay = Relay::process(&config);
    wait_until("the relay to hold the slot", DEADLINE, || {
        outbox.slot_active()
    })
    .await;

    let mut long = outbox.writer().await;
    let long_start = outbox.current_wal_lsn().await;
    let tx = long.transaction().await.unwrap();
    let mut loadgen = outbox.start_loadgen(&[
        "--events",
        "4000",
        "--rate",
        "800",
        "--connections",
        "2",
        "--aggregates",
        "20",
    ]);
    // The long transaction's rows use their own aggregates, `seq` rising
    // with the series, so per-aggregate commit order is `seq` order.
    let insert = format!(
        "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
         SELECT gen_random_uuid(), 'order', 'long-' || (i % 10), 'OrderPlaced',
                jsonb_build_object('aggregate', 'long-' || (i % 10), 'seq', i), i
         FROM generate_series($1::bigint, $2::bigint) AS i",
        outbox.table
    );
    let mut relay = Some(relay);
    for step in 0..10i64 {
        tx.execute(&insert, &[&(step * 200 + 1), &(step * 200 + 200)])
            .await
            .unwrap();
        // Over time: short transactions commit between the long one's
        // statements.
        let before = committed_rows(&outbox).await;
        wait_until("short transactions to commit", DEADLINE, || async {
            committed_rows(&outbox).await >= before + 100
        })
        .await;
        if step == 4 {
            // The slot confirmed short transactions that committed after
            // the long one began: on restart the server must still send it.
            wait_until(
                "the slot to confirm past the long transaction's start",
                DEADLINE,
                || async {
                    outbox
                        .confirmed_flush_lsn()
                        .await
                        .is_some_and(|c| c > long_start)
                },
            )
            .await;
            let mut r = relay.take().unwrap();
            match stop {
                Stop::Kill9 => r.kill9(),
                Stop::Sigterm => {
                    let status = r.terminate().await;
                    assert!(status.success(), "SIGTERM exits 0: {status:?}");
                }
            }
        }
    }
    tx.commit().await.unwrap();
    wait_child(&mut loadgen, DEADLINE).await;
    let committed = outbox.committed_from_table().await;
    assert_eq!(committed.len(), 4000 + 2000);

    let mut relay = Relay::process(&config);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(status.success(), "graceful exit: {status:?}");
    let received = consume_to_end(&topic).await;
    let summary = check_delivery(case, &committed, &received);
    if stop == Stop::Sigterm {
        assert_eq!(summary.duplicated, 0, "a graceful stop sends nothing twice");
    }
    outbox.drop_all().await;
    report_wall_time(case, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_transaction_open_across_a_relay_crash_is_delivered_whole() {
    long_transaction_across_a_relay_restart(Stop::Kill9).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_transaction_open_across_a_graceful_restart_is_delivered_once() {
    long_transaction_across_a_relay_restart(Stop::Sigterm).await;
}

/// SIGTERM while a large transaction streams: the relay reads on to its
/// commit, drains, confirms it, and a restart sends nothing twice (the
/// transaction's events already delivered must not come again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_in_the_middle_of_a_large_transaction_finishes_it_first() {
    let started = Instant::now();
    let rows: i64 = 20_000;
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let config = outbox.write_config("");
    let mut relay = Relay::process(&config);
    wait_until("the relay to hold the slot", DEADLINE, || {
        outbox.slot_active()
    })
    .await;
    let mut writer = outbox.writer().await;
    let tx = writer.transaction().await.unwrap();
    tx.execute(
        &format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
             SELECT gen_random_uuid(), 'order', 'agg-' || (i % 100), 'OrderPlaced',
                    jsonb_build_object('aggregate', 'agg-' || (i % 100), 'seq', i / 100), i / 100
             FROM generate_series(1, $1::bigint) AS i",
            outbox.table
        ),
        &[&rows],
    )
    .await
    .unwrap();
    let before_commit = outbox.current_wal_lsn().await;
    tx.commit().await.unwrap();
    wait_until("the transaction to start arriving", DEADLINE, || async {
        topic_len(&topic).await >= 500
    })
    .await;
    let log = relay.log_path().to_path_buf();
    let status = relay.terminate().await;
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
    let log = std::fs::read_to_string(log).unwrap();
    assert!(
        log.contains("stop requested mid-transaction"),
        "the stop came while the transaction streamed:\n{log}"
    );
    assert_eq!(
        topic_len(&topic).await,
        rows,
        "the relay finished the transaction before stopping"
    );
    let confirmed = outbox.confirmed_flush_lsn().await.unwrap();
    assert!(
        confirmed > before_commit,
        "the final status update confirmed the transaction: {confirmed} <= {before_commit}"
    );

    let mut relay = Relay::process(&config);
    let mut committed = outbox.committed_from_table().await;
    let mut seqs = HashMap::new();
    let more = outbox.commit_events(&mut writer, 10, 1, 5, &mut seqs).await;
    committed.extend(more);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}");
    let received = consume_ids_to_end(&topic).await;
    let summary = check_delivery("sigterm-mid-transaction", &committed, &received);
    assert_eq!(summary.duplicated, 0, "a graceful stop sends nothing twice");
    outbox.drop_all().await;
    report_wall_time("sigterm-mid-transaction", started);
}

// ---------------------------------------------------------------------------
// Case 13: one 1M-row transaction.

/// Peak RSS a streaming relay stays under; buffering the transaction's
/// records (well over 150 MB of payloads, headers and keys) would not.
const BIG_TXN_MAX_RSS: u64 = 300 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn million_row_transaction_streams_in_bounded_memory_and_confirms_after_its_last_row() {
    let started = Instant::now();
    let rows: i64 = std::env::var("OUTBOX_RELAY_BIG_TXN_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let outbox = TestOutbox::create("jsonb").await;
    // pg_walinspect finds the transaction's exact commit end LSN (what the
    // relay must confirm). Creating an extension changes no server setting.
    let _ = outbox
        .admin
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 4).await;
    let config = outbox.write_config("");
    let mut relay = Relay::process(&config);
    wait_until("the relay to hold the slot", DEADLINE, || {
        outbox.slot_active()
    })
    .await;
    let txn_start = outbox.current_wal_lsn().await;

    // The transaction runs in its own task; this one samples meanwhile.
    let table = outbox.table.clone();
    let writer = tokio::spawn(async move {
        let mut client = pg_admin().await;
        let tx = client.transaction().await.unwrap();
        let xid: String = tx
            .query_one("SELECT pg_current_xact_id()::text", &[])
            .await
            .unwrap()
            .get(0);
        tx.execute(
            &format!(
                "INSERT INTO public.{table} (id, aggregatetype, aggregateid, type, payload, seq)
                 SELECT gen_random_uuid(), 'order', 'agg-' || (i % 1000), 'OrderPlaced',
                        jsonb_build_object('aggregate', 'agg-' || (i % 1000), 'seq', i / 1000),
                        i / 1000
                 FROM generate_series(1, $1::bigint) AS i"
            ),
            &[&rows],
        )
        .await
        .unwrap();
        let before_commit: String = tx
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
        tx.commit().await.unwrap();
        let xid: i64 = xid.parse::<i64>().unwrap() % (1 << 32);
        let row = client
            .query_one(
                "SELECT end_lsn::text FROM pg_get_wal_records_info($1::text::pg_lsn, pg_current_wal_flush_lsn())
                 WHERE resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%'
                   AND xid::text::bigint = $2",
                &[&before_commit, &xid],
            )
            .await
            .expect("the commit record of the big transaction");
        row.get::<_, String>(0).parse::<Lsn>().unwrap()
    });

    let mut peak_rss = 0u64;
    let mut passed_start_early = false;
    let mut samples: Vec<(Lsn, i64)> = Vec::new();
    let mut commit_end: Option<Lsn> = None;
    let mut writer = Some(writer);
    let mut committed_at: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        assert!(
            Instant::now() < deadline,
            "the big transaction was not delivered and confirmed within 15 minutes: {} of {rows} records, confirmed {:?}, commit end {commit_end:?}",
            samples.last().map_or(0, |s| s.1),
            samples.last().map(|s| s.0)
        );
        if let Some(rss) = relay.rss_bytes() {
            peak_rss = peak_rss.max(rss);
        }
        // Confirmed first, then the topic: a confirmation seen before the
        // count must be covered by that count.
        let confirmed = outbox.confirmed_flush_lsn().await.expect("slot");
        let on_topic = topic_len(&topic).await;
        samples.push((confirmed, on_topic));
        if confirmed > txn_start && on_topic < rows {
            passed_start_early = true;
        }
        if writer.as_ref().is_some_and(|w| w.is_finished()) {
            commit_end = Some(writer.take().unwrap().await.unwrap());
            committed_at = Some(Instant::now());
            println!(
                "big-txn: {rows} rows committed after {:.1} s, commit end LSN {}",
                started.elapsed().as_secs_f64(),
                commit_end.unwrap()
            );
        }
        if let Some(end) = commit_end
            && on_topic >= rows
            && confirmed >= end
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let commit_end = commit_end.unwrap();
    let delivered_after = committed_at.unwrap().elapsed();
    // The slot never confirmed the transaction before the broker held every
    // one of its records.
    for (confirmed, on_topic) in &samples {
        assert!(
            *confirmed < commit_end || *on_topic >= rows,
            "confirmed_flush_lsn {confirmed} reached the big transaction's commit end {commit_end} with only {on_topic} of {rows} records on the topic"
        );
    }
    let status = relay.terminate().await;
    assert!(status.success(), "graceful exit: {status:?}");
    println!(
        "big-txn: peak relay RSS {:.1} MiB; delivered and confirmed {:.1} s after commit; confirmed passed the transaction's start before its end: {passed_start_early}",
        peak_rss as f64 / 1048576.0,
        delivered_after.as_secs_f64()
    );
    assert!(peak_rss > 0, "RSS was sampled");
    assert!(
        peak_rss < BIG_TXN_MAX_RSS,
        "relay peak RSS {} MiB: the transaction was buffered, not streamed",
        peak_rss / 1048576
    );

    let received = consume_ids_to_end(&topic).await;
    let committed = outbox.committed_from_table().await;
    assert_eq!(committed.len() as i64, rows);
    let distinct: HashSet<&str> = received.iter().filter_map(|r| r.header("ce_id")).collect();
    assert_eq!(distinct.len() as i64, rows, "every row delivered");
    let summary = check_delivery("big-txn", &committed, &received);
    assert_eq!(summary.duplicated, 0, "a clean run delivers exactly once");
    outbox.drop_all().await;
    report_wall_time("big-txn", started);
}

// ---------------------------------------------------------------------------
// Case 15: UPDATE / DELETE / TRUNCATE are counted; /health while streaming.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_changes_are_counted_in_metrics_and_health_is_ok_while_streaming() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    // A publication that (wrongly) publishes everything: the relay must
    // ignore the other kinds, and count them. With the recommended
    // insert-only publication the server never sends them at all.
    outbox
        .admin
        .batch_execute(&format!(
            "ALTER PUBLICATION {} SET (publish = 'insert, update, delete, truncate')",
            outbox.publication
        ))
        .await
        .unwrap();
    let port = free_port();
    let config = outbox.write_config(&format!("[relay]\nmetrics_addr = \"127.0.0.1:{port}\""));
    let mut relay = Relay::process(&config);
    wait_until("/health to answer 200", DEADLINE, || async {
        http_get(port, "/health")
            .await
            .is_some_and(|(s, _)| s == 200)
    })
    .await;

    let t = &outbox.table;
    let ids: Vec<String> = (0..4).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let insert = |i: usize| {
        format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload)
             VALUES ('{}', 'order', 'o1', 'Placed', '{{\"seq\":{}}}');",
            ids[i],
            i + 1
        )
    };
    outbox
        .admin
        .batch_execute(&format!(
            "{}{}{}
             UPDATE public.{t} SET type = 'Changed' WHERE id IN ('{}', '{}');
             DELETE FROM public.{t} WHERE id = '{}';
             TRUNCATE public.{t};
             {}",
            insert(0),
            insert(1),
            insert(2),
            ids[0],
            ids[1],
            ids[2],
            insert(3),
        ))
        .await
        .unwrap();
    let committed: Vec<Committed> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Committed {
            id: id.clone(),
            aggregate: "o1".into(),
            seq: i as i64 + 1,
        })
        .collect();
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    // The last insert came after every ignored change: once it is
    // published, the counters are final.
    let published = |m: &str| metric_value(m, "outbox_relay_events_published_total", "");
    wait_until("the published counter to reach 4", DEADLINE, || async {
        let metrics = http_get(port, "/metrics").await.map(|(_, b)| b);
        metrics.is_some_and(|m| published(&m) >= 4.0)
    })
    .await;
    let (_, metrics) = http_get(port, "/metrics").await.expect("/metrics");
    let ignored = |kind: &str| {
        metric_value(
            &metrics,
            "outbox_relay_changes_ignored_total",
            &format!("kind=\"{kind}\""),
        )
    };
    assert_eq!(ignored("update"), 2.0, "{metrics}");
    assert_eq!(ignored("delete"), 1.0, "{metrics}");
    assert_eq!(ignored("truncate"), 1.0, "{metrics}");
    assert_eq!(published(&metrics), 4.0, "{metrics}");
    let (status, body) = http_get(port, "/health").await.expect("/health");
    assert_eq!(status, 200, "{body}");
    let summary = check_delivery("ignored-counted", &committed, &received);
    assert_eq!(summary.duplicated, 0);
    assert_eq!(
        received.len(),
        4,
        "updates, deletes, truncates publish nothing"
    );
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}");
    outbox.drop_all().await;
    report_wall_time("ignored-counted", started);
}

// ---------------------------------------------------------------------------
// Case 16: ALTER TABLE mid-stream.

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

// ---------------------------------------------------------------------------
// Case 18: byte-exact round trip.

/// Payloads that tend to break JSON handling, as a service would write them
/// (jsonb normalizes their formatting; `payload::text` is the reference).
fn tricky_payloads() -> Vec<String> {
    let mut deep = String::new();
    for level in 0..100 {
        deep.push_str(if level % 2 == 0 { "[" } else { "{\"k\":" });
    }
    deep.push_str("\"bottom\"");
    for level in (0..100).rev() {
        deep.push_str(if level % 2 == 0 { "]" } else { "}" });
    }
    vec![
        r#"{"emoji": "😀", "clef": "𝄞", "mixed": "a😀b𝄞c", "flag": "🇮🇱"}"#.into(),
        r#"{"he": "עברית", "ar": "العربية", "bidi": "abc עברית 123 العربية!"}"#.into(),
        "{\"combining\": \"e\u{301}\", \"precomposed\": \"\u{e9}\", \"stack\": \"a\u{301}\u{302}\u{303}\"}"
            .into(),
        "{}".into(),
        "[]".into(),
        deep,
        r#"{"big": 123456789012345678901234567890.123456789012345678901234567890, "int": 18446744073709551616, "tiny": 1e-30, "neg": -0.0, "exp": 6.02E+23}"#
            .into(),
        r#"{"esc": "quote \" backslash \\ slash \/ tab \t nl \n cr \r ctl \u0001 \u001f", "pair": "\ud83d\ude00", "bmp": "\u2028\u2029"}"#
            .into(),
        r#"{"b": 1, "a": 2, "a": 3, "  spaced key  ": [1, 2.50, true, false, null]}"#.into(),
        r#""just a string""#.into(),
    ]
}

async fn round_trip_tricky_payloads(mode: ContentMode) {
    let case = match mode {
        ContentMode::Binary => "byte-exact-binary",
        ContentMode::Structured => "byte-exact-structured",
    };
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let mut settings = outbox.settings();
    settings.envelope.mode = mode;
    let relay = Relay::in_process(settings);
    let mut committed = Vec::new();
    let mut expected: HashMap<String, String> = HashMap::new();
    for (seq, payload) in tricky_payloads().iter().enumerate() {
        let id = uuid::Uuid::new_v4().to_string();
        let row = outbox
            .admin
            .query_one(
                &format!(
                    "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload)
                     VALUES ($1::text::uuid, 'order', 'tricky', 'OrderPlaced', $2::text::jsonb)
                     RETURNING payload::text",
                    outbox.table
                ),
                &[&id, payload],
            )
            .await
            .unwrap_or_else(|e| panic!("insert {payload}: {e}"));
        expected.insert(id.clone(), row.get(0));
        committed.push(Committed {
            id,
            aggregate: "tricky".into(),
            seq: seq as i64 + 1,
        });
    }
    let want = committed.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    relay.stop().await.expect("graceful stop");
    for r in &received {
        let id = r.header("id").expect("id header");
        let want = &expected[id];
        let value = r.value.as_deref().expect("record value");
        match mode {
            ContentMode::Binary => assert_eq!(
                value,
                want.as_bytes(),
                "record value differs from payload::text for {want}"
            ),
            ContentMode::Structured => {
                #[derive(serde::Deserialize)]
                struct Envelope<'a> {
                    #[serde(borrow)]
                    data: &'a serde_json::value::RawValue,
                }
                let envelope: Envelope<'_> =
                    serde_json::from_slice(value).expect("structured envelope is JSON");
                // Verbatim embedding is stronger than JSON equality, and the
                // only equality that holds for numbers beyond f64.
                assert_eq!(envelope.data.get(), want.as_str(), "data member differs");
            }
        }
    }
    // The checker keys on `ce_id`; structured records carry the id in `id`.
    let keyed: Vec<Received> = received
        .into_iter()
        .map(|mut r| {
            let id = r.headers["id"].clone();
            r.headers.insert("ce_id".into(), id);
            r
        })
        .collect();
    let summary = check_delivery(case, &committed, &keyed);
    assert_eq!(summary.duplicated, 0);
    assert_eq!(keyed.len(), committed.len());
    outbox.drop_all().await;
    report_wall_time(case, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tricky_payloads_round_trip_byte_exact_in_binary_mode() {
    round_trip_tricky_payloads(ContentMode::Binary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tricky_payloads_round_trip_verbatim_in_structured_mode() {
    round_trip_tricky_payloads(ContentMode::Structured).await;
}

// ---------------------------------------------------------------------------
// Case 19: authentication.

/// The relay's exit code for a fatal runtime error (slot missing,
/// authentication refused, ...).
const EXIT_FATAL: i32 = 1;
/// The relay's exit code for a config it refuses before connecting.
const EXIT_CONFIG: i32 = 2;

/// Starts the relay with `config`, expects exit code [`EXIT_FATAL`] within
/// [`FAST_EXIT`] and no retry; returns the log.
async fn expect_fast_refusal(config: &std::path::Path) -> String {
    expect_fast_exit(config, EXIT_FATAL).await
}

/// Starts the relay with `config`, expects exit code `code` within
/// [`FAST_EXIT`] and no retry; returns the log.
async fn expect_fast_exit(config: &std::path::Path, code: i32) -> String {
    let started = Instant::now();
    let mut relay = Relay::process(config);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert!(
        !status.success(),
        "refused start exits non-zero: {status:?}\n{log}"
    );
    assert_eq!(status.code(), Some(code), "exit code\n{log}");
    assert!(
        !log.contains("retrying"),
        "no retry for a fatal error:\n{log}"
    );
    println!(
        "refused start exited after {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        log.lines()
            .find(|l| l.starts_with("outbox-relay:"))
            .unwrap_or_default()
    );
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_exits_fast_naming_authentication_and_the_role() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let config =
        outbox.write_config_with_url(&pg_url_for("relay", "not-the-relay-password", ""), "");
    let log = expect_fast_refusal(&config).await;
    assert!(log.contains("authentication failed"), "{log}");
    assert!(log.contains("\"relay\""), "names the role: {log}");
    assert!(
        !log.contains("not-the-relay-password"),
        "no password in the log"
    );
    assert!(!outbox.slot_active().await);
    outbox.drop_all().await;
    report_wall_time("auth-wrong-password", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_without_replication_exits_fast_telling_to_alter_role() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let role = TestRole::create(&outbox, "LOGIN", "no-repl-pw").await;
    let config = outbox.write_config_with_url(&pg_url_for(&role.name, &role.password, ""), "");
    let log = expect_fast_refusal(&config).await;
    assert!(
        log.contains(&format!("ALTER ROLE {} REPLICATION", role.name)),
        "{log}"
    );
    outbox.drop_all().await;
    role.drop_role(&outbox.admin).await;
    report_wall_time("auth-no-replication", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_revoked_mid_stream_exits_with_a_clear_message() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let role = TestRole::create(&outbox, "LOGIN REPLICATION", "revoked-pw").await;
    let config = outbox.write_config_with_url(&pg_url_for(&role.name, &role.password, ""), "");
    let mut relay = Relay::process(&config);
    let mut writer = outbox.writer().await;
    let committed = outbox
        .commit_events(&mut writer, 50, 2, 10, &mut HashMap::new())
        .await;
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    check_delivery("login-revoked-before", &committed, &received);

    outbox
        .admin
        .batch_execute(&format!("ALTER ROLE {} NOLOGIN", role.name))
        .await
        .unwrap();
    let revoked_at = Instant::now();
    outbox.terminate_walsender(None, DEADLINE).await;
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert!(!status.success(), "{status:?}\n{log}");
    assert!(log.contains("authentication failed"), "{log}");
    assert!(log.contains(&role.name), "names the role: {log}");
    assert!(log.contains("not permitted to log in"), "says why: {log}");
    println!(
        "login revoked: exited {:.1} s after the walsender was terminated: {}",
        revoked_at.elapsed().as_secs_f64(),
        log.lines()
            .find(|l| l.starts_with("outbox-relay:"))
            .unwrap_or_default()
    );
    outbox.drop_all().await;
    role.drop_role(&outbox.admin).await;
    report_wall_time("auth-login-revoked", started);
}

// ---------------------------------------------------------------------------
// Case 20: TLS.

/// Whether the walsender holding the slot speaks TLS, per `pg_stat_ssl`.
async fn walsender_ssl(outbox: &TestOutbox) -> (bool, Option<String>) {
    let pid = outbox
        .walsender_pid()
        .await
        .expect("a walsender holds the slot");
    let row = outbox
        .admin
        .query_one(
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = $1",
            &[&pid],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

async fn tls_delivers(case: &str, conninfo: &str) {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let config = outbox.write_config_with_url(conninfo, "");
    let mut relay = Relay::process(&config);
    wait_until("the relay to hold the slot", DEADLINE, || {
        outbox.slot_active()
    })
    .await;
    let (ssl, version) = walsender_ssl(&outbox).await;
    assert!(ssl, "{case}: the replication session is encrypted");
    println!("{case}: walsender TLS version {version:?}");
    let mut writer = outbox.writer().await;
    let committed = outbox
        .commit_events(&mut writer, 20, 2, 5, &mut HashMap::new())
        .await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}");
    let received = consume_to_end(&topic).await;
    let summary = check_delivery(case, &committed, &received);
    assert_eq!(summary.duplicated, 0);
    outbox.drop_all().await;
    report_wall_time(case, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verify_full_against_localhost_connects_and_delivers() {
    let query = format!("sslmode=verify-full&sslrootcert={}", env("PG_CA_CERT"));
    let url = pg_url_at("localhost", "relay", "relay-test-password", &query);
    tls_delivers("tls-verify-full", &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_require_encrypts_the_replication_session() {
    let url = pg_url_for("relay", "relay-test-password", "sslmode=require");
    tls_delivers("tls-require", &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verify_full_against_a_wrong_host_name_refuses_fast() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let conninfo = format!(
        "host=wrong.example hostaddr=127.0.0.1 port={} user=relay password=relay-test-password \
         dbname=postgres sslmode=verify-full sslrootcert={}",
        env("PG_PORT"),
        env("PG_CA_CERT")
    );
    let config = outbox.write_config_with_url(&conninfo, "");
    let log = expect_fast_refusal(&config).await;
    assert!(log.contains("certificate"), "{log}");
    assert!(
        log.contains("wrong.example"),
        "names the host checked: {log}"
    );
    assert!(
        !log.contains("relay-test-password"),
        "no password in the log"
    );
    assert!(!outbox.slot_active().await);
    outbox.drop_all().await;
    report_wall_time("tls-wrong-host", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_the_relay_cannot_honour_refuse_fast_naming_the_fix() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    // What the conninfo alone rules out is a config error; a verify mode
    // without a root certificate only at connect (over a Unix socket,
    // where sslmode does not apply, it is fine).
    for (query, says, code) in [
        (
            "sslmode=disable&channel_binding=require",
            "channel_binding=require needs TLS",
            EXIT_CONFIG,
        ),
        ("sslmode=verify-full", "sslrootcert=<path", EXIT_FATAL),
        (
            "sslmode=verify-ca&sslrootcert=system",
            "sslmode=verify-full",
            EXIT_CONFIG,
        ),
    ] {
        let url = pg_url_at("localhost", "relay", "relay-test-password", query);
        let config = outbox.write_config_with_url(&url, "");
        let log = expect_fast_exit(&config, code).await;
        assert!(log.contains(says), "{query}: {log}");
        if code == EXIT_CONFIG {
            assert!(log.contains("postgres.url"), "names the field: {log}");
        }
    }
    assert!(!outbox.slot_active().await);
    outbox.drop_all().await;
    report_wall_time("tls-refused-settings", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslrootcert_file_is_the_only_trust_and_system_means_the_system_store() {
    use crate::support::tls::ThrowawayCa;
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    // The relay's "system trust store" here is the test server's CA
    // (OpenSSL reads SSL_CERT_FILE), so trusting the system store would let
    // the server's certificate pass.
    let system_store = [("SSL_CERT_FILE", env("PG_CA_CERT"))];
    let system_store: Vec<(&str, &str)> =
        system_store.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // sslrootcert=<another CA's file>: the system store must not count.
    let other = ThrowawayCa::create();
    let url = pg_url_at(
        "localhost",
        "relay",
        "relay-test-password",
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            other.ca_cert.display()
        ),
    );
    let config = outbox.write_config_with_url(&url, "");
    let mut relay = Relay::process_with_env(&config, &system_store);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(1), "refused: {log}");
    assert!(log.contains("certificate"), "{log}");

    // sslrootcert=system: that store, and verify-full by default.
    let url = pg_url_at(
        "localhost",
        "relay",
        "relay-test-password",
        "sslrootcert=system",
    );
    let config = outbox.write_config_with_url(&url, "");
    let mut relay = Relay::process_with_env(&config, &system_store);
    let mut writer = outbox.writer().await;
    let committed = outbox
        .commit_events(&mut writer, 10, 2, 5, &mut HashMap::new())
        .await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let (ssl, _) = walsender_ssl(&outbox).await;
    assert!(ssl);
    assert!(relay.terminate().await.success());
    outbox.drop_all().await;
    report_wall_time("tls-root-cert-trust", started);
}

// ---------------------------------------------------------------------------
// Case 21: a canary password never appears in any log line.

/// A secret with every character that URLs and key=value strings give a
/// meaning to, between two unique markers: a leak of its beginning or its
/// end shows even where the middle was cut off or escaped.
struct Canary {
    text: String,
    head: String,
    tail: String,
}

impl Canary {
    fn new(prefix: &str) -> Canary {
        let marker = || uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let head = format!("{prefix}{}", marker());
        let tail = format!("{}{prefix}", marker());
        Canary {
            text: format!("{head}/?@#:%='\" &x {tail}"),
            head,
            tail,
        }
    }

    /// What must appear in no output line: the secret, as the URL and the
    /// key=value string carry it, percent-encoded, and its markers.
    fn forms(&self) -> Vec<String> {
        vec![
            self.text.clone(),
            percent_encode_all(&self.text),
            percent_encode_minimal(&self.text),
            self.head.clone(),
            self.tail.clone(),
        ]
    }
}

/// Replaces `line` (which must be there) in the config at `path`.
fn edit_config(path: &std::path::Path, line: &str, replacement: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(line), "{line:?} not in the config");
    std::fs::write(path, text.replace(line, replacement)).unwrap();
}

/// Starts a relay at trace level with `config`, waits for it to exit with
/// `code` within [`FAST_EXIT`], returns its output.
async fn refused_run(config: &std::path::Path, code: i32, says: &str) -> String {
    let mut relay = Relay::process_with_log(config, "trace");
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(code), "exit code\n{log}");
    assert!(log.contains(says), "says {says:?}:\n{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_secrets_never_appear_in_trace_logs() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let pg = Canary::new("pgcanary");
    let kafka = Canary::new("kcanary");
    let role = TestRole::create(&outbox, "LOGIN REPLICATION", &pg.text).await;
    let kafka_secrets = format!(
        "[kafka.properties]\n\"sasl.password\" = {k}\n\"ssl.key.password\" = {k}",
        k = toml_string(&kafka.text)
    );
    // The URL carries '/', '?', '#', ':', '=', quotes and the space raw, as
    // tokio-postgres accepts them; only '%' and '@' are encoded.
    let url = pg_url_written(
        "127.0.0.1",
        &role.name,
        &percent_encode_minimal(&pg.text),
        "",
    );
    let key_value = pg_key_value_for(&role.name, &pg.text, "");
    let config = outbox.write_config_with_url(&url, &kafka_secrets);
    let forbidden: Vec<String> = pg.forms().into_iter().chain(kafka.forms()).collect();
    // Each output is checked as soon as it is complete, so the first leak
    // is what fails the test.
    let mut lines_checked = 0;
    let mut check = |what: &str, text: String| {
        assert_no_secret(what, &text, &forbidden);
        lines_checked += text.lines().count();
    };

    // Start path, URL form. A full cycle: connect, deliver, reconnect after a
    // walsender kill, graceful stop; everything logged at trace level.
    let mut relay = Relay::process_with_log(&config, "trace");
    let cycle_log = relay.log_path().to_path_buf();
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 20, 2, 5, &mut seqs).await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let killed = outbox.terminate_walsender(None, DEADLINE).await;
    wait_until("the relay to reconnect", DEADLINE, || async {
        outbox.walsender_pid().await.is_some_and(|p| p != killed)
    })
    .await;
    committed.extend(outbox.commit_events(&mut writer, 20, 2, 5, &mut seqs).await);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}");
    let cycle = std::fs::read_to_string(&cycle_log).unwrap();
    // The trace filter took effect (otherwise this proves little).
    assert!(cycle.contains("TRACE"), "trace-level lines were written");
    assert!(cycle.contains("replication stream started"), "{cycle}");
    check("start, URL form", cycle);

    // Start path, key=value form.
    let kv_config = outbox.write_config_with_url(&key_value, &kafka_secrets);
    let mut relay = Relay::process_with_log(&kv_config, "trace");
    committed.extend(outbox.commit_events(&mut writer, 10, 2, 5, &mut seqs).await);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let kv_log = relay.log_path().to_path_buf();
    assert!(relay.terminate().await.success());
    check(
        "start, key=value form",
        std::fs::read_to_string(&kv_log).unwrap(),
    );
    let received = consume_to_end(&topic).await;
    check_delivery("canary", &committed, &received);

    // Failure path: the broker is unreachable; deliveries time out and the
    // relay rebuilds its producer.
    let unreachable = outbox.write_config_with_url(&url, &kafka_secrets);
    edit_config(
        &unreachable,
        &format!("brokers = \"{}\"", env("KAFKA_BROKERS")),
        &format!(
            "brokers = \"127.0.0.1:{}\"\nmessage_timeout_ms = 2000\nshutdown_drain_secs = 1",
            free_port()
        ),
    );
    let mut relay = Relay::process_with_log(&unreachable, "trace");
    outbox.commit_events(&mut writer, 4, 2, 2, &mut seqs).await;
    relay.wait_for_log("delivery failed", DEADLINE).await;
    let unreachable_log = relay.log_path().to_path_buf();
    relay.terminate().await;
    check(
        "broker unreachable",
        std::fs::read_to_string(&unreachable_log).unwrap(),
    );

    // Failure path: a wrong password that contains the canary, both forms.
    let wrong = format!("{}-wrong", pg.text);
    let wrong_url = pg_url_written("127.0.0.1", &role.name, &percent_encode_minimal(&wrong), "");
    for conninfo in [wrong_url, pg_key_value_for(&role.name, &wrong, "")] {
        let config = outbox.write_config_with_url(&conninfo, &kafka_secrets);
        check(
            "wrong password",
            refused_run(&config, EXIT_FATAL, "authentication failed").await,
        );
    }

    // Config path: a conninfo the relay refuses, whose error names the
    // field and the fix: an unsupported sslmode, and a raw '@' in the
    // password.
    for (conninfo, says) in [
        (
            pg_key_value_for(&role.name, &pg.text, "sslmode=allow"),
            "sslmode",
        ),
        (
            pg_url_written("127.0.0.1", &role.name, &pg.text, "sslmode=disable"),
            "more than one '@'",
        ),
    ] {
        let config = outbox.write_config_with_url(&conninfo, &kafka_secrets);
        check(
            "refused conninfo",
            refused_run(&config, EXIT_CONFIG, says).await,
        );
    }

    // And the config check, which prints the whole config.
    for config in [&config, &kv_config] {
        let checked = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(["check-config", "--config"])
            .arg(config)
            .env("RUST_LOG", "trace")
            .output()
            .unwrap();
        assert!(checked.status.success());
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        check("check-config", output);
    }
    println!("canary: {lines_checked} log lines checked");
    outbox.drop_all().await;
    role.drop_role(&outbox.admin).await;
    report_wall_time("canary", started);
}

/// Panics naming the first line of `text` that holds one of `forbidden`.
fn assert_no_secret(what: &str, text: &str, forbidden: &[String]) {
    // Colour codes sit between a field's name and value; strip them so that
    // a secret cannot hide behind one.
    let text = strip_ansi(text);
    for secret in forbidden {
        if let Some(line) = text.lines().find(|l| l.contains(secret.as_str())) {
            panic!("{what}: a secret ({secret}) appears in the output: {line}");
        }
    }
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
