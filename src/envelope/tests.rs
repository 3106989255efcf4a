//! Unit and property tests for the CloudEvents envelope.

use super::*;
use chrono::TimeZone;
use proptest::prelude::*;
use serde_json::Value;

const PAYLOAD: &str = r#"{"order": {"id": 42, "total": 12.50, "note": "😀 𝄞 שלום مرحبا e\u0301 ñ"}, "items": [], "meta": {}}"#;

fn commit_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap()
}

fn row() -> OutboxRow {
    OutboxRow {
        id: "3f0a0c8e-7a4c-4f7e-9a53-0c1d2e3f4a5b".to_owned(),
        aggregate_type: "Order".to_owned(),
        aggregate_id: "order-42".to_owned(),
        event_type: "OrderCreated".to_owned(),
        payload: Bytes::from_static(PAYLOAD.as_bytes()),
        payload_is_jsonb: false,
        timestamp: None,
        trace_parent: None,
        trace_state: None,
        headers: vec![("tenant".to_owned(), Bytes::from_static(b"acme"))],
        source: None,
    }
}

fn settings(mode: ContentMode) -> EnvelopeSettings {
    EnvelopeSettings {
        source: "/orders-service".to_owned(),
        mode,
        topic_template: DEFAULT_TOPIC_TEMPLATE.to_owned(),
    }
}

fn header<'a>(record: &'a KafkaRecord, name: &str) -> Option<&'a [u8]> {
    record
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_ref())
}

fn header_str<'a>(record: &'a KafkaRecord, name: &str) -> Option<&'a str> {
    header(record, name).map(|v| std::str::from_utf8(v).unwrap())
}

/// The `data` member of a structured value, as the raw text it holds.
fn structured_data_text(value: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Doc<'a> {
        #[serde(borrow)]
        data: &'a RawValue,
    }
    let doc: Doc = serde_json::from_slice(value).unwrap();
    doc.data.get().to_owned()
}

