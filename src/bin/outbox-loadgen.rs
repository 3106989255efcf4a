//! `outbox-loadgen`: commits outbox rows the way a real service does (a
//! business row and its outbox rows in one transaction), for the fault tests,
//! `make soak` and the benchmarks.
//!
//! Aggregates are split between connections (aggregate `i` belongs to
//! connection `i % connections`) and every aggregate's payload carries a
//! rising `seq`, so per-aggregate commit order is `seq` order and a checker
//! can recover it from the table alone, whatever happened to this process.
//! Restarted on an existing table, it continues each aggregate's `seq`.

use std::time::{Duration, Instant};

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
}

#[tokio::main]
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

    let started = Instant::now();
    let mut tasks = Vec::new();
    for conn in 0..args.connections {
        let args = args.clone();
        let seqs: Vec<i64> = (0..args.aggregates)
            .filter(|a| a % args.connections == conn)
            .map(|a| start_seq.get(a).copied().unwrap_or(0))
            .collect();
        tasks.push(tokio::spawn(async move {
            run_connection(args, conn, seqs).await
        }));
    }
    let mut events = 0;
    for t in tasks {
        events += t.await.context("writer task")??;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "loadgen: committed {events} events in {secs:.2} s ({:.0} events/s)",
        events as f64 / secs
    );
    Ok(())
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

/// One writer connection: commits transactions for its own aggregates.
async fn run_connection(args: Args, conn: usize, mut seqs: Vec<i64>) -> anyhow::Result<u64> {
    let mut client = connect(&args.url).await?;
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
    let mine: Vec<usize> = (0..args.aggregates)
        .filter(|a| a % args.connections == conn)
        .collect();
    let per_conn_events = if args.events == 0 {
        u64::MAX
    } else {
        args.events / args.connections as u64
            + u64::from((conn as u64) < args.events % args.connections as u64)
    };
    let deadline =
        (args.duration_secs > 0).then(|| Instant::now() + Duration::from_secs(args.duration_secs));
    // Pacing: one transaction every `rows / (rate / connections)` seconds.
    let mut pace = (args.rate > 0).then(|| {
        let txn_per_sec = args.rate as f64 / args.connections as f64 / args.rows_per_txn as f64;
        let mut i = tokio::time::interval(Duration::from_secs_f64(1.0 / txn_per_sec.max(0.001)));
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        i
    });
    let padding = "x".repeat(args.payload_bytes.saturating_sub(90));
    let mut written = 0u64;
    let mut next = 0usize;
    while written < per_conn_events && deadline.is_none_or(|d| Instant::now() < d) {
        if let Some(pace) = pace.as_mut() {
            pace.tick().await;
        }
        let tx = client.transaction().await?;
        let rows = args.rows_per_txn.min((per_conn_events - written) as usize);
        for _ in 0..rows {
            let slot = next % mine.len();
            next += 1;
            seqs[slot] += 1;
            let aggregate = format!("agg-{}", mine[slot]);
            let payload = format!(
                r#"{{"aggregate":"{aggregate}","seq":{},"total":42.5,"pad":"{padding}"}}"#,
                seqs[slot]
            );
            tx.execute(&business, &[&aggregate, &seqs[slot]]).await?;
            tx.execute(&insert, &[&args.aggregate_type, &aggregate, &payload])
                .await?;
        }
        tx.commit().await?;
        written += rows as u64;
    }
    Ok(written)
}
