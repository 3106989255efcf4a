//! `outbox-loadgen`: commits outbox rows the way a real service does (a
//! business row and its outbox rows in one transaction), for the fault tests,
//! `make soak` and the benchmarks.
//!
//! Aggregates are split between connections (aggregate `i` belongs to
//! connection `i % connections`) and every aggregate's payload carries a
//! rising `seq`, so per-aggregate commit order is `seq` order and a checker
//! can recover it from the table alone, whatever happened to this process.
//! Restarted on an existing table, it continues each aggregate's `seq`.
//!
//! `--open-loop` is the benchmark's latency load: transaction `j` is due at
//! `start + j / rate` whatever the previous commits took (a slow commit makes
//! the next ones late, it never thins the schedule), and every event carries
//! a run-wide number `n` first in its payload. `--timing-file` then records,
//! per `n`, when the event was due and when its COMMIT returned (Unix
//! nanoseconds, the clock a consumer on the same host reads), so latency is
//! measured from the moment the writer knew the event was durable.

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Parser;
use tokio_postgres::{Client, NoTls};

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Commit outbox rows with a business row per transaction, at a fixed rate or flat out"
)]
struct Args {
    /// PostgreSQL connection string (a role that may insert into the tables).
    #[arg(long, env = "PG_URL")]
    url: String,
    /// Outbox table (schema-qualified or not); the business table is `<table>_orders`.
    #[arg(long, default_value = "outbox")]
    table: String,
    /// Events per second over all connections; 0 = as fast as possible.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Stop after this many events (0 = no limit).
    #[arg(long, default_value_t = 10_000)]
    events: u64,
    /// Stop after this many seconds (0 = no limit).
    #[arg(long, default_value_t = 0)]
    duration_secs: u64,
    #[arg(long, default_value_t = 2)]
    connections: usize,
    #[arg(long, default_value_t = 1)]
    rows_per_txn: usize,
    /// Approximate payload size in bytes (the JSON is padded to it).
    #[arg(long, default_value_t = 200)]
    payload_bytes: usize,
    #[arg(long, default_value_t = 100)]
    aggregates: usize,
    #[arg(long, default_value = "order")]
    aggregate_type: String,
    /// Schedule transaction j at start + j/rate, independent of how long the
    /// commits take (needs --rate and --duration-secs or --events).
    #[arg(long)]
    open_loop: bool,
    /// Write each event's due and commit-returned times here when done
    /// (format: see `write_timing_file`).
    #[arg(long)]
    timing_file: Option<std::path::PathBuf>,
    /// Seconds at the start that a latency reader should leave out; only
    /// recorded in the timing file's header.
    #[arg(long, default_value_t = 0.0)]
    warmup_secs: f64,
}

/// When one event was due and when the COMMIT that made it durable returned.
#[derive(Debug, Clone, Copy, Default)]
struct EventTiming {
    due_ns: u64,
    committed_ns: u64,
}

/// Magic of the timing file; the benchmark's latency reader checks it.
const TIMING_MAGIC: &[u8; 8] = b"OBLTIME1";

