//! A writer for the tests that run several features at once
//! (tests/it/combinations.rs): each transaction holds events written as
//! table rows or as outbox messages (`postgres.source = "both"`), each with a
//! trace context of its own (`tracingspancontext` -> `traceparent`), events
//! for a webhook route beside those for Kafka, and now and then a row whose
//! payload is not JSON, and an event whose JSON breaks its contract (dead
//! letters both). What was committed comes back
//! sorted by where it must arrive, so each sink gets its own checker.
//!
//! Beside it, the set-up and the verdicts those tests share: the outbox, the
//! config lines of each feature, dead letters, cleanup, trace context on
//! webhook requests.
//!
//! Rows go to the table as `text` (the bad rows need a `text` payload
//! column: `TestOutbox::create("text")`); messages through `outbox_emit`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use super::messages::install_outbox_emit;
use super::webhook::Receiver;
use super::{
    Committed, DEADLINE, Received, TestOutbox, committed_rows, consume, consume_ids_to_end,
    ids_on_topic, random_name, wait_until_explained,
};

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
    /// Each bad transaction also holds an event whose payload is JSON but
    /// breaks [`ORDER_SCHEMA`] (the relay runs with [`contract_toml`]): a
    /// row, or by turns a message (with `messages`) and an event of the
    /// webhook's type (with `hook_type`). It must be dead-lettered too.
    pub contract_breaks: bool,
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
    /// Good events of the bad rows' aggregate (`agg-bad`), written after
    /// its first bad row: each must wait in the parking table behind it
    /// (after_dead_letter = "park", the default), never on a topic.
    pub parked: Vec<Committed>,
    /// The traceparent each event was written with, by event id.
    pub traceparents: HashMap<String, String>,
    /// How many events were outbox messages.
    pub messages: usize,
    /// Transactions committed.
    pub transactions: usize,
}

/// Writes one good event of `aggregate` in `tx`, as a row (`insert`) or,
/// `as_message`, with `outbox_emit` (`emit`, under `prefix`), with the next
/// `seq` of its aggregate and a traceparent of its own (kept in `out`);
/// returns its id and seq.
async fn write_event(
    tx: &tokio_postgres::Transaction<'_>,
    (insert, emit, prefix): (&str, &str, &str),
    (aggregate_type, aggregate, as_message): (&str, &str, bool),
    seqs: &mut HashMap<String, i64>,
    out: &mut Written,
) -> (String, i64) {
    let seq = seqs.entry(aggregate.to_owned()).or_insert(0);
    *seq += 1;
    let seq = *seq;
    let payload = format!(r#"{{"aggregate":"{aggregate}","seq":{seq}}}"#);
    let traceparent = new_traceparent();
    let id = if as_message {
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
            insert,
            &[
                &id,
                &aggregate_type,
                &aggregate,
                &payload,
                &traceparent,
                &seq,
            ],
        )
        .await
        .unwrap();
        id
    };
    out.traceparents.insert(id.clone(), traceparent);
    (id, seq)
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
            let as_message = mix.messages && (t + i).is_multiple_of(2);
            let (id, seq) = write_event(
                &tx,
                (&insert, emit, &prefix),
                (aggregate_type, &aggregate, as_message),
                seqs,
                out,
            )
            .await;
            let committed = Committed { id, aggregate, seq };
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
            // A good event behind it (a row, or with source both every
            // other time a message): parked, in order, never sent, with
            // its trace context kept for its release.
            let as_message = mix.messages && out.parked.len() % 2 == 1;
            let (id, seq) = write_event(
                &tx,
                (&insert, emit, &prefix),
                ("order", "agg-bad", as_message),
                seqs,
                out,
            )
            .await;
            out.parked.push(Committed {
                id,
                aggregate: "agg-bad".to_owned(),
                seq,
            });
            if mix.contract_breaks {
                let n = t / mix.bad_every;
                let aggregate_type = match mix.hook_type {
                    Some(kind) if n % 2 == 1 => kind,
                    _ => "order",
                };
                // A number where the contract wants text, text where it
                // wants a number.
                let broken = r#"{"aggregate": 5, "seq": "five"}"#;
                let id = if mix.messages && n % 3 == 2 {
                    let traceparent = new_traceparent();
                    tx.query_one(
                        emit,
                        &[
                            &aggregate_type,
                            &"agg-broken",
                            &broken,
                            &traceparent,
                            &prefix,
                        ],
                    )
                    .await
                    .unwrap()
                    .get(0)
                } else {
                    let id = uuid::Uuid::new_v4().to_string();
                    tx.execute(
                        &format!(
                            "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                             VALUES ($1::text::uuid, $2, 'agg-broken', 'OrderPlaced', $3)",
                            self.table
                        ),
                        &[&id, &aggregate_type, &broken],
                    )
                    .await
                    .unwrap();
                    id
                };
                out.bad.push(id);
            }
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

// ------------------------------------------------ set-up and verdicts

/// The contract of every event the writer commits: what a good payload is.
pub const ORDER_SCHEMA: &str = r#"{
  "$id": "urn:combinations:order:v1",
  "type": "object",
  "required": ["aggregate", "seq"],
  "properties": {"aggregate": {"type": "string"}, "seq": {"type": "integer"}}
}"#;

