//! `dead list | retry | discard` of parked aggregates: rows written to the
//! parking table as the relay writes them (a HEAD naming a real dead
//! letter of the dead-letter topic, EVENT rows holding the exact Kafka
//! record or webhook event, a DEAD row in the middle), listed, released in
//! order up to the next dead letter, discarded, released while the relay's
//! writer parks at the same moment, and resumed after an interrupted
//! release.

use std::sync::Arc;

use outbox_relay::admin::AdminTarget;
use outbox_relay::admin::dead::parked::{Hooks, Pause};
use outbox_relay::admin::dead::{self as dead_lib, DeadOptions, Request};
use outbox_relay::config::Config;
use outbox_relay::envelope::KafkaRecord;
use outbox_relay::parking::store;
use outbox_relay::parking::{Aggregate, Outcome, Parcel, ParkedTable, Place};
use tokio_postgres::Client;

use super::{RawRecord, dead, list_json, produce_raw, text};
use crate::support::*;

/// A header value that is not UTF-8.
const BINARY: [u8; 4] = [0xff, 0x00, b'\'', 0x80];

/// One test's parked aggregate: its table and names.
struct Parking<'a> {
    admin: &'a Client,
    table: String,
    topic: String,
    aggregateid: String,
    /// The commit LSN of every row written: below the slot's confirmed
    /// position (`0/10`), unless a test says otherwise.
    lsn: String,
}

impl<'a> Parking<'a> {
    fn new(outbox: &'a TestOutbox, aggregateid: &str) -> Self {
        Parking {
            admin: &outbox.admin,
            table: format!("public.{}", outbox.parked_table()),
            topic: outbox.topic("order"),
            aggregateid: aggregateid.to_owned(),
            lsn: "0/10".to_owned(),
        }
    }

