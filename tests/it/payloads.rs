//! What the events carry: structured mode's CloudEvents JSON, and payloads
//! that tend to break JSON handling (astral-plane and right-to-left text,
//! combining marks, deep nesting, numbers beyond f64, escapes, duplicate
//! keys) reaching the topic byte for byte in binary mode and verbatim as
//! `data` in structured mode.

use std::collections::HashMap;
use std::time::Instant;

use outbox_relay::envelope::ContentMode;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_mode_writes_cloudevents_json() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let relay = Relay::in_process(outbox.settings_with(r#"mode = "structured""#));
    let mut writer = outbox.writer().await;
    let committed = outbox
        .commit_events(&mut writer, 10, 5, 7, &mut HashMap::new())
        .await;
    let want = committed.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    assert_eq!(received.len(), committed.len());
    for (r, c) in received.iter().zip(&committed) {
        assert_eq!(
            r.header("content-type"),
            Some("application/cloudevents+json")
        );
        let ce: serde_json::Value = serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
        assert_eq!(ce["specversion"], "1.0");
        assert_eq!(ce["id"], c.id.as_str());
        assert_eq!(ce["type"], "OrderPlaced");
        assert_eq!(ce["source"], "/orders-service");
        assert_eq!(ce["subject"], c.aggregate.as_str());
        assert_eq!(ce["datacontenttype"], "application/json");
        chrono::DateTime::parse_from_rfc3339(ce["time"].as_str().unwrap()).unwrap();
        // data is JSON, not a string holding JSON.
        assert_eq!(ce["data"]["seq"], c.seq);
    }
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}

/// Payloads that tend to break JSON handling, as a service would write them
/// (jsonb normalizes their formatting; `payload::text` is the reference).
fn tricky_payloads() -> Vec<String> {
    let mut deep = String::new();
    for level in 0..100 {
        deep.push_str(if level % 2 == 0 { "[" } else { "{\"k\":" });
    }
    deep.push_str("\"bottom\"");
    for level in (0..100).rev() {
        deep.push_str(if level % 2 == 0 { "]" } else { "}" });
    }
    vec![
        r#"{"emoji": "😀", "clef": "𝄞", "mixed": "a😀b𝄞c", "flag": "🇮🇱"}"#.into(),
        r#"{"he": "עברית", "ar": "العربية", "bidi": "abc עברית 123 العربية!"}"#.into(),
        "{\"combining\": \"e\u{301}\", \"precomposed\": \"\u{e9}\", \"stack\": \"a\u{301}\u{302}\u{303}\"}"
            .into(),
        "{}".into(),
        "[]".into(),
        deep,
        r#"{"big": 123456789012345678901234567890.123456789012345678901234567890, "int": 18446744073709551616, "tiny": 1e-30, "neg": -0.0, "exp": 6.02E+23}"#
            .into(),
        r#"{"esc": "quote \" backslash \\ slash \/ tab \t nl \n cr \r ctl \u0001 \u001f", "pair": "\ud83d\ude00", "bmp": "\u2028\u2029"}"#
            .into(),
        r#"{"b": 1, "a": 2, "a": 3, "  spaced key  ": [1, 2.50, true, false, null]}"#.into(),
        r#""just a string""#.into(),
    ]
}

async fn round_trip_tricky_payloads(mode: ContentMode) {
    let case = match mode {
        ContentMode::Binary => "byte-exact-binary",
        ContentMode::Structured => "byte-exact-structured",
    };
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let mut settings = outbox.settings();
    settings.envelope.mode = mode;
    let relay = Relay::in_process(settings);
    let mut committed = Vec::new();
    let mut expected: HashMap<String, String> = HashMap::new();
    for (seq, payload) in tricky_payloads().iter().enumerate() {
        let id = uuid::Uuid::new_v4().to_string();
        let row = outbox
            .admin
            .query_one(
                &format!(
                    "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload)
                     VALUES ($1::text::uuid, 'order', 'tricky', 'OrderPlaced', $2::text::jsonb)
                     RETURNING payload::text",
                    outbox.table
                ),
                &[&id, payload],
            )
            .await
            .unwrap_or_else(|e| panic!("insert {payload}: {e}"));
        expected.insert(id.clone(), row.get(0));
        committed.push(Committed {
            id,
            aggregate: "tricky".into(),
            seq: seq as i64 + 1,
        });
    }
    let want = committed.len();
    let received = consume(&topic, DEADLINE, move |r| r.len() >= want).await;
    relay.stop().await.expect("graceful stop");
    for r in &received {
        let id = r.header("id").expect("id header");
        let want = &expected[id];
        let value = r.value.as_deref().expect("record value");
        match mode {
            ContentMode::Binary => assert_eq!(
                value,
                want.as_bytes(),
                "record value differs from payload::text for {want}"
            ),
            ContentMode::Structured => {
                #[derive(serde::Deserialize)]
                struct Envelope<'a> {
                    #[serde(borrow)]
                    data: &'a serde_json::value::RawValue,
                }
                let envelope: Envelope<'_> =
                    serde_json::from_slice(value).expect("structured envelope is JSON");
                // Verbatim embedding is stronger than JSON equality, and the
                // only equality that holds for numbers beyond f64.
                assert_eq!(envelope.data.get(), want.as_str(), "data member differs");
            }
        }
    }
    // The checker keys on `ce_id`; structured records carry the id in `id`.
    let keyed: Vec<Received> = received
        .into_iter()
        .map(|mut r| {
            let id = r.headers["id"].clone();
            r.headers.insert("ce_id".into(), id);
            r
        })
        .collect();
    let summary = check_delivery(case, &committed, &keyed);
    assert_eq!(summary.duplicated, 0);
    assert_eq!(keyed.len(), committed.len());
    outbox.drop_all().await;
    report_wall_time(case, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tricky_payloads_round_trip_byte_exact_in_binary_mode() {
    round_trip_tricky_payloads(ContentMode::Binary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tricky_payloads_round_trip_verbatim_in_structured_mode() {
    round_trip_tricky_payloads(ContentMode::Structured).await;
}
