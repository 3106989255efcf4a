//! What an on-call engineer relies on, through the binary against the real
//! services: the exit codes, /ready, the metrics on /metrics, and the log
//! lines (start-up, progress, librdkafka's expected warning).

mod support;

use std::time::Duration;

use support::*;

/// Exit codes of `outbox-relay run`, as README.md and docs/operations.md
/// document them.
const EXIT_CLEAN: i32 = 0;
const EXIT_CONFIG: i32 = 2;
const EXIT_SOURCE: i32 = 3;
const EXIT_SINK: i32 = 4;

const FAST_EXIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Exit codes

/// A slot that does not exist is a PostgreSQL-side fatal error: exit 3, with
/// the slot named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_slot_exits_with_the_source_code() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox
        .admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
        .await
        .unwrap();
    let config = outbox.write_config("");
    let mut relay = RelayProcess::start(&config);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SOURCE), "{log}");
    assert!(log.contains(&outbox.slot), "names the slot: {log}");
    outbox.drop_all().await;
}

/// A dead-letter topic that does not exist, with a producer that may not
/// create topics, is a Kafka-side fatal error: exit 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_topic_exits_with_the_sink_code() {
    let outbox = TestOutbox::create("jsonb").await;
    let config =
        outbox.write_config("[kafka.properties]\n\"allow.auto.create.topics\" = \"false\"");
    let mut relay = RelayProcess::start(&config);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SINK), "{log}");
    assert!(log.contains(&outbox.dlq_topic), "names the topic: {log}");
    outbox.drop_all().await;
}

/// A configuration the relay refuses: exit 2, naming the key, before any
/// connection (the slot does not even exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_config_exits_with_the_config_code() {
    let outbox = TestOutbox::create("jsonb").await;
    let config = outbox.write_config("[relay]\nunhealthy_after_secs = 0");
    let mut relay = RelayProcess::start(&config);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_CONFIG), "{log}");
    assert!(log.contains("relay.unhealthy_after_secs"), "{log}");
    outbox.drop_all().await;
}

/// SIGTERM while streaming: drain, confirm, exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_streaming_exits_clean() {
    let outbox = TestOutbox::create("jsonb").await;
    let config = outbox.write_config("");
    let relay = RelayProcess::start(&config);
    wait_until("the relay to hold the slot", FAST_EXIT, || {
        outbox.slot_active()
    })
    .await;
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{status:?}");
    outbox.drop_all().await;
}
