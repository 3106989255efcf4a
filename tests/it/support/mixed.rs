//! A writer for the tests that run several features at once
//! (tests/it/combinations.rs): each transaction holds events written as
//! table rows or as outbox messages (`postgres.source = "both"`), each with a
//! trace context of its own (`tracingspancontext` -> `traceparent`), events
//! for a webhook route beside those for Kafka, and now and then a row whose
//! payload is not JSON (a dead letter). What was committed comes back
//! sorted by where it must arrive, so each sink gets its own checker.
//!
//! Rows go to the table as `text` (the bad rows need a `text` payload
//! column: `TestOutbox::create("text")`); messages through `outbox_emit`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use super::{Committed, Received, TestOutbox};

/// What each transaction holds.
#[derive(Debug, Clone)]
pub struct Mix {
    /// Events per transaction (bad rows come on top).
    pub per_txn: usize,
    /// Aggregates per sink, used round robin.
    pub aggregates: usize,
    /// Every other event an outbox message (needs `outbox_emit` installed
    /// and the relay on `source = "both"`), else rows only.
    pub messages: bool,
    /// A bad row (payload not JSON) in every `bad_every`-th transaction; 0
    /// for none.
    pub bad_every: usize,
    /// Every third event of this aggregate type, which a `[[routes]]`
    /// entry sends to a webhook; `None`: every event goes to Kafka.
    pub hook_type: Option<&'static str>,
}

/// Everything committed, by where it must arrive.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// Events for the Kafka topic of aggregate type `order`, commit order.
    pub kafka: Vec<Committed>,
    /// Events for the webhook route, commit order.
    pub hooks: Vec<Committed>,
    /// Ids of the bad rows: each must be dead-lettered.
    pub bad: Vec<String>,
    /// The traceparent each event was written with, by event id.
    pub traceparents: HashMap<String, String>,
    /// How many events were outbox messages.
    pub messages: usize,
    /// Transactions committed.
    pub transactions: usize,
}

/// A new W3C traceparent, sampled.
pub fn new_traceparent() -> String {
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let span_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    format!("00-{trace_id}-{span_id}-01")
}

impl TestOutbox {
    /// Commits one transaction as `mix` says, adding what it wrote to `out`.
    pub async fn commit_mixed(
        &self,
        writer: &mut Client,
        mix: &Mix,
        seqs: &mut HashMap<String, i64>,
        out: &mut Written,
    ) {
        let insert = format!(
            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, \
             tracingspancontext, seq) \
             VALUES ($1::text::uuid, $2, $3, 'OrderPlaced', $4::text::jsonb, $5, $6)",
            self.table
        );
        let emit = "SELECT outbox_emit($1, $2, 'OrderPlaced', $3::text::jsonb, $4, NULL, $5)::text";
        let prefix = self.message_prefix();
        let t = out.transactions;
        let tx = writer.transaction().await.unwrap();
        for i in 0..mix.per_txn {
            let n = t * mix.per_txn + i;
            let hook = mix.hook_type.filter(|_| n % 3 == 2);
            let (aggregate_type, aggregate) = match hook {
                Some(kind) => (kind, format!("hook-{}", n % mix.aggregates)),
                None => ("order", format!("agg-{}", n % mix.aggregates)),
            };
            let seq = seqs.entry(aggregate.clone()).or_insert(0);
            *seq += 1;
            let payload = format!(r#"{{"aggregate":"{aggregate}","seq":{seq}}}"#);
            let traceparent = new_traceparent();
            let id = if mix.messages && (t + i).is_multiple_of(2) {
                out.messages += 1;
                tx.query_one(
                    emit,
                    &[&aggregate_type, &aggregate, &payload, &traceparent, &prefix],
                )
                .await
                .unwrap()
                .get(0)
            } else {
                let id = uuid::Uuid::new_v4().to_string();
                tx.execute(
                    &insert,
                    &[
                        &id,
                        &aggregate_type,
                        &aggregate,
                        &payload,
                        &traceparent,
                        &*seq,
                    ],
                )
                .await
                .unwrap();
                id
            };
            out.traceparents.insert(id.clone(), traceparent);
            let committed = Committed {
                id,
                aggregate,
                seq: *seq,
            };
            match hook {
                Some(_) => out.hooks.push(committed),
                None => out.kafka.push(committed),
            }
        }
        if mix.bad_every > 0 && t.is_multiple_of(mix.bad_every) {
            let id = uuid::Uuid::new_v4().to_string();
            tx.execute(
                &format!(
                    "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                     VALUES ($1::text::uuid, 'order', 'agg-bad', 'OrderPlaced', 'not json')",
                    self.table
                ),
                &[&id],
            )
            .await
            .unwrap();
            out.bad.push(id);
        }
        tx.commit().await.unwrap();
        out.transactions += 1;
    }
}

/// [`TestOutbox::commit_mixed`] in the background, a transaction every
/// `pause`, until [`MixWriter::finish`]: load while the test kills relays.
pub struct MixWriter {
    stop: watch::Sender<bool>,
    task: JoinHandle<Written>,
    transactions: Arc<AtomicUsize>,
}

impl MixWriter {
    pub fn start(outbox: Arc<TestOutbox>, mix: Mix, pause: Duration) -> Self {
        let (stop, stopped) = watch::channel(false);
        let transactions = Arc::new(AtomicUsize::new(0));
        let count = transactions.clone();
        let task = tokio::spawn(async move {
            let mut writer = outbox.writer().await;
            let mut seqs = HashMap::new();
            let mut out = Written::default();
            while !*stopped.borrow() {
                outbox
                    .commit_mixed(&mut writer, &mix, &mut seqs, &mut out)
                    .await;
                count.store(out.transactions, Ordering::Relaxed);
                tokio::time::sleep(pause).await;
            }
            out
        });
        MixWriter {
            stop,
            task,
            transactions,
        }
    }

    /// Transactions committed so far.
    pub fn transactions(&self) -> usize {
        self.transactions.load(Ordering::Relaxed)
    }

    /// Waits until `more` transactions beyond now are committed.
    pub async fn wait_for_more(&self, more: usize) {
        let target = self.transactions() + more;
        super::wait_until("the writer to commit more", super::DEADLINE, || async {
            self.transactions() >= target
        })
        .await;
    }

    /// Stops writing; what was committed.
    pub async fn finish(self) -> Written {
        self.stop.send_replace(true);
        self.task.await.unwrap()
    }
}

/// Every record of a traced event carries the writer's traceparent in
/// `ce_traceparent` (Kafka); panics naming the first that does not.
/// Returns how many records were checked, for the caller to require some.
pub fn check_kafka_traceparents(case: &str, written: &Written, received: &[Received]) -> usize {
    let mut checked = 0;
    for r in received {
        let Some(id) = r.header("ce_id") else {
            continue;
        };
        if let Some(want) = written.traceparents.get(id) {
            assert_eq!(
                r.header("ce_traceparent"),
                Some(want.as_str()),
                "{case}: event {id} lost its trace context"
            );
            checked += 1;
        }
    }
    println!("traceparents: case={case} checked={checked}");
    checked
}

/// The ids of the dead letters on `records` (their `id` header).
pub fn dead_letter_ids(records: &[Received]) -> std::collections::HashSet<String> {
    records
        .iter()
        .filter_map(|r| r.header("id").map(str::to_owned))
        .collect()
}
