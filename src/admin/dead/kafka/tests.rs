use super::*;
use proptest::prelude::*;

use crate::deadletter::{DeadLetter, dead_letter_record, headers_only};
use pgoutput::lsn::Lsn;

const TEMPLATE: &str = "outbox.event.{aggregatetype}";

static NO_CONTRACTS: std::sync::LazyLock<Contracts> = std::sync::LazyLock::new(Contracts::default);

/// Rebuilt with `template` and `source`, no contracts.
fn rebuild<'a>(template: &'a str, source: &'a str) -> Rebuild<'a> {
    Rebuild {
        topic_template: template,
        source,
        contracts: &NO_CONTRACTS,
    }
}

/// A dead letter as the relay writes it, read back from `dlq` at `offset`.
fn read_back(record: crate::envelope::KafkaRecord, offset: i64) -> DlqRecord {
    DlqRecord {
        topic: record.topic,
        partition: 0,
        offset,
        timestamp: DateTime::from_timestamp(1_700_000_000, 0),
        key: Some(record.key),
        value: Some(record.value),
        headers: record
            .headers
            .into_iter()
            .map(|(name, value)| (name.into_owned(), value))
            .collect(),
    }
}

fn dead_letter(
    id: &str,
    key: &[u8],
    value: &[u8],
    extra: Vec<(String, Bytes)>,
) -> crate::envelope::KafkaRecord {
    let mut columns = vec![
        ("id".to_owned(), Bytes::copy_from_slice(id.as_bytes())),
        ("aggregatetype".to_owned(), Bytes::from_static(b"order")),
        ("aggregateid".to_owned(), Bytes::copy_from_slice(key)),
        ("type".to_owned(), Bytes::from_static(b"Placed")),
        (
            "timestamp".to_owned(),
            Bytes::from_static(b"2026-01-02T03:04:05.000006Z"),
        ),
    ];
    columns.extend(extra);
    dead_letter_record(DeadLetter {
        topic: "outbox.dlq",
        reason: "payload is not JSON".into(),
        reason_code: "payload_not_json",
        key: Bytes::copy_from_slice(key),
        lsn: Lsn(0x10),
        source_table: "public.outbox",
        original_topic: Some("orders.placed".into()),
        value: Bytes::copy_from_slice(value),
        columns,
    })
}

fn get<'r>(record: &'r Republished, name: &str) -> Option<&'r [u8]> {
    record
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_ref())
}

