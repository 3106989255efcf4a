//! The edges around the core, against real PostgreSQL and Kafka: what the
//! relay does when the outbox is partitioned, when the server behind the
//! URL changes, when someone moves the slot, and how much a crash re-sends.

mod support;

use std::time::Duration;

use support::relay_probe::topic_len;
use support::*;

const DEADLINE: Duration = Duration::from_secs(120);

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
        let relay = RelayProcess::start(&config);
        // Let it stream for about 1.5 s of load past what it found, then crash it.
        let target = topic_len(&topic).await + RATE * 3 / 2;
        wait_until("the relay to publish 1.5 s of load", DEADLINE, || async {
            topic_len(&topic).await >= target
        })
        .await;
        relay.kill9();
    }
    let relay = RelayProcess::start(&config);
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
