//! `outbox-latency`: the benchmark's measuring end (`benches/run.py` drives it).
//!
//! * `consume`: a Kafka consumer on the same host as the writer. It stamps
//!   each record with the time it arrived, reads the event number `n` from
//!   the start of the value, and, once the writer's timing file appears,
//!   joins the two: latency = arrival − the writer's commit-returned time,
//!   per event, into an HDR histogram. The writer's load is open loop (each
//!   event is due at a fixed time whatever happened before), so a stall
//!   anywhere shows up in every event it delayed: no coordinated omission.
//! * `stdin`: the same over lines of `pg_recvlogical -P test_decoding -f -`,
//!   which is the PostgreSQL-only path (commit returned → walsender → client).
//! * `produce`: the broker alone: an idempotent acks=all producer at a fixed
//!   open-loop rate with the same record size, writing the same timing file
//!   (the "commit-returned" time is when `send` returned).
//! * `burst`: a bare producer for the cost curves: the relay's own
//!   producer settings (`outbox_relay::sink::producer_config`), `--records`
//!   records of the outbox load's shape round robin over `--topics-file`'s
//!   topics, sent as fast as its queue takes them, starting cold (no
//!   topic's metadata known), exiting once every record is acknowledged.
//! * `watch`: polls a topic's high watermarks and writes the record count
//!   over time, for drain rates and time to first event; with
//!   `--topics-file`, the sum over many topics (one ListOffsets request per
//!   poll), and with `--topic-config`, topics created with those settings.
//!
//! Timing file layout (written by `outbox-loadgen --timing-file` and by
//! `produce`): little-endian u64s: magic `OBLTIME1`, run start (Unix ns),
//! warm-up (ns), count `c`, then `c` pairs (due ns, commit-returned ns)
//! indexed by `n`; zeros mark an event never committed.
//!
//! Every time is `CLOCK_REALTIME` read on one host, so the two processes'
//! stamps compare directly; nothing here asserts on timings.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;

#[derive(Parser)]
#[command(about = "Latency and drain measurements for the outbox-relay benchmark")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Consume a topic from its current end and report commit-to-consume latency.
    Consume {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        topic: String,
        #[command(flatten)]
        wait: JoinArgs,
    },
    /// Read `pg_recvlogical -P test_decoding -f -` lines from stdin and
    /// report commit-to-decode latency.
    Stdin {
        #[command(flatten)]
        wait: JoinArgs,
    },
    /// Produce at a fixed open-loop rate (acks=all, idempotent).
    Produce {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        rate: u64,
        #[arg(long)]
        duration_secs: f64,
        #[arg(long, default_value_t = 0.0)]
        warmup_secs: f64,
        #[arg(long, default_value_t = 500)]
        record_bytes: usize,
        #[arg(long, default_value_t = 5)]
        linger_ms: u32,
        #[arg(long)]
        timing_file: PathBuf,
        #[command(flatten)]
        txn: TxnArgs,
    },
    /// Send --records records round robin over the topics of --topics-file
    /// as fast as the queue takes them, with the relay's producer settings;
    /// exit once every one is acknowledged.
    Burst {
        #[arg(long)]
        brokers: String,
        /// The topics, one a line; record `i` goes to the `i % count`-th.
        #[arg(long)]
        topics_file: PathBuf,
        #[arg(long)]
        records: u64,
        #[arg(long, default_value_t = 500)]
        payload_bytes: usize,
        #[arg(long, default_value_t = 5)]
        linger_ms: u64,
        /// At most this many records sent and not yet acknowledged, as the
        /// relay's `relay.channel_capacity` bounds its read-ahead; 0 (the
        /// default): all of them handed to librdkafka at once.
        #[arg(long, default_value_t = 0)]
        max_pending: u64,
        /// --max-pending of the relay's default `relay.channel_capacity`:
        /// the window the relay itself drains with.
        #[arg(long, conflicts_with = "max_pending")]
        relay_window: bool,
    },
    /// Poll a topic's record count until it reaches --expect; write "unix_ns count" lines.
    Watch {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        topic: String,
        /// More topics, one a line, counted together with --topic (the sum).
        #[arg(long)]
        topics_file: Option<PathBuf>,
        /// A setting (KEY=VALUE, e.g. max.message.bytes=2000000) of the
        /// topics this creates; repeatable.
        #[arg(long)]
        topic_config: Vec<String>,
        #[arg(long)]
        expect: i64,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 10)]
        interval_ms: u64,
        #[arg(long, default_value_t = 1800)]
        timeout_secs: u64,
        /// Touched once the topic exists and the first count was taken.
        #[arg(long)]
        ready_file: Option<PathBuf>,
        /// Before the first count, write every topic twice (see `warm`),
        /// as topics in use have been: what is timed then is the steady
        /// cost of many topics, not the broker's one-off work on a new one.
        #[arg(long)]
        warm: bool,
    },
}

