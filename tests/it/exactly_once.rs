//! Exactly-once delivery (`kafka.delivery = "exactly-once"`), as a
//! read_committed consumer sees it: every committed event once, in
//! per-aggregate order, with no duplicate at all, across graceful restarts,
//! kill -9 at random moments, a broker restart and a walsender kill; two
//! relays on one slot (one waits, then takes over); two relays with one
//! transactional id (the older is fenced and exits with code 4).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::services::{self, ServiceDown};
use crate::support::*;

/// Hazards of the checkpoint topic (issue 30).
mod checkpoint_hazards;
/// The checkpoint topic set up by `init`, refused by `run` when it is not.
mod checkpoint_setup;

/// The relay config for `outbox` in exactly-once mode, with its own
/// checkpoint topic and `kafka_extra` lines in `[kafka]`.
fn eos_config(outbox: &TestOutbox, checkpoint_topic: &str, kafka_extra: &str) -> PathBuf {
    let path = outbox.write_config("");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "[kafka]\n",
        &format!(
            "[kafka]\ndelivery = \"exactly-once\"\ncheckpoint_topic = \"{checkpoint_topic}\"\n{kafka_extra}\n"
        ),
        1,
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// An outbox with its event topic (3 partitions) and a compacted
/// checkpoint topic of its own.
async fn eos_outbox(outbox: TestOutbox) -> (TestOutbox, String, String) {
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let checkpoints = random_name("checkpoints");
    outbox
        .create_topic_with_config(&checkpoints, 1, &[("cleanup.policy", "compact")])
        .await;
    (outbox, topic, checkpoints)
}

/// A small seeded generator for the fault moments: a failing run is
/// replayed with `EXACTLY_ONCE_SEED`.
struct Moments(u64);

impl Moments {
    fn new() -> Self {
        let seed = std::env::var("EXACTLY_ONCE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        println!("fault moments: EXACTLY_ONCE_SEED={seed}");
        Moments(seed | 1)
    }

    /// A delay in `0..max`.
    fn delay(&mut self, max: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(self.0 % max.as_millis().max(1) as u64)
    }
}

/// Waits until the slot's confirmed position passes `above`.
async fn wait_confirmed_above(outbox: &TestOutbox, above: Option<pgoutput::lsn::Lsn>) {
    wait_until(
        "the slot's confirmed position to move",
        DEADLINE,
        || async { outbox.confirmed_flush_lsn().await > above },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_delivers_each_event_once_across_graceful_restarts() {
    let started = Instant::now();
    let (outbox, topic, checkpoints) = eos_outbox(TestOutbox::create("jsonb").await).await;
    let config = eos_config(&outbox, &checkpoints, "");
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = Vec::new();
    for round in 0..3 {
        let mut relay = Relay::process(&config);
        relay.wait_for_event("streaming", DEADLINE).await;
        committed.extend(
            outbox
                .commit_events(&mut writer, 100, 3, 20, &mut seqs)
                .await,
        );
        consume_all_ids(&topic, &committed, DEADLINE).await;
        let status = relay.terminate().await;
        assert!(
            status.success(),
            "round {round}: {status:?}\n{}",
            relay.log_text()
        );
        if round > 0 {
            assert!(
                relay
                    .log_text()
                    .contains("resuming from the last committed checkpoint"),
                "round {round} resumed from its checkpoint:\n{}",
                relay.log_text()
            );
        }
    }
    let received = consume_ids_to_end(&topic).await;
    check_exactly_once("exactly-once-restarts", &committed, &received);
    // The checkpoint is on its topic, keyed by the transactional id.
    let records = consume_ids_to_end(&checkpoints).await;
    assert!(!records.is_empty(), "checkpoints were written");
    outbox.drop_all().await;
    report_wall_time("exactly-once-restarts", started);
}

/// The fault checker in exactly-once mode: a steady writer; the relay
/// killed with SIGKILL 20 times at seeded random moments after it started
/// streaming (mid-transaction, mid-commit, mid-checkpoint-read); then the
/// walsender terminated under load. A read_committed consumer must see
/// every committed event exactly once. (The broker's restart is the next
/// test: it alone needs the services to itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_survives_kill9_and_a_walsender_kill() {
    let started = Instant::now();
    let (outbox, topic, checkpoints) = eos_outbox(TestOutbox::create("jsonb").await).await;
    let config = eos_config(&outbox, &checkpoints, "message_timeout_ms = 10000");
    let mut loadgen = eos_load(&outbox);
    let mut moments = Moments::new();
    for kill in 0..20 {
        let relay = Relay::process(&config);
        relay.wait_for_event("streaming", DEADLINE).await;
        tokio::time::sleep(moments.delay(Duration::from_millis(2000))).await;
        println!("kill -9 #{kill}");
        relay.kill9();
    }
    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    wait_confirmed_above(&outbox, outbox.confirmed_flush_lsn().await).await;
    let walsender = outbox.terminate_walsender(None, DEADLINE).await;
    wait_until("a new walsender", DEADLINE, || async {
        outbox.walsender_pid().await.is_some_and(|p| p != walsender)
    })
    .await;
    wait_confirmed_above(&outbox, outbox.confirmed_flush_lsn().await).await;
    loadgen.kill();
    finish_under_load("exactly-once-kill9", &outbox, &topic, &mut relay).await;
    report_wall_time("exactly-once-kill9", started);
}

/// A steady writer for the fault tests: 400 events/s over 40 aggregates.
fn eos_load(outbox: &TestOutbox) -> Loadgen {
    Loadgen::start(
        outbox,
        &[
            "--events",
            "0",
            "--rate",
            "400",
            "--connections",
            "2",
            "--aggregates",
            "40",
        ],
    )
}

/// Once the writer is stopped: waits until a read_committed consumer
/// holds every committed event, stops the relay gracefully and checks that
/// each event is there exactly once.
async fn finish_under_load(case: &str, outbox: &TestOutbox, topic: &str, relay: &mut Relay) {
    // The generator was killed: a COMMIT it had sent may still land.
    outbox.wait_loadgen_sessions_ended().await;
    let committed = outbox.committed_from_table().await;
    assert!(committed.len() > 1000, "{} events", committed.len());
    consume_all_ids(topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    let received = consume_ids_to_end(topic).await;
    check_exactly_once(case, &committed, &received);
    outbox.drop_all().await;
}

/// Two relays with one config (one slot, one transactional id): the second
/// waits as a standby on the relay lock (it never builds its transactional
/// producer, so it cannot fence the first); the first is killed with SIGKILL
/// mid-stream; the second takes over from the last committed checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_on_one_slot_the_second_takes_over_without_duplicates() {
    let started = Instant::now();
    let (outbox, topic, checkpoints) = eos_outbox(TestOutbox::create("jsonb").await).await;
    let config = eos_config(&outbox, &checkpoints, "");
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let a = Relay::process(&config);
    a.wait_for_event("streaming", DEADLINE).await;
    let mut committed = outbox
        .commit_events(&mut writer, 100, 2, 20, &mut seqs)
        .await;
    let mut b = Relay::process(&config);
    b.wait_for_event("standing_by", DEADLINE).await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    // A dies mid-stream: transactions open or committed but not confirmed.
    committed.extend(
        outbox
            .commit_events(&mut writer, 200, 2, 20, &mut seqs)
            .await,
    );
    a.kill9();
    b.wait_for_event("streaming", DEADLINE).await;
    committed.extend(
        outbox
            .commit_events(&mut writer, 100, 2, 20, &mut seqs)
            .await,
    );
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = b.terminate().await;
    assert!(status.success(), "{status:?}\n{}", b.log_text());
    let received = consume_ids_to_end(&topic).await;
    check_exactly_once("exactly-once-two-relays", &committed, &received);
    outbox.drop_all().await;
    report_wall_time("exactly-once-two-relays", started);
}

/// Two relays (on two slots) configured with one transactional id: the
/// second one's producer fences the first, which must stop with exit code
/// 4 and say why, instead of fencing it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_fenced_by_another_with_its_transactional_id_exits_4() {
    let (first, first_topic, checkpoints) = eos_outbox(TestOutbox::create("jsonb").await).await;
    let second = TestOutbox::create("jsonb").await;
    second.create_topic(&second.topic("order"), 3).await;
    let id = format!("transactional_id = \"{}\"", random_name("shared-id"));
    let mut a = Relay::process(&eos_config(&first, &checkpoints, &id));
    a.wait_for_event("streaming", DEADLINE).await;
    let mut writer = first.writer().await;
    let mut seqs = HashMap::new();
    let committed = first.commit_events(&mut writer, 20, 2, 5, &mut seqs).await;
    consume_all_ids(&first_topic, &committed, DEADLINE).await;

    let mut b = Relay::process(&eos_config(&second, &checkpoints, &id));
    b.wait_for_event("streaming", DEADLINE).await;
    // A finds out at its next transaction.
    first.commit_events(&mut writer, 20, 2, 5, &mut seqs).await;
    let status = a.wait(DEADLINE).await;
    assert_eq!(status.code(), Some(EXIT_SINK), "{}", a.log_text());
    let log = a.log_text();
    assert!(
        log.contains("fenced") && log.contains("kafka.transactional_id"),
        "the exit says it was fenced and what to change:\n{log}"
    );
    assert!(
        b.log_text().contains("written for another slot"),
        "B ignores A's checkpoint:\n{}",
        b.log_text()
    );
    assert!(b.running(), "B goes on:\n{}", b.log_text());
    let status = b.terminate().await;
    assert!(status.success(), "{status:?}");
    first.drop_all().await;
    second.drop_all().await;
}

/// Dead letters go in the same Kafka transaction as the events around
/// them: across kill -9 at seeded moments, each bad row's dead letter is
/// on the dead-letter topic once, and each good row's event once. (The bad
/// rows are an aggregate of their own: the first parks it, the others wait
/// in its queue as dead letters, and the good rows' aggregate flows.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_written_once_inside_the_transactions() {
    let (outbox, topic, checkpoints) = eos_outbox(TestOutbox::create("text").await).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let config = eos_config(&outbox, &checkpoints, "");
    let t = outbox.table.clone();
    let mut moments = Moments::new();
    let mut good = Vec::new();
    let mut bad = std::collections::HashSet::new();
    let mut relay = Relay::process(&config);
    for round in 0..4 {
        relay.wait_for_event("streaming", DEADLINE).await;
        for n in 0..25 {
            let (bad_id, good_id) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
            let seq = (round * 25 + n) as i64;
            outbox
                .admin
                .batch_execute(&format!(
                    "BEGIN;
                     INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{bad_id}', 'order', 'o-bad', 'Placed', 'not json');
                     INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{good_id}', 'order', 'o1', 'Placed', '{{\"seq\":{seq}}}');
                     COMMIT;"
                ))
                .await
                .unwrap();
            bad.insert(bad_id.to_string());
            good.push(Committed {
                id: good_id.to_string(),
                aggregate: "o1".into(),
                seq,
            });
        }
        tokio::time::sleep(moments.delay(Duration::from_millis(500))).await;
        relay.kill9();
        relay = Relay::process(&config);
    }
    consume_all_ids(&topic, &good, DEADLINE).await;
    let dlq = consume(&outbox.dlq_topic, DEADLINE, {
        let n = bad.len();
        move |r| r.len() >= n
    })
    .await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    let received = consume_ids_to_end(&topic).await;
    check_exactly_once("exactly-once-dead-letters", &good, &received);
    // Everything on the dead-letter topic now, read_committed.
    let dlq_len = consume_ids_to_end(&outbox.dlq_topic).await.len();
    let ids: std::collections::HashSet<String> = dlq
        .iter()
        .filter_map(|r| r.header("id").map(str::to_owned))
        .collect();
    assert_eq!(ids, bad, "every bad row dead-lettered");
    assert_eq!(dlq_len, bad.len(), "each dead letter once");
    outbox.drop_all().await;
}

/// `outbox-relay init --config <config>` (and `extra` arguments).
async fn init(config: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "init".to_owned(),
        "--config".to_owned(),
        config.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    crate::support::cli::cli(args).await
}

/// The checkpoint topic deleted while the relay was stopped: the next start
/// refuses (exit code 4) and leaves the broker without the topic, where
/// before it warned and had the broker re-create it, not compacted. `init`
/// creates it again; the relay then starts from the slot's position (after
/// a graceful stop the slot holds everything, so nothing is written twice)
/// and writes new checkpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_checkpoint_topic_is_refused_at_start_until_init_creates_it() {
    let (outbox, topic, checkpoints) = eos_outbox(TestOutbox::create("jsonb").await).await;
    let config = eos_config(&outbox, &checkpoints, "");
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut committed = outbox
        .commit_events(&mut writer, 50, 2, 10, &mut seqs)
        .await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    assert!(relay.terminate().await.success());

    outbox.delete_topic(&checkpoints).await;
    let mut refused = Relay::process(&config);
    let status = refused.wait(DEADLINE).await;
    let log = refused.log_text();
    assert_eq!(status.code(), Some(EXIT_SINK), "{log}");
    assert!(
        log.contains(&format!(
            "checkpoint topic \"{checkpoints}\" does not exist"
        )) && log.contains("outbox-relay init --config")
            && !log.contains("streaming from the slot"),
        "{log}"
    );
    assert!(
        !topic_exists(&checkpoints).await,
        "the relay had the broker re-create {checkpoints}:\n{log}"
    );

    let set_up = init(&config, &[]).await;
    assert!(
        set_up.status.success(),
        "{}",
        crate::support::cli::shown(&set_up)
    );
    assert_eq!(
        describe_topic(&checkpoints).await,
        Some((1, "compact".to_owned()))
    );
    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let log = relay.log_text();
    assert!(
        log.contains("no checkpoint of this relay found")
            && !log.contains("resuming from the last committed checkpoint"),
        "{log}"
    );
    committed.extend(
        outbox
            .commit_events(&mut writer, 50, 2, 10, &mut seqs)
            .await,
    );
    consume_all_ids(&topic, &committed, DEADLINE).await;
    assert!(relay.terminate().await.success());
    let received = consume_ids_to_end(&topic).await;
    // After a graceful stop the slot had confirmed everything: nothing twice.
    check_exactly_once(
        "exactly-once-checkpoint-topic-deleted",
        &committed,
        &received,
    );
    let relay = Relay::process(&config);
    relay.wait_for_event("checkpoint_resumed", DEADLINE).await;
    relay.kill9();
    outbox.drop_all().await;
}

/// The WAL position the server is at now.
async fn current_wal_lsn(client: &tokio_postgres::Client) -> pgoutput::lsn::Lsn {
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

/// What on-call reads of exactly-once delivery on /metrics: the Kafka
/// transactions by outcome, one commit-duration sample (in seconds) per
/// commit, and the last committed checkpoint's LSN, which covers every
/// event a read_committed consumer saw: above the WAL position before they
/// were written, and not beyond the server's position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_metrics_count_transactions_and_show_the_checkpoint() {
    let (outbox, topic, checkpoints) = eos_outbox(TestOutbox::create("jsonb").await).await;
    let port = free_port();
    let config = eos_config(&outbox, &checkpoints, "");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}\n[relay]\nmetrics_addr = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let mut relay = Relay::process(&config);
    relay.wait_for_event("streaming", DEADLINE).await;
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let before = current_wal_lsn(&writer).await;
    let committed = outbox.commit_events(&mut writer, 40, 2, 5, &mut seqs).await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let scrape = || async { http::http_get(port, "/metrics").await.map(|(_, b)| b) };
    let checkpoint_of = |m: &str| http::metric_value(m, "outbox_relay_checkpoint_lsn", "");
    let ended = |m: &str, outcome: &str| {
        http::metric_value(
            m,
            "outbox_relay_kafka_transactions_total",
            &format!("outcome=\"{outcome}\""),
        )
    };
    // The consumer may see the records a moment before the commit call
    // returns to the relay; and a scrape may fall between a commit's
    // duration sample and its count: wait for a scrape past both.
    wait_until(
        "the checkpoint gauge to pass the events' position, every commit timed",
        DEADLINE,
        || async {
            scrape().await.is_some_and(|m| {
                checkpoint_of(&m) > before.as_u64() as f64
                    && http::metric_value(&m, "outbox_relay_kafka_commit_seconds_count", "")
                        == ended(&m, "committed") + ended(&m, "commit_failed")
            })
        },
    )
    .await;
    let metrics = scrape().await.expect("/metrics");
    let now = current_wal_lsn(&writer).await;
    let value = |name: &str, labels: &str| http::metric_value(&metrics, name, labels);
    let commits = ended(&metrics, "committed");
    assert!(commits >= 1.0, "{metrics}");
    assert!(checkpoint_of(&metrics) <= now.as_u64() as f64, "{metrics}");
    // A healthy run: nothing aborted, no commit failed.
    for outcome in ["aborted", "commit_failed"] {
        assert_eq!(ended(&metrics, outcome), 0.0, "{outcome}: {metrics}");
    }
    let sum = value("outbox_relay_kafka_commit_seconds_sum", "");
    assert!(sum > 0.0 && sum < 60.0 * commits, "seconds: {metrics}");
    assert!(
        metrics.contains("outbox_relay_kafka_commit_seconds_bucket{le=\"0.001\"}"),
        "seconds buckets: {metrics}"
    );
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    outbox.drop_all().await;
}

/// The start-up read of the checkpoint topic takes a read_committed
/// consumer's watermark as the last stable offset (librdkafka's watermark
/// query carries the consumer's isolation.level). With another producer's
/// transaction open on the topic, holding a newer record under the key, the
/// read must not finish (a read_committed reader would stop before that
/// record and take an older checkpoint); once the transaction commits, the
/// read returns that record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpoint_read_waits_out_a_transaction_open_on_the_topic() {
    use outbox_relay::relay::exactly_once::checkpoint_reader::{CheckpointRead, read_checkpoint};
    use outbox_relay::sink::SinkSettings;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

    let (outbox, _topic, checkpoints) = eos_outbox(TestOutbox::create("jsonb").await).await;
    let brokers = env("KAFKA_BROKERS");
    let settings = SinkSettings {
        brokers: brokers.clone(),
        linger_ms: 5,
        message_timeout_ms: 30_000,
        queue_max_messages: 1000,
        queue_max_kbytes: None,
        dead_letter_topic: outbox.dlq_topic.clone(),
        properties: Vec::new(),
    };
    let key = random_name("relay-id");
    let producer: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("transactional.id", random_name("other-writer"))
        .create()
        .expect("transactional producer");
    let timeout = Duration::from_secs(30);
    let send = |value: &str| {
        producer.begin_transaction().unwrap();
        producer
            .send(BaseRecord::to(&checkpoints).key(&key).payload(value))
            .map_err(|(e, _)| e)
            .unwrap();
        producer.flush(timeout).unwrap();
    };
    let p = &producer;
    tokio::task::block_in_place(|| p.init_transactions(timeout)).unwrap();
    tokio::task::block_in_place(|| {
        send("committed");
        p.commit_transaction(timeout).unwrap();
        send("open");
    });
    // Long enough for the queries on a loaded machine: the read must end
    // by the open transaction, not by a slow query.
    let read = read_checkpoint(&settings, &checkpoints, &key, Duration::from_secs(10)).await;
    assert!(
        read.as_ref()
            .is_err_and(|e| e.to_string().contains("transaction stays open")),
        "a read past an open transaction: {read:?}"
    );
    tokio::task::block_in_place(|| p.commit_transaction(timeout)).unwrap();
    let read = read_checkpoint(&settings, &checkpoints, &key, Duration::from_secs(30))
        .await
        .expect("the read after the commit");
    assert_eq!(read, CheckpointRead::Last(Some(b"open".to_vec())));
    outbox.drop_all().await;
}

