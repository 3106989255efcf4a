//! Test support for the integration tests: a per-test outbox (random table,
//! publication, slot and topic names), a writer that commits outbox rows like
//! a service would, a consumer that reads topics to the end, and the relay
//! run in-process.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use outbox_relay::envelope::{ContentMode, EnvelopeSettings};
use outbox_relay::lsn::Lsn;
use outbox_relay::metrics::Health;
use outbox_relay::outbox::ColumnMap;
use outbox_relay::relay::{self, RelayError, RelaySettings};
use outbox_relay::replication::{Conninfo, ReplicationSettings};
use outbox_relay::sink::SinkSettings;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};

pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run under `make test` or `eval \"$(scripts/services up)\"`")
    })
}

pub fn random_name(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

pub async fn pg_admin() -> Client {
    let (client, conn) = tokio_postgres::connect(&env("PG_URL"), NoTls)
        .await
        .expect("connect to PG_URL");
    tokio::spawn(conn);
    client
}

/// One test's outbox: table, publication, slot and topic, all randomly named.
pub struct TestOutbox {
    pub admin: Client,
    pub table: String,
    pub publication: String,
    pub slot: String,
    /// Topic prefix; events go to `<topic_prefix>.<aggregatetype>`.
    pub topic_prefix: String,
    pub dlq_topic: String,
}

impl TestOutbox {
    /// Creates a Debezium-style outbox. `payload_type` is `jsonb` normally,
    /// `text` to let a test write payloads that are not JSON.
    pub async fn create(payload_type: &str) -> Self {
        let admin = pg_admin().await;
        let table = random_name("outbox");
        let publication = random_name("pub");
        let slot = random_name("slot");
        admin
            .batch_execute(&format!(
                "CREATE TABLE public.{table} (
                    id uuid PRIMARY KEY,
                    aggregatetype text NOT NULL,
                    aggregateid text,
                    type text NOT NULL,
                    payload {payload_type},
                    \"timestamp\" timestamptz NOT NULL DEFAULT now(),
                    tracingspancontext text,
                    seq bigint
                 );
                 CREATE TABLE public.{table}_orders (id bigserial PRIMARY KEY, aggregateid text, seq bigint);
                 GRANT SELECT ON public.{table} TO relay;
                 CREATE PUBLICATION {publication} FOR TABLE public.{table} WITH (publish = 'insert');"
            ))
            .await
            .expect("create outbox");
        admin
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await
            .expect("create slot");
        let topic_prefix = random_name("t");
        let dlq_topic = format!("{topic_prefix}.dlq");
        Self {
            admin,
            table,
            publication,
            slot,
            topic_prefix,
            dlq_topic,
        }
    }

    pub fn topic(&self, aggregate_type: &str) -> String {
        format!("{}.{aggregate_type}", self.topic_prefix)
    }

    pub fn settings(&self) -> RelaySettings {
        RelaySettings {
            replication: ReplicationSettings {
                conninfo: Conninfo::parse(&env("PG_RELAY_URL")).expect("PG_RELAY_URL"),
                slot: self.slot.clone(),
                publication: self.publication.clone(),
                outbox_table: Some(("public".into(), self.table.clone())),
                outbox_oid: None,
                status_interval: Duration::from_secs(1),
                connect_timeout: Duration::from_secs(10),
                application_name: "outbox-relay-test".into(),
            },
            sink: SinkSettings {
                brokers: env("KAFKA_BROKERS"),
                linger_ms: 5,
                message_timeout_ms: 30_000,
                queue_max_messages: 100_000,
                dead_letter_topic: self.dlq_topic.clone(),
                properties: Vec::new(),
            },
            envelope: EnvelopeSettings {
                source: "/orders-service".into(),
                mode: ContentMode::Binary,
                topic_template: format!("{}.{{aggregatetype}}", self.topic_prefix),
            },
            columns: ColumnMap::default(),
            table: ("public".into(), self.table.clone()),
            dlq_topic: self.dlq_topic.clone(),
            max_in_flight: 10_000,
            heartbeat_interval: None,
            shutdown_drain: Duration::from_secs(30),
            on_unroutable: Default::default(),
            unhealthy_after: Duration::from_secs(120),
        }
    }

    /// Creates `topic` with `partitions` partitions ahead of the relay, as
    /// production teams do.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        self.create_topic_with_config(topic, partitions, &[]).await;
    }

    /// Like [`TestOutbox::create_topic`], with topic configs.
    pub async fn create_topic_with_config(
        &self,
        topic: &str,
        partitions: i32,
        config: &[(&str, &str)],
    ) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", env("KAFKA_BROKERS"))
            .create()
            .expect("admin client");
        let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        for (k, v) in config {
            new_topic = new_topic.set(k, v);
        }
        let res = admin
            .create_topics(
                &[new_topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .expect("create topic");
        for r in res {
            r.expect("topic created");
        }
    }

    /// Commits `rows_per_txn`-row transactions, each inserting a business row
    /// and the outbox rows in one transaction. Aggregates are chosen round
    /// robin from `aggregates`; each aggregate's rows carry a rising `seq`.
    /// Returns the committed events in commit order.
    pub async fn commit_events(
        &self,
        writer: &mut Client,
        txns: usize,
        rows_per_txn: usize,
        aggregates: usize,
        seqs: &mut HashMap<String, i64>,
    ) -> Vec<Committed> {
        let mut out = Vec::with_capacity(txns * rows_per_txn);
        let insert = writer
            .prepare(&format!(
                "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
                 VALUES ($1::text::uuid, 'order', $2, 'OrderPlaced', $3::text::jsonb, $4)",
                self.table
            ))
            .await
            .unwrap();
        let business = writer
            .prepare(&format!(
                "INSERT INTO public.{}_orders (aggregateid, seq) VALUES ($1, $2)",
                self.table
            ))
            .await
            .unwrap();
        let mut n = seqs.values().map(|v| *v as usize).sum::<usize>();
        for _ in 0..txns {
            let tx = writer.transaction().await.unwrap();
            for _ in 0..rows_per_txn {
                let aggregate = format!("agg-{}", n % aggregates);
                n += 1;
                let seq = seqs.entry(aggregate.clone()).or_insert(0);
                *seq += 1;
                let id = uuid::Uuid::new_v4().to_string();
                let payload = format!(r#"{{"aggregate":"{aggregate}","seq":{seq},"total":42.5}}"#);
                tx.execute(&business, &[&aggregate, &*seq]).await.unwrap();
                tx.execute(&insert, &[&id, &aggregate, &payload, &*seq])
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

    pub async fn writer(&self) -> Client {
        pg_admin().await
    }

    pub async fn confirmed_flush_lsn(&self) -> Option<Lsn> {
        let row = self
            .admin
            .query_opt(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await
            .unwrap()?;
        let text: Option<String> = row.get(0);
        text.map(|t| t.parse().expect("lsn"))
    }

    pub async fn current_wal_lsn(&self) -> Lsn {
        let row = self
            .admin
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .unwrap();
        row.get::<_, String>(0).parse().unwrap()
    }

    /// Whether a walsender holds the slot (false when the slot is gone).
    pub async fn slot_active(&self) -> bool {
        self.admin
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await
            .unwrap()
            .is_some_and(|row| row.get(0))
    }

    pub async fn drop_all(&self) {
        // The slot may still be held for a moment by a walsender that is
        // shutting down; wait for it to let go (bounded).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.slot_active().await && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = self
            .admin
            .execute("SELECT pg_drop_replication_slot($1)", &[&self.slot])
            .await;
        let _ = self
            .admin
            .batch_execute(&format!(
                "DROP PUBLICATION IF EXISTS {}; DROP TABLE IF EXISTS public.{} ; DROP TABLE IF EXISTS public.{}_orders;",
                self.publication, self.table, self.table
            ))
            .await;
    }
}

/// An outbox row the test committed.
#[derive(Debug, Clone)]
pub struct Committed {
    pub id: String,
    pub aggregate: String,
    pub seq: i64,
}

/// A record read back from Kafka.
#[derive(Debug, Clone)]
pub struct Received {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: HashMap<String, Vec<u8>>,
}

impl Received {
    /// Copies what the checker needs out of a consumed message.
    pub fn from_message(m: &impl Message) -> Self {
        Received {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers: m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| std::str::from_utf8(v).expect("utf-8 header"))
    }
}

/// Reads `topic` from the beginning with a read_committed consumer until
/// `until` says the records suffice or `deadline` passes; then reads on for
/// `settle` to catch records that should not be there (duplicates).
pub async fn consume(
    topic: &str,
    deadline: Duration,
    mut until: impl FnMut(&[Received]) -> bool + Send + 'static,
) -> Vec<Received> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || consume_blocking(&topic, deadline, &mut until))
        .await
        .unwrap()
}

fn consume_blocking(
    topic: &str,
    deadline: Duration,
    until: &mut dyn FnMut(&[Received]) -> bool,
) -> Vec<Received> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .set("group.id", random_name("checker"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .expect("consumer");
    let start = std::time::Instant::now();
    // Wait for the topic to exist (the relay creates it on first write).
    let partitions = loop {
        if let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5))
            && let Some(t) = md.topics().first()
            && t.error().is_none()
            && !t.partitions().is_empty()
        {
            break t.partitions().len() as i32;
        }
        if start.elapsed() > deadline {
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    while start.elapsed() < deadline && !until(&out) {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push(Received::from_message(&m)),
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            None => {}
        }
    }
    out
}

/// Reads every record currently in `topic` (up to each partition's high
/// watermark). Used once the relay stopped, so that duplicates it wrote are
/// all visible.
pub async fn consume_to_end(topic: &str) -> Vec<Received> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", env("KAFKA_BROKERS"))
            .set("group.id", random_name("checker"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .expect("consumer");
        let md = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .expect("metadata");
        let partitions = md.topics()[0].partitions().len() as i32;
        let mut total = 0;
        for p in 0..partitions {
            let (low, high) = consumer
                .fetch_watermarks(&topic, p, Duration::from_secs(10))
                .expect("watermarks");
            total += (high - low) as usize;
        }
        drop(consumer);
        consume_blocking(&topic, Duration::from_secs(60), &mut |r| r.len() >= total)
    })
    .await
    .unwrap()
}

/// The relay running in-process.
pub struct RunningRelay {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), RelayError>>,
}

impl RunningRelay {
    pub fn start(settings: RelaySettings) -> Self {
        Self::start_with_health(settings, Health::default())
    }

    /// With a /health state the test reads.
    pub fn start_with_health(settings: RelaySettings, health: Health) -> Self {
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(relay::run(settings, rx, health));
        Self { stop, task }
    }

    /// Graceful stop (as on SIGTERM); returns the relay's result.
    pub async fn stop(self) -> Result<(), RelayError> {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("relay stops within 60 s")
            .expect("relay task")
    }

    /// Waits for the relay to end by itself (a fatal error).
    pub async fn join(self, within: Duration) -> Result<(), RelayError> {
        tokio::time::timeout(within, self.task)
            .await
            .expect("relay ends in time")
            .expect("relay task")
    }
}

/// Waits until `cond` holds, checking every 100 ms, or panics after `within`.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The checker's verdict on one case (test-plan.md): nothing lost, per
/// aggregate first occurrences in commit order, and how many duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub case: String,
    pub committed: usize,
    pub delivered: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub dead_lettered: usize,
}