/// The `dataschema` of events checked against [`ORDER_SCHEMA`].
pub const ORDER_DATASCHEMA: &str = "urn:combinations:order:v1";

/// A `[[contracts]]` entry holding every event type to [`ORDER_SCHEMA`],
/// written to a file of its own (named by its absolute path).
pub fn contract_toml() -> String {
    let dir = std::env::temp_dir().join(random_name("contract"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("order.schema.json");
    std::fs::write(&path, ORDER_SCHEMA).unwrap();
    format!(
        "\n[[contracts]]\nschema = {:?}\n",
        path.display().to_string()
    )
}

/// Every event record (a `ce_id`) says it was checked against
/// [`ORDER_SCHEMA`]; returns how many were checked.
pub fn check_kafka_dataschemas(case: &str, received: &[Received]) -> usize {
    let mut checked = 0;
    for r in received.iter().filter(|r| r.header("ce_id").is_some()) {
        assert_eq!(
            r.header("ce_dataschema"),
            Some(ORDER_DATASCHEMA),
            "{case}: event {:?} not checked against its contract",
            r.header("ce_id")
        );
        checked += 1;
    }
    checked
}

/// Every accepted webhook request says it was checked against
/// [`ORDER_SCHEMA`] (`ce-dataschema`); returns how many were checked.
pub fn check_webhook_dataschemas(case: &str, receiver: &Receiver) -> usize {
    let accepted = receiver.accepted();
    for a in &accepted {
        assert_eq!(
            a.headers.get("ce-dataschema").map(String::as_str),
            Some(ORDER_DATASCHEMA),
            "{case}: webhook event {} not checked against its contract",
            a.id
        );
    }
    accepted.len()
}

/// The events a relay process is waited on for: it streams, or it stands by.
pub const STREAMING: &str = "streaming";
pub const STANDING_BY: &str = "standing_by";
pub const CLEANUP: &str = "cleanup = \"delete-after-ack\"\n";
/// The writer's pause between transactions: about 50 transactions a
/// second on this machine, load the relays must keep up with.
pub const PAUSE: Duration = Duration::from_millis(10);

/// A `text`-payload outbox (bad rows possible) with its `order` topic (3
/// partitions) and dead-letter topic; the relay's role may delete rows
/// (`cleanup`), `outbox_emit` is installed (`messages`).
pub async fn text_outbox(cleanup: bool, messages: bool) -> Arc<TestOutbox> {
    text_outbox_from(TestOutbox::create("text").await, cleanup, messages).await
}

/// [`text_outbox`] from an outbox already created as `text` (by a test
/// that holds the services lock exclusively: `TestOutbox::create_exclusive`).
pub async fn text_outbox_from(
    outbox: TestOutbox,
    cleanup: bool,
    messages: bool,
) -> Arc<TestOutbox> {
    if cleanup {
        outbox
            .admin
            .batch_execute(&format!("GRANT DELETE ON public.{} TO relay", outbox.table))
            .await
            .unwrap();
    }
    if messages {
        install_outbox_emit(&outbox.admin).await;
    }
    outbox.create_topic(&outbox.topic("order"), 3).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    Arc::new(outbox)
}

/// A compacted checkpoint topic of the test's own.
pub async fn checkpoint_topic(outbox: &TestOutbox) -> String {
    let checkpoints = random_name("checkpoints");
    outbox
        .create_topic_with_config(&checkpoints, 1, &[("cleanup.policy", "compact")])
        .await;
    checkpoints
}

/// `[kafka]` lines for exactly-once delivery.
pub fn exactly_once(checkpoints: &str) -> String {
    format!("delivery = \"exactly-once\"\ncheckpoint_topic = \"{checkpoints}\"\n")
}

/// `[postgres]` lines for rows and messages (the test's message prefix).
pub fn source_both(outbox: &TestOutbox) -> String {
    format!(
        "source = \"both\"\nmessage_prefix = \"{}\"\n",
        outbox.message_prefix()
    )
}

/// Waits until every bad row is on the dead-letter topic; asserts nothing
/// else is, and (read to its end) each one once when `once`.
pub async fn check_dead_letters(outbox: &TestOutbox, written: &Written, once: bool) {
    let want = written.bad.len();
    let dlq = consume(&outbox.dlq_topic, DEADLINE, move |r| {
        dead_letter_ids(r).len() >= want
    })
    .await;
    let bad: HashSet<String> = written.bad.iter().cloned().collect();
    assert_eq!(dead_letter_ids(&dlq), bad, "every bad row dead-lettered");
    if once {
        let all = consume_ids_to_end(&outbox.dlq_topic).await;
        assert_eq!(all.len(), bad.len(), "each dead letter once");
    }
    println!("dead-letters: {} bad rows, all on the topic", bad.len());
    check_parked(outbox, written).await;
}

/// The good events of `agg-bad` wait in the parking table behind its
/// first bad row, each once and in commit order, and none reached the
/// topic of its aggregate type.
pub async fn check_parked(outbox: &TestOutbox, written: &Written) {
    let want: Vec<String> = written.parked.iter().map(|c| c.id.clone()).collect();
    let mut parked = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::time::Instant::now() < deadline {
        parked = outbox
            .parked()
            .await
            .into_iter()
            .filter(|(aggregate, kind, _)| aggregate == "agg-bad" && kind == "EVENT")
            .map(|(_, _, id)| id)
            .collect::<Vec<_>>();
        if parked.len() >= want.len() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        parked, want,
        "agg-bad's good events parked behind its dead letter, once each, in commit order"
    );
    let heads: Vec<String> = outbox
        .parked()
        .await
        .into_iter()
        .filter(|(aggregate, kind, _)| aggregate == "agg-bad" && kind == "HEAD")
        .map(|(_, _, id)| id)
        .collect();
    assert_eq!(
        heads.first(),
        written.bad.first(),
        "agg-bad waits behind its first bad row"
    );
    // Each as it would have been sent, its writer's trace context in it.
    for c in &written.parked {
        let header: Option<Vec<u8>> = outbox
            .admin
            .query_opt(
                &format!(
                    "SELECT header_values[array_position(header_names, 'ce_traceparent')] \
                     FROM public.{} WHERE event_id = $1 AND kind = 'EVENT'",
                    outbox.parked_table()
                ),
                &[&c.id],
            )
            .await
            .unwrap()
            .and_then(|r| r.get(0));
        assert_eq!(
            header.as_deref(),
            written.traceparents.get(&c.id).map(String::as_bytes),
            "parked event {} keeps its trace context",
            c.id
        );
    }
    let early = ids_on_topic(&outbox.topic("order"), &written.parked).await;
    assert!(
        early.is_empty(),
        "parked events reached the topic: {early:?}"
    );
    println!(
        "parking: {} events of agg-bad parked in order behind its dead letter",
        want.len()
    );
}

/// Waits until cleanup deleted every row but those of `at_restart` (the
/// rows in the table when the last relay started after a kill -9). Those
/// may stay: a relay killed after confirming rows and before its DELETE
/// leaves them behind, and the next relay starts past them (nothing
/// re-publishes them, so nothing deletes them). Prints how many are left,
/// which is how often that happens.
pub async fn wait_for_cleanup(outbox: &TestOutbox, at_restart: &HashSet<String>) {
    wait_until_explained(
        "cleanup to delete every row committed since the restart",
        DEADLINE,
        || async { ids_in_table(outbox).await.is_subset(at_restart) },
        || async {
            let left = ids_in_table(outbox).await;
            format!(
                "{} rows left, {} of them committed since the restart",
                left.len(),
                left.difference(at_restart).count()
            )
        },
    )
    .await;
    println!(
        "cleanup: {} rows left from before the restart",
        committed_rows(outbox).await
    );
}

/// Every accepted webhook request of a traced event carries its
/// traceparent (`ce-traceparent`); returns how many were checked.
pub fn check_webhook_traceparents(case: &str, written: &Written, receiver: &Receiver) -> usize {
    let mut checked = 0;
    for a in receiver.accepted() {
        if let Some(want) = written.traceparents.get(&a.id) {
            assert_eq!(
                a.headers.get("ce-traceparent"),
                Some(want),
                "{case}: webhook event {} lost its trace context",
                a.id
            );
            checked += 1;
        }
    }
    checked
}

/// The ids of the rows in the outbox table now.
pub async fn ids_in_table(outbox: &TestOutbox) -> HashSet<String> {
    outbox
        .admin
        .query(
            &format!("SELECT id::text FROM public.{}", outbox.table),
            &[],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.get(0))
        .collect()
}