#[derive(clap::Args)]
struct JoinArgs {
    /// The writer's timing file; measuring ends when it exists and every
    /// event in it arrived, or nothing arrived for --idle-secs.
    #[arg(long)]
    timing_file: PathBuf,
    #[arg(long, default_value_t = 30)]
    idle_secs: u64,
    /// Touched once the reader is positioned and ready for the load.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Give up after this many seconds whatever happens.
    #[arg(long, default_value_t = 3600)]
    max_secs: u64,
}

/// `produce` as a transactional producer: the baseline for the relay's
/// exactly-once mode (what librdkafka's transactions cost on their own).
#[derive(clap::Args)]
struct TxnArgs {
    /// Produce in Kafka transactions with this `transactional.id`. Each
    /// record's "commit-returned" time is then its due time: an
    /// application emitting at the rate sees every wait for a commit.
    #[arg(long)]
    transactional_id: Option<String>,
    /// What a transaction holds: `one` record, or every record `due` when
    /// it begins (what arrived while the last commit ran: the relay's
    /// cadence at a trickle).
    #[arg(long, default_value = "one", value_parser = ["one", "due"])]
    per_transaction: String,
    /// Also send one small record to this topic just before each commit,
    /// as the relay sends its checkpoint (a second partition that joins
    /// every transaction late).
    #[arg(long)]
    checkpoint_topic: Option<String>,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Consume {
            brokers,
            topic,
            wait,
        } => consume(&brokers, &topic, &wait),
        Cmd::Stdin { wait } => from_stdin(&wait),
        Cmd::Produce {
            brokers,
            topic,
            rate,
            duration_secs,
            warmup_secs,
            record_bytes,
            linger_ms,
            timing_file,
            txn,
        } => produce(
            &brokers,
            &topic,
            rate,
            duration_secs,
            warmup_secs,
            record_bytes,
            linger_ms,
            &timing_file,
            &txn,
        ),
        Cmd::Burst {
            brokers,
            topics_file,
            records,
            payload_bytes,
            linger_ms,
            max_pending,
            relay_window,
        } => burst(
            &brokers,
            &topics_file,
            records,
            payload_bytes,
            linger_ms,
            if relay_window {
                outbox_relay::config::RelayConfig::default().channel_capacity as u64
            } else {
                max_pending
            },
        ),
        Cmd::Watch {
            brokers,
            topic,
            topics_file,
            topic_config,
            expect,
            out,
            interval_ms,
            timeout_secs,
            ready_file,
            warm,
        } => watch(
            &brokers,
            &topic,
            topics_file.as_deref(),
            &topic_config,
            expect,
            &out,
            Duration::from_millis(interval_ms),
            Duration::from_secs(timeout_secs),
            ready_file.as_deref(),
            warm,
        ),
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The event number at the start of a JSON payload: `"n":123` or, as
/// PostgreSQL prints jsonb, `"n": 123`. The first occurrence in `bytes`.
fn event_number(bytes: &[u8]) -> Option<u64> {
    let at = bytes.windows(4).position(|w| w == b"\"n\":")?;
    let rest = &bytes[at + 4..];
    let digits = rest.iter().skip_while(|b| **b == b' ');
    let mut n: u64 = 0;
    let mut any = false;
    for b in digits {
        if b.is_ascii_digit() {
            n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            any = true;
        } else {
            break;
        }
    }
    any.then_some(n)
}

/// Arrival times by event number, and what arrived twice or unnumbered.
#[derive(Default)]
struct Arrivals {
    at: Vec<u64>,
    /// The record's `CreateTime` (Unix ms: when the producer's `send` was
    /// called; librdkafka stamps it), 0 when unknown.
    produced_ms: Vec<u64>,
    received: u64,
    duplicates: u64,
    unnumbered: u64,
    last_ns: u64,
}

impl Arrivals {
    fn record(&mut self, payload: Option<&[u8]>, now: u64, produced_ms: Option<u64>) {
        self.last_ns = now;
        match payload.and_then(event_number) {
            Some(n) => {
                let n = n as usize;
                if n >= self.at.len() {
                    let len = (n + 1).max(self.at.len() * 2);
                    self.at.resize(len, 0);
                    self.produced_ms.resize(len, 0);
                }
                if self.at[n] == 0 {
                    self.at[n] = now;
                    self.produced_ms[n] = produced_ms.unwrap_or(0);
                    self.received += 1;
                } else {
                    self.duplicates += 1;
                }
            }
            None => self.unnumbered += 1,
        }
    }
}

struct Timing {
    start_ns: u64,
    warmup_ns: u64,
    events: Vec<(u64, u64)>,
}

impl Timing {
    fn committed(&self) -> u64 {
        self.events.iter().filter(|(_, c)| *c != 0).count() as u64
    }
}

fn read_timing(path: &Path) -> anyhow::Result<Option<Timing>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    if bytes.len() < 32 || &bytes[..8] != b"OBLTIME1" {
        bail!("{} is not a timing file (bad magic)", path.display());
    }
    let count = word(3) as usize;
    if bytes.len() != 32 + count * 16 {
        bail!("{} is truncated", path.display());
    }
    let events = (0..count)
        .map(|i| (word(4 + 2 * i), word(5 + 2 * i)))
        .collect();
    Ok(Some(Timing {
        start_ns: word(1),
        warmup_ns: word(2),
        events,
    }))
}