#[test]
fn a_dead_letter_is_republished_as_its_event_to_its_topic() {
    let dlq = read_back(
        dead_letter(
            "e-1",
            b"o-7",
            br#"{"total": 1.50}"#,
            vec![("tenant".into(), Bytes::from_static(b"acme"))],
        ),
        41,
    );
    let out = republished(&dlq, rebuild(TEMPLATE, "/orders")).unwrap();
    assert_eq!(
        out.topic, "orders.placed",
        "the header wins over the template"
    );
    assert_eq!(out.key.as_deref(), Some(&b"o-7"[..]));
    assert_eq!(out.value.as_deref(), Some(&br#"{"total": 1.50}"#[..]));
    assert_eq!(get(&out, "content-type"), Some(&b"application/json"[..]));
    assert_eq!(get(&out, "ce_id"), Some(&b"e-1"[..]));
    assert_eq!(get(&out, "id"), Some(&b"e-1"[..]));
    assert_eq!(get(&out, "ce_type"), Some(&b"Placed"[..]));
    assert_eq!(get(&out, "ce_source"), Some(&b"/orders"[..]));
    assert_eq!(get(&out, "ce_subject"), Some(&b"o-7"[..]));
    assert_eq!(
        get(&out, "ce_time"),
        Some(&b"2026-01-02T03:04:05.000006Z"[..])
    );
    assert_eq!(get(&out, "tenant"), Some(&b"acme"[..]));
    assert_eq!(
        get(&out, "dlq_replayed_from"),
        Some(&b"outbox.dlq/0/41"[..])
    );
    for gone in [
        "dlq_reason",
        "dlq_reason_code",
        "lsn",
        "source_table",
        "dlq_original_topic",
        "aggregatetype",
        "aggregateid",
        "type",
        "timestamp",
    ] {
        assert_eq!(get(&out, gone), None, "{gone} should not be republished");
    }
    let count = |name: &str| out.headers.iter().filter(|(n, _)| n == name).count();
    assert_eq!((count("id"), count("ce_id")), (1, 1));
}

#[test]
fn without_the_topic_header_the_template_names_the_topic() {
    let mut dlq = read_back(dead_letter("e-1", b"k", b"{}", vec![]), 0);
    dlq.headers.retain(|(n, _)| n != "dlq_original_topic");
    assert_eq!(
        republished(&dlq, rebuild(TEMPLATE, "/s")).unwrap().topic,
        "outbox.event.order"
    );
    dlq.headers.retain(|(n, _)| n != "aggregatetype");
    let why = republished(&dlq, rebuild(TEMPLATE, "/s")).unwrap_err();
    assert!(why.contains("topic is not known"), "{why}");
}

#[test]
fn a_dead_letter_without_its_payload_or_its_id_is_not_retryable() {
    let whole = dead_letter("e-1", b"k", &[b'x'; 100], vec![]);
    let cut = read_back(headers_only(&whole), 3);
    let why = republished(&cut, rebuild(TEMPLATE, "/s")).unwrap_err();
    assert!(
        why.contains("not kept") && why.contains("100 bytes"),
        "{why}"
    );
    assert!(why.contains("SHA-256"), "{why}");
    let mut anonymous = read_back(whole, 4);
    anonymous.headers.retain(|(n, _)| n != "id");
    assert_eq!(dead_letter_id(&anonymous), "outbox.dlq/0/4");
    let why = republished(&anonymous, rebuild(TEMPLATE, "/s")).unwrap_err();
    assert!(why.contains("no readable event id"), "{why}");
}

#[test]
fn locations_that_are_not_one_do_not_parse() {
    for bad in [
        "",
        "a/1",
        "/1/2",
        "a//2",
        "a/1/",
        "a/-1/2",
        "a/1/+2",
        "a b/1/2",
        "a/1/99999999999999999999",
        "a/99999999999/1",
        "événement/1/2",
    ] {
        assert_eq!(parse_location(bad), None, "{bad:?}");
    }
    assert_eq!(
        parse_location("my.dlq/3/17"),
        Some(("my.dlq".to_owned(), 3, 17))
    );
}

proptest! {
    /// Formatting a location and parsing it back gives the same topic,
    /// partition and offset, for every topic name Kafka accepts.
    #[test]
    fn a_location_parses_back(
        topic in "[a-zA-Z0-9._-]{1,249}",
        partition in 0..=i32::MAX,
        offset in 0..=i64::MAX,
    ) {
        prop_assume!(topic != "." && topic != "..");
        let text = location(&topic, partition, offset);
        prop_assert_eq!(parse_location(&text), Some((topic, partition, offset)));
    }

    /// Whatever the id, the key, the JSON payload's text and the header
    /// columns hold, the republished event has the key and payload byte for
    /// byte, the event id, and every header column with its bytes.
    #[test]
    fn key_payload_and_headers_survive_byte_for_byte(
        id in "\\PC{1,40}",
        key in proptest::collection::vec(any::<u8>(), 1..200),
        text in "\\PC{0,500}",
        spaces in "[ \t\r\n]{0,3}",
        extra in proptest::collection::vec(("x_[a-z%'\"é]{1,10}", proptest::collection::vec(any::<u8>(), 0..300)), 0..5),
    ) {
        let extra: Vec<(String, Bytes)> = extra.into_iter().map(|(n, v)| (n, Bytes::from(v))).collect();
        // Any text, as JSON, with the spacing a service chose.
        let value = format!("{spaces}{{{spaces}\"t\":{}}}{spaces}", serde_json::Value::String(text)).into_bytes();
        let dlq = read_back(dead_letter(&id, &key, &value, extra.clone()), 9);
        let out = republished(&dlq, rebuild(TEMPLATE, "/s")).unwrap();
        prop_assert_eq!(out.key.as_deref(), Some(&key[..]));
        prop_assert_eq!(out.value.as_deref(), Some(&value[..]));
        prop_assert_eq!(get(&out, "ce_id"), Some(id.as_bytes()));
        prop_assert_eq!(get(&out, "id"), Some(id.as_bytes()));
        prop_assert_eq!(dead_letter_id(&dlq), id);
        // The dead letter keeps the first of two columns of one name.
        let mut seen = std::collections::HashSet::new();
        for (name, bytes) in extra.iter().filter(|(n, _)| seen.insert(n.clone())) {
            prop_assert_eq!(get(&out, name), Some(bytes.as_ref()), "{}", name);
        }
    }
}

#[test]
fn a_dead_letter_is_never_republished_into_the_dead_letter_topic() {
    // A topic template can render to the dead-letter topic's own name: the
    // event would come back as a dead letter of itself, for ever.
    let mut dlq = read_back(dead_letter("e-1", b"k", b"{}", vec![]), 0);
    dlq.headers.retain(|(n, _)| n != "dlq_original_topic");
    let why = republished(&dlq, rebuild("outbox.dlq", "/s")).unwrap_err();
    assert!(why.contains("dead-letter topic"), "{why}");
    assert!(not_retryable(&dlq, rebuild("outbox.dlq", "/s")).is_some());
}

#[test]
fn a_retry_checks_the_event_against_todays_contract() {
    use crate::contracts::Schema;
    use std::sync::Arc;
    let contracts = |schema: serde_json::Value| {
        Contracts::from_parts(vec![(
            Some("order".into()),
            Some("Placed".into()),
            Arc::new(Schema::from_value(&schema, "order.json", Some("urn:order:v2")).unwrap()),
        )])
    };
    let dlq = read_back(dead_letter("e-1", b"o-7", br#"{"amount":"12"}"#, vec![]), 3);

    let strict = contracts(serde_json::json!({"properties": {"amount": {"type": "integer"}}}));
    let with_strict = Rebuild {
        contracts: &strict,
        ..rebuild(TEMPLATE, "/s")
    };
    let why = republished(&dlq, with_strict).unwrap_err();
    assert!(
        why.starts_with("payload breaks contract order.json: at /amount:")
            && why.contains("fix the schema"),
        "{why}"
    );
    assert!(not_retryable(&dlq, with_strict).is_some());

    // The schema fixed (the amount may be a string): the retry goes, and
    // says which schema it was checked against.
    let fixed =
        contracts(serde_json::json!({"properties": {"amount": {"type": ["integer", "string"]}}}));
    let out = republished(
        &dlq,
        Rebuild {
            contracts: &fixed,
            ..rebuild(TEMPLATE, "/s")
        },
    )
    .unwrap();
    assert_eq!(get(&out, "ce_dataschema"), Some(&b"urn:order:v2"[..]));
    assert_eq!(out.value.as_deref(), Some(&br#"{"amount":"12"}"#[..]));
    // No contract: no dataschema.
    let plain = republished(&dlq, rebuild(TEMPLATE, "/s")).unwrap();
    assert_eq!(get(&plain, "ce_dataschema"), None);
}

#[test]
fn a_payload_that_is_not_json_is_not_sent_as_json() {
    // What the relay dead-letters as payload_not_json: text that is not
    // JSON, bytes that are not UTF-8, two values, nothing at all.
    for (value, why) in [
        (&b"not json: ' % \xc3\xa9 {"[..], "expected"),
        (&[0xff, 0xfe, b'{', b'}'][..], "not UTF-8 at byte 0"),
        (&b"{} {}"[..], "trailing characters"),
        (&b""[..], "EOF"),
    ] {
        let dlq = read_back(dead_letter("e-1", b"k", value, vec![]), 5);
        let refused = republished(&dlq, rebuild(TEMPLATE, "/s")).unwrap_err();
        assert!(
            refused.starts_with("its payload is not valid JSON (")
                && refused.contains(why)
                && refused.contains("content-type: application/json")
                && refused.contains("dead discard"),
            "{value:?}: {refused}"
        );
        assert_eq!(not_retryable(&dlq, rebuild(TEMPLATE, "/s")), Some(refused));
    }
    // Deep nesting is JSON all the same (no recursion limit).
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let dlq = read_back(dead_letter("e-1", b"k", deep.as_bytes(), vec![]), 6);
    assert!(republished(&dlq, rebuild(TEMPLATE, "/s")).is_ok());
}
