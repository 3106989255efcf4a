//! `delivery-throughput`: how many webhook events per second the delivery
//! table takes through the relay's own statements (`sink::http::store`),
//! the endpoint left out.
//!
//! Two phases over `events` events of `aggregates` aggregates (50 events
//! each by default), on a table of its own that it creates in `public` and
//! drops at the end:
//! * park: as the dispatcher parks events its endpoint did not take, each
//!   event looked up, then inserted PENDING and due at once; `writers`
//!   sessions at a time (a sink's `max_concurrency`, 16 by default), each
//!   working through aggregates of its own, one event at a time;
//! * deliver: as the retry worker sends them, 4 loops (its loops per sink)
//!   each on a session of its own: claim the due head of an aggregate's
//!   queue, record it SENT and commit, until every row is SENT.
//!
//! Prints events per second of each phase and of both. Run it against the
//! test services (`eval "$(scripts/services env)"`; it connects to `PG_URL`):
//!
//! ```text
//! cargo run --release --example delivery-throughput -- [events] [writers]
//! ```
//!
//! Nothing here asserts on timings; the figures are for comparing builds
//! side by side on one machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use outbox_relay::pg::{ConnectSettings, Conninfo, PgClient};
use outbox_relay::routes::AfterDeadLetter;
use outbox_relay::sink::http::WebhookEvent;
use outbox_relay::sink::http::store::{self, DeliveryTable, Finish, NewRow, Session};

const ROUTE: &str = "bench";
const EVENTS_PER_AGGREGATE: usize = 50;
const DELIVER_LOOPS: usize = 4;
const BODY_BYTES: usize = 1024;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().map_or(Ok(50_000), |a| a.parse())?;
    let writers: usize = args.next().map_or(Ok(16), |a| a.parse())?;
    let aggregates = (events / EVENTS_PER_AGGREGATE).max(1);
    let url = std::env::var("PG_URL").map_err(|_| {
        anyhow::anyhow!("PG_URL is not set: eval \"$(scripts/services env)\" first")
    })?;
    let settings = ConnectSettings::new(Conninfo::parse(&url)?);
    let table = DeliveryTable {
        schema: "public".to_owned(),
        name: format!("delivery_bench_{}", std::process::id()),
    };
    let admin = PgClient::connect(&settings).await?;
    admin.batch_execute(&table.create_sql()).await?;

    let started = Instant::now();
    let mut parkers = tokio::task::JoinSet::new();
    for w in 0..writers {
        let (settings, table) = (settings.clone(), table.clone());
        parkers.spawn(async move {
            let mut session = Session::connect(&settings, &table).await?;
            for round in 0..EVENTS_PER_AGGREGATE {
                for aggregate in (w..aggregates).step_by(writers) {
                    let event = event(aggregate, round);
                    store::look_up(&mut session, ROUTE, &event).await?;
                    let row = NewRow {
                        route: ROUTE,
                        event: &event,
                        status: store::PENDING,
                        attempts: 2,
                        max_attempts: 10,
                        delay: Duration::ZERO,
                        last_status: Some(503),
                        last_error: Some("HTTP 503".to_owned()),
                    };
                    store::insert(&mut session, &row).await?;
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = parkers.join_next().await {
        done??;
    }
    let parked = started.elapsed();
    let total = aggregates * EVENTS_PER_AGGREGATE;

    let delivering = Instant::now();
    let sent = Arc::new(AtomicUsize::new(0));
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..DELIVER_LOOPS {
        let (settings, table, sent) = (settings.clone(), table.clone(), Arc::clone(&sent));
        loops.spawn(async move {
            let mut session = Session::connect(&settings, &table).await?;
            while sent.load(Ordering::Relaxed) < total {
                match store::claim(&mut session, ROUTE).await? {
                    Some(row) => {
                        store::finish(&mut session, row.id, &Finish::Sent { status: 204 }).await?;
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    // The heads left are another loop's for now.
                    None => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = loops.join_next().await {
        done??;
    }
    let delivered = delivering.elapsed();
    let left: i64 = admin
        .query_one(
            &format!(
                "SELECT count(*) FROM {} WHERE status <> 'SENT'",
                table.quoted()
            ),
            &[],
        )
        .await?
        .get(0);
    admin
        .batch_execute(&format!("DROP TABLE {}", table.quoted()))
        .await?;
    anyhow::ensure!(left == 0, "{left} rows were not delivered");

    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "park (look-up + insert, {writers} sessions): {total} events in {:.2} s = {:.0} events/s",
        parked.as_secs_f64(),
        rate(total, parked)
    );
    println!(
        "deliver (claim + record SENT, {DELIVER_LOOPS} loops): {total} events in {:.2} s = {:.0} events/s",
        delivered.as_secs_f64(),
        rate(total, delivered)
    );
    println!("both: {:.0} events/s", rate(total, parked + delivered));
    Ok(())
}

/// The `round`th event of aggregate `aggregate`, shaped as the relay sends
/// one: a CloudEvents header set and a 1 KiB JSON body.
fn event(aggregate: usize, round: usize) -> WebhookEvent {
    let id = format!("{aggregate:08x}-{round:04x}-4000-8000-000000000000");
    let mut body = format!("{{\"aggregate\":{aggregate},\"round\":{round},\"pad\":\"");
    while body.len() < BODY_BYTES - 2 {
        body.push(char::from(b'a' + (body.len() % 26) as u8));
    }
    body.push_str("\"}");
    let headers = [
        ("ce-id", id.as_str()),
        ("ce-type", "order.placed"),
        ("ce-source", "/bench"),
        ("ce-specversion", "1.0"),
        ("ce-subject", "order"),
        ("ce-time", "2026-01-01T00:00:00.000000Z"),
        ("idempotency-key", id.as_str()),
        ("content-type", "application/json"),
    ];
    WebhookEvent {
        id: id.clone(),
        key: format!("agg-{aggregate}"),
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
        body: Bytes::from(body),
        after_dead_letter: AfterDeadLetter::Park,
    }
}