/// Drives `poll` (which records arrivals) until the timing file exists and
/// every committed event arrived, or the stream went idle; then reports.
fn join_loop(
    wait: &JoinArgs,
    arrivals: &mut Arrivals,
    mut poll: impl FnMut(&mut Arrivals) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    if let Some(ready) = &wait.ready_file {
        std::fs::write(ready, b"ready\n")?;
    }
    let started = Instant::now();
    let mut timing: Option<Timing> = None;
    let mut last_check = Instant::now();
    let mut idle_since = Instant::now();
    let mut last_received = 0;
    let mut committed = u64::MAX;
    loop {
        let open = poll(arrivals)?;
        if arrivals.received != last_received {
            last_received = arrivals.received;
            idle_since = Instant::now();
        }
        if timing.is_none() && last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            timing = read_timing(&wait.timing_file)?;
            if let Some(t) = &timing {
                committed = t.committed();
                idle_since = Instant::now().max(idle_since);
            }
        }
        if timing.is_some() {
            // Numbers are unique to this run and the reader started at the
            // end of its input, so a distinct count equal to the committed
            // count means every committed event arrived.
            if arrivals.received >= committed
                || idle_since.elapsed() >= Duration::from_secs(wait.idle_secs)
            {
                break;
            }
        }
        if !open {
            // The input ended: wait only for the timing file.
            if timing.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if started.elapsed() >= Duration::from_secs(wait.max_secs) {
            bail!("gave up after {} s", wait.max_secs);
        }
    }
    let timing = match timing {
        Some(t) => t,
        None => read_timing(&wait.timing_file)?.context("no timing file")?,
    };
    report(&timing, arrivals)
}

