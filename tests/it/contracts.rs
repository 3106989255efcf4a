//! Event contracts end to end (`[[contracts]]`, docs/contracts.md): the
//! relay process checks each event against its JSON Schema before it sends
//! it; one that breaks its contract is dead-lettered with the reason and
//! its payload intact while the stream goes on; `dead retry` refuses it
//! while the schema still does and sends it, with its `ce_dataschema`, once
//! the schema is fixed. `outbox-relay schema check` gives the same verdict
//! offline.

use std::path::Path;
use std::process::Output;

use crate::support::cli::{cli, shown as text};
use crate::support::*;

/// Amounts are whole numbers: what the contract starts as.
const STRICT: &str = r#"{
  "$id": "https://schemas.example.com/order-placed/v1",
  "type": "object",
  "required": ["amount"],
  "properties": {"amount": {"type": "integer", "minimum": 0}}
}"#;

/// Amounts may also be text: the schema fixed.
const FIXED: &str = r#"{
  "$id": "https://schemas.example.com/order-placed/v2",
  "type": "object",
  "required": ["amount"],
  "properties": {"amount": {"type": ["integer", "string"]}}
}"#;

const CONTRACT: &str = "[[contracts]]\naggregatetype = \"order\"\ntype = \"Placed\"\nschema = \"schemas/order-placed.json\"\n";

/// Writes the schema beside `config` (in `schemas/`, the relative path
/// the contract names).
fn write_schema(config: &Path, text: &str) {
    let dir = config.parent().unwrap().join("schemas");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("order-placed.json"), text).unwrap();
}

