//! `outbox-relay dead list | retry | discard` as a user runs them, on both
//! sinks: dead letters the relay really wrote to the Kafka dead-letter
//! topic (an event refused for a missing topic republished to its original
//! topic once and only once; a payload that is not JSON and one too large
//! to keep its payload refused), and DEAD rows of the delivery table
//! (`sql/outbox_delivery.sql`) made PENDING or deleted one by one. Two
//! retries at once send each event once; a retry killed mid-way loses
//! nothing; relays sharing a dead-letter topic each take their own. Ids,
//! routes and schema names carry quotes, `%` and non-ASCII text; keys and
//! headers bytes that are not UTF-8; ids that do not exist are reported and
//! fail the command.

use std::collections::HashMap;
use std::process::Output;

use crate::support::cli::{cli, shown as text};
use crate::support::*;

/// `outbox-relay dead <args> --config <config>`.
async fn dead(config: &std::path::Path, args: &[&str]) -> Output {
    let mut all = vec!["dead".to_owned()];
    all.extend(args.iter().map(|s| (*s).to_owned()));
    all.push("--config".into());
    all.push(config.display().to_string());
    cli(all).await
}

/// `dead list --json [args]`: the document, after checking it exited 0.
async fn list_json(config: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["list", "--json"];
    all.extend(args);
    let out = dead(config, &all).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

fn by_id(doc: &serde_json::Value) -> HashMap<String, serde_json::Value> {
    doc["dead_letters"]
        .as_array()
        .expect("dead_letters array")
        .iter()
        .map(|e| (e["id"].as_str().expect("id").to_owned(), e.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_dead_letters_are_republished_to_their_topic_once_and_discarded_ones_hidden() {
    // A text payload column lets a service write something that is not JSON.
    let outbox = TestOutbox::create("text").await;
    let topic = outbox.topic("order");
    let ghost = outbox.topic("ghost");
    outbox.create_topic(&topic, 3).await;
    outbox.create_topic(&outbox.dlq_topic, 2).await;
    let mut settings = outbox.settings();
    settings.sink.properties.extend([
        // Too small for the big row even as a dead letter: it goes headers only.
        ("message.max.bytes".to_string(), "20000".to_string()),
        ("allow.auto.create.topics".to_string(), "false".to_string()),
        (
            "topic.metadata.propagation.max.ms".to_string(),
            "2000".to_string(),
        ),
    ]);
    settings.on_unroutable = outbox_relay::sink::OnUnroutable::DeadLetter;
    // Each row its own dead letter, the aggregate's good event delivered
    // (after_dead_letter = "skip"): the dead letters are what this test
    // reads; parked heads are tests/it/dead_cli/parked.rs's.
    settings.webhooks.routes = settings.webhooks.routes.clone().with_after_dead_letter(
        outbox_relay::routes::AfterDeadLetter::Skip,
        &[],
        &[],
    );
    settings.parking = None;
    let relay = Relay::in_process(settings);
    let t = &outbox.table;
    let [not_json, refused, big_id, good] =
        std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    let key = "o'1%é";
    let big = format!("{{\"blob\":\"{}\"}}", "x".repeat(50_000));
    outbox
        .admin
        .batch_execute(&format!(
            "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{not_json}', 'order', 'o''1%é', 'Placed', 'not json: '' % é ☃ \\ {{');
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{refused}', 'ghost', 'o''1%é', 'Haunted', '{{\"boo\": \"é ☃\"}}');
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{big_id}', 'order', 'o2', 'Placed', '{big}');
             INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) VALUES ('{good}', 'order', 'o''1%é', 'Placed', '{{\"ok\":true}}');"
        ))
        .await
        .unwrap();
    // The relay may write a dead letter twice (it replays after the topic
    // it found missing): wait for all three events, however many copies.
    let wanted = [not_json.clone(), refused.clone(), big_id.clone()];
    let dlq = consume(&outbox.dlq_topic, DEADLINE, move |r| {
        wanted
            .iter()
            .all(|id| r.iter().any(|x| x.header("id") == Some(id.as_str())))
    })
    .await;
    let dead_letter: HashMap<&str, &Received> =
        dlq.iter().map(|r| (r.header("id").unwrap(), r)).collect();
    let good_event = consume(&topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(good_event[0].header("ce_id"), Some(good.as_str()));
    relay.stop().await.expect("graceful stop");

    // As the superuser, with the replay record init makes.
    replay_record(&outbox.admin, "public").await;
    let config = outbox.write_config_with_url(
        &env("PG_URL"),
        "[kafka.properties]\n\"allow.auto.create.topics\" = \"false\"",
    );
    // list: all three, with their topic and reason; the big one cannot be retried.
    let doc = list_json(&config, &[]).await;
    let entries = by_id(&doc);
    assert_eq!(entries.len(), 3, "{doc:#}");
    assert_eq!(entries[&not_json]["sink"], "kafka");
    assert_eq!(entries[&not_json]["route"], topic.as_str());
    assert_eq!(entries[&not_json]["reason_code"], "payload_not_json");
    assert_eq!(entries[&not_json]["state"], "dead");
    assert_eq!(entries[&not_json]["source"], format!("public.{t}").as_str());
    // Sent again, its payload would be a lie about its content type.
    assert_eq!(entries[&not_json]["retryable"], false);
    assert!(
        entries[&not_json]["not_retryable"]
            .as_str()
            .is_some_and(|why| why.starts_with("its payload is not valid JSON")),
        "{doc:#}"
    );
    assert_eq!(entries[&refused]["route"], ghost.as_str());
    assert_eq!(entries[&refused]["reason_code"], "topic_missing");
    assert_eq!(entries[&big_id]["retryable"], false);
    let text_list = dead(&config, &["list"]).await;
    assert_eq!(text_list.status.code(), Some(0), "{}", text(&text_list));
    let shown = String::from_utf8_lossy(&text_list.stdout);
    for id in [&not_json, &refused, &big_id] {
        assert!(shown.contains(id.as_str()), "{shown}");
    }
    assert!(shown.contains("3 dead letters (kafka: 3)"), "{shown}");
    assert!(
        shown.contains(&format!(
            "cannot retry \"{big_id}\": its payload was not kept"
        )),
        "{shown}"
    );

    // The operator fixes what refused the ghost event (its topic), nothing
    // else, and retries everything: it is republished; the one whose
    // payload was not kept and the one whose payload is not JSON are
    // refused by id, saying what to do, and the command fails.
    // (As many partitions as the order topic: the same key lands on the
    // same partition number.)
    outbox.create_topic(&ghost, 3).await;
    let out = dead(&config, &["retry", "--all"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&big_id) && stderr.contains("not kept"),
        "{}",
        text(&out)
    );
    assert!(
        stderr.contains(&format!(
            "{not_json:?} cannot be retried: its payload is not valid JSON"
        )) && stderr.contains("content-type: application/json")
            && stderr.contains("insert the row again")
            && stderr.contains("dead discard"),
        "{}",
        text(&out)
    );
    assert!(
        !stderr.contains("not json: "),
        "a problem line never quotes the payload: {}",
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains(&format!("republished \"{not_json}\"")),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains(&format!("republished \"{refused}\"")),
        "{}",
        text(&out)
    );

    // A consumer of the original topic sees the event: same id, key and
    // payload bytes, on the partition the relay uses for that key.
    let ghosts = consume(&ghost, DEADLINE, |r| !r.is_empty()).await;
    let again = &ghosts[0];
    let original = dead_letter[refused.as_str()];
    assert_eq!(again.header("ce_id"), Some(refused.as_str()));
    assert_eq!(again.key.as_deref(), Some(key.as_bytes()));
    assert_eq!(again.value, original.value, "payload byte for byte");
    assert_eq!(
        again.value.as_deref(),
        Some("{\"boo\": \"é ☃\"}".as_bytes())
    );
    assert_eq!(again.header("id"), Some(refused.as_str()));
    assert_eq!(again.header("ce_type"), Some("Haunted"));
    assert_eq!(again.header("ce_source"), Some("/orders-service"));
    assert_eq!(again.header("content-type"), Some("application/json"));
    assert_eq!(again.header("dlq_reason"), None);
    assert_eq!(
        again.partition, good_event[0].partition,
        "same key, same partition as the relay's own event"
    );

    // discard hides those that cannot be retried; list --all still shows them.
    let out = dead(&config, &["discard", &big_id, &not_json]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let doc = list_json(&config, &[]).await;
    assert_eq!(by_id(&doc).len(), 0, "{doc:#}");
    let all = by_id(&list_json(&config, &["--all"]).await);
    assert_eq!(all[&big_id]["state"], "discarded");
    assert_eq!(all[&not_json]["state"], "discarded");
    assert_eq!(all[&refused]["state"], "replayed");

    // A second retry republishes nothing.
    let before = topic_len(&topic).await + topic_len(&ghost).await;
    let out = dead(&config, &["retry", "--all"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 done, 0 failed"),
        "{}",
        text(&out)
    );
    let out = dead(&config, &["retry", &refused]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already replayed"),
        "{}",
        text(&out)
    );
    assert_eq!(
        topic_len(&topic).await + topic_len(&ghost).await,
        before,
        "nothing republished twice"
    );
    let republished = consume_to_end(&ghost).await;
    let copies = republished
        .iter()
        .filter(|r| r.header("ce_id") == Some(refused.as_str()))
        .count();
    assert_eq!(copies, 1);
    let orders = consume_to_end(&topic).await;
    assert!(
        orders
            .iter()
            .all(|r| r.header("ce_id") != Some(not_json.as_str())),
        "the payload that is not JSON never went out as JSON"
    );
    outbox.drop_all().await;
}

/// A schema of the test's own holding the delivery table, made with
/// `sql/outbox_delivery.sql` as the contract says, and the replay record.
/// Its name needs quoting (`%`, non-ASCII); `postgres.table` refuses
/// quotes, so it has none.
async fn delivery_schema(outbox: &TestOutbox) -> String {
    let schema = format!("dl_é%_{}", random_name("s"));
    let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
    let contract = include_str!("../../sql/outbox_delivery.sql");
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE SCHEMA {quoted}; BEGIN; SET LOCAL search_path TO {quoted}; {contract}; COMMIT;"
        ))
        .await
        .expect("create the delivery table");
    replay_record(&outbox.admin, &schema).await;
    schema
}

/// The outbox config for the CLI with the outbox table in `schema` (so the
/// delivery table is looked for there), as the superuser.
fn config_in_schema(outbox: &TestOutbox, schema: &str) -> std::path::PathBuf {
    let path = outbox.write_config_with_url(&env("PG_URL"), "");
    let text = std::fs::read_to_string(&path).unwrap();
    let line = format!("table = \"public.{}\"", outbox.table);
    assert!(text.contains(&line), "config layout changed");
    let text = text.replace(
        &line,
        &format!(
            "table = {}",
            toml_string(&format!("{schema}.{}", outbox.table))
        ),
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_rows_of_the_delivery_table_are_retried_and_discarded_one_by_one() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let schema = delivery_schema(&outbox).await;
    let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
    let table = format!("{quoted}.outbox_delivery");
    let rows = [
        ("ev'1", "billing'é", "DEAD", 5, "HTTP 500 from billing"),
        ("ev%2", "ship%", "DEAD", 3, "refused: 410"),
        ("évé☃3", "billing'é", "DEAD", 5, "timeout"),
        ("ev4", "billing'é", "PENDING", 1, "HTTP 503"),
    ];
    for (id, route, status, attempts, error) in rows {
        outbox
            .admin
            .execute(
                &format!(
                    "INSERT INTO {table} (event_id, route, aggregate_key, status, attempts, \
                     max_attempts, next_attempt_at, last_error, last_status, headers, body) \
                     VALUES ($1, $2, 'k', $3, $4, 5, now() + interval '1 hour', $5, 500, \
                     '{{\"ce-id\":\"x\"}}', '\\x00ff'::bytea)"
                ),
                &[&id, &route, &status, &attempts, &error],
            )
            .await
            .expect("insert a delivery row");
    }
    let config = config_in_schema(&outbox, &schema);

    let doc = list_json(&config, &[]).await;
    let entries = by_id(&doc);
    assert_eq!(entries.len(), 3, "the three DEAD rows only: {doc:#}");
    let first = &entries["ev'1"];
    assert_eq!(first["sink"], "table");
    assert_eq!(first["route"], "billing'é");
    assert_eq!(first["reason"], "HTTP 500 from billing");
    assert_eq!(first["attempts"], 5);
    assert_eq!(first["max_attempts"], 5);
    assert_eq!(first["last_status"], 500);
    assert_eq!(first["state"], "dead");
    assert!(first["age_seconds"].as_f64().is_some_and(|a| a >= 0.0));
    assert_eq!(entries["ev%2"]["attempts"], 3);
    assert!(entries.contains_key("évé☃3"));
    let ship = by_id(&list_json(&config, &["--route", "ship%"]).await);
    assert_eq!(ship.keys().collect::<Vec<_>>(), ["ev%2"]);

    let state = |id: &'static str| {
        let admin = &outbox.admin;
        let table = table.clone();
        async move {
            admin
                .query_opt(
                    &format!(
                        "SELECT status, attempts, next_attempt_at <= now() FROM {table} WHERE event_id = $1"
                    ),
                    &[&id],
                )
                .await
                .unwrap()
                .map(|r| (r.get::<_, String>(0), r.get::<_, i32>(1), r.get::<_, bool>(2)))
        }
    };

    // retry ID: exactly that row becomes PENDING, due now, no attempts.
    let out = dead(&config, &["retry", "ev'1"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(state("ev'1").await, Some(("PENDING".into(), 0, true)));
    assert_eq!(state("ev%2").await, Some(("DEAD".into(), 3, false)));
    assert_eq!(state("évé☃3").await, Some(("DEAD".into(), 5, false)));
    assert_eq!(state("ev4").await, Some(("PENDING".into(), 1, false)));

    // `%` is an id like any other, not a pattern: it names nothing.
    let out = dead(&config, &["discard", "%"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no dead letter has id \"%\""),
        "{}",
        text(&out)
    );
    // discard ID: exactly that row is deleted.
    let out = dead(&config, &["discard", "ev%2"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(state("ev%2").await, None);
    assert_eq!(state("évé☃3").await, Some(("DEAD".into(), 5, false)));
    assert_eq!(state("ev4").await, Some(("PENDING".into(), 1, false)));

    // Again: skipped, as what was retried is, not a failure.
    for (verb, id, was) in [
        ("discard", "ev%2", "discarded"),
        ("retry", "ev'1", "replayed"),
    ] {
        let out = dead(&config, &[verb, id]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("skipped {id:?}: already {was}"))
                && stdout.contains("1 done, 0 failed"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(state("ev'1").await, Some(("PENDING".into(), 0, true)));

    // Unknown ids and rows that are not DEAD are reported and fail the
    // command; the known one among them is still retried.
    let out = dead(&config, &["retry", "nope", "ev4", "évé☃3"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no dead letter has id \"nope\""),
        "{stderr}"
    );
    assert!(stderr.contains("no dead letter has id \"ev4\""), "{stderr}");
    assert!(stderr.contains("dead list --all"), "{stderr}");
    assert_eq!(state("évé☃3").await, Some(("PENDING".into(), 0, true)));
    assert_eq!(state("ev4").await, Some(("PENDING".into(), 1, false)));
    assert_eq!(by_id(&list_json(&config, &[]).await).len(), 0);
    // --all shows the rows retried and discarded, with their state; the
    // PENDING row nobody retried is no dead letter.
    let all = by_id(&list_json(&config, &["--all"]).await);
    assert_eq!(all.len(), 3, "{all:#?}");
    assert_eq!(all["ev'1"]["state"], "replayed");
    assert_eq!(all["ev'1"]["route"], "billing'é");
    assert_eq!(all["ev%2"]["state"], "discarded");
    assert_eq!(all["évé☃3"]["state"], "replayed");
    assert!(all["ev%2"]["state_at"].is_string(), "{all:#?}");
    let text_all = dead(&config, &["list", "--all"]).await;
    assert_eq!(text_all.status.code(), Some(0), "{}", text(&text_all));
    let shown = String::from_utf8_lossy(&text_all.stdout);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("ev%2 ") && l.ends_with("discarded")),
        "{shown}"
    );

    outbox
        .admin
        .batch_execute(&format!("DROP SCHEMA {quoted} CASCADE"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_topic_or_delivery_table_says_what_to_fix() {
    let outbox = TestOutbox::create("jsonb").await;
    // An empty schema of its own: no delivery table, no replay record.
    let schema = random_name("empty");
    outbox
        .admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let config = config_in_schema(&outbox, &schema);
    let out = dead(&config, &["list"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "the dead-letter topic {:?} does not exist",
            outbox.dlq_topic
        )),
        "{stderr}"
    );
    assert!(stderr.contains("kafka.dlq_topic"), "{stderr}");
    assert!(
        stderr.contains(&format!("{schema}.outbox_delivery does not exist"))
            && stderr.contains("init"),
        "{stderr}"
    );
    let out = dead(&config, &["retry", "x'y"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no dead letter has id \"x'y\""), "{stderr}");
    assert!(stderr.contains("run `outbox-relay init`"), "{stderr}");
    // Neither command created anything.
    assert_eq!(topic_len(&outbox.dlq_topic).await, 0);
    let tables: i64 = outbox
        .admin
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "list and a failed retry create no table");
    outbox
        .admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

/// A record to write as it is: key, value, headers.
type RawRecord<'a> = (Vec<u8>, Vec<u8>, Vec<(&'a str, Vec<u8>)>);

/// Writes `records` to `topic` as they are, bytes that are not UTF-8
/// included.
async fn produce_raw(topic: &str, records: &[RawRecord<'_>]) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for (key, value, headers) in records {
        let mut owned = OwnedHeaders::new();
        for (name, value) in headers {
            owned = owned.insert(Header {
                key: name,
                value: Some(value.as_slice()),
            });
        }
        producer
            .send(
                FutureRecord::to(topic)
                    .key(key.as_slice())
                    .payload(value.as_slice())
                    .headers(owned),
                std::time::Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("produce a dead letter");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_bytes_survive_the_republish_and_a_dead_letter_without_an_id_goes_by_location() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 1).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    // A dead letter as an older relay wrote it (no dlq_original_topic: the
    // topic comes from kafka.topic), with bytes that are not UTF-8 in its
    // key and a header column, a JSON payload as a service spaced it, and
    // one that has no id at all.
    let id = "ïd '%\"\\ ☃";
    let key: Vec<u8> = vec![0xff, 0x00, b'k', 0xc3];
    let value: Vec<u8> = " {\"s\" :\t\"\\u0000 é ☃ ' % \\\" \\\\\",\n \"n\": 1.50e0 }\r\n"
        .as_bytes()
        .to_vec();
    let blob: Vec<u8> = vec![0x80, 0x00, 0xfe];
    let source = format!("public.{}", outbox.table);
    produce_raw(
        &outbox.dlq_topic,
        &[
            (
                key.clone(),
                value.clone(),
                vec![
                    ("dlq_reason", b"topic missing".to_vec()),
                    ("dlq_reason_code", b"topic_missing".to_vec()),
                    ("lsn", b"0/16B3748".to_vec()),
                    ("source_table", source.as_bytes().to_vec()),
                    ("id", id.as_bytes().to_vec()),
                    ("aggregatetype", b"order".to_vec()),
                    ("type", b"Placed".to_vec()),
                    ("blob", blob.clone()),
                ],
            ),
            (
                b"k2".to_vec(),
                b"{}".to_vec(),
                vec![
                    ("dlq_reason", b"column id is NULL".to_vec()),
                    ("source_table", source.as_bytes().to_vec()),
                    ("aggregatetype", b"order".to_vec()),
                ],
            ),
        ],
    )
    .await;
    replay_record(&outbox.admin, "public").await;
    let config = outbox.write_config_with_url(&env("PG_URL"), "");
    let anonymous = format!("{}/0/1", outbox.dlq_topic);
    let entries = by_id(&list_json(&config, &[]).await);
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert_eq!(entries[id]["route"], topic.as_str());
    assert_eq!(entries[&anonymous]["retryable"], false);

    // Named by its location, the one without an id is refused by it.
    let out = dead(&config, &["retry", id, &anonymous]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{anonymous:?} cannot be retried"))
            && stderr.contains("no readable event id"),
        "{stderr}"
    );
    let received = consume(&topic, DEADLINE, |r| !r.is_empty()).await;
    assert_eq!(received.len(), 1);
    let event = &received[0];
    assert_eq!(
        event.key.as_deref(),
        Some(key.as_slice()),
        "key byte for byte"
    );
    assert_eq!(
        event.value.as_deref(),
        Some(value.as_slice()),
        "value byte for byte"
    );
    assert_eq!(
        event.headers.get("blob"),
        Some(&blob),
        "header byte for byte"
    );
    assert_eq!(event.header("ce_id"), Some(id));
    assert_eq!(event.header("id"), Some(id));
    assert_eq!(event.headers.get("dlq_reason"), None);
    assert_eq!(
        event.header("dlq_replayed_from"),
        Some(format!("{}/0/0", outbox.dlq_topic).as_str())
    );

    // Discarded by its location, it is hidden; nothing is left to list.
    let out = dead(&config, &["discard", &anonymous]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(by_id(&list_json(&config, &[]).await).len(), 0);
    let all = by_id(&list_json(&config, &["--all"]).await);
    assert_eq!(all[&anonymous]["state"], "discarded");
    assert_eq!(all[id]["state"], "replayed");
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_only_write_the_replay_record_can_retry_and_discard() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 1).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let [one, two] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    // The replay record made once by an owner, as docs/dead-letters.md
    // says; the relay's role may read and insert, not create tables.
    let schema = random_name("replay");
    let source = format!("{schema}.{}", outbox.table);
    produce_raw(
        &outbox.dlq_topic,
        &[kafka_letter(&one, &source), kafka_letter(&two, &source)],
    )
    .await;
    let replay = outbox_relay::admin::dead::table::replay_table(&schema);
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; GRANT USAGE ON SCHEMA {schema} TO relay;
             {create}; GRANT SELECT, INSERT ON {table} TO relay;",
            create = outbox_relay::admin::dead::table::create_replay_sql(&replay),
            table = replay.sql(),
        ))
        .await
        .unwrap();
    let path = outbox.write_config("");
    let text_config = std::fs::read_to_string(&path).unwrap();
    let line = format!("table = \"public.{}\"", outbox.table);
    let text_config = text_config.replace(&line, &format!("table = \"{schema}.{}\"", outbox.table));
    std::fs::write(&path, text_config).unwrap();

    let out = dead(&path, &["retry", &one]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = dead(&path, &["discard", &two]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let all = by_id(&list_json(&path, &["--all"]).await);
    assert_eq!(all[&one]["state"], "replayed");
    assert_eq!(all[&two]["state"], "discarded");
    outbox
        .admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

/// `config` with the outbox table moved to `schema` (so the replay record
/// is looked for there), keeping its role.
fn move_to_schema(config: &std::path::Path, outbox: &TestOutbox, schema: &str) {
    let text = std::fs::read_to_string(config).unwrap();
    let line = format!("table = \"public.{}\"", outbox.table);
    assert!(text.contains(&line), "config layout changed");
    let text = text.replace(&line, &format!("table = \"{schema}.{}\"", outbox.table));
    std::fs::write(config, text).unwrap();
}

/// A Kafka dead letter as the relay writes it, with an event id, from the
/// outbox table `source` (`schema.name`).
fn kafka_letter(id: &str, source: &str) -> RawRecord<'static> {
    (
        b"k".to_vec(),
        b"{}".to_vec(),
        vec![
            ("dlq_reason", b"topic missing".to_vec()),
            ("dlq_reason_code", b"topic_missing".to_vec()),
            ("source_table", source.as_bytes().to_vec()),
            ("id", id.as_bytes().to_vec()),
            ("aggregatetype", b"order".to_vec()),
            ("type", b"Placed".to_vec()),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_makes_the_replay_record_the_relay_role_then_uses() {
    // Nothing set up: init creates the outbox table, publication and slot
    // in a schema of the test's own, where the replay record goes too.
    let outbox = TestOutbox::from_parts(
        services::shared().await,
        pg_admin().await,
        random_name("outbox"),
        random_name("pub"),
        random_name("slot"),
    );
    let schema = random_name("replay");
    outbox
        .admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let id = uuid::Uuid::new_v4().to_string();
    let source = format!("{schema}.{}", outbox.table);
    produce_raw(&outbox.dlq_topic, &[kafka_letter(&id, &source)]).await;
    // The relay's role, as the relay runs.
    let config = outbox.write_config("");
    move_to_schema(&config, &outbox, &schema);
    let config_arg = config.display().to_string();
    let init = |extra: &[&str]| {
        let mut args: Vec<String> = [
            "init",
            "--config",
            &config_arg,
            "--create-table",
            "--grant",
            "relay",
            "--admin-url",
            &env("PG_URL"),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        cli(args)
    };
    let replay_exists = || async {
        outbox
            .admin
            .query_one(
                "SELECT to_regclass(quote_ident($1) || '.outbox_dead_replay') IS NOT NULL",
                &[&schema],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    };

    // Before init, retry and discard change nothing and say what to run.
    let out = dead(&config, &["discard", &id]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{id:?}: not discarded"))
            && stderr.contains("run `outbox-relay init`"),
        "{}",
        text(&out)
    );
    assert!(!replay_exists().await, "the dead commands create no table");
    // check warns, naming init.
    let check = |config: String| {
        cli(vec![
            "check".into(),
            "--config".into(),
            config,
            "--json".into(),
        ])
    };
    let item = |out: &Output| -> serde_json::Value {
        let items: Vec<serde_json::Value> =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)));
        items
            .into_iter()
            .find(|i| i["name"] == "postgres.replay_table")
            .unwrap_or_else(|| panic!("no replay item: {}", text(out)))
    };
    let before = item(&check(config_arg.clone()).await);
    assert_eq!(before["status"], "warn", "{before:#}");
    assert!(
        before["fix"]
            .as_str()
            .is_some_and(|f| f.contains("outbox-relay init")),
        "{before:#}"
    );

    // --dry-run shows the steps and does nothing.
    let dry = init(&["--dry-run"]).await;
    assert!(dry.status.success(), "{}", text(&dry));
    let stdout = String::from_utf8_lossy(&dry.stdout);
    let quoted = format!("\"{schema}\".\"outbox_dead_replay\"");
    assert!(
        stdout.contains(&format!("CREATE TABLE IF NOT EXISTS {quoted} ("))
            && stdout.contains(&format!(
                "GRANT SELECT, INSERT, UPDATE ON {quoted} TO \"relay\";"
            )),
        "{}",
        text(&dry)
    );
    assert!(!replay_exists().await, "--dry-run changes nothing");

    let first = init(&[]).await;
    assert!(first.status.success(), "{}", text(&first));
    let stdout = String::from_utf8_lossy(&first.stdout);
    for step in [
        format!("done: create the dead-letter replay record {schema}.outbox_dead_replay"),
        format!("done: grant relay SELECT, INSERT, UPDATE on {schema}.outbox_dead_replay"),
    ] {
        assert!(stdout.contains(&step), "{step}: {}", text(&first));
    }
    // Again: in place, nothing changed.
    let second = init(&[]).await;
    assert!(second.status.success(), "{}", text(&second));
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(
        stdout.contains("nothing to do")
            && !stdout.contains("done:")
            && stdout.contains(&format!(
                "in place: dead-letter replay record {schema}.outbox_dead_replay"
            )),
        "{}",
        text(&second)
    );
    let after = item(&check(config_arg.clone()).await);
    assert_eq!(after["status"], "ok", "{after:#}");

    // The relay's role discards, lists, and sees it discarded.
    let out = dead(&config, &["discard", &id]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = dead(&config, &["list"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 dead letters"),
        "{}",
        text(&out)
    );
    let all = by_id(&list_json(&config, &["--all"]).await);
    assert_eq!(all[&id]["state"], "discarded");
    let out = dead(&config, &["discard", &id]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already discarded"),
        "{}",
        text(&out)
    );

    let _ = outbox
        .admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&outbox.slot])
        .await;
    outbox
        .admin
        .batch_execute(&format!(
            "DROP PUBLICATION IF EXISTS {}; DROP SCHEMA {schema} CASCADE",
            outbox.publication
        ))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_that_cannot_be_retried_says_why_even_without_a_replay_record() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let id = uuid::Uuid::new_v4().to_string();
    // A schema without the replay record, the relay's role.
    let schema = random_name("noreplay");
    let mut truncated = kafka_letter(&id, &format!("{schema}.{}", outbox.table));
    truncated.1 = Vec::new();
    truncated.2.extend([
        ("dlq_truncated", b"true".to_vec()),
        ("dlq_payload_size", b"2000000".to_vec()),
        ("dlq_payload_sha256", b"ab12".to_vec()),
    ]);
    produce_raw(&outbox.dlq_topic, &[truncated]).await;
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; GRANT USAGE ON SCHEMA {schema} TO relay"
        ))
        .await
        .unwrap();
    let config = outbox.write_config("");
    move_to_schema(&config, &outbox, &schema);
    let out = dead(&config, &["retry", &id]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{id:?} cannot be retried: its payload was not kept"
        )),
        "{}",
        text(&out)
    );
    assert!(!stderr.contains("replay record"), "{}", text(&out));
    outbox
        .admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_goes_with_all_only() {
    // Refused before the config is read: the file need not exist.
    for args in [
        &["dead", "retry", "--route", "r", "some-id"][..],
        &["dead", "retry", "--route", "r"][..],
    ] {
        let mut all: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        all.extend(["--config".to_owned(), "/nonexistent/relay.toml".to_owned()]);
        let out = cli(all).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--route") && !stderr.contains("configuration"),
            "{args:?}: {}",
            text(&out)
        );
    }
}

/// Each of `ids` as the one `stdout` of `outputs` says was sent (`sent`
/// before it: `republished` or `retried`), the other saying it skipped it:
/// panics naming the first id that is not so.
fn each_done_by_one(ids: &[String], outputs: [&Output; 2], sent: &str) {
    let stdout: Vec<String> = outputs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .collect();
    for id in ids {
        let did: Vec<bool> = stdout
            .iter()
            .map(|s| s.contains(&format!("{sent} {id:?}")))
            .collect();
        let skipped: Vec<bool> = stdout
            .iter()
            .map(|s| s.contains(&format!("skipped {id:?}")))
            .collect();
        assert!(
            (did == [true, false] && skipped == [false, true])
                || (did == [false, true] && skipped == [true, false]),
            "{id}: {sent} {did:?}, skipped {skipped:?}\n{}\n{}",
            text(outputs[0]),
            text(outputs[1])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_retries_at_once_republish_each_event_once() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    outbox.create_topic(&outbox.dlq_topic, 2).await;
    let source = format!("public.{}", outbox.table);
    let ids: Vec<String> = (0..20).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let letters: Vec<RawRecord<'_>> = ids.iter().map(|id| kafka_letter(id, &source)).collect();
    produce_raw(&outbox.dlq_topic, &letters).await;
    replay_record(&outbox.admin, "public").await;
    let config = outbox.write_config("");

    // Two operators (or a script run twice) retry everything at once.
    let (first, second) = tokio::join!(
        dead(&config, &["retry", "--all"]),
        dead(&config, &["retry", "--all"])
    );
    for out in [&first, &second] {
        assert_eq!(out.status.code(), Some(0), "{}", text(out));
    }
    // Both have exited: every record they were acknowledged is there.
    let events = consume_to_end(&topic).await;
    let mut sent: HashMap<String, usize> = HashMap::new();
    for event in &events {
        *sent
            .entry(event.header("ce_id").unwrap_or("").to_owned())
            .or_default() += 1;
    }
    for id in &ids {
        assert_eq!(sent.get(id), Some(&1), "{id} republished once: {sent:?}");
    }
    assert_eq!(events.len(), ids.len(), "{sent:?}");
    // Each says what it did per id: one republished it, the other skipped it.
    each_done_by_one(&ids, [&first, &second], "republished");
    let all = by_id(&list_json(&config, &["--all"]).await);
    assert!(
        ids.iter().all(|id| all[id]["state"] == "replayed"),
        "{all:#?}"
    );
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_retries_of_dead_rows_at_once_make_each_pending_once() {
    let outbox = TestOutbox::create("jsonb").await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let schema = delivery_schema(&outbox).await;
    let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
    let table = format!("{quoted}.outbox_delivery");
    let ids: Vec<String> = (0..10).map(|i| format!("row'{i}")).collect();
    for id in &ids {
        outbox
            .admin
            .execute(
                &format!(
                    "INSERT INTO {table} (event_id, route, aggregate_key, status, attempts, \
                     max_attempts, next_attempt_at, last_error, headers, body) \
                     VALUES ($1, 'billing', 'k', 'DEAD', 5, 5, now() + interval '1 hour', \
                     'HTTP 500', '{{}}', '\\x00'::bytea)"
                ),
                &[id],
            )
            .await
            .expect("insert a DEAD row");
    }
    let config = config_in_schema(&outbox, &schema);
    let (first, second) = tokio::join!(
        dead(&config, &["retry", "--all"]),
        dead(&config, &["retry", "--all"])
    );
    for out in [&first, &second] {
        assert_eq!(out.status.code(), Some(0), "{}", text(out));
    }
    each_done_by_one(&ids, [&first, &second], "retried");
    let pending: i64 = outbox
        .admin
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE status = 'PENDING' AND attempts = 0"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, ids.len() as i64);
    outbox
        .admin
        .batch_execute(&format!("DROP SCHEMA {quoted} CASCADE"))
        .await
        .unwrap();
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_killed_while_the_broker_has_not_taken_the_events_loses_none() {
    let outbox = TestOutbox::create("jsonb").await;
    // Their topic does not exist yet, and the producer waits for it (up to
    // two minutes) rather than have the broker create it: the retry holds
    // its claim meanwhile.
    let topic = outbox.topic("order");
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let source = format!("public.{}", outbox.table);
    let ids: Vec<String> = (0..5).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let letters: Vec<RawRecord<'_>> = ids.iter().map(|id| kafka_letter(id, &source)).collect();
    produce_raw(&outbox.dlq_topic, &letters).await;
    replay_record(&outbox.admin, "public").await;
    let config = outbox.write_config_with(
        "",
        "message_timeout_ms = 120000",
        "[kafka.properties]\n\"allow.auto.create.topics\" = \"false\"\n\
         \"topic.metadata.propagation.max.ms\" = \"120000\"",
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["dead", "retry", "--all", "--config"])
        .arg(&config)
        .env_remove("OUTBOX_RELAY_ADMIN_URL")
        .env_remove("OUTBOX_RELAY_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start dead retry");
    // Its claim: a session in a transaction, holding the dead letters'
    // advisory locks (the five letters are offsets 0 to 4 of partition 0;
    // their topic is named only in the statements' parameters).
    let claiming = || {
        use outbox_relay::admin::dead::table::{LOCK_CLASS, lock_keys};
        let admin = &outbox.admin;
        let places: Vec<_> = (0..5).map(|o| (outbox.dlq_topic.clone(), 0, o)).collect();
        // pg_locks shows a key as the oid of its 32 bits.
        let keys: Vec<i64> = lock_keys(&places)
            .into_iter()
            .map(|k| i64::from(k as u32))
            .collect();
        let class = i64::from(LOCK_CLASS as u32);
        async move {
            admin
                .query_one(
                    "SELECT count(DISTINCT a.pid) FROM pg_stat_activity a \
                     JOIN pg_locks l ON l.pid = a.pid \
                     WHERE a.state = 'idle in transaction' AND l.locktype = 'advisory' \
                       AND l.granted AND l.objsubid = 2 AND l.classid::int8 = $1 \
                       AND l.objid::int8 = ANY($2::int8[])",
                    &[&class, &keys],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    wait_until("the retry to hold its claim", DEADLINE, || async {
        claiming().await == 1
    })
    .await;
    let recorded = || {
        let admin = &outbox.admin;
        let dlq = outbox.dlq_topic.clone();
        async move {
            admin
                .query_one(
                    "SELECT count(*) FROM public.outbox_dead_replay WHERE dlq_topic = $1",
                    &[&dlq],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        recorded().await,
        0,
        "nothing is recorded before the broker took it"
    );
    // kill -9 while the broker has not taken the events.
    child.kill().expect("kill -9 the retry");
    child.wait().expect("reap it");
    wait_until("its session to end", DEADLINE, || async {
        claiming().await == 0
    })
    .await;
    assert_eq!(recorded().await, 0, "the claim died with the command");
    let all = by_id(&list_json(&config, &[]).await);
    assert!(ids.iter().all(|id| all[id]["state"] == "dead"), "{all:#?}");

    // The operator creates the topic and retries: every event goes, once.
    outbox.create_topic(&topic, 1).await;
    let out = dead(&config, &["retry", "--all"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let events = consume_to_end(&topic).await;
    let mut sent: Vec<&str> = events.iter().filter_map(|e| e.header("ce_id")).collect();
    sent.sort_unstable();
    let mut wanted: Vec<&str> = ids.iter().map(String::as_str).collect();
    wanted.sort_unstable();
    assert_eq!(sent, wanted);
    assert_eq!(recorded().await, ids.len() as i64);
    outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_sharing_a_dead_letter_topic_each_take_their_own() {
    // Two relays, two outbox tables and slots, one dead-letter topic.
    let a = TestOutbox::create("jsonb").await;
    let b = TestOutbox::create("jsonb").await;
    let dlq = a.dlq_topic.clone();
    a.create_topic(&dlq, 1).await;
    a.create_topic(&a.topic("order"), 1).await;
    b.create_topic(&b.topic("order"), 1).await;
    let config_a = a.write_config("");
    let config_b = b.write_config("");
    let text_b = std::fs::read_to_string(&config_b).unwrap();
    let line = format!("dlq_topic = \"{}\"", b.dlq_topic);
    assert!(text_b.contains(&line), "config layout changed");
    std::fs::write(
        &config_b,
        text_b.replace(&line, &format!("dlq_topic = \"{dlq}\"")),
    )
    .unwrap();
    let [a1, a2, b1, b2, nobody] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    let (source_a, source_b) = (format!("public.{}", a.table), format!("public.{}", b.table));
    // Written by hand: no source_table.
    let mut unattributed = kafka_letter(&nobody, "");
    unattributed.2.retain(|(name, _)| *name != "source_table");
    produce_raw(
        &dlq,
        &[
            kafka_letter(&a1, &source_a),
            kafka_letter(&b1, &source_b),
            unattributed,
            kafka_letter(&a2, &source_a),
            kafka_letter(&b2, &source_b),
        ],
    )
    .await;
    replay_record(&a.admin, "public").await;

    let ids = |doc: &serde_json::Value| {
        let mut ids: Vec<String> = by_id(doc).into_keys().collect();
        ids.sort_unstable();
        ids
    };
    let sorted = |mut v: Vec<String>| {
        v.sort_unstable();
        v
    };
    // list shows each relay its own, and says what it left out.
    let doc_a = list_json(&config_a, &[]).await;
    assert_eq!(
        ids(&doc_a),
        sorted(vec![a1.clone(), a2.clone()]),
        "{doc_a:#}"
    );
    let notes = doc_a["notes"].to_string();
    assert!(
        notes.contains("2 dead letter(s)")
            && notes.contains(&source_b)
            && notes.contains("--unattributed"),
        "{doc_a:#}"
    );
    let doc_b = list_json(&config_b, &[]).await;
    assert_eq!(
        ids(&doc_b),
        sorted(vec![b1.clone(), b2.clone()]),
        "{doc_b:#}"
    );
    let with_unattributed = list_json(&config_a, &["--unattributed"]).await;
    assert_eq!(
        ids(&with_unattributed),
        sorted(vec![a1.clone(), a2.clone(), nobody.clone()])
    );

    // An id of the other relay's is refused, naming its source.
    let out = dead(&config_a, &["retry", &b1]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "{b1:?} is a dead letter of another source ({source_b:?})"
        )),
        "{}",
        text(&out)
    );

    // --all takes a's own, nothing else.
    let out = dead(&config_a, &["retry", "--all"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("2 done, 0 failed"), "{}", text(&out));
    let sent_a: Vec<String> = consume_to_end(&a.topic("order"))
        .await
        .iter()
        .filter_map(|e| e.header("ce_id").map(str::to_owned))
        .collect();
    assert_eq!(sorted(sent_a), sorted(vec![a1.clone(), a2.clone()]));
    assert_eq!(topic_len(&b.topic("order")).await, 0);
    let doc_b = list_json(&config_b, &[]).await;
    assert_eq!(ids(&doc_b), sorted(vec![b1.clone(), b2.clone()]));
    let all_a = by_id(&list_json(&config_a, &["--all", "--unattributed"]).await);
    assert_eq!(all_a[&nobody]["state"], "dead");

    // b's --all takes b's.
    let out = dead(&config_b, &["retry", "--all"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(topic_len(&b.topic("order")).await, 2);
    a.drop_all().await;
    b.drop_all().await;
}

/// docs/dead-letters.md says who creates a missing topic as the code
/// decides it: the relay's producer, with the properties it is given by
/// default, has a broker that creates topics create it (what `check`
/// reports), and the page's example turns that off.
#[test]
fn the_page_says_who_creates_a_missing_topic_as_the_code_does() {
    let page = include_str!("../../docs/dead-letters.md");
    let words = page.split_whitespace().collect::<Vec<_>>().join(" ");
    let kafka = outbox_relay::config::KafkaConfig::default();
    assert!(
        outbox_relay::admin::kafka_facts::producer_auto_create(&kafka),
        "the default producer has the broker create topics: the page says so below"
    );
    for says in [
        "By default the relay's producer (and `dead retry`'s, which uses the same \
         `[kafka.properties]`) asks for a missing topic in a way that has a broker with \
         `auto.create.topics.enable = true` create it on first use",
        "`\"allow.auto.create.topics\" = \"false\"`: then no topic is created",
    ] {
        assert!(words.contains(says), "the page no longer says: {says}");
    }
    assert!(
        !words.contains("never has the broker create a topic"),
        "the page claims the producer never has a topic created, which only holds with \
         allow.auto.create.topics = false"
    );
}

mod parked;