fn hist() -> Histogram<u64> {
    // 1 µs to 1 hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

fn summary(h: &Histogram<u64>) -> serde_json::Value {
    if h.is_empty() {
        return json!(null);
    }
    json!({
        "count": h.len(),
        "p50_us": h.value_at_quantile(0.5),
        "p90_us": h.value_at_quantile(0.9),
        "p99_us": h.value_at_quantile(0.99),
        "p999_us": h.value_at_quantile(0.999),
        "max_us": h.max(),
        "mean_us": h.mean(),
    })
}

/// Prints one JSON object: latency from commit-returned (and from due) to
/// arrival over the events due after the warm-up, the same per quarter of
/// the measured window (a growing backlog shows as rising quarters), and
/// the counts that make a result trustworthy (lost, duplicated).
fn report(timing: &Timing, arrivals: &Arrivals) -> anyhow::Result<()> {
    let from = timing.start_ns + timing.warmup_ns;
    let measured: Vec<(usize, u64, u64)> = timing
        .events
        .iter()
        .enumerate()
        .filter(|(_, (due, committed))| *committed != 0 && *due >= from)
        .map(|(n, (d, c))| (n, *d, *c))
        .collect();
    let window_end = measured.iter().map(|e| e.1).max().unwrap_or(from);
    let span = (window_end - from).max(1);
    let mut commit_to = hist();
    let mut due_to = hist();
    let mut quarters = [hist(), hist(), hist(), hist()];
    // Split at the record's CreateTime: commit-returned → the producer's
    // `send` (PostgreSQL and the relay), then `send` → consumed (librdkafka,
    // the broker, the consumer). Millisecond stamps, taken as the middle
    // of their millisecond.
    let mut to_produce = hist();
    let mut produce_to = hist();
    let mut lost = 0u64;
    for (n, due, committed) in &measured {
        let Some(&at) = arrivals.at.get(*n).filter(|a| **a != 0) else {
            lost += 1;
            continue;
        };
        if let Some(&ms) = arrivals.produced_ms.get(*n).filter(|ms| **ms != 0) {
            let produced = ms * 1_000_000 + 500_000;
            to_produce.saturating_record((produced.saturating_sub(*committed) / 1_000).max(1));
            produce_to.saturating_record((at.saturating_sub(produced) / 1_000).max(1));
        }
        let us = (at.saturating_sub(*committed) / 1_000).max(1);
        commit_to.saturating_record(us);
        due_to.saturating_record((at.saturating_sub(*due) / 1_000).max(1));
        let q = (((due - from) as u128 * 4 / span as u128) as usize).min(3);
        quarters[q].saturating_record(us);
    }
    let window_secs = span as f64 / 1e9;
    // What the writer achieved: an open-loop writer that cannot keep its
    // schedule commits late, and the step ran at this rate, not the target.
    let first_commit = measured.iter().map(|e| e.2).min().unwrap_or(0);
    let last_commit = measured.iter().map(|e| e.2).max().unwrap_or(0);
    let commit_secs = (last_commit.saturating_sub(first_commit) as f64 / 1e9).max(1e-9);
    let out = json!({
        "committed": timing.committed(),
        "measured": measured.len(),
        "received": arrivals.received,
        "lost": lost,
        "duplicates": arrivals.duplicates,
        "unnumbered": arrivals.unnumbered,
        "window_secs": window_secs,
        "measured_rate": measured.len() as f64 / window_secs.max(1e-9),
        "commit_rate": measured.len() as f64 / commit_secs,
        "commit_to_consume": summary(&commit_to),
        "due_to_consume": summary(&due_to),
        "commit_to_produce": summary(&to_produce),
        "produce_to_consume": summary(&produce_to),
        "quarters_p99_us": quarters.iter().map(|h| if h.is_empty() { None } else { Some(h.value_at_quantile(0.99)) }).collect::<Vec<_>>(),
        "quarters_max_us": quarters.iter().map(|h| if h.is_empty() { None } else { Some(h.max()) }).collect::<Vec<_>>(),
    });
    println!("{out}");
    Ok(())
}

fn create_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    create_topics(brokers, &[topic.to_owned()], &[])
}

/// Creates `topics` (one partition each, `config` their settings), a
/// thousand to a request; those that exist are left as they are.
fn create_topics(
    brokers: &str,
    topics: &[String],
    config: &[(String, String)],
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .context("admin client")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for chunk in topics.chunks(1000) {
        let new: Vec<NewTopic> = chunk
            .iter()
            .map(|t| {
                config.iter().fold(
                    NewTopic::new(t, 1, TopicReplication::Fixed(1)),
                    |n, (k, v)| n.set(k, v),
                )
            })
            .collect();
        let res = rt.block_on(admin.create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(120))),
        ))?;
        for r in res {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, e)) => bail!("creating topic {t}: {e}"),
            }
        }
    }
    Ok(())
}