impl Summary {
    pub fn print(&self) {
        println!(
            "summary: case={} committed={} delivered={} lost={} duplicated={} dead-lettered={}",
            self.case,
            self.committed,
            self.delivered,
            self.lost,
            self.duplicated,
            self.dead_lettered
        );
    }
}

/// Checks records read from the topic against what was committed. Panics
/// (naming an example) on loss or on a per-aggregate order violation among
/// first occurrences; returns the counts, duplicates included, for the caller
/// to judge against its crash windows.
pub fn check_delivery(case: &str, committed: &[Committed], received: &[Received]) -> Summary {
    let mut first_seen: HashMap<&str, (i32, i64)> = HashMap::new();
    let mut duplicated = 0;
    for r in received {
        let id = r.header("ce_id").expect("ce_id header");
        if first_seen.contains_key(id) {
            duplicated += 1;
        } else {
            first_seen.insert(id, (r.partition, r.offset));
        }
    }
    let lost: Vec<&Committed> = committed
        .iter()
        .filter(|c| !first_seen.contains_key(c.id.as_str()))
        .collect();
    let summary = Summary {
        case: case.to_string(),
        committed: committed.len(),
        delivered: received.len(),
        lost: lost.len(),
        duplicated,
        dead_lettered: 0,
    };
    summary.print();
    assert!(
        lost.is_empty(),
        "{case}: {} events lost, e.g. {:?}",
        lost.len(),
        lost[0]
    );
    // Per aggregate, first occurrences sit in one partition in commit order.
    let mut last: HashMap<&str, (i32, i64, i64)> = HashMap::new();
    for c in committed {
        let (partition, offset) = first_seen[c.id.as_str()];
        if let Some((p, o, seq)) = last.get(c.aggregate.as_str()) {
            assert_eq!(
                *p, partition,
                "{case}: aggregate {} changed partition",
                c.aggregate
            );
            assert!(
                offset > *o,
                "{case}: aggregate {} seq {} (offset {offset}) arrived before seq {seq} (offset {o})",
                c.aggregate,
                c.seq
            );
        }
        last.insert(&c.aggregate, (partition, offset, c.seq));
    }
    summary
}

