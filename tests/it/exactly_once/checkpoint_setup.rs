//! Setting the checkpoint topic up is `init`'s job, and `run` refuses to
//! start without it: `init` creates it (one partition, compacted) and
//! leaves it alone the second time, refuses one the relay would refuse;
//! `run` refuses a missing topic (without having the broker create it) or
//! an uncompacted one, with exit code 4 and one ERROR line naming the fix,
//! and stops the same way when the topic is deleted while it runs.

use std::collections::HashMap;

use super::{eos_config, init};
use crate::support::cli::shown;
use crate::support::*;

/// The lines of the relay's log at level ERROR.
fn error_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(" ERROR ")).collect()
}

/// An outbox with its event and dead-letter topics, in exactly-once mode
/// with `checkpoints` as its checkpoint topic (not created here).
async fn outbox_without_checkpoints() -> (TestOutbox, String) {
    let outbox = TestOutbox::create("jsonb").await;
    outbox.create_topic(&outbox.topic("order"), 1).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    (outbox, random_name("checkpoints"))
}

/// `init` creates the checkpoint topic as the relay needs it, one
/// partition and compacted (read back with an admin client); the second
/// time it is in place. `--dry-run` names the topic and creates nothing;
/// the grants printed cover reading the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_creates_the_checkpoint_topic_compacted_with_one_partition_once() {
    let (outbox, checkpoints) = outbox_without_checkpoints().await;
    let config = eos_config(&outbox, &checkpoints, "");

    let dry = init(&config, &["--dry-run"]).await;
    assert!(dry.status.success(), "{}", shown(&dry));
    let stdout = String::from_utf8_lossy(&dry.stdout);
    assert!(
        stdout.contains(&format!(
            "init would create the checkpoint topic \"{checkpoints}\""
        )),
        "{}",
        shown(&dry)
    );
    assert!(!topic_exists(&checkpoints).await, "--dry-run created it");

    let first = init(&config, &[]).await;
    assert!(first.status.success(), "{}", shown(&first));
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        stdout.contains(&format!(
            "done: create checkpoint topic \"{checkpoints}\" (1 partition, cleanup.policy=compact)"
        )),
        "{}",
        shown(&first)
    );
    assert!(
        stdout.contains(&format!(
            "--operation Write --operation Read --operation DescribeConfigs --topic {checkpoints}"
        )),
        "the grants on the checkpoint topic: {}",
        shown(&first)
    );
    assert_eq!(
        describe_topic(&checkpoints).await,
        Some((1, "compact".to_owned()))
    );

    let again = init(&config, &[]).await;
    assert!(again.status.success(), "{}", shown(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains(&format!(
            "in place: checkpoint topic \"{checkpoints}\" (1 partition, compacted)"
        )),
        "{}",
        shown(&again)
    );
    outbox.drop_all().await;
}

/// A checkpoint topic the relay would refuse (not compacted, or of two
/// partitions) is refused by `init` too, with the fix, and left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_refuses_an_uncompacted_or_partitioned_checkpoint_topic_naming_the_fix() {
    let (outbox, uncompacted) = outbox_without_checkpoints().await;
    outbox
        .create_topic_with_config(&uncompacted, 1, &[("cleanup.policy", "delete")])
        .await;
    let refused = init(&eos_config(&outbox, &uncompacted, ""), &[]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", shown(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("is not compacted (cleanup.policy=delete)")
            && stderr.contains(&format!(
                "kafka-configs.sh --bootstrap-server {} --alter --entity-type topics \
                 --entity-name {uncompacted} --add-config cleanup.policy=compact",
                env("KAFKA_BROKERS")
            )),
        "{}",
        shown(&refused)
    );
    assert_eq!(
        describe_topic(&uncompacted).await,
        Some((1, "delete".to_owned())),
        "init changed the topic"
    );

    let partitioned = random_name("checkpoints");
    outbox
        .create_topic_with_config(&partitioned, 2, &[("cleanup.policy", "compact")])
        .await;
    let refused = init(&eos_config(&outbox, &partitioned, ""), &[]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", shown(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(&format!(
            "checkpoint topic \"{partitioned}\" exists but has 2 partitions"
        )),
        "{}",
        shown(&refused)
    );
    outbox.drop_all().await;
}