/// Every partition of `topics`, at the end, for one ListOffsets request
/// per count; waits for all their metadata.
fn partitions_of(consumer: &BaseConsumer, topics: &[String]) -> anyhow::Result<TopicPartitionList> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        // A broker busy making (or removing) thousands of topics may fail a
        // metadata request for a moment: asked again until the deadline.
        let md = match consumer.fetch_metadata(None, Duration::from_secs(60)) {
            Ok(md) => md,
            Err(e) if Instant::now() < deadline => {
                eprintln!("watch: metadata request failed ({e}); asking again");
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            Err(e) => return Err(e).context("metadata of the watched topics"),
        };
        let known: std::collections::HashMap<&str, Vec<i32>> = md
            .topics()
            .iter()
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .map(|t| (t.name(), t.partitions().iter().map(|p| p.id()).collect()))
            .collect();
        if topics.iter().all(|t| known.contains_key(t.as_str())) {
            let mut tpl = TopicPartitionList::new();
            for t in topics {
                for p in &known[t.as_str()] {
                    tpl.add_partition_offset(t, *p, Offset::End)?;
                }
            }
            return Ok(tpl);
        }
        if Instant::now() >= deadline {
            let seen = topics
                .iter()
                .filter(|t| known.contains_key(t.as_str()))
                .count();
            bail!(
                "{seen} of {} topics have metadata after 300 s",
                topics.len()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Partitions of `topic` and their high watermarks, waiting for the topic's
/// metadata to appear.
fn watermarks(consumer: &BaseConsumer, topic: &str) -> anyhow::Result<Vec<(i32, i64)>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        let t = &md.topics()[0];
        if t.error().is_none() && !t.partitions().is_empty() {
            let mut out = Vec::new();
            for p in t.partitions() {
                let (_, high) =
                    consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10))?;
                out.push((p.id(), high));
            }
            return Ok(out);
        }
        if Instant::now() >= deadline {
            bail!("topic {topic} has no metadata after 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn consume(brokers: &str, topic: &str, wait: &JoinArgs) -> anyhow::Result<()> {
    create_topic(brokers, topic)?;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("outbox-latency-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .context("consumer")?;
    // Positioned at the current end before the load starts: everything the
    // load writes is read, nothing from before it.
    let mut tpl = TopicPartitionList::new();
    for (p, high) in watermarks(&consumer, topic)? {
        tpl.add_partition_offset(topic, p, Offset::Offset(high))?;
    }
    consumer.assign(&tpl)?;
    let mut arrivals = Arrivals::default();
    join_loop(wait, &mut arrivals, |arr| {
        if let Some(msg) = consumer.poll(Duration::from_millis(100)) {
            let msg = msg.context("consumer error")?;
            let now = unix_ns();
            let produced_ms = msg
                .timestamp()
                .to_millis()
                .and_then(|ms| u64::try_from(ms).ok());
            arr.record(msg.payload(), now, produced_ms);
        }
        Ok(true)
    })
}

fn from_stdin(wait: &JoinArgs) -> anyhow::Result<()> {
    // A reader thread stamps lines as they come; the join loop must not
    // block on stdin when the load is over.
    let (tx, rx) = std::sync::mpsc::channel::<Option<(u64, Vec<u8>)>>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            match lock.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(_) => {
                    let now = unix_ns();
                    if line.starts_with(b"table ") && tx.send(Some((now, line.clone()))).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut arrivals = Arrivals::default();
    let mut open = true;
    join_loop(wait, &mut arrivals, |arr| {
        if !open {
            return Ok(false);
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Some((now, line))) => {
                if event_number(&line).is_some() {
                    arr.record(Some(&line), now, None);
                }
            }
            Ok(None) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => open = false,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        Ok(open)
    })
}

#[allow(clippy::too_many_arguments)]
fn produce(
    brokers: &str,
    topic: &str,
    rate: u64,
    duration_secs: f64,
    warmup_secs: f64,
    record_bytes: usize,
    linger_ms: u32,
    timing_file: &Path,
    txn: &TxnArgs,
) -> anyhow::Result<()> {
    anyhow::ensure!(rate > 0, "--rate must be positive");
    create_topic(brokers, topic)?;
    if let Some(checkpoints) = &txn.checkpoint_topic {
        create_topic(brokers, checkpoints)?;
    }
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", linger_ms.to_string())
        .set("queue.buffering.max.messages", "100000");
    if let Some(id) = &txn.transactional_id {
        // As the relay's transactional producer: connected to every broker
        // at once, so no commit waits for a connection.
        config
            .set("transactional.id", id)
            .set("enable.sparse.connections", "false");
    }
    let producer: Arc<BaseProducer> = Arc::new(config.create().context("producer")?);
    let timeout = Duration::from_secs(30);
    // In transactions, delivery reports are served by a thread of their
    // own (as the relay serves its own off the commit's thread), so that a commit, which
    // waits for them, returns as soon as the broker answers: rdkafka's
    // `commit_transaction` would serve them in 100 ms steps.
    let polling_done = Arc::new(AtomicBool::new(false));
    let polling = txn.transactional_id.is_some().then(|| {
        let producer = Arc::clone(&producer);
        let done = Arc::clone(&polling_done);
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                producer.poll(Duration::from_millis(10));
            }
        })
    });
    if txn.transactional_id.is_some() {
        producer
            .init_transactions(timeout)
            .context("init_transactions")?;
    }
    let total = (rate as f64 * duration_secs) as u64;
    let period_ns = 1e9 / rate as f64;
    let pad = "x".repeat(record_bytes.saturating_sub(90));
    let mut events = vec![(0u64, 0u64); total as usize];
    let mut commits = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut transactions = 0u64;
    let start = Instant::now();
    let start_ns = unix_ns();
    let due_of = |n: u64| Duration::from_nanos((n as f64 * period_ns) as u64);
    let mut n = 0u64;
    while n < total {
        let due = due_of(n);
        let now = start.elapsed();
        if now < due {
            // Serve delivery reports while waiting; never sleep past the due time.
            producer.poll(Duration::ZERO);
            std::thread::sleep((due - now).min(Duration::from_millis(1)));
            continue;
        }
        if txn.transactional_id.is_some() {
            producer.begin_transaction().context("begin_transaction")?;
        }
        // Without transactions one record a turn; in one, one record or
        // every record due by now.
        let last = match (&txn.transactional_id, txn.per_transaction.as_str()) {
            (Some(_), "due") => {
                let mut last = n;
                while last + 1 < total && due_of(last + 1) <= now {
                    last += 1;
                }
                last
            }
            _ => n,
        };
        for i in n..=last {
            let key = format!("agg-{}", i % 100);
            let payload = format!(
                r#"{{"n":{i},"aggregate":"{key}","seq":{},"total":42.5,"pad":"{pad}"}}"#,
                i / 100 + 1
            );
            send_queued(
                &producer,
                BaseRecord::to(topic)
                    .key(&key)
                    .payload(&payload)
                    .headers(relay_headers(i)),
            )?;
            let handed = if txn.transactional_id.is_some() {
                start_ns + due_of(i).as_nanos() as u64
            } else {
                unix_ns()
            };
            events[i as usize] = (start_ns + due_of(i).as_nanos() as u64, handed);
        }
        n = last + 1;
        if let Some(id) = &txn.transactional_id {
            if let Some(checkpoints) = &txn.checkpoint_topic {
                let value = format!("{n:016x}");
                send_queued(
                    &producer,
                    BaseRecord::<str, str>::to(checkpoints)
                        .key(id)
                        .payload(&value),
                )?;
            }
            let began = Instant::now();
            commit_transaction(&producer, timeout)?;
            commits.record(began.elapsed().as_micros().max(1) as u64)?;
            transactions += 1;
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .context("flushing the producer")?;
    polling_done.store(true, Ordering::Relaxed);
    if let Some(polling) = polling {
        let _ = polling.join();
    }
    let mut buf = Vec::with_capacity(32 + events.len() * 16);
    buf.extend_from_slice(b"OBLTIME1");
    for w in [start_ns, (warmup_secs * 1e9) as u64, total] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    for (d, c) in &events {
        buf.extend_from_slice(&d.to_le_bytes());
        buf.extend_from_slice(&c.to_le_bytes());
    }
    let tmp = timing_file.with_extension("tmp");
    std::fs::write(&tmp, &buf)?;
    std::fs::rename(&tmp, timing_file)?;
    if transactions > 0 {
        let ms = |q: f64| commits.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "produce: {total} records at {rate}/s in {transactions} transactions; \
             commit_transaction p50 {:.2} ms, p99 {:.2} ms",
            ms(0.5),
            ms(0.99)
        );
    } else {
        println!("produce: {total} records at {rate}/s");
    }
    Ok(())
}

/// librdkafka's own commit (as the relay calls it): it waits for every
/// delivery report, which the polling thread above serves.
fn commit_transaction(producer: &BaseProducer, timeout: Duration) -> anyhow::Result<()> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the handle belongs to `producer`, alive for the whole call;
    // the returned error object is read, then destroyed exactly once.
    unsafe {
        let error =
            rdkafka::bindings::rd_kafka_commit_transaction(producer.client().native_ptr(), ms);
        if error.is_null() {
            return Ok(());
        }
        let text = std::ffi::CStr::from_ptr(rdkafka::bindings::rd_kafka_error_string(error))
            .to_string_lossy()
            .into_owned();
        rdkafka::bindings::rd_kafka_error_destroy(error);
        bail!("commit_transaction: {text}")
    }
}

/// The headers the relay's binary-mode CloudEvents carry, of the same
/// lengths, so that the broker alone moves records of the relay's shape.
fn relay_headers(n: u64) -> OwnedHeaders {
    let id = format!("{:08x}-0000-4000-8000-{n:012x}", n as u32);
    fn header<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a [u8]> {
        Header {
            key,
            value: Some(value.as_bytes()),
        }
    }
    OwnedHeaders::new_with_capacity(7)
        .insert(header("ce_specversion", "1.0"))
        .insert(header("ce_id", &id))
        .insert(header("ce_source", "/outbox-relay/postgres/outbox"))
        .insert(header("ce_type", "OrderPlaced"))
        .insert(header("ce_time", "2026-12-01T12:00:00.123456Z"))
        .insert(header("content-type", "application/json"))
        .insert(header("id", &id))
}

/// Counts the acknowledgements and failures of `burst`'s records, and
/// keeps the first failure's error.
#[derive(Default)]
struct AckCount {
    acked: std::sync::atomic::AtomicU64,
    failed: std::sync::atomic::AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
}

impl rdkafka::ClientContext for AckCount {}

impl rdkafka::producer::ProducerContext for AckCount {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        use Ordering::Relaxed;
        match result {
            Ok(_) => self.acked.fetch_add(1, Relaxed),
            Err((e, _)) => {
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| e.to_string());
                }
                self.failed.fetch_add(1, Relaxed)
            }
        };
    }
}