/// The tests here hold the services alone ([`services::exclusive`]):
/// `make test` runs them after the others, one at a time.
mod alone {
    use super::*;

    /// The broker stopped for a few seconds under load in exactly-once mode
    /// and started again: open transactions are aborted or time out, the relay
    /// rebuilds its transactional producer, resumes from its checkpoint, and a
    /// read_committed consumer sees every committed event exactly once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exactly_once_survives_a_broker_restart() {
        let serial = services::exclusive().await;
        let started = Instant::now();
        let (outbox, topic, checkpoints) =
            eos_outbox(TestOutbox::create_exclusive(&serial, "jsonb").await).await;
        let config = eos_config(&outbox, &checkpoints, "message_timeout_ms = 10000");
        let mut loadgen = eos_load(&outbox);
        let mut moments = Moments::new();
        let mut relay = Relay::process(&config);
        relay.wait_for_event("streaming", DEADLINE).await;
        wait_confirmed_above(&outbox, outbox.confirmed_flush_lsn().await).await;
        let kafka = ServiceDown::stop(&["stop-kafka"], "start-kafka").await;
        // The fault: the broker is gone for a few seconds under load.
        tokio::time::sleep(moments.delay(Duration::from_secs(5)) + Duration::from_secs(3)).await;
        kafka.start().await;
        wait_confirmed_above(&outbox, outbox.confirmed_flush_lsn().await).await;
        loadgen.kill();
        finish_under_load("exactly-once-broker-restart", &outbox, &topic, &mut relay).await;
        report_wall_time("exactly-once-broker-restart", started);
    }
}