/// `run` without the checkpoint topic: exit code 4 before streaming, one
/// ERROR line naming the topic and `outbox-relay init`, nothing confirmed,
/// and the broker (which creates topics on request) has no such topic
/// afterwards, even with `allow.auto.create.topics` set in the properties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_missing_checkpoint_topic_and_never_has_it_created() {
    let (outbox, checkpoints) = outbox_without_checkpoints().await;
    let path = eos_config(&outbox, &checkpoints, "");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("\n[kafka.properties]\n\"allow.auto.create.topics\" = \"true\"\n");
    std::fs::write(&path, text).unwrap();
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    outbox.commit_events(&mut writer, 5, 1, 5, &mut seqs).await;
    let before = outbox.confirmed_flush_lsn().await;

    let mut relay = Relay::process(&path);
    let status = relay.wait(DEADLINE).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SINK), "{log}");
    let errors = error_lines(&log);
    assert_eq!(errors.len(), 1, "one ERROR line:\n{log}");
    assert!(
        errors[0].contains(&format!(
            "checkpoint topic \"{checkpoints}\" does not exist"
        )) && errors[0].contains(&format!("`outbox-relay init --config {}`", path.display())),
        "names the topic and the fix:\n{log}"
    );
    assert!(
        !log.contains("streaming from the slot"),
        "stops before streaming:\n{log}"
    );
    assert!(
        !topic_exists(&checkpoints).await,
        "the relay had the broker create {checkpoints}:\n{log}"
    );
    assert_eq!(
        outbox.confirmed_flush_lsn().await,
        before,
        "confirms nothing"
    );
    outbox.drop_all().await;
}

/// `run` on a checkpoint topic that is not compacted (as a broker creates
/// it on first use): exit code 4, one ERROR line naming the topic and the
/// command that compacts it, nothing confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_an_uncompacted_checkpoint_topic_naming_the_fix() {
    let (outbox, checkpoints) = outbox_without_checkpoints().await;
    outbox.create_topic(&checkpoints, 1).await;
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    outbox.commit_events(&mut writer, 5, 1, 5, &mut seqs).await;
    let before = outbox.confirmed_flush_lsn().await;

    let mut relay = Relay::process(&eos_config(&outbox, &checkpoints, ""));
    let status = relay.wait(DEADLINE).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SINK), "{log}");
    assert_fatal_cause(&log, "checkpoint_topic_unusable");
    let errors = error_lines(&log);
    assert_eq!(errors.len(), 1, "one ERROR line:\n{log}");
    assert!(
        errors[0].contains(&format!(
            "checkpoint topic \"{checkpoints}\" is not compacted (cleanup.policy=delete)"
        )) && errors[0].contains(&format!(
            "--entity-name {checkpoints} --add-config cleanup.policy=compact"
        )),
        "names the topic and the fix:\n{log}"
    );
    assert!(
        !log.contains("streaming from the slot"),
        "stops before streaming:\n{log}"
    );
    assert_eq!(
        outbox.confirmed_flush_lsn().await,
        before,
        "confirms nothing"
    );
    outbox.drop_all().await;
}

/// The checkpoint topic deleted while the relay runs: the next commit's
/// checkpoint record has no topic to go to, and the commit fails after
/// `kafka.message_timeout_ms` (the producer does not have the broker
/// re-create the topic meanwhile). The relay starts over, finds the topic
/// missing and stops with exit code 4; the slot stays at the last committed
/// checkpoint. Once `init` created the topic again, the relay replays from
/// the slot: every event once for a read_committed consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_topic_deleted_while_running_stops_the_relay_and_is_not_re_created() {
    let (outbox, checkpoints) = outbox_without_checkpoints().await;
    outbox
        .create_topic_with_config(&checkpoints, 1, &[("cleanup.policy", "compact")])
        .await;
    let topic = outbox.topic("order");
    let config = eos_config(&outbox, &checkpoints, "message_timeout_ms = 5000");
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut committed = outbox
        .commit_events(&mut writer, 20, 2, 10, &mut seqs)
        .await;
    consume_all_ids(&topic, &committed, DEADLINE).await;

    outbox.delete_topic(&checkpoints).await;
    committed.extend(
        outbox
            .commit_events(&mut writer, 20, 2, 10, &mut seqs)
            .await,
    );
    let status = relay.wait(DEADLINE).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SINK), "{log}");
    let errors: Vec<&str> = error_lines(&log)
        .into_iter()
        .filter(|l| !l.contains("librdkafka"))
        .collect();
    assert!(
        errors.len() == 1
            && errors[0].contains(&format!(
                "checkpoint topic \"{checkpoints}\" does not exist"
            )),
        "stops naming the missing topic:\n{log}"
    );
    assert!(
        !topic_exists(&checkpoints).await,
        "the running relay had the broker re-create {checkpoints}:\n{log}"
    );

    let set_up = init(&config, &[]).await;
    assert!(set_up.status.success(), "{}", shown(&set_up));
    let mut relay = Relay::process(&config);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    assert!(relay.terminate().await.success(), "{}", relay.log_text());
    let received = consume_ids_to_end(&topic).await;
    check_exactly_once(
        "exactly-once-checkpoint-topic-deleted-while-running",
        &committed,
        &received,
    );
    outbox.drop_all().await;
}