// One thread serves every connection: at the benchmark's rates the writers
// wait on PostgreSQL, and a second runtime thread only adds wake-ups that
// compete with the system being measured for the machine's CPU.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(args.rows_per_txn > 0, "--rows-per-txn must be at least 1");
    anyhow::ensure!(
        args.aggregates >= args.connections,
        "--aggregates must be at least --connections (each connection owns its aggregates)"
    );
    let setup = connect(&args.url).await?;
    setup
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {}_orders (id bigserial PRIMARY KEY, aggregateid text NOT NULL, seq bigint NOT NULL)",
            args.table
        ))
        .await
        .context("creating the business table")?;
    let start_seq = existing_seqs(&setup, &args).await?;
    if args.open_loop {
        anyhow::ensure!(args.rate > 0, "--open-loop needs --rate");
        anyhow::ensure!(
            args.duration_secs > 0 || args.events > 0,
            "--open-loop needs --duration-secs or --events"
        );
    }

    // Every connection is connected and prepared before the clock starts,
    // so the first due times are not spent on connecting.
    let mut writers = Vec::new();
    for conn in 0..args.connections {
        writers.push(Writer::connect(&args, conn).await?);
    }
    let started = Instant::now();
    let start_ns = unix_ns();
    let mut tasks = Vec::new();
    for (conn, writer) in writers.into_iter().enumerate() {
        let args = args.clone();
        let seqs: Vec<i64> = (0..args.aggregates)
            .filter(|a| a % args.connections == conn)
            .map(|a| start_seq.get(a).copied().unwrap_or(0))
            .collect();
        tasks.push(tokio::spawn(async move {
            if args.open_loop {
                run_open_loop(args, conn, writer, seqs, started, start_ns).await
            } else {
                run_connection(args, conn, writer, seqs).await
            }
        }));
    }
    let mut events = 0;
    let mut timings = Vec::new();
    for t in tasks {
        let (n, mut times) = t.await.context("writer task")??;
        events += n;
        timings.append(&mut times);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "loadgen: committed {events} events in {secs:.2} s ({:.0} events/s)",
        events as f64 / secs
    );
    if args.open_loop {
        println!("loadgen: {}", lateness_summary(&timings));
    }
    if let Some(path) = &args.timing_file {
        write_timing_file(path, start_ns, args.warmup_secs, &timings)
            .with_context(|| format!("writing the timing file {}", path.display()))?;
    }
    Ok(())
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// How late the commits returned against their due times: open-loop load
/// that the database cannot follow shows here, not as a thinner schedule.
fn lateness_summary(timings: &[(u64, EventTiming)]) -> String {
    let mut late: Vec<u64> = timings
        .iter()
        .map(|(_, t)| t.committed_ns.saturating_sub(t.due_ns) / 1_000)
        .collect();
    if late.is_empty() {
        return "no events committed".to_string();
    }
    late.sort_unstable();
    let at = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize];
    format!(
        "due-to-commit-returned us: p50={} p99={} p99.9={} max={}",
        at(0.5),
        at(0.99),
        at(0.999),
        late[late.len() - 1]
    )
}

/// Writes the timing file, replacing it atomically (a reader waiting for it
/// never sees half of it). Layout, little-endian u64s: the magic, the run's
/// start (Unix ns), the warm-up (ns), the count `c`, then `c` pairs
/// (due ns, commit-returned ns) indexed by the event number `n`; a pair of
/// zeros is an event that was never committed.
fn write_timing_file(
    path: &std::path::Path,
    start_ns: u64,
    warmup_secs: f64,
    timings: &[(u64, EventTiming)],
) -> std::io::Result<()> {
    let count = timings.iter().map(|(n, _)| n + 1).max().unwrap_or(0);
    let mut table = vec![EventTiming::default(); count as usize];
    for (n, t) in timings {
        table[*n as usize] = *t;
    }
    let mut buf = Vec::with_capacity(32 + table.len() * 16);
    buf.extend_from_slice(TIMING_MAGIC);
    buf.extend_from_slice(&start_ns.to_le_bytes());
    buf.extend_from_slice(&((warmup_secs * 1e9) as u64).to_le_bytes());
    buf.extend_from_slice(&count.to_le_bytes());
    for t in &table {
        buf.extend_from_slice(&t.due_ns.to_le_bytes());
        buf.extend_from_slice(&t.committed_ns.to_le_bytes());
    }
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&buf)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .context("connecting to PostgreSQL")?;
    tokio::spawn(conn);
    Ok(client)
}

/// The highest `seq` already committed per aggregate index.
async fn existing_seqs(client: &Client, args: &Args) -> anyhow::Result<Vec<i64>> {
    let rows = client
        .query(
            &format!(
                "SELECT aggregateid, max((payload->>'seq')::bigint) FROM {} WHERE aggregatetype = $1 GROUP BY 1",
                args.table
            ),
            &[&args.aggregate_type],
        )
        .await
        .context("reading existing sequence numbers")?;
    let mut seqs = vec![0; args.aggregates];
    for row in rows {
        let aggregate: String = row.get(0);
        let max: Option<i64> = row.get(1);
        if let Some(i) = aggregate
            .strip_prefix("agg-")
            .and_then(|n| n.parse::<usize>().ok())
            && i < seqs.len()
        {
            seqs[i] = max.unwrap_or(0);
        }
    }
    Ok(seqs)
}

/// One writer connection with its statements prepared, and the aggregates
/// it owns (aggregate `i` belongs to connection `i % connections`).
struct Writer {
    client: Client,
    insert: tokio_postgres::Statement,
    business: tokio_postgres::Statement,
    mine: Vec<usize>,
    padding: String,
    next: usize,
}

