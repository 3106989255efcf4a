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
    let events = consume(&topic, DEADLINE, |r| r.len() >= 3).await;
    let ids: Vec<&str> = events.iter().map(|r| r.header("ce_id").unwrap()).collect();
    assert_eq!(
        ids,
        [before.as_str(), after.as_str(), unchecked.as_str()],
        "in order, one aggregate"
    );
    for event in &events[..2] {
        assert_eq!(
            event.header("ce_dataschema"),
            Some("https://schemas.example.com/order-placed/v1")
        );
    }
    assert_eq!(
        events[2].header("ce_dataschema"),
        None,
        "no contract, unchecked"
    );

    let dlq = consume(&outbox.dlq_topic, DEADLINE, |r| !r.is_empty()).await;
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

    // Fixed: the retry sends it, checked against the new version.
    write_schema(&config, FIXED);
    let retried = dead(&config, &["retry", &broken]).await;
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried));
    let events = consume(&topic, DEADLINE, |r| r.len() >= 4).await;
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