/// The topics of a `--topics-file`, one a line, blank lines skipped.
fn read_topics(file: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("--topics-file {}", file.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The value of the `n`-th record of the outbox load (`payload_sql` in
/// benches/run.py) as the relay sends it: PostgreSQL's text of the jsonb
/// (keys shortest first, a space after `:` and `,`), padded with `pad`.
fn load_payload(n: u64, pad: &str) -> String {
    format!(
        r#"{{"n": {n}, "pad": "{pad}", "seq": {}, "total": 42.5, "aggregate": "agg-{}"}}"#,
        n / 100 + 1,
        n % 100
    )
}

/// A bare producer beside the relay in the topics cost curve: what the
/// relay's producer costs without the relay around it. The relay's settings
/// (idempotent, acks=all, gapless, murmur2_random, its linger and queue
/// size) but no statistics, which only the relay reads; records as the
/// outbox load makes them (key `agg-<n % 100>`, the same JSON value), no
/// headers; one `send` after another, the queue served when full.
fn burst(
    brokers: &str,
    topics_file: &Path,
    records: u64,
    payload_bytes: usize,
    linger_ms: u64,
    max_pending: u64,
) -> anyhow::Result<()> {
    use Ordering::Relaxed;
    let topics = read_topics(topics_file)?;
    anyhow::ensure!(!topics.is_empty(), "--topics-file names no topic");
    let defaults = outbox_relay::config::KafkaConfig::default();
    let settings = outbox_relay::sink::SinkSettings {
        brokers: brokers.to_owned(),
        linger_ms,
        message_timeout_ms: defaults.message_timeout_ms,
        queue_max_messages: defaults.queue_max_messages,
        dead_letter_topic: defaults.dlq_topic,
        // librdkafka's own byte bound (1 GiB): a bare producer has no
        // relay-side bound to follow.
        queue_max_kbytes: None,
        properties: Vec::new(),
    };
    let producer: BaseProducer<AckCount> = outbox_relay::sink::producer_config(&settings, None)
        .create_with_context(AckCount::default())
        .context("producer")?;
    let pad = "x".repeat(payload_bytes.saturating_sub(90));
    let started = Instant::now();
    for n in 0..records {
        let key = format!("agg-{}", n % 100);
        let payload = load_payload(n, &pad);
        let topic = &topics[(n % topics.len() as u64) as usize];
        let record = BaseRecord::to(topic).key(&key).payload(&payload);
        // The relay's window: wait for acknowledgements to make room.
        while max_pending > 0 && {
            let ctx = producer.context();
            n - ctx.acked.load(Relaxed) - ctx.failed.load(Relaxed) >= max_pending
        } {
            producer.poll(Duration::from_millis(1));
        }
        send_queued(&producer, record)?;
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(600))
        .context("waiting for the acknowledgements")?;
    let (acked, failed) = (
        producer.context().acked.load(Relaxed),
        producer.context().failed.load(Relaxed),
    );
    if acked != records {
        let first = producer
            .context()
            .first_error
            .lock()
            .ok()
            .and_then(|e| e.clone());
        bail!(
            "{acked} of {records} records acknowledged, {failed} failed after {:.1} s (the first: {})",
            started.elapsed().as_secs_f64(),
            first.as_deref().unwrap_or("none reported")
        );
    }
    println!(
        "burst: {records} records to {} topic(s) acknowledged in {:.3} s",
        topics.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn watch(
    brokers: &str,
    topic: &str,
    topics_file: Option<&Path>,
    topic_config: &[String],
    expect: i64,
    out: &Path,
    interval: Duration,
    timeout: Duration,
    ready_file: Option<&Path>,
    warm: bool,
) -> anyhow::Result<()> {
    let mut topics = vec![topic.to_owned()];
    if let Some(file) = topics_file {
        topics.extend(read_topics(file)?);
    }
    let config = topic_config
        .iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => Ok((k.to_owned(), v.to_owned())),
            None => bail!("--topic-config {kv:?}: KEY=VALUE"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    create_topics(brokers, &topics, &config)?;
    if warm {
        warm_topics(brokers, &topics)?;
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .context("watch client")?;
    // One topic: its partitions' watermarks, one request each. Many: one
    // ListOffsets request (latest, at the client's isolation level as for
    // the watermarks) for all their partitions.
    let (partitions, all) = if topics.len() == 1 {
        let partitions: Vec<i32> = watermarks(&consumer, topic)?
            .iter()
            .map(|(p, _)| *p)
            .collect();
        (partitions, None)
    } else {
        (Vec::new(), Some(partitions_of(&consumer, &topics)?))
    };
    let count_now = || -> anyhow::Result<i64> {
        let mut sum = 0;
        if let Some(all) = &all {
            // Topics just made answer "not leader" for a moment: asked again
            // (quietly) for up to a minute.
            let deadline = Instant::now() + Duration::from_secs(60);
            let ends = loop {
                match consumer.offsets_for_times(all.clone(), Duration::from_secs(60)) {
                    Ok(ends) => break ends,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            for e in ends.elements() {
                match e.offset() {
                    Offset::Offset(o) => sum += o,
                    other => bail!("{}/{}: no end offset ({other:?})", e.topic(), e.partition()),
                }
            }
            return Ok(sum);
        }
        for p in &partitions {
            sum += consumer
                .fetch_watermarks(topic, *p, Duration::from_secs(10))?
                .1;
        }
        Ok(sum)
    };
    let base = count_now()?;
    if let Some(ready) = ready_file {
        std::fs::write(ready, b"ready\n")?;
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    let started = Instant::now();
    let mut last = -1;
    loop {
        let count = count_now()? - base;
        let now = unix_ns();
        if count != last {
            writeln!(file, "{now} {count}")?;
            file.flush()?;
            last = count;
        }
        if count >= expect {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            bail!(
                "{topic}: {count} of {expect} records after {} s",
                timeout.as_secs()
            );
        }
        std::thread::sleep(interval);
    }
}

/// Writes every topic twice, one record each time: first 8 KiB, then a few
/// bytes. A Kafka broker adds the first entry to a new partition's offset
/// and time indexes on the append after the first that exceeds
/// `index.interval.bytes` (4,096 by default), and that first write to the
/// index files (preallocated, memory-mapped) costs the broker about 5 ms
/// a partition on the benchmark machine, once per log segment. A drain of
/// a few records a topic into new topics would time mostly that; topics
/// in use have paid it long before. The warming records are on the
/// topics before the first count, which later counts are taken against,
/// so no count includes them.
fn warm_topics(brokers: &str, topics: &[String]) -> anyhow::Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("linger.ms", "0")
        .create()
        .context("warming producer")?;
    let first = vec![b'w'; 8192];
    // Thousands of topics just made: the producer's metadata may not list
    // every one yet, and a record to a topic it does not list is refused.
    let deadline = Instant::now() + Duration::from_secs(300);
    for payload in [&first[..], b"w"] {
        for topic in topics {
            let mut record = BaseRecord::<(), _>::to(topic).payload(payload);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, back))
                        if matches!(
                            e.rdkafka_error_code(),
                            Some(RDKafkaErrorCode::QueueFull | RDKafkaErrorCode::UnknownTopic)
                        ) && Instant::now() < deadline =>
                    {
                        record = back;
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, back)) => bail!("warming {}: {e}", back.topic),
                }
            }
        }
        // Each round acknowledged before the next: two appends a partition.
        producer
            .flush(Duration::from_secs(600))
            .context("warming the topics")?;
    }
    Ok(())
}

/// Hands `record` to the producer, waiting (and serving the producer)
/// while its queue is full: a full queue hands the record back.
fn send_queued<C, K, P>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'_, K, P, C::DeliveryOpaque>,
) -> anyhow::Result<()>
where
    C: rdkafka::producer::ProducerContext,
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                record = back;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, back)) => bail!("produce to {}: {e}", back.topic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{event_number, load_payload};

    #[test]
    fn load_payload_is_the_loads_jsonb_text() {
        // What `SELECT (jsonb_build_object(...))::text` of run.py's
        // payload_sql prints for i = 1234 and a pad of 3.
        assert_eq!(
            load_payload(1234, "xxx"),
            r#"{"n": 1234, "pad": "xxx", "seq": 13, "total": 42.5, "aggregate": "agg-34"}"#
        );
        // A 500 B load pads with 410: PostgreSQL's text is 481 bytes.
        assert_eq!(load_payload(1234, &"x".repeat(410)).len(), 481);
        assert_eq!(event_number(load_payload(7, "").as_bytes()), Some(7));
    }

    #[test]
    fn event_number_in_both_spellings() {
        assert_eq!(event_number(br#"{"n":42,"x":1}"#), Some(42));
        assert_eq!(
            event_number(br#"table public.t: INSERT: payload[jsonb]:'{"n": 7, "pad": "x"}'"#),
            Some(7)
        );
        assert_eq!(event_number(br#"{"seq":3}"#), None);
        assert_eq!(event_number(br#"{"n":"x"}"#), None);
        assert_eq!(event_number(br#"{"n":99999999999999999999999}"#), None);
    }
}
