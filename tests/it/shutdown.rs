//! The relay binary under signals and crashes (test-plan cases 1 and 2),
//! against real PostgreSQL and Kafka, judged by the checker.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::*;


#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_seeded_moments_loses_nothing() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 4).await;
    let config = outbox.write_config("");
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = Vec::new();
    // Seeded crash points: after how many delivered records each kill comes.
    let seed: u64 = std::env::var("TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let kills = 3;
    for round in 0..kills {
        let relay = Relay::process(&config);
        committed.extend(
            outbox
                .commit_events(&mut writer, 300, 3, 40, &mut seqs)
                .await,
        );
        let at =
            (committed.len() / 2) + ((seed as usize * 131 + round * 977) % (committed.len() / 2));
        consume(&topic, DEADLINE, move |r| r.len() >= at).await;
        relay.kill9();
    }
    let mut relay = Relay::process(&config);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(
        status.success(),
        "graceful exit after the crashes: {status:?}"
    );
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("kill-9", &committed, &received);
    assert_eq!(summary.lost, 0);
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_stream_drains_and_restart_yields_no_duplicate() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let config = outbox.write_config("");
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut relay = Relay::process(&config);
    let mut committed = outbox
        .commit_events(&mut writer, 200, 10, 20, &mut seqs)
        .await;
    // Stop while the backlog is still streaming.
    consume(&topic, DEADLINE, |r| r.len() >= 100).await;
    let status = relay.terminate().await;
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
    let mut relay = Relay::process(&config);
    committed.extend(
        outbox
            .commit_events(&mut writer, 10, 1, 20, &mut seqs)
            .await,
    );
    let want = committed.len();
    consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    let status = relay.terminate().await;
    assert!(status.success());
    let received = consume_to_end(&topic).await;
    let summary = check_delivery("sigterm", &committed, &received);
    assert_eq!(
        summary.duplicated, 0,
        "a graceful stop leaves nothing to send twice"
    );
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

/// A dead-letter topic that does not exist, on a broker that does not
/// create topics (here: a producer that may not), stops the binary at start
/// with exit code 1 and the command that creates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_dead_letter_topic_exits_non_zero_with_the_fix() {
    let outbox = TestOutbox::create("jsonb").await;
    let config =
        outbox.write_config("[kafka.properties]\n\"allow.auto.create.topics\" = \"false\"");
    let mut relay = Relay::process(&config);
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(1), "{status:?}");
    let log = relay.log_text();
    let fix = format!(
        "kafka-topics.sh --bootstrap-server <broker> --create --topic {}",
        outbox.dlq_topic
    );
    assert!(log.contains(&fix), "{log}");
    outbox.drop_all().await;
}