    /// A place in the stream no other row of the table has.
    fn position(&self) -> i64 {
        static NEXT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    async fn head(&self, id: &str, reason: &str) {
        self.row(id, "HEAD", Some(reason), None).await;
    }

    async fn dead(&self, id: &str, reason: &str) {
        self.row(id, "DEAD", Some(reason), None).await;
    }

    /// An EVENT row bound for Kafka: the record the relay built.
    async fn event(&self, id: &str) {
        self.row(id, "EVENT", None, Some("kafka")).await;
    }

    /// An EVENT row bound for the webhook sink `sink`.
    async fn webhook(&self, id: &str, sink: &str) {
        self.row(id, "EVENT", None, Some(sink)).await;
    }

    async fn row(&self, id: &str, kind: &str, reason: Option<&str>, sink: Option<&str>) {
        let (topic, key, names, values, body) = match sink {
            Some("kafka") => (
                Some(self.topic.clone()),
                Some(self.aggregateid.as_bytes().to_vec()),
                Some(vec!["ce_id".to_owned(), "bin".to_owned()]),
                Some(vec![id.as_bytes().to_vec(), BINARY.to_vec()]),
                Some(body(id)),
            ),
            Some(_) => (
                None,
                Some(self.aggregateid.as_bytes().to_vec()),
                Some(vec!["ce-id".to_owned(), "content-type".to_owned()]),
                Some(vec![id.as_bytes().to_vec(), b"application/json".to_vec()]),
                Some(body(id)),
            ),
            None => (None, None, None, None, None),
        };
        self.admin
            .execute(
                &format!(
                    "INSERT INTO {} (aggregatetype, aggregateid, event_id, kind, reason, shard, \
                     commit_lsn, position, sink, topic, record_key, header_names, header_values, \
                     body) VALUES ('order', $1, $2, $3, $4, 0, $5::text::pg_lsn, $6, $7, $8, $9, \
                     $10, $11, $12)",
                    self.table
                ),
                &[
                    &self.aggregateid,
                    &id,
                    &kind,
                    &reason,
                    &self.lsn,
                    &self.position(),
                    &sink,
                    &topic,
                    &key,
                    &names,
                    &values,
                    &body,
                ],
            )
            .await
            .expect("park a row");
    }

    /// `(kind, event_id, released)` of every row, in id order.
    async fn rows(&self) -> Vec<(String, String, bool)> {
        self.admin
            .query(
                &format!(
                    "SELECT kind, event_id, released_at IS NOT NULL FROM {} \
                     WHERE aggregateid = $1 ORDER BY id",
                    self.table
                ),
                &[&self.aggregateid],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }
}

/// The payload of parked event `id`.
fn body(id: &str) -> Vec<u8> {
    format!("{{\"event\":\"{id}\",\"text\":\"é ☃\"}}").into_bytes()
}

/// The dead letter of head `id` of aggregate `aggregateid`, as the relay
/// writes it.
fn letter<'a>(id: &str, aggregateid: &str, source: &str) -> RawRecord<'a> {
    (
        aggregateid.as_bytes().to_vec(),
        b"{\"dead\":true}".to_vec(),
        vec![
            ("dlq_reason", b"topic missing".to_vec()),
            ("dlq_reason_code", b"topic_missing".to_vec()),
            ("source_table", source.as_bytes().to_vec()),
            ("id", id.as_bytes().to_vec()),
            ("aggregatetype", b"order".to_vec()),
            ("aggregateid", aggregateid.as_bytes().to_vec()),
            ("type", b"Placed".to_vec()),
        ],
    )
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect()
}

/// The outbox with its topics (one partition for the events: their order
/// is the topic's) and the replay record.
async fn set_up() -> TestOutbox {
    let outbox = TestOutbox::create("jsonb").await;
    outbox.create_topic(&outbox.topic("order"), 1).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    replay_record(&outbox.admin, "public").await;
    outbox
}

fn source(outbox: &TestOutbox) -> String {
    format!("public.{}", outbox.table)
}

/// The ce_ids the topic holds, in order, after waiting for `n` records.
async fn sent(topic: &str, n: usize) -> Vec<Received> {
    let records = consume(topic, DEADLINE, move |r| r.len() >= n).await;
    assert_eq!(records.len(), n, "exactly {n} records");
    records
}

fn ce_ids(records: &[Received]) -> Vec<String> {
    records
        .iter()
        .map(|r| r.header("ce_id").unwrap_or("?").to_owned())
        .collect()
}

/// Each released record is the parked one byte for byte.
fn exactly_as_parked(record: &Received, id: &str, aggregateid: &str) {
    assert_eq!(record.key.as_deref(), Some(aggregateid.as_bytes()), "key");
    assert_eq!(record.value.as_deref(), Some(body(id).as_slice()), "value");
    assert_eq!(record.headers.len(), 2, "{:?}", record.headers);
    assert_eq!(record.headers["ce_id"], id.as_bytes());
    assert_eq!(record.headers["bin"], BINARY.to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_head_is_listed_and_retried_then_its_queue_in_order_up_to_the_next_dead_letter() {
    let outbox = set_up().await;
    let aggregateid = "o'1%é";
    let p = Parking::new(&outbox, aggregateid);
    let [head, e1, e2, e3, next, e4] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    produce_raw(
        &outbox.dlq_topic,
        &[
            letter(&head, aggregateid, &source(&outbox)),
            letter(&next, aggregateid, &source(&outbox)),
        ],
    )
    .await;
    p.head(&head, "topic_missing: no topic").await;
    p.event(&e1).await;
    p.event(&e2).await;
    p.event(&e3).await;
    p.dead(&next, "contract_violation: amount").await;
    p.event(&e4).await;
    // A released head of another shard, which that shard's slot (not this
    // config's) has to pass before it may go.
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO {} (aggregatetype, aggregateid, event_id, kind, released_at, shard, \
             commit_lsn, position) VALUES ('order', 'other-shard', 'gone', 'HEAD', now(), 1, \
             '0/10', 0)",
            p.table
        ))
        .await
        .unwrap();
    let config = outbox.write_config("");

    // list: the head, what waits behind it, its reason and age.
    let doc = list_json(&config, &[]).await;
    let parked = doc["parked"].as_array().expect("parked array");
    assert_eq!(parked.len(), 1, "{doc:#}");
    assert_eq!(parked[0]["event_id"], head.as_str());
    assert_eq!(parked[0]["aggregatetype"], "order");
    assert_eq!(parked[0]["aggregateid"], aggregateid);
    assert_eq!(parked[0]["reason"], "topic_missing: no topic");
    assert_eq!(parked[0]["waiting"], 5);
    assert!(parked[0]["age_seconds"].as_f64().is_some(), "{doc:#}");
    assert_eq!(parked[0]["release_interrupted"], serde_json::Value::Null);
    let out = dead(&config, &["list"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("parked aggregates"), "{shown}");
    assert!(shown.contains(&format!("order/{aggregateid}")), "{shown}");
    assert!(shown.contains("1 parked aggregate:"), "{shown}");

    // retry: the head's dead letter first, then the queue, in order, up to
    // the next dead letter, which becomes the head.
    let out = dead(&config, &["retry", &head]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("republished {head:?}")),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains(&format!(
            "released {head:?} up to the next dead letter: 3 parked event(s)"
        )) && stdout.contains(&format!(
            "parked behind {next:?} (contract_violation: amount)"
        )),
        "{}",
        text(&out)
    );
    let records = sent(&p.topic, 4).await;
    assert_eq!(ce_ids(&records), [&head, &e1, &e2, &e3].map(String::as_str));
    for (record, id) in records[1..].iter().zip([&e1, &e2, &e3]) {
        exactly_as_parked(record, id, aggregateid);
    }
    // The old head's tombstone is gone (the slot is past its commit); the
    // DEAD row is the head now, with one event behind it.
    assert_eq!(
        p.rows().await,
        [
            ("HEAD".to_owned(), next.clone(), false),
            ("EVENT".to_owned(), e4.clone(), false)
        ]
    );
    let other: i64 = outbox
        .admin
        .query_one(
            &format!(
                "SELECT count(*) FROM {} WHERE aggregateid = 'other-shard'",
                p.table
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(other, 1, "another shard's released head stays");
    let doc = list_json(&config, &[]).await;
    assert_eq!(doc["parked"][0]["event_id"], next.as_str(), "{doc:#}");
    assert_eq!(doc["parked"][0]["reason"], "contract_violation: amount");
    assert_eq!(doc["parked"][0]["waiting"], 1);
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_head_releases_its_queue_without_it_webhook_events_to_the_delivery_table() {
    let outbox = set_up().await;
    let delivery = crate::support::webhook::create_delivery_table(&outbox).await;
    let aggregateid = "o2";
    let p = Parking::new(&outbox, aggregateid);
    let [head, e1, w1, e2] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    produce_raw(
        &outbox.dlq_topic,
        &[letter(&head, aggregateid, &source(&outbox))],
    )
    .await;
    p.head(&head, "topic_missing").await;
    p.event(&e1).await;
    p.webhook(&w1, "hook").await;
    p.event(&e2).await;
    let config = outbox.write_config_with(
        &format!("delivery_table = \"{delivery}\""),
        "",
        "[sinks.hook]\nurl = \"http://127.0.0.1:9/\"",
    );
    let out = dead(&config, &["discard", &head]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("discarded {head:?}")),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains(&format!("released {head:?}: 3 parked event(s)")),
        "{}",
        text(&out)
    );
    let records = sent(&p.topic, 2).await;
    assert_eq!(
        ce_ids(&records),
        [&e1, &e2].map(String::as_str),
        "the head is not sent"
    );
    exactly_as_parked(&records[0], &e1, aggregateid);
    let rows = outbox
        .admin
        .query(
            &format!(
                "SELECT event_id, route, aggregate_key, status, attempts, headers::text, body, \
                 next_attempt_at <= now() FROM public.{delivery}"
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.get::<_, String>(0), w1);
    assert_eq!(row.get::<_, String>(1), "hook");
    assert_eq!(row.get::<_, String>(2), aggregateid);
    assert_eq!(row.get::<_, String>(3), "PENDING");
    assert_eq!(row.get::<_, i32>(4), 0);
    let headers: serde_json::Value = serde_json::from_str(&row.get::<_, String>(5)).unwrap();
    assert_eq!(headers["ce-id"], w1.as_str());
    assert_eq!(row.get::<_, Vec<u8>>(6), body(&w1));
    assert!(row.get::<_, bool>(7), "due now");
    // Live again; the slot is past the released head (a release waits
    // for that), so no replay can meet its dead letter: its row is gone.
    assert_eq!(p.rows().await, []);
    assert_eq!(
        list_json(&config, &[]).await["parked"],
        serde_json::json!([])
    );
    outbox.drop_all().await;
}

/// `dead retry ids` through the library, releasing as `hooks` say.
async fn retry_with(config: &Config, ids: &[String], hooks: Hooks) -> (bool, String) {
    let target = AdminTarget::from_config(config, None);
    let options = DeadOptions {
        timeout: DEADLINE,
        delivery_table: None,
        unattributed: false,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let passed = dead_lib::run_with(
        &target,
        config,
        &options,
        Request::Retry {
            ids: ids.to_vec(),
            route: None,
        },
        &hooks,
        &mut out,
        &mut err,
    )
    .await;
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&err)
    );
    (passed, shown)
}

fn load(config: &std::path::Path) -> Config {
    Config::load(Some(config), std::iter::empty()).expect("the test's config")
}

/// Sessions waiting for a lock in a statement on `table` that ends like
/// `like` (`FOR UPDATE`, `FOR SHARE`).
async fn waiting_on_lock(admin: &Client, table: &str, like: &str) -> i64 {
    let like = format!("%{table}%{like}%");
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE $1",
            &[&like],
        )
        .await
        .unwrap()
        .get(0)
}

/// What the relay's writer asks for: one Kafka event of `aggregateid`.
fn park_request(p: &Parking<'_>, id: &str, position: u64) -> outbox_relay::parking::Request {
    outbox_relay::parking::Request::Event {
        aggregate: Aggregate::new("order", &p.aggregateid),
        event_id: id.to_owned(),
        place: Place {
            commit_lsn: "0/20".parse().unwrap(),
            position,
        },
        parcel: Parcel::Kafka(KafkaRecord {
            topic: p.topic.clone(),
            key: p.aggregateid.clone().into_bytes().into(),
            value: body(id).into(),
            headers: vec![("ce_id".into(), id.as_bytes().to_vec().into())],
        }),
    }
}

/// Runs the writer's `store::write` of `request` on a connection of its
/// own, as the relay's writer task does.
fn spawn_writer(
    config: &Config,
    table: &str,
    request: outbox_relay::parking::Request,
) -> tokio::task::JoinHandle<Vec<Outcome>> {
    let target = AdminTarget::from_config(config, None);
    let table = ParkedTable {
        schema: "public".to_owned(),
        name: table.to_owned(),
    };
    tokio::spawn(async move {
        let client = target.client().await.expect("the writer's connection");
        let prepared = store::Prepared::new(&client, &table)
            .await
            .expect("prepare the writer's statements");
        store::write(&client, &prepared, 0, &[], &[request])
            .await
            .expect("the writer commits")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_parked_during_a_release_is_never_lost_or_reordered() {
    let outbox = set_up().await;
    let config_path = outbox.write_config("");
    let config = load(&config_path);
    let pause = |locked| Hooks {
        pause: Some(Pause {
            locked,
            resume: Arc::new(tokio::sync::Semaphore::new(0)),
        }),
        ..Hooks::default()
    };

    // 1. The writer holds the head shared and parks an event before the
    //    release locks it: the release waits, then sends it in order.
    let a = Parking::new(&outbox, "a");
    let [head, e1, late] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    produce_raw(&outbox.dlq_topic, &[letter(&head, "a", &source(&outbox))]).await;
    a.head(&head, "topic_missing").await;
    a.event(&e1).await;
    let mut writer = pg_admin().await;
    let parking = writer.transaction().await.unwrap();
    parking
        .query(
            &format!(
                "SELECT 1 FROM {} WHERE kind = 'HEAD' AND released_at IS NULL \
                 AND aggregatetype = 'order' AND aggregateid = 'a' FOR SHARE",
                a.table
            ),
            &[],
        )
        .await
        .unwrap();
    parking
        .execute(
            &format!(
                "INSERT INTO {} (aggregatetype, aggregateid, event_id, kind, shard, commit_lsn, \
                 position, sink, topic, record_key, header_names, header_values, body) VALUES \
                 ('order', 'a', $1, 'EVENT', 0, '0/11', 0, 'kafka', $2, 'a', \
                 ARRAY['ce_id', 'bin'], ARRAY[$3, $4]::bytea[], $5)",
                a.table
            ),
            &[
                &late,
                &a.topic,
                &late.as_bytes().to_vec(),
                &BINARY.to_vec(),
                &body(&late),
            ],
        )
        .await
        .unwrap();
    let admin = &outbox.admin;
    let table = outbox.parked_table();
    let ((passed, shown), ()) = tokio::join!(
        retry_with(&config, std::slice::from_ref(&head), Hooks::default()),
        async move {
            wait_until("the release to wait for the writer", DEADLINE, || async {
                waiting_on_lock(admin, &table, "FOR UPDATE").await == 1
            })
            .await;
            parking.commit().await.unwrap();
        }
    );
    assert!(passed, "{shown}");
    assert!(shown.contains("2 parked event(s)"), "{shown}");
    let records = sent(&a.topic, 3).await;
    assert_eq!(ce_ids(&records), [&head, &e1, &late].map(String::as_str));
    exactly_as_parked(&records[2], &late, "a");

    // 2. The release holds the head when the writer comes: the writer
    //    waits, then finds the head released and hands its event back.
    let b = Parking::new(&outbox, "b");
    let [head_b, b1, handed_back] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    produce_raw(&outbox.dlq_topic, &[letter(&head_b, "b", &source(&outbox))]).await;
    b.head(&head_b, "topic_missing").await;
    b.event(&b1).await;
    let (locked, mut on_lock) = tokio::sync::mpsc::unbounded_channel();
    let hooks = pause(locked);
    let resume = hooks.pause.as_ref().unwrap().resume.clone();
    let table = outbox.parked_table();
    let request = park_request(&b, &handed_back, 0);
    let ((passed, shown), outcomes) = tokio::join!(
        retry_with(&config, std::slice::from_ref(&head_b), hooks),
        async {
            on_lock.recv().await.expect("the release locks the head");
            let writing = spawn_writer(&config, &table, request.clone());
            wait_until("the writer to wait for the release", DEADLINE, || async {
                waiting_on_lock(admin, &table, "FOR SHARE").await == 1
            })
            .await;
            resume.add_permits(100);
            writing.await.unwrap()
        }
    );
    assert!(passed, "{shown}");
    let outbox_relay::parking::Request::Event { parcel, .. } = request else {
        unreachable!()
    };
    assert_eq!(outcomes, [Outcome::Released(parcel)], "{shown}");
    assert!(b.rows().await.iter().all(|(_, id, _)| *id != handed_back));

    // 3. The release reaches a DEAD row while the writer waits: the
    //    aggregate stays parked, behind the new head, and the writer's event
    //    is parked behind it, not sent ahead of it.
    let c = Parking::new(&outbox, "c");
    let [head_c, c1, dead_c, c2, parked_c] =
        std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    produce_raw(&outbox.dlq_topic, &[letter(&head_c, "c", &source(&outbox))]).await;
    c.head(&head_c, "topic_missing").await;
    c.event(&c1).await;
    c.dead(&dead_c, "contract_violation").await;
    c.event(&c2).await;
    let (locked, mut on_lock) = tokio::sync::mpsc::unbounded_channel();
    let hooks = pause(locked);
    let resume = hooks.pause.as_ref().unwrap().resume.clone();
    let request = park_request(&c, &parked_c, 1);
    let ((passed, shown), outcomes) = tokio::join!(
        retry_with(&config, std::slice::from_ref(&head_c), hooks),
        async {
            on_lock.recv().await.expect("the release locks the head");
            let writing = spawn_writer(&config, &table, request);
            wait_until("the writer to wait for the release", DEADLINE, || async {
                waiting_on_lock(admin, &table, "FOR SHARE").await == 1
            })
            .await;
            resume.add_permits(100);
            writing.await.unwrap()
        }
    );
    assert!(passed, "{shown}");
    assert_eq!(outcomes, [Outcome::Parked], "{shown}");
    assert_eq!(
        c.rows().await,
        [
            ("HEAD".to_owned(), dead_c.clone(), false),
            ("EVENT".to_owned(), c2.clone(), false),
            ("EVENT".to_owned(), parked_c.clone(), false),
        ]
    );
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_release_resumes_where_it_stopped_in_order() {
    let outbox = set_up().await;
    let config_path = outbox.write_config("");
    let config = load(&config_path);
    let p = Parking::new(&outbox, "o9");
    let head = uuid::Uuid::new_v4().to_string();
    let events = ids(5);
    produce_raw(&outbox.dlq_topic, &[letter(&head, "o9", &source(&outbox))]).await;
    p.head(&head, "topic_missing").await;
    for e in &events {
        p.event(e).await;
    }
    // Stopped after its first batch of two, as if killed there.
    let hooks = Hooks {
        batch: 2,
        stop_after: Some(1),
        ..Hooks::default()
    };
    let (passed, shown) = retry_with(&config, std::slice::from_ref(&head), hooks).await;
    assert!(!passed, "{shown}");
    assert!(
        shown.contains("release stopped after 1 batch(es), 2 event(s) sent"),
        "{shown}"
    );
    let doc = list_json(&config_path, &[]).await;
    assert_eq!(doc["parked"][0]["waiting"], 3, "{doc:#}");
    assert_eq!(
        doc["parked"][0]["release_interrupted"],
        format!("release interrupted: run `dead retry {head}` again").as_str(),
        "{doc:#}"
    );
    let out = dead(&config_path, &["list"]).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("release interrupted"),
        "{}",
        text(&out)
    );

    // Run again: the dead letter is skipped, the queue goes on.
    let out = dead(&config_path, &["retry", &head]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("skipped {head:?}: already replayed")),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains(&format!("released {head:?}: 3 parked event(s)")),
        "{}",
        text(&out)
    );
    let records = sent(&p.topic, 6).await;
    let mut wanted = vec![head.clone()];
    wanted.extend(events.iter().cloned());
    assert_eq!(ce_ids(&records), wanted, "each once, in order");
    assert_eq!(
        list_json(&config_path, &[]).await["parked"],
        serde_json::json!([])
    );
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_dead_letter_cannot_be_retried_keeps_its_queue_until_discarded() {
    let outbox = set_up().await;
    let p = Parking::new(&outbox, "o5");
    let [head, e1] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    let mut not_json = letter(&head, "o5", &source(&outbox));
    not_json.1 = b"not json {".to_vec();
    produce_raw(&outbox.dlq_topic, &[not_json]).await;
    p.head(&head, "payload_not_json").await;
    p.event(&e1).await;
    let config = outbox.write_config("");
    let out = dead(&config, &["retry", &head]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("its parked queue (1 waiting) is not released")
            && stderr.contains(&format!("`outbox-relay dead discard {head}`")),
        "{}",
        text(&out)
    );
    assert_eq!(
        p.rows().await,
        [
            ("HEAD".to_owned(), head.clone(), false),
            ("EVENT".to_owned(), e1.clone(), false)
        ]
    );
    let out = dead(&config, &["discard", &head]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let records = sent(&p.topic, 1).await;
    assert_eq!(ce_ids(&records), [e1.as_str()]);
    assert_eq!(
        list_json(&config, &[]).await["parked"],
        serde_json::json!([])
    );
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_exactly_once_mode_a_release_that_lost_its_commit_sends_nothing_twice() {
    let outbox = set_up().await;
    let checkpoints = crate::support::mixed::checkpoint_topic(&outbox).await;
    let config_path = outbox.write_config_with(
        "",
        &format!("delivery = \"exactly-once\"\ncheckpoint_topic = \"{checkpoints}\""),
        "",
    );
    let config = load(&config_path);
    let p = Parking::new(&outbox, "o7");
    let head = uuid::Uuid::new_v4().to_string();
    let events = ids(4);
    produce_raw(&outbox.dlq_topic, &[letter(&head, "o7", &source(&outbox))]).await;
    p.head(&head, "topic_missing").await;
    for e in &events {
        p.event(e).await;
    }
    // The first batch reaches the broker, its rows' deletion never commits.
    let hooks = Hooks {
        batch: 2,
        lose_commit_of: Some(0),
        ..Hooks::default()
    };
    let (passed, shown) = retry_with(&config, std::slice::from_ref(&head), hooks).await;
    assert!(!passed, "{shown}");
    assert!(shown.contains("commit was lost"), "{shown}");
    assert_eq!(p.rows().await.len(), 5, "every row still parked");

    let out = dead(&config_path, &["retry", &head]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut wanted = vec![head.clone()];
    wanted.extend(events.iter().cloned());
    // One partition: a batch sent twice would show before the last event.
    let records = sent(&p.topic, 5).await;
    assert_eq!(ce_ids(&records), wanted, "each once, in order");
    assert!(
        p.rows()
            .await
            .iter()
            .all(|(kind, _, released)| kind == "HEAD" && *released)
    );
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sends_nothing_the_relay_has_not_confirmed() {
    let outbox = set_up().await;
    let config_path = outbox.write_config("");
    let config = load(&config_path);
    // The head confirmed (below the slot's position), its later event not
    // yet: the relay may still have events of the aggregate before it in
    // its producer, or park it again after a crash.
    let mut p = Parking::new(&outbox, "o11");
    let head = uuid::Uuid::new_v4().to_string();
    let [confirmed, unconfirmed] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    produce_raw(&outbox.dlq_topic, &[letter(&head, "o11", &source(&outbox))]).await;
    p.head(&head, "topic_missing").await;
    p.event(&confirmed).await;
    p.lsn = "FFFF/0".to_owned();
    p.event(&unconfirmed).await;
    let hooks = Hooks {
        unconfirmed_wait: std::time::Duration::from_secs(1),
        ..Hooks::default()
    };
    let (passed, shown) = retry_with(&config, std::slice::from_ref(&head), hooks).await;
    assert!(!passed, "{shown}");
    assert!(
        shown.contains("release stopped after 1 event(s) sent")
            && shown.contains("is not confirmed past the rest"),
        "{shown}"
    );
    let records = sent(&p.topic, 2).await;
    assert_eq!(
        ce_ids(&records),
        [head.as_str(), confirmed.as_str()],
        "the head, then only what the slot is past"
    );
    assert_eq!(
        p.rows().await,
        [
            ("HEAD".to_owned(), head.clone(), false),
            ("EVENT".to_owned(), unconfirmed.clone(), false),
        ],
        "the unconfirmed event stays parked behind the head"
    );
    outbox.drop_all().await;
}

/// Places compare as LSNs, not as their text: an event committed at 0/9
/// goes before one at 0/10 (the text sorts "0/10" first). Where a cluster's
/// WAL grows a digit, the text's order sent an aggregate's first events last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sends_in_lsn_order_where_the_text_of_the_lsns_sorts_otherwise() {
    let outbox = set_up().await;
    let config = outbox.write_config("");
    let mut p = Parking::new(&outbox, "o12");
    let [head, earlier, later] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    produce_raw(&outbox.dlq_topic, &[letter(&head, "o12", &source(&outbox))]).await;
    p.lsn = "0/8".to_owned();
    p.head(&head, "topic_missing").await;
    p.lsn = "0/9".to_owned();
    p.event(&earlier).await;
    p.lsn = "0/10".to_owned();
    p.event(&later).await;
    let out = dead(&config, &["retry", &head]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let records = sent(&p.topic, 3).await;
    assert_eq!(
        ce_ids(&records),
        [head.as_str(), earlier.as_str(), later.as_str()],
        "in commit order"
    );
    outbox.drop_all().await;
}