async fn dead(config: &Path, args: &[&str]) -> Output {
    let mut all: Vec<String> = vec!["dead".into()];
    all.extend(args.iter().map(|s| (*s).to_owned()));
    all.extend(["--config".into(), config.display().to_string()]);
    cli(all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_breaks_its_contract_is_dead_lettered_and_retried_once_the_schema_is_fixed() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    let config = outbox.write_config(CONTRACT);
    write_schema(&config, STRICT);
    let mut relay = Relay::process(&config);
    let t = &outbox.table;
    let [before, broken, after, unchecked] =
        std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
    // Four transactions: the broken one between two good ones, and an
    // event type no contract covers.
    for (id, event_type, payload) in [
        (&before, "Placed", r#"{"amount": 3}"#),
        (&broken, "Placed", r#"{"amount": "three", "note": "kept"}"#),
        (&after, "Placed", r#"{"amount": 4}"#),
        (&unchecked, "Shipped", r#"{"amount": "any"}"#),
    ] {
        outbox
            .admin
            .execute(
                &format!(
                    "INSERT INTO public.{t} (id, aggregatetype, aggregateid, type, payload) \
                     VALUES ($1::text::uuid, 'order', 'o-1', $2, $3::text::jsonb)"
                ),
                &[id, &event_type, &payload],
            )
            .await
            .unwrap();
    }
    // The aggregate parks behind the violation (after_dead_letter =
    // "park", the default): the events after it wait, in order.
    let dlq = consume(&outbox.dlq_topic, DEADLINE, |r| !r.is_empty()).await;
    wait_until("the later events parked", DEADLINE, || async {
        outbox.parked().await
            == [
                ("o-1".to_owned(), "HEAD".to_owned(), broken.clone()),
                ("o-1".to_owned(), "EVENT".to_owned(), after.clone()),
                ("o-1".to_owned(), "EVENT".to_owned(), unchecked.clone()),
            ]
    })
    .await;
    let events = consume_to_end(&topic).await;
    let ids: Vec<&str> = events.iter().map(|r| r.header("ce_id").unwrap()).collect();
    assert_eq!(ids, [before.as_str()], "nothing after the violation yet");
    assert_eq!(
        events[0].header("ce_dataschema"),
        Some("https://schemas.example.com/order-placed/v1")
    );

    assert_eq!(dlq.len(), 1);
    let letter = &dlq[0];
    assert_eq!(letter.header("id"), Some(broken.as_str()));
    assert_eq!(letter.header("dlq_reason_code"), Some("contract_violation"));
    let reason = letter.header("dlq_reason").unwrap();
    assert!(
        reason.starts_with("payload breaks contract schemas/order-placed.json: at /amount:")
            && reason.ends_with("(rule `type`)")
            && !reason.contains("three"),
        "{reason}"
    );
    // jsonb's own text of the payload, byte for byte.
    assert_eq!(
        letter.value.as_deref(),
        Some(&br#"{"note": "kept", "amount": "three"}"#[..])
    );
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    assert!(!relay.log_text().contains("ERROR"), "{}", relay.log_text());

    // The schema still refuses it: listed as not retryable, retry refuses.
    replay_record(&outbox.admin, "public").await;
    let list = dead(&config, &["list", "--json"]).await;
    assert_eq!(list.status.code(), Some(0), "{}", text(&list));
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let entry = &doc["dead_letters"][0];
    assert_eq!(entry["id"], broken.as_str());
    assert_eq!(entry["reason_code"], "contract_violation");
    assert_eq!(entry["retryable"], false, "{doc:#}");
    let refused = dead(&config, &["retry", &broken]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("payload breaks contract"),
        "{}",
        text(&refused)
    );

    // Fixed: the retry sends it, checked against the new version, then
    // the events parked behind it, in commit order.
    write_schema(&config, FIXED);
    let retried = dead(&config, &["retry", &broken]).await;
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried));
    let events = consume(&topic, DEADLINE, |r| r.len() >= 4).await;
    let ids: Vec<&str> = events.iter().map(|r| r.header("ce_id").unwrap()).collect();
    assert_eq!(
        ids,
        [
            before.as_str(),
            broken.as_str(),
            after.as_str(),
            unchecked.as_str()
        ],
        "in order, one aggregate"
    );
    assert_eq!(
        events[2].header("ce_dataschema"),
        Some("https://schemas.example.com/order-placed/v1"),
        "a parked event is sent as it was built"
    );
    assert_eq!(
        events[3].header("ce_dataschema"),
        None,
        "no contract, unchecked"
    );
    assert!(
        outbox.parked().await.is_empty(),
        "the aggregate is live again"
    );
    let resent = events
        .iter()
        .find(|r| r.header("ce_id") == Some(broken.as_str()))
        .expect("the retried event on its topic");
    assert_eq!(
        resent.header("ce_dataschema"),
        Some("https://schemas.example.com/order-placed/v2")
    );
    assert_eq!(
        resent.value.as_deref(),
        Some(&br#"{"note": "kept", "amount": "three"}"#[..])
    );
    outbox.drop_all().await;
}

/// `schema check` with the relay's config: the same verdicts, exit 0 only
/// when every payload keeps its contract, 1 when one does not or no
/// contract covers the type, 2 for a schema that cannot be used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_check_gives_the_relays_verdict_offline() {
    let dir = std::env::temp_dir().join(random_name("schema_check"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "[postgres]\nurl = \"postgres://relay@127.0.0.1:1/app\"\nslot = \"s\"\npublication = \"p\"\n\
             [kafka]\nbrokers = \"127.0.0.1:1\"\n[cloudevents]\nsource = \"/orders\"\n{CONTRACT}"
        ),
    )
    .unwrap();
    write_schema(&config, STRICT);
    let good = dir.join("good.json");
    let bad = dir.join("bad.json");
    std::fs::write(&good, r#"{"amount": 1}"#).unwrap();
    std::fs::write(&bad, r#"{"amount": -1}"#).unwrap();
    let check = |args: Vec<String>| async move {
        let mut all = vec!["schema".to_owned(), "check".to_owned()];
        all.extend(args);
        cli(all).await
    };
    let s = |p: &Path| p.display().to_string();
    let with_config = |extra: &[String]| {
        let mut v = vec![
            "--config".to_owned(),
            s(&config),
            "--type".into(),
            "Placed".into(),
            "--aggregatetype".into(),
            "order".into(),
        ];
        v.extend_from_slice(extra);
        v
    };
    let ok = check(with_config(&[s(&good)])).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(text(&ok).contains("dataschema https://schemas.example.com/order-placed/v1"));
    let failed = check(with_config(&[s(&good), s(&bad)])).await;
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    assert!(text(&failed).contains("at /amount:"), "{}", text(&failed));
    let uncovered = check(vec![
        "--config".into(),
        s(&config),
        "--type".into(),
        "Shipped".into(),
        s(&good),
    ])
    .await;
    assert_eq!(uncovered.status.code(), Some(1), "{}", text(&uncovered));
    assert!(
        text(&uncovered).contains("unchecked"),
        "{}",
        text(&uncovered)
    );
    std::fs::write(dir.join("broken.json"), r#"{"type": 12}"#).unwrap();
    let unusable = check(vec![
        "--schema".into(),
        s(&dir.join("broken.json")),
        s(&good),
    ])
    .await;
    assert_eq!(unusable.status.code(), Some(2), "{}", text(&unusable));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Registry contracts through the relay process, read back by Confluent's
/// own deserializers (the official Python client): the acceptance test of
/// the registry wire formats.
mod registry {
    use outbox_relay::registry::{Schema, SchemaType};

    use crate::registry::{client, python_reads, python_reads_protobuf, registry_url};
    use crate::support::*;

    const ORDER_AVRO: &str = r#"{
      "type": "record", "name": "OrderPlaced", "namespace": "com.acme.contracts",
      "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": null}
      ]
    }"#;

    const ORDER_JSON: &str = r#"{
      "$schema": "http://json-schema.org/draft-07/schema#",
      "type": "object",
      "required": ["order_id", "amount"],
      "properties": {"order_id": {"type": "string"}, "amount": {"type": "integer"}}
    }"#;

    /// An outbox whose `order` topic's value subject (`<topic>-value`)
    /// holds `schema`; the relay's config with a topic-strategy contract.
    async fn set_up(
        outbox: TestOutbox,
        schema_type: SchemaType,
        text: &str,
        extra: &str,
    ) -> (TestOutbox, u32, std::path::PathBuf) {
        let topic = outbox.topic("order");
        outbox.create_topic(&topic, 1).await;
        outbox.create_topic(&outbox.dlq_topic, 1).await;
        let id = client()
            .register(
                &format!("{topic}-value"),
                &Schema {
                    schema_type,
                    text: text.to_owned(),
                    references: Vec::new(),
                },
            )
            .await
            .expect("schema registered");
        let config = outbox.write_config(&format!(
            "[registry]\nurl = \"{}\"\n\n[[contracts]]\naggregatetype = \"order\"\nsubject_strategy = \"topic\"\n{extra}",
            registry_url()
        ));
        (outbox, id, config)
    }

    async fn insert(outbox: &TestOutbox, id: &str, payload: &str) {
        insert_as(outbox, id, "o-1", payload).await;
    }

    async fn insert_as(outbox: &TestOutbox, id: &str, aggregate: &str, payload: &str) {
        outbox
            .admin
            .execute(
                &format!(
                    "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                     VALUES ($1::text::uuid, 'order', $3, 'OrderPlaced', $2::text::jsonb)",
                    outbox.table
                ),
                &[&id, &payload, &aggregate],
            )
            .await
            .unwrap();
    }

    /// Inserts a payload that fits, one whose amount is text with a
    /// fraction ("12.50": an integer in no format, where protobuf's JSON
    /// reads "12.00" as 12), and `fits`; gives the id of the one that
    /// breaks the schema.
    async fn insert_fits_breaks_fits(outbox: &TestOutbox, fits: &str) -> String {
        let [first, broken, second] = std::array::from_fn(|_| uuid::Uuid::new_v4().to_string());
        insert(outbox, &first, r#"{"order_id": "o-1", "amount": 1200}"#).await;
        // An aggregate of its own: it parks behind its dead letter, while
        // o-1's events go on.
        insert_as(
            outbox,
            &broken,
            "o-broken",
            r#"{"order_id": "o-1", "amount": "12.50"}"#,
        )
        .await;
        insert(outbox, &second, fits).await;
        broken
    }

    /// The dead letters, the first `broken`'s: a contract violation at
    /// /amount, its reason without the payload's value.
    async fn broken_is_dead_lettered(outbox: &TestOutbox, broken: &str) -> Vec<Received> {
        let dlq = consume(&outbox.dlq_topic, DEADLINE, |r| !r.is_empty()).await;
        assert_eq!(dlq[0].header("id"), Some(broken));
        assert_eq!(dlq[0].header("dlq_reason_code"), Some("contract_violation"));
        let reason = dlq[0].header("dlq_reason").unwrap();
        assert!(
            reason.contains("at /amount:") && !reason.contains("12.50"),
            "{reason}"
        );
        dlq
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn avro_events_are_read_back_by_confluents_deserializer_and_a_mismatch_is_dead_lettered()
    {
        let (outbox, id, config) = set_up(
            TestOutbox::create("jsonb").await,
            SchemaType::Avro,
            ORDER_AVRO,
            "",
        )
        .await;
        let topic = outbox.topic("order");
        let mut relay = Relay::process(&config);
        let broken = insert_fits_breaks_fits(
            &outbox,
            r#"{"order_id": "o-1", "amount": 7, "note": "gift"}"#,
        )
        .await;
        let read = python_reads(&topic, 2, "avro").await;
        assert_eq!(
            read,
            [
                serde_json::json!({"order_id": "o-1", "amount": 1200, "note": null}),
                serde_json::json!({"order_id": "o-1", "amount": 7, "note": "gift"}),
            ]
        );
        let events = consume(&topic, DEADLINE, |r| r.len() >= 2).await;
        let dataschema = format!("{}/schemas/ids/{id}", registry_url().trim_end_matches('/'));
        for event in &events {
            assert_eq!(event.header("ce_dataschema"), Some(dataschema.as_str()));
            assert_eq!(event.header("content-type"), Some("application/avro"));
        }
        let dlq = broken_is_dead_lettered(&outbox, &broken).await;
        assert_eq!(
            dlq[0].value.as_deref(),
            Some(&br#"{"amount": "12.50", "order_id": "o-1"}"#[..]),
            "the JSON payload, not Avro"
        );
        let status = relay.terminate().await;
        assert!(status.success(), "{status:?}\n{}", relay.log_text());
        assert!(!relay.log_text().contains("ERROR"), "{}", relay.log_text());
        outbox.drop_all().await;
    }

    /// Two messages, the contract's the second: its records carry the
    /// message indexes [1], which the deserializer must read to find the
    /// message's bytes.
    const ORDER_PROTO: &str = r#"syntax = "proto3";
package com.acme.contracts;
import "google/protobuf/timestamp.proto";

message Envelope { string kind = 1; }
message OrderPlaced {
  string order_id = 1;
  int64 amount = 2;
  Status status = 3;
  repeated Line lines = 4;
  google.protobuf.Timestamp placed_at = 5;
  message Line { string sku = 1; int32 qty = 2; }
}
enum Status { STATUS_UNKNOWN = 0; PAID = 1; }
"#;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn protobuf_events_are_read_back_by_confluents_deserializer_and_a_mismatch_is_dead_lettered()
     {
        let (outbox, id, config) = set_up(
            TestOutbox::create("jsonb").await,
            SchemaType::Protobuf,
            ORDER_PROTO,
            "record = \"com.acme.contracts.OrderPlaced\"\n",
        )
        .await;
        // The consumer's copy of the schema, for protoc.
        let proto = config.with_file_name("order_events.proto");
        std::fs::write(&proto, ORDER_PROTO).unwrap();
        let topic = outbox.topic("order");
        let mut relay = Relay::process(&config);
        let broken = insert_fits_breaks_fits(
            &outbox,
            r#"{"orderId": "o-1", "amount": 7, "status": "PAID",
                "lines": [{"sku": "s-1", "qty": 2}], "placedAt": "2026-12-04T10:00:00.5Z"}"#,
        )
        .await;
        let read = python_reads_protobuf(&topic, 2, &proto, "OrderPlaced").await;
        assert_eq!(
            read,
            [
                // protobuf's json_format: 64-bit integers as strings.
                serde_json::json!({"order_id": "o-1", "amount": "1200"}),
                serde_json::json!({
                    "order_id": "o-1", "amount": "7", "status": "PAID",
                    "lines": [{"sku": "s-1", "qty": 2}],
                    "placed_at": "2026-12-04T10:00:00.500Z"
                }),
            ]
        );
        let events = consume(&topic, DEADLINE, |r| r.len() >= 2).await;
        let dataschema = format!("{}/schemas/ids/{id}", registry_url().trim_end_matches('/'));
        for event in &events {
            assert_eq!(event.header("ce_dataschema"), Some(dataschema.as_str()));
            assert_eq!(event.header("content-type"), Some("application/protobuf"));
            let value = event.value.as_deref().unwrap();
            // Magic, the id, then the message indexes [1]: count 1, index 1.
            assert_eq!(
                &value[..7],
                &[
                    0,
                    (id >> 24) as u8,
                    (id >> 16) as u8,
                    (id >> 8) as u8,
                    id as u8,
                    2,
                    2
                ]
            );
        }
        let dlq = broken_is_dead_lettered(&outbox, &broken).await;
        assert_eq!(
            dlq[0].value.as_deref(),
            Some(&br#"{"amount": "12.50", "order_id": "o-1"}"#[..]),
            "the JSON payload, not Protobuf"
        );
        let status = relay.terminate().await;
        assert!(status.success(), "{status:?}\n{}", relay.log_text());
        assert!(!relay.log_text().contains("ERROR"), "{}", relay.log_text());
        outbox.drop_all().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn framed_json_events_are_read_back_by_confluents_deserializer() {
        let (outbox, id, config) = set_up(
            TestOutbox::create("jsonb").await,
            SchemaType::Json,
            ORDER_JSON,
            "",
        )
        .await;
        let topic = outbox.topic("order");
        let mut relay = Relay::process(&config);
        let good = uuid::Uuid::new_v4().to_string();
        insert(&outbox, &good, r#"{"order_id": "o-9", "amount": 3}"#).await;
        let read = python_reads(&topic, 1, "json").await;
        assert_eq!(read, [serde_json::json!({"order_id": "o-9", "amount": 3})]);
        let events = consume(&topic, DEADLINE, |r| !r.is_empty()).await;
        let value = events[0].value.as_deref().unwrap();
        assert_eq!(
            &value[..5],
            &[
                0,
                (id >> 24) as u8,
                (id >> 16) as u8,
                (id >> 8) as u8,
                id as u8
            ]
        );
        let status = relay.terminate().await;
        assert!(status.success(), "{status:?}\n{}", relay.log_text());
        outbox.drop_all().await;
    }

    /// `check` finds each subject at the version the relay takes; a pin
    /// behind the latest is a warning with the compatibility verdict; a
    /// missing subject fails it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn check_names_each_subject_its_version_and_a_pin_behind_the_latest() {
        let (outbox, _, config) = set_up(
            TestOutbox::create("jsonb").await,
            SchemaType::Avro,
            ORDER_AVRO,
            "version = 1\n",
        )
        .await;
        let subject = format!("{}-value", outbox.topic("order"));
        let newer = ORDER_AVRO.replace(
            r#"{"name": "note", "type": ["null", "string"], "default": null}"#,
            r#"{"name": "note", "type": ["null", "string"], "default": null},
        {"name": "channel", "type": "string", "default": "web"}"#,
        );
        assert_ne!(newer, ORDER_AVRO);
        client()
            .register(
                &subject,
                &Schema {
                    schema_type: SchemaType::Avro,
                    text: newer,
                    references: Vec::new(),
                },
            )
            .await
            .expect("version 2 registered");
        let check = |config: std::path::PathBuf| async move {
            crate::support::cli::cli(vec![
                "check".into(),
                "--config".into(),
                config.display().to_string(),
            ])
            .await
        };
        let out = check(config.clone()).await;
        let shown = crate::support::cli::shown(&out);
        let line = shown
            .lines()
            .find(|l| l.contains(&format!("registry.subject.{subject}")))
            .unwrap_or_else(|| panic!("no line for the subject: {shown}"));
        assert!(
            line.contains("WARN")
                && line.contains("version 1")
                && line.contains("version 2 is the latest"),
            "{line}"
        );
        assert!(!shown.contains("FAIL"), "{shown}");
        assert_eq!(out.status.code(), Some(0), "{shown}");

        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(
            &config,
            text.replace(
                "subject_strategy = \"topic\"",
                "subject = \"no-such-subject-value\"",
            ),
        )
        .unwrap();
        let out = check(config.clone()).await;
        let shown = crate::support::cli::shown(&out);
        assert_eq!(out.status.code(), Some(1), "{shown}");
        assert!(
            shown.contains("registry.subject.no-such-subject-value") && shown.contains("FAIL"),
            "{shown}"
        );

        // The subject is there, but its schema is not the record the
        // contract names: the relay could not use it, and check says so.
        std::fs::write(&config, text + "record = \"com.acme.contracts.Refund\"\n").unwrap();
        let out = check(config).await;
        let shown = crate::support::cli::shown(&out);
        assert_eq!(out.status.code(), Some(1), "{shown}");
        let line = shown
            .lines()
            .find(|l| l.contains(&format!("registry.subject.{subject}")))
            .unwrap_or_else(|| panic!("no line for the subject: {shown}"));
        assert!(
            line.contains("FAIL") && line.contains("not record com.acme.contracts.Refund"),
            "{shown}"
        );
        outbox.drop_all().await;
    }

    pub(super) mod alone {
        use super::*;
        use crate::support::http::http_get;

        /// The registry down when the relay starts: it sends nothing,
        /// checked or not, says so at each retry (WARN, the reconnect
        /// counter's `schema_registry`, /ready 503 naming it), and
        /// delivers every event, checked, once the registry is back; gone
        /// again mid-stream, it changes nothing (the schema is kept).
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_registry_down_at_start_delays_every_event_and_loses_none() {
            let services = services::exclusive().await;
            let metrics_port = free_port();
            let (outbox, id, config) = set_up(
                TestOutbox::create_exclusive(&services, "jsonb").await,
                SchemaType::Avro,
                ORDER_AVRO,
                &format!("\n[relay]\nmetrics_addr = \"127.0.0.1:{metrics_port}\"\n"),
            )
            .await;
            let topic = outbox.topic("order");
            let ids: Vec<String> = (0..5).map(|_| uuid::Uuid::new_v4().to_string()).collect();
            for (n, id) in ids.iter().enumerate() {
                insert(
                    &outbox,
                    id,
                    &format!(r#"{{"order_id": "o-{n}", "amount": {n}}}"#),
                )
                .await;
            }
            let down = services::ServiceDown::stop(&["stop-registry"], "start-registry").await;
            let mut relay = Relay::process(&config);
            relay
                .wait_for_event("schema_registry_unreachable", DEADLINE)
                .await;
            wait_until(
                "/ready to answer 503 naming the registry",
                DEADLINE,
                || async {
                    http_get(metrics_port, "/ready")
                        .await
                        .is_some_and(|(status, body)| {
                            status == 503 && body.contains("schema_registry")
                        })
                },
            )
            .await;
            // Nothing went out while it waited.
            let held = consume_to_end(&topic).await;
            assert!(
                held.is_empty(),
                "{} events sent before their schema was known",
                held.len()
            );
            assert!(
                relay.log_text().contains("schema_registry"),
                "{}",
                relay.log_text()
            );
            down.start().await;
            let read = python_reads(&topic, ids.len(), "avro").await;
            let orders: Vec<&str> = read
                .iter()
                .map(|v| v["order_id"].as_str().unwrap())
                .collect();
            assert_eq!(orders, ["o-0", "o-1", "o-2", "o-3", "o-4"]);
            let events = consume(&topic, DEADLINE, |r| r.len() >= 5).await;
            assert!(events.iter().all(|e| {
                e.header("ce_dataschema")
                    .is_some_and(|d| d.ends_with(&format!("/{id}")))
            }));
            wait_until("/ready to answer 200 once streaming", DEADLINE, || async {
                http_get(metrics_port, "/ready")
                    .await
                    .is_some_and(|(status, _)| status == 200)
            })
            .await;
            // The registry gone again while events keep coming: the relay
            // has its schema, every event goes, checked.
            let down = services::ServiceDown::stop(&["stop-registry"], "start-registry").await;
            let later: Vec<String> = (0..5).map(|_| uuid::Uuid::new_v4().to_string()).collect();
            for (n, id) in later.iter().enumerate() {
                insert(
                    &outbox,
                    id,
                    &format!(r#"{{"order_id": "p-{n}", "amount": {n}}}"#),
                )
                .await;
            }
            let events = consume(&topic, DEADLINE, |r| r.len() >= 10).await;
            assert_eq!(events.len(), 10);
            assert!(events.iter().all(|e| e.header("ce_dataschema").is_some()));
            down.start().await;
            let status = relay.terminate().await;
            assert!(status.success(), "{status:?}\n{}", relay.log_text());
            assert!(!relay.log_text().contains("ERROR"), "{}", relay.log_text());
            outbox.drop_all().await;
        }
    }
}