/// The relay binary run as a child process, for crash and signal tests.
pub struct RelayProcess {
    pub child: std::process::Child,
    pub config: std::path::PathBuf,
    pub log: std::path::PathBuf,
}

impl TestOutbox {
    /// Writes a relay.toml for this outbox into a temporary directory.
    pub fn write_config(&self, extra: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(random_name("relay_cfg"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay.toml");
        let toml = format!(
            r#"[postgres]
url = "{url}"
slot = "{slot}"
publication = "{publication}"
table = "public.{table}"
status_interval_secs = 1
heartbeat_interval_secs = 0
[kafka]
brokers = "{brokers}"
topic = "{prefix}.{{aggregatetype}}"
dlq_topic = "{dlq}"
[cloudevents]
source = "/orders-service"
{extra}
"#,
            url = env("PG_RELAY_URL"),
            slot = self.slot,
            publication = self.publication,
            table = self.table,
            brokers = env("KAFKA_BROKERS"),
            prefix = self.topic_prefix,
            dlq = self.dlq_topic,
        );
        std::fs::write(&path, toml).unwrap();
        path
    }
}

impl RelayProcess {
    pub fn start(config: &std::path::Path) -> Self {
        let log = config.with_extension(format!("{}.log", random_name("run")));
        let file = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start outbox-relay");
        Self {
            child,
            config: config.to_path_buf(),
            log,
        }
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then wait for the exit status (bounded).
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        // SAFETY-free: kill(2) through the `kill` command keeps this crate free of libc.
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        self.wait(Duration::from_secs(60)).await
    }

    pub async fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay did not exit within {within:?}; log: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl TestOutbox {
    /// Every committed outbox row, ordered per aggregate by its `seq` (the
    /// payload's, as `outbox-loadgen` and [`TestOutbox::commit_events`] write
    /// it), which is the aggregate's commit order. Read from the table, so it
    /// is right whatever happened to the writer.
    pub async fn committed_from_table(&self) -> Vec<Committed> {
        self.admin
            .query(
                &format!(
                    "SELECT id::text, aggregateid, (payload->>'seq')::bigint AS seq
                     FROM public.{} ORDER BY aggregateid, seq",
                    self.table
                ),
                &[],
            )
            .await
            .expect("read committed rows")
            .into_iter()
            .map(|r| Committed {
                id: r.get(0),
                aggregate: r.get(1),
                seq: r.get(2),
            })
            .collect()
    }

    /// Runs `outbox-loadgen` against this outbox with extra arguments (e.g.
    /// `["--events", "5000", "--rate", "2000"]`); returns the child process.
    pub fn start_loadgen(&self, args: &[&str]) -> std::process::Child {
        std::process::Command::new(env!("CARGO_BIN_EXE_outbox-loadgen"))
            .args([
                "--url",
                &env("PG_URL"),
                "--table",
                &format!("public.{}", self.table),
            ])
            .args(args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start outbox-loadgen")
    }
}

/// Waits for a child process to exit (bounded) and asserts it succeeded.
pub async fn wait_child(child: &mut std::process::Child, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "child exited with {status}");
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "child still running after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads `topic` until every committed id has been seen at least once (or
/// `within` passes), returning all records read.
pub async fn consume_all_ids(
    topic: &str,
    committed: &[Committed],
    within: Duration,
) -> Vec<Received> {
    let mut missing: std::collections::HashSet<String> =
        committed.iter().map(|c| c.id.clone()).collect();
    let mut checked = 0;
    consume(topic, within, move |r| {
        for x in &r[checked..] {
            if let Some(id) = x.header("ce_id") {
                missing.remove(id);
            }
        }
        checked = r.len();
        missing.is_empty()
    })
    .await
}
pub mod cluster;
pub mod mock;
pub mod proxy;
pub mod relay_probe;
pub mod tls;

impl TestOutbox {
    /// A temporary `test_decoding` slot of the test's own, opened before the
    /// transactions whose commit position the test needs to know.
    pub async fn open_commit_watch(&self) -> String {
        let watch = random_name("watch");
        self.admin
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'test_decoding', true)",
                &[&watch],
            )
            .await
            .expect("create the commit-watch slot");
        watch
    }

    /// The end LSN of the first outbox transaction committed since `watch`
    /// was opened: confirming it (or anything past its commit record) would
    /// tell PostgreSQL that transaction is done. Drops the watch slot.
    pub async fn first_outbox_commit_end(&self, watch: &str) -> Lsn {
        let row = self
            .admin
            .query_one(
                &format!(
                    "WITH c AS (SELECT lsn, xid, data FROM pg_logical_slot_peek_changes($1, NULL, NULL))
                     SELECT min(lsn)::text FROM c
                     WHERE data LIKE 'COMMIT%'
                       AND xid IN (SELECT xid FROM c WHERE data LIKE 'table public.{}:%')",
                    self.table
                ),
                &[&watch],
            )
            .await
            .expect("peek the commit-watch slot");
        let end: Option<String> = row.get(0);
        self.admin
            .execute("SELECT pg_drop_replication_slot($1)", &[&watch])
            .await
            .expect("drop the commit-watch slot");
        end.expect("an outbox transaction committed")
            .parse()
            .expect("lsn")
    }
}