impl Writer {
    async fn connect(args: &Args, conn: usize) -> anyhow::Result<Writer> {
        let client = connect(&args.url).await?;
        let insert = client
            .prepare(&format!(
                "INSERT INTO {} (id, aggregatetype, aggregateid, type, payload)
                 VALUES (gen_random_uuid(), $1, $2, 'OrderPlaced', $3::text::jsonb)",
                args.table
            ))
            .await?;
        let business = client
            .prepare(&format!(
                "INSERT INTO {}_orders (aggregateid, seq) VALUES ($1, $2)",
                args.table
            ))
            .await?;
        let mine = (0..args.aggregates)
            .filter(|a| a % args.connections == conn)
            .collect();
        Ok(Writer {
            client,
            insert,
            business,
            mine,
            padding: "x".repeat(args.payload_bytes.saturating_sub(90)),
            next: 0,
        })
    }

    /// Commits one transaction with one event per entry of `numbers` (the
    /// run-wide event number `n`, or None outside open-loop mode).
    ///
    /// BEGIN goes out with the first row's inserts and COMMIT with the last
    /// row's (tokio-postgres pipelines the requests of one client in the
    /// order they are first polled): a single-row transaction is one round
    /// trip, so the writers cost the machine little beyond what PostgreSQL
    /// does for the rows. A failed insert aborts the transaction, and the
    /// COMMIT behind it then only rolls back: the insert's error is returned,
    /// so nothing is counted as committed that was not.
    async fn commit(
        &mut self,
        aggregate_type: &str,
        seqs: &mut [i64],
        numbers: &[Option<u64>],
    ) -> anyhow::Result<()> {
        let client = &self.client;
        let last = numbers.len().saturating_sub(1);
        for (i, n) in numbers.iter().enumerate() {
            let slot = self.next % self.mine.len();
            self.next += 1;
            seqs[slot] += 1;
            let aggregate = format!("agg-{}", self.mine[slot]);
            // `n` first: jsonb keeps the shortest key first too, so readers
            // of the decoded text find it at the start either way.
            let number = n.map(|n| format!(r#""n":{n},"#)).unwrap_or_default();
            let payload = format!(
                r#"{{{number}"aggregate":"{aggregate}","seq":{},"total":42.5,"pad":"{}"}}"#,
                seqs[slot], self.padding
            );
            let seq = seqs[slot];
            let business_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                [&aggregate, &seq];
            let outbox_params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                [&aggregate_type, &aggregate, &payload];
            // Each async block sends its request on its first poll, and
            // join! polls them in this order.
            let (begin, business, outbox, commit) = tokio::join!(
                async {
                    if i == 0 {
                        client.batch_execute("BEGIN").await
                    } else {
                        Ok(())
                    }
                },
                client.execute(&self.business, &business_params),
                client.execute(&self.insert, &outbox_params),
                async {
                    if i == last {
                        client.batch_execute("COMMIT").await
                    } else {
                        Ok(())
                    }
                },
            );
            begin.context("BEGIN")?;
            business.context("inserting the business row")?;
            outbox.context("inserting the outbox row")?;
            commit.context("COMMIT")?;
        }
        Ok(())
    }
}

/// Events this connection writes in total when `--events` limits the run.
fn events_of_connection(args: &Args, conn: usize) -> u64 {
    if args.events == 0 {
        u64::MAX
    } else {
        args.events / args.connections as u64
            + u64::from((conn as u64) < args.events % args.connections as u64)
    }
}

/// One writer connection: commits transactions for its own aggregates, at
/// the paced rate or flat out.
async fn run_connection(
    args: Args,
    conn: usize,
    mut writer: Writer,
    mut seqs: Vec<i64>,
) -> anyhow::Result<(u64, Vec<(u64, EventTiming)>)> {
    let per_conn_events = events_of_connection(&args, conn);
    let deadline =
        (args.duration_secs > 0).then(|| Instant::now() + Duration::from_secs(args.duration_secs));
    // Pacing: one transaction every `rows / (rate / connections)` seconds.
    let mut pace = (args.rate > 0).then(|| {
        let txn_per_sec = args.rate as f64 / args.connections as f64 / args.rows_per_txn as f64;
        let mut i = tokio::time::interval(Duration::from_secs_f64(1.0 / txn_per_sec.max(0.001)));
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        i
    });
    let mut written = 0u64;
    while written < per_conn_events && deadline.is_none_or(|d| Instant::now() < d) {
        if let Some(pace) = pace.as_mut() {
            pace.tick().await;
        }
        let rows = args.rows_per_txn.min((per_conn_events - written) as usize);
        writer
            .commit(&args.aggregate_type, &mut seqs, &vec![None; rows])
            .await?;
        written += rows as u64;
    }
    Ok((written, Vec::new()))
}

/// Open-loop writer: transaction `j` (of all connections) is due at
/// `start + j * rows_per_txn / rate` and belongs to connection
/// `j % connections`; its events are numbered `j * rows_per_txn + r`.
/// A transaction that is due while the previous one still runs starts as
/// soon as that one returns: lateness accumulates in the timings instead of
/// stretching the schedule (no coordinated omission).
async fn run_open_loop(
    args: Args,
    conn: usize,
    mut writer: Writer,
    mut seqs: Vec<i64>,
    started: Instant,
    start_ns: u64,
) -> anyhow::Result<(u64, Vec<(u64, EventTiming)>)> {
    let rows = args.rows_per_txn as u64;
    let txn_period = Duration::from_secs_f64(rows as f64 / args.rate as f64);
    let end = (args.duration_secs > 0).then(|| Duration::from_secs(args.duration_secs));
    let total_txns = (args.events > 0).then(|| args.events.div_ceil(rows));
    let mut timings = Vec::new();
    let mut j = conn as u64;
    loop {
        let due = txn_period.mul_f64(j as f64);
        if end.is_some_and(|end| due >= end) || total_txns.is_some_and(|t| j >= t) {
            break;
        }
        tokio::time::sleep_until((started + due).into()).await;
        let numbers: Vec<Option<u64>> = (j * rows..(j + 1) * rows).map(Some).collect();
        writer
            .commit(&args.aggregate_type, &mut seqs, &numbers)
            .await?;
        let committed_ns = unix_ns();
        let due_ns = start_ns + due.as_nanos() as u64;
        timings.extend(numbers.iter().flatten().map(|&n| {
            (
                n,
                EventTiming {
                    due_ns,
                    committed_ns,
                },
            )
        }));
        j += args.connections as u64;
    }
    Ok((timings.len() as u64, timings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(bytes: &[u8], i: usize) -> u64 {
        u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap())
    }

    #[test]
    fn timing_file_is_indexed_by_event_number_with_gaps_as_zeros() {
        let dir = std::env::temp_dir().join(format!("loadgen-timing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.bin");
        // Out of order (connections finish in any order), event 1 never committed.
        let timings = [
            (
                2,
                EventTiming {
                    due_ns: 30,
                    committed_ns: 35,
                },
            ),
            (
                0,
                EventTiming {
                    due_ns: 10,
                    committed_ns: 17,
                },
            ),
        ];
        write_timing_file(&path, 1_000, 2.5, &timings).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], TIMING_MAGIC);
        assert_eq!(word(&bytes, 1), 1_000);
        assert_eq!(word(&bytes, 2), 2_500_000_000);
        assert_eq!(word(&bytes, 3), 3, "count = highest n + 1");
        assert_eq!(bytes.len(), 32 + 3 * 16);
        let pair = |n: usize| (word(&bytes, 4 + 2 * n), word(&bytes, 5 + 2 * n));
        assert_eq!(pair(0), (10, 17));
        assert_eq!(pair(1), (0, 0));
        assert_eq!(pair(2), (30, 35));
        assert!(!path.with_extension("tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lateness_is_commit_returned_minus_due() {
        let timings: Vec<(u64, EventTiming)> = (0..1000u64)
            .map(|n| {
                (
                    n,
                    EventTiming {
                        due_ns: n * 1_000_000,
                        // n µs late
                        committed_ns: n * 1_000_000 + n * 1_000,
                    },
                )
            })
            .collect();
        let s = lateness_summary(&timings);
        assert_eq!(
            s,
            "due-to-commit-returned us: p50=500 p99=989 p99.9=998 max=999"
        );
        assert_eq!(lateness_summary(&[]), "no events committed");
    }
}
