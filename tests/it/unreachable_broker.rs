//! A Kafka the relay cannot reach: `kafka.brokers` names a loopback port
//! nobody listens on (a wrong port, a broker not up yet). The relay must
//! keep running with the events waiting, say so in one clear log line
//! instead of a flood of librdkafka errors, answer 503 on /ready with the
//! reason (and 503 on /health once that lasted `relay.unhealthy_after_secs`);
//! and once a broker answers on that address, turn ready again and deliver
//! what waited.
//!
//! The broker "comes up" as a TCP proxy to the services' broker started on
//! the port the relay was given; the broker's metadata then names its own
//! address, as a real cluster behind a bootstrap address does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::support::http::http_get;
use crate::support::proxy::StallProxy;
use crate::support::*;

/// How long the relay's log is watched while no broker answers.
const UNREACHABLE_WINDOW: Duration = Duration::from_secs(10);

/// Most WARN or ERROR lines a relay may log from its start to the end of
/// [`UNREACHABLE_WINDOW`] with no broker to reach: the one line that says
/// so, and a few others (librdkafka's own). Before the rate limit it logged
/// about 17 a second.
const MAX_NOISY_LINES: usize = 5;

/// WARN and ERROR lines of a relay process's log.
fn noisy_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

/// Events committed while no broker answers wait in the relay and arrive
/// once one does (a delivery tells the relay the broker is back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_broker_is_not_ready_says_so_once_then_delivers_when_one_answers() {
    unreachable_then_answering("unreachable-broker", Waiting::Events).await;
}

/// On an idle outbox nothing is in flight when the broker comes up: the
/// relay must notice by itself (librdkafka's statistics) and turn ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_broker_on_an_idle_outbox_turns_ready_once_one_answers() {
    unreachable_then_answering("unreachable-broker-idle", Waiting::Nothing).await;
}

#[derive(PartialEq)]
enum Waiting {
    /// Events committed before the broker comes up.
    Events,
    /// None until /ready answers 200 again.
    Nothing,
}

async fn unreachable_then_answering(case: &str, waiting: Waiting) {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 1).await;
    let broker_port = free_port();
    let brokers = format!("127.0.0.1:{broker_port}");
    let metrics_port = free_port();
    let config = outbox.write_config(&format!(
        "[relay]\nmetrics_addr = \"127.0.0.1:{metrics_port}\"\nunhealthy_after_secs = 3"
    ));
    let text = std::fs::read_to_string(&config).unwrap();
    let usual = format!("brokers = \"{}\"", env("KAFKA_BROKERS"));
    assert!(text.contains(&usual), "config layout changed");
    std::fs::write(
        &config,
        text.replace(&usual, &format!("brokers = \"{brokers}\"")),
    )
    .unwrap();

    let mut relay = Relay::process(&config);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = Vec::new();
    if waiting == Waiting::Events {
        committed = outbox.commit_events(&mut writer, 3, 2, 2, &mut seqs).await;
    }

    let answers = |path: &'static str, want: u16, needle: String| async move {
        http_get(metrics_port, path)
            .await
            .is_some_and(|(status, body)| status == want && body.contains(&needle))
    };
    let log_of = |relay: &Relay| {
        let log = relay.log_text();
        async move { log }
    };
    wait_until_explained(
        "/ready to answer 503 naming the unreachable brokers",
        DEADLINE,
        || answers("/ready", 503, brokers.clone()),
        || log_of(&relay),
    )
    .await;
    let (_, ready) = http_get(metrics_port, "/ready").await.expect("/ready");
    println!("{case}: /ready with no broker to reach: {ready}");
    wait_until_explained(
        "/health to answer 503 once unreachable for unhealthy_after_secs",
        DEADLINE,
        || answers("/health", 503, "no Kafka broker answered".to_owned()),
        || log_of(&relay),
    )
    .await;

    // Nothing reaches a broker, and nothing may stop the relay: it waits.
    let window = tokio::time::Instant::now();
    while window.elapsed() < UNREACHABLE_WINDOW {
        assert!(
            relay.running(),
            "the relay exited with no broker to reach:\n{}",
            relay.log_text()
        );
        let (status, body) = http_get(metrics_port, "/ready").await.expect("/ready");
        assert_eq!(status, 503, "/ready while no broker answers: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = relay.log_text();
    let clear = format!("cannot reach any Kafka broker at {brokers}");
    assert_eq!(
        log.matches(&clear).count(),
        1,
        "one line says the brokers cannot be reached; log:\n{log}"
    );
    let noisy = noisy_lines(&log);
    println!(
        "{case}: {} WARN/ERROR lines in the first {} s of an unreachable broker",
        noisy.len(),
        UNREACHABLE_WINDOW.as_secs()
    );
    assert!(
        noisy.len() <= MAX_NOISY_LINES,
        "{} WARN/ERROR lines (at most {MAX_NOISY_LINES}):\n{}",
        noisy.len(),
        noisy.join("\n")
    );

    // A broker answers on the address the relay was given.
    let upstream: SocketAddr = env("KAFKA_BROKERS").parse().expect("broker address");
    let _broker = StallProxy::start_at(brokers.parse().expect("address"), upstream).await;
    wait_until_explained(
        "/ready to answer 200 once a broker answers",
        DEADLINE,
        || answers("/ready", 200, "streaming".to_owned()),
        || log_of(&relay),
    )
    .await;
    if waiting == Waiting::Nothing {
        committed = outbox.commit_events(&mut writer, 3, 2, 2, &mut seqs).await;
    }
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    let summary = check_delivery(case, &committed, &received);
    assert_eq!(summary.lost, 0);
    wait_until("/health to answer 200 again", DEADLINE, || {
        answers("/health", 200, "streaming".to_owned())
    })
    .await;
    let log = relay.log_text();
    assert!(
        log.contains("a Kafka broker answers again"),
        "the recovery is logged; log:\n{log}"
    );
    let status = relay.terminate().await;
    assert_eq!(status.code(), Some(EXIT_CLEAN), "{status:?}");
    outbox.drop_all().await;
}