#[test]
fn binary_mode_sets_headers_key_topic_and_keeps_payload_bytes() {
    let record = build_record(&row(), commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(record.topic, "outbox.event.Order");
    assert_eq!(record.key.as_ref(), b"order-42");
    assert_eq!(record.value.as_ref(), PAYLOAD.as_bytes());
    let expected = [
        ("ce_specversion", "1.0"),
        ("ce_id", "3f0a0c8e-7a4c-4f7e-9a53-0c1d2e3f4a5b"),
        ("ce_source", "/orders-service"),
        ("ce_type", "OrderCreated"),
        ("ce_subject", "order-42"),
        ("ce_time", "2024-05-01T12:00:00.000000Z"),
        ("ce_partitionkey", "order-42"),
        ("content-type", "application/json"),
        ("id", "3f0a0c8e-7a4c-4f7e-9a53-0c1d2e3f4a5b"),
        ("tenant", "acme"),
    ];
    for (name, value) in expected {
        assert_eq!(header_str(&record, name), Some(value), "header {name}");
    }
    assert_eq!(header(&record, "ce_traceparent"), None);
    assert_eq!(record.headers.len(), expected.len());
}

#[test]
fn structured_mode_embeds_data_as_json_value_byte_exact() {
    let record = build_record(&row(), commit_time(), &settings(ContentMode::Structured)).unwrap();
    assert_eq!(
        header_str(&record, "content-type"),
        Some("application/cloudevents+json")
    );
    assert_eq!(header_str(&record, "id"), Some(row().id.as_str()));
    assert_eq!(
        header(&record, "ce_id"),
        None,
        "no ce_ headers in structured mode"
    );
    let doc: Value = serde_json::from_slice(&record.value).unwrap();
    assert_eq!(doc["specversion"], "1.0");
    assert_eq!(doc["id"], row().id.as_str());
    assert_eq!(doc["source"], "/orders-service");
    assert_eq!(doc["type"], "OrderCreated");
    assert_eq!(doc["subject"], "order-42");
    assert_eq!(doc["partitionkey"], "order-42");
    assert_eq!(doc["time"], "2024-05-01T12:00:00.000000Z");
    assert_eq!(doc["datacontenttype"], "application/json");
    assert!(
        doc["data"].is_object(),
        "data is a JSON object, not a string"
    );
    assert_eq!(doc["data"]["order"]["total"], 12.5);
    // The payload text, including `12.50` and the combining mark, is verbatim.
    assert_eq!(structured_data_text(&record.value), PAYLOAD);
    assert!(doc.get("traceparent").is_none());
}

#[test]
fn time_prefers_row_timestamp_and_keeps_microseconds() {
    let mut r = row();
    r.timestamp = Some(DateTime::from_timestamp_micros(1_714_564_496_123_456).unwrap());
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(
        header_str(&record, "ce_time"),
        Some("2024-05-01T11:54:56.123456Z")
    );
}

#[test]
fn row_source_overrides_config_and_empty_source_falls_back() {
    let mut r = row();
    r.source = Some("/billing".to_owned());
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(header_str(&record, "ce_source"), Some("/billing"));
    r.source = Some(String::new());
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(header_str(&record, "ce_source"), Some("/orders-service"));
}

#[test]
fn payload_that_is_not_json_is_refused_in_both_modes() {
    let bad: [&[u8]; 6] = [
        b"",
        b"{\"a\": 1",
        b"{\"a\": 1} trailing",
        b"not json",
        b"\"\xff\xfe\"",
        b"{'single': 'quotes'}",
    ];
    for mode in [ContentMode::Binary, ContentMode::Structured] {
        for payload in bad {
            let mut r = row();
            r.payload = Bytes::from_static(payload);
            let err = build_record(&r, commit_time(), &settings(mode)).unwrap_err();
            assert!(
                matches!(err, EnvelopeError::PayloadNotJson { .. }),
                "{payload:?}: {err}"
            );
            assert_eq!(err.reason_code(), "payload_not_json");
        }
    }
}

#[test]
fn payload_error_never_quotes_the_payload() {
    let mut r = row();
    r.payload = Bytes::from_static(b"{\"card\": \"4111-CANARY-SECRET\" oops}");
    let err = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap_err();
    assert!(!err.to_string().contains("CANARY"), "{err}");
    assert!(!format!("{err:?}").contains("CANARY"));
}

#[test]
fn scalar_and_whitespace_payloads_are_json() {
    for payload in ["null", "0", "\"text\"", "[]", "{}", " {\"a\": [1, 2]} \n"] {
        let mut r = row();
        r.payload = Bytes::copy_from_slice(payload.as_bytes());
        let binary = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
        assert_eq!(binary.value.as_ref(), payload.as_bytes());
        let structured =
            build_record(&r, commit_time(), &settings(ContentMode::Structured)).unwrap();
        assert_eq!(structured_data_text(&structured.value), payload.trim());
    }
}

#[test]
fn deep_nesting_beyond_serde_json_recursion_limit_is_accepted() {
    let depth = 10_000;
    let payload = format!("{}1{}", "[{\"a\":".repeat(depth), "}]".repeat(depth));
    let mut r = row();
    r.payload = Bytes::from(payload.clone());
    let binary = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(binary.value.as_ref(), payload.as_bytes());
    let structured = build_record(&r, commit_time(), &settings(ContentMode::Structured)).unwrap();
    assert_eq!(structured_data_text(&structured.value), payload);
}

#[test]
fn big_numbers_keep_their_digits_in_structured_mode() {
    let payload =
        r#"{"n": 123456789012345678901234567890, "f": 0.1000000000000000055511151231257827}"#;
    let mut r = row();
    r.payload = Bytes::from_static(payload.as_bytes());
    let record = build_record(&r, commit_time(), &settings(ContentMode::Structured)).unwrap();
    assert_eq!(structured_data_text(&record.value), payload);
}

#[test]
fn empty_id_type_or_source_is_a_missing_attribute() {
    let mut r = row();
    r.id.clear();
    let err = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap_err();
    assert_eq!(err, EnvelopeError::MissingAttribute { attribute: "id" });

    let mut r = row();
    r.event_type.clear();
    // `{aggregatetype}` only, so the empty type cannot break the topic first.
    let err = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap_err();
    assert_eq!(err, EnvelopeError::MissingAttribute { attribute: "type" });

    let mut s = settings(ContentMode::Binary);
    s.source.clear();
    let err = build_record(&row(), commit_time(), &s).unwrap_err();
    assert_eq!(
        err,
        EnvelopeError::MissingAttribute {
            attribute: "source"
        }
    );
    assert_eq!(err.reason_code(), "missing_attribute");
}

#[test]
fn empty_aggregate_id_is_an_empty_key_without_subject() {
    let mut r = row();
    r.aggregate_id.clear();
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert!(record.key.is_empty());
    assert_eq!(header(&record, "ce_subject"), None);
    assert_eq!(header(&record, "ce_partitionkey"), None);
    let record = build_record(&r, commit_time(), &settings(ContentMode::Structured)).unwrap();
    let doc: Value = serde_json::from_slice(&record.value).unwrap();
    assert!(doc.get("subject").is_none() && doc.get("partitionkey").is_none());
}

#[test]
fn topic_template_substitutes_aggregate_type_and_type() {
    let mut s = settings(ContentMode::Binary);
    s.topic_template = "app.{aggregatetype}.{type}.v1".to_owned();
    let record = build_record(&row(), commit_time(), &s).unwrap();
    assert_eq!(record.topic, "app.Order.OrderCreated.v1");
    s.topic_template = "fixed-topic".to_owned();
    assert_eq!(
        build_record(&row(), commit_time(), &s).unwrap().topic,
        "fixed-topic"
    );
}

#[test]
fn invalid_topics_are_refused() {
    let cases = [
        ("outbox.event.{aggregatetype}", "Order Lines"),
        ("outbox.event.{aggregatetype}", "Bestellung/Ä"),
        ("{aggregatetype}", ""),
        ("{aggregatetype}", "."),
        ("{aggregatetype}", ".."),
        ("outbox.{unknown}", "Order"),
    ];
    for (template, aggregate_type) in cases {
        let err = render_topic(template, aggregate_type, "T").unwrap_err();
        assert!(
            matches!(err, EnvelopeError::InvalidTopic { .. }),
            "{template} {aggregate_type}"
        );
        assert_eq!(err.reason_code(), "invalid_topic");
    }
    let long = "a".repeat(250);
    assert!(render_topic("{aggregatetype}", &long, "T").is_err());
    assert!(render_topic("{aggregatetype}", &long[..249], "T").is_ok());
    // A huge aggregate type is truncated in the error, on a char boundary.
    let huge = "é".repeat(10_000);
    let EnvelopeError::InvalidTopic { topic, .. } =
        render_topic("{aggregatetype}", &huge, "T").unwrap_err()
    else {
        panic!("expected InvalidTopic");
    };
    assert!(topic.len() <= MAX_TOPIC_IN_ERROR + '…'.len_utf8());
}

#[test]
fn invalid_topic_from_row_fails_the_record() {
    let mut r = row();
    r.aggregate_type = "Order Lines".to_owned();
    let err = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap_err();
    assert!(err.to_string().contains("Order Lines"), "{err}");
}

#[test]
fn traceparent_from_bare_value_or_debezium_properties() {
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    assert_eq!(traceparent_from_span_context(tp), Some(tp));
    let props = format!("#\n#Mon May 01 12:00:00 UTC 2024\ntraceparent={tp}\ntracestate=\n");
    assert_eq!(traceparent_from_span_context(&props), Some(tp));
    for bad in [
        "",
        "garbage",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
    ] {
        assert_eq!(traceparent_from_span_context(bad), None, "{bad}");
    }

    let mut r = row();
    r.trace_parent = Some(props);
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(header_str(&record, "ce_traceparent"), Some(tp));
    let record = build_record(&r, commit_time(), &settings(ContentMode::Structured)).unwrap();
    let doc: Value = serde_json::from_slice(&record.value).unwrap();
    assert_eq!(doc["traceparent"], tp);

    r.trace_parent = Some("not a trace context".to_owned());
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(
        header(&record, "ce_traceparent"),
        None,
        "bad context is dropped, not fatal"
    );
}

#[test]
fn tracestate_travels_unchanged_beside_its_traceparent() {
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let state = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
    // From a tracestate column.
    let mut r = row();
    r.trace_parent = Some(tp.to_owned());
    r.trace_state = Some(state.to_owned());
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(header_str(&record, "ce_traceparent"), Some(tp));
    assert_eq!(header_str(&record, "ce_tracestate"), Some(state));
    let record = build_record(&r, commit_time(), &settings(ContentMode::Structured)).unwrap();
    let doc: Value = serde_json::from_slice(&record.value).unwrap();
    assert_eq!(
        (doc["traceparent"].as_str(), doc["tracestate"].as_str()),
        (Some(tp), Some(state))
    );

    // From Debezium's properties text, where Properties.store escapes `=`.
    r.trace_state = None;
    r.trace_parent = Some(format!(
        "#Mon May 01 12:00:00 UTC 2024\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61rcWkgMzE\ntraceparent={tp}\n"
    ));
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(header_str(&record, "ce_traceparent"), Some(tp));
    assert_eq!(header_str(&record, "ce_tracestate"), Some(state));

    // A tracestate without a traceparent, or a malformed one, is dropped;
    // the event and its traceparent are not.
    r.trace_parent = None;
    r.trace_state = Some(state.to_owned());
    let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(header(&record, "ce_tracestate"), None);
    r.trace_parent = Some(tp.to_owned());
    for bad in ["no-equals", "UPPER=x", "k=v,", "k=a,b=c=d", "k=\u{e9}"] {
        r.trace_state = Some(bad.to_owned());
        let record = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
        let kept = header_str(&record, "ce_tracestate");
        assert_eq!(header_str(&record, "ce_traceparent"), Some(tp), "{bad}");
        assert!(
            kept.is_none() || is_tracestate(bad),
            "{bad:?} kept as {kept:?}"
        );
    }
    assert!(is_tracestate("k=v,"), "an empty member is allowed");
    assert!(
        !is_tracestate("UPPER=x") && !is_tracestate("k=a,b=c=d") && !is_tracestate("no-equals")
    );
    let too_many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
    assert!(!is_tracestate(&too_many.join(",")));
    assert!(is_tracestate(&too_many[..32].join(",")));
}

#[test]
fn content_mode_deserializes_from_lowercase_names() {
    #[derive(Deserialize)]
    struct M {
        mode: ContentMode,
    }
    let m: M = serde_json::from_str(r#"{"mode": "structured"}"#).unwrap();
    assert_eq!(m.mode, ContentMode::Structured);
    let m: M = serde_json::from_str(r#"{"mode": "binary"}"#).unwrap();
    assert_eq!(m.mode, ContentMode::Binary);
    assert!(serde_json::from_str::<M>(r#"{"mode": "Binary"}"#).is_err());
}

// ---- property tests ----

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter_map("finite", serde_json::Number::from_f64)
            .prop_map(Value::Number),
        any::<String>().prop_map(Value::String),
        "[\\u{0590}-\\u{06FF}\\u{0300}-\\u{036F}\\u{1F600}-\\u{1F64F}a-z ]{0,12}"
            .prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let tree = json_leaf().prop_recursive(8, 128, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    // Narrow but deep chains as well as wide, shallow trees; serde_json's
    // `Value` parser (used to check) stops at depth 128, so stay below it.
    let chain =
        (json_leaf(), prop::collection::vec(any::<bool>(), 0..100)).prop_map(|(leaf, wraps)| {
            wraps.into_iter().fold(leaf, |v, as_array| {
                if as_array {
                    Value::Array(vec![v])
                } else {
                    Value::Object([("k".to_owned(), v)].into_iter().collect())
                }
            })
        });
    prop_oneof![tree, chain]
}

/// JSON text the way PostgreSQL might send it: compact or with whitespace.
fn payload_text() -> impl Strategy<Value = (Value, String)> {
    (json_value(), any::<bool>()).prop_map(|(v, pretty)| {
        let text = if pretty {
            serde_json::to_string_pretty(&v).unwrap()
        } else {
            serde_json::to_string(&v).unwrap()
        };
        (v, text)
    })
}

fn time_strategy() -> impl Strategy<Value = DateTime<Utc>> {
    // 1970 .. 2200, microsecond resolution like PostgreSQL's timestamptz.
    (0i64..7_258_118_400_000_000).prop_map(|us| DateTime::from_timestamp_micros(us).unwrap())
}

prop_compose! {
    fn outbox_row()(
        id in ".+",
        aggregate_type in "[a-zA-Z0-9._-]{1,40}",
        aggregate_id in any::<String>(),
        event_type in ".+",
        (json, text) in payload_text(),
        timestamp in prop::option::of(time_strategy()),
        headers in prop::collection::vec(("x-[a-z]{1,8}", any::<Vec<u8>>()), 0..4),
        source in prop::option::of(".*"),
    ) -> (OutboxRow, Value) {
        let row = OutboxRow {
            id,
            aggregate_type,
            aggregate_id,
            event_type,
            payload: Bytes::from(text),
            payload_is_jsonb: false,
            timestamp,
            trace_parent: None,
        trace_state: None,
            headers: headers.into_iter().map(|(n, v)| (n, Bytes::from(v))).collect(),
            source,
        };
        (row, json)
    }
}

fn expected_source<'a>(row: &'a OutboxRow, settings: &'a EnvelopeSettings) -> &'a str {
    row.source
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(&settings.source)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn binary_value_is_the_payload_and_headers_are_complete(
        (row, _json) in outbox_row(),
        commit in time_strategy(),
    ) {
        let s = settings(ContentMode::Binary);
        let record = build_record(&row, commit, &s).unwrap();
        prop_assert_eq!(&record.value, &row.payload);
        prop_assert_eq!(record.key.as_ref(), row.aggregate_id.as_bytes());
        prop_assert_eq!(&record.topic, &format!("outbox.event.{}", row.aggregate_type));
        let time = format_time(row.timestamp.unwrap_or(commit));
        let mut required = vec![
            ("ce_specversion", "1.0"),
            ("ce_id", row.id.as_str()),
            ("ce_source", expected_source(&row, &s)),
            ("ce_type", row.event_type.as_str()),
            ("ce_time", time.as_str()),
            ("content-type", "application/json"),
            ("id", row.id.as_str()),
        ];
        if !row.aggregate_id.is_empty() {
            required.push(("ce_subject", row.aggregate_id.as_str()));
            required.push(("ce_partitionkey", row.aggregate_id.as_str()));
        }
        for (name, value) in required {
            prop_assert_eq!(header(&record, name), Some(value.as_bytes()), "header {}", name);
        }
        for (name, value) in &row.headers {
            prop_assert!(record.headers.contains(&(name.clone().into(), value.clone())));
        }
    }

    #[test]
    fn structured_value_holds_attributes_and_data_as_json(
        (row, json) in outbox_row(),
        commit in time_strategy(),
    ) {
        let s = settings(ContentMode::Structured);
        let record = build_record(&row, commit, &s).unwrap();
        prop_assert_eq!(header(&record, "content-type"), Some(STRUCTURED_CONTENT_TYPE.as_bytes()));
        let doc: Value = serde_json::from_slice(&record.value).unwrap();
        // Compare with the payload parsed the same way: the generated value
        // may differ in a float's last digit after a text round trip.
        let payload: Value = serde_json::from_slice(&row.payload).unwrap();
        prop_assert_eq!(&doc["data"], &payload);
        prop_assert!(json.is_object() == payload.is_object() && json.is_array() == payload.is_array());
        prop_assert_eq!(structured_data_text(&record.value), std::str::from_utf8(&row.payload).unwrap());
        prop_assert_eq!(&doc["specversion"], "1.0");
        prop_assert_eq!(&doc["id"], row.id.as_str());
        prop_assert_eq!(&doc["source"], expected_source(&row, &s));
        prop_assert_eq!(&doc["type"], row.event_type.as_str());
        let time = format_time(row.timestamp.unwrap_or(commit));
        prop_assert_eq!(&doc["time"], time.as_str());
        prop_assert_eq!(&doc["datacontenttype"], "application/json");
        if row.aggregate_id.is_empty() {
            prop_assert!(doc.get("subject").is_none());
        } else {
            prop_assert_eq!(&doc["subject"], row.aggregate_id.as_str());
            prop_assert_eq!(&doc["partitionkey"], row.aggregate_id.as_str());
        }
        prop_assert_eq!(record.key.as_ref(), row.aggregate_id.as_bytes());
    }

    #[test]
    fn arbitrary_payload_bytes_never_panic_and_match_serde_json(
        payload in prop_oneof![
            any::<Vec<u8>>(),
            payload_text().prop_map(|(_, t)| t.into_bytes()),
            // Valid JSON with one byte changed.
            (payload_text(), any::<prop::sample::Index>(), any::<u8>()).prop_map(|((_, t), i, b)| {
                let mut bytes = t.into_bytes();
                let at = i.index(bytes.len());
                bytes[at] = b;
                bytes
            }),
        ],
        mode in prop_oneof![Just(ContentMode::Binary), Just(ContentMode::Structured)],
    ) {
        let mut r = row();
        r.payload = Bytes::from(payload.clone());
        let result = build_record(&r, commit_time(), &settings(mode));
        let is_json = std::str::from_utf8(&payload)
            .ok()
            .and_then(|t| serde_json::from_str::<serde::de::IgnoredAny>(t).ok())
            .is_some();
        prop_assert_eq!(result.is_ok(), is_json);
    }

    /// Taking a `jsonb` payload as JSON without parsing it changes no
    /// record: for any JSON text the record is the one a parsed payload
    /// gives, in both content modes.
    #[test]
    fn a_jsonb_payload_builds_the_record_a_parsed_one_does(
        (row, _json) in outbox_row(),
        commit in time_strategy(),
        mode in prop_oneof![Just(ContentMode::Binary), Just(ContentMode::Structured)],
    ) {
        let s = settings(mode);
        let jsonb = OutboxRow { payload_is_jsonb: true, ..row.clone() };
        prop_assert_eq!(build_record(&jsonb, commit, &s), build_record(&row, commit, &s));
    }

    /// What a `jsonb` payload is still checked for: UTF-8 in binary mode
    /// (a `SQL_ASCII` database sends bytes unchecked), and JSON in
    /// structured mode, which embeds it and so parses it anyway.
    #[test]
    fn a_jsonb_payload_is_still_checked_for_utf8(
        payload in prop_oneof![
            any::<Vec<u8>>(),
            any::<String>().prop_map(String::into_bytes),
            payload_text().prop_map(|(_, t)| t.into_bytes()),
        ],
        mode in prop_oneof![Just(ContentMode::Binary), Just(ContentMode::Structured)],
    ) {
        let mut r = row();
        r.payload = Bytes::from(payload.clone());
        r.payload_is_jsonb = true;
        let result = build_record(&r, commit_time(), &settings(mode));
        let text = std::str::from_utf8(&payload).ok();
        let expected = match mode {
            ContentMode::Binary => text.is_some(),
            ContentMode::Structured => text
                .and_then(|t| serde_json::from_str::<serde::de::IgnoredAny>(t).ok())
                .is_some(),
        };
        prop_assert_eq!(result.is_ok(), expected);
    }

    #[test]
    fn rendered_topics_are_valid_or_refused(
        aggregate_type in any::<String>(),
        event_type in any::<String>(),
    ) {
        match render_topic("t.{aggregatetype}.{type}", &aggregate_type, &event_type) {
            Ok(topic) => {
                prop_assert!(topic.len() <= MAX_TOPIC_LEN);
                prop_assert!(topic.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
                prop_assert_eq!(topic, format!("t.{aggregate_type}.{event_type}"));
            }
            Err(e) => prop_assert_eq!(e.reason_code(), "invalid_topic"),
        }
    }
}

proptest! {
    /// The cache answers exactly what rendering answers, whatever the
    /// template uses and in whatever order rows of a few types arrive: a
    /// cache keyed on too little (the aggregate type alone under a `{type}`
    /// template) or keeping an invalid name fails here.
    #[test]
    fn cached_topics_are_the_rendered_topics(
        template in prop::sample::select(vec![
            "t.{aggregatetype}",
            "t.{aggregatetype}.{type}",
            "{type}",
            "fixed.topic",
            "{aggregatetype}{type}",
        ]),
        rows in prop::collection::vec(("[ab.!]{0,2}", "[xy/]{0,2}"), 1..40),
    ) {
        let mut cache = TopicCache::default();
        for (aggregate_type, event_type) in &rows {
            prop_assert_eq!(
                cache.topic(template, aggregate_type, event_type),
                render_topic(template, aggregate_type, event_type),
                "{} / {}", aggregate_type, event_type
            );
        }
    }
}

#[test]
fn the_topic_cache_stays_bounded() {
    let mut cache = TopicCache::default();
    for n in 0..TopicCache::CAPACITY + 10 {
        let aggregate_type = format!("agg{n}");
        let topic = cache.topic("t.{aggregatetype}.{type}", &aggregate_type, "Created");
        assert_eq!(topic, Ok(format!("t.agg{n}.Created")));
        assert!(cache.len() <= TopicCache::CAPACITY, "{} kept", cache.len());
    }
    assert!(!cache.is_empty());
}

#[test]
fn a_refused_topic_is_not_kept() {
    let mut cache = TopicCache::default();
    assert!(cache.topic("t.{aggregatetype}", "a b", "T").is_err());
    assert!(cache.is_empty());
    assert!(cache.topic("t.{aggregatetype}", "a b", "T").is_err());
}

#[test]
fn a_dropped_trace_context_says_which_part() {
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let dropped = |parent: Option<&str>, state: Option<&str>| {
        let mut r = row();
        r.trace_parent = parent.map(str::to_owned);
        r.trace_state = state.map(str::to_owned);
        let kept = TraceContext::of_row(&r);
        TraceContext::dropped(&r, kept.as_ref())
    };
    assert_eq!(dropped(None, None), None);
    assert_eq!(
        dropped(Some(""), None),
        None,
        "an empty column is no context"
    );
    assert_eq!(dropped(Some(tp), None), None);
    assert_eq!(dropped(Some(tp), Some("congo=t61rcWkgMzE")), None);
    assert_eq!(
        dropped(Some("00-zz-b7ad6b7169203331-01"), None),
        Some("traceparent")
    );
    assert_eq!(dropped(Some(tp), Some("UPPER=x")), Some("tracestate"));
    assert_eq!(
        dropped(Some(&format!("traceparent={tp}\ntracestate=k=a=b")), None),
        Some("tracestate")
    );
    assert_eq!(
        dropped(Some(&tp.to_uppercase()), Some("k=v")),
        Some("traceparent")
    );
}

/// Numbers no machine type holds exactly, as a payload writes them.
const EDGE_NUMBERS: &str =
    r#"{"a": 99999999999999999.99, "b": 1e400, "c": -0, "d": 18446744073709551617, "e": 1.0}"#;

#[test]
fn numbers_reach_the_record_as_written_in_both_modes() {
    let mut r = row();
    r.payload = Bytes::from_static(EDGE_NUMBERS.as_bytes());
    let binary = build_record(&r, commit_time(), &settings(ContentMode::Binary)).unwrap();
    assert_eq!(binary.value.as_ref(), EDGE_NUMBERS.as_bytes());
    let structured = build_record(&r, commit_time(), &settings(ContentMode::Structured)).unwrap();
    assert_eq!(structured_data_text(&structured.value), EDGE_NUMBERS);
    r.payload_is_jsonb = true;
    let jsonb = build_record(&r, commit_time(), &settings(ContentMode::Structured)).unwrap();
    assert_eq!(structured_data_text(&jsonb.value), EDGE_NUMBERS);
}
