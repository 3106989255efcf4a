use super::*;
use pgoutput::assembler::Column;

fn relation(cols: &[&str]) -> Arc<Relation> {
    Arc::new(Relation {
        oid: 16384,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns: cols
            .iter()
            .map(|c| Column {
                flags: 0,
                name: (*c).into(),
                type_oid: 25,
                type_modifier: -1,
            })
            .collect(),
    })
}

fn text(s: &str) -> TupleValue {
    TupleValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

const COLS: &[&str] = &[
    "id",
    "aggregatetype",
    "aggregateid",
    "type",
    "payload",
    "timestamp",
];

fn row(values: Vec<TupleValue>) -> TupleData {
    TupleData { columns: values }
}

#[test]
fn extracts_debezium_columns() {
    let rel = relation(COLS);
    let mut ex = RowExtractor::new(ColumnMap::default());
    let r = ex
        .extract(
            &rel,
            &row(vec![
                text("0b3f6f6e-6f0e-4a43-9b53-3a3b1f4d9a10"),
                text("order"),
                text("o-1"),
                text("OrderPlaced"),
                text(r#"{"total": 42}"#),
                text("2026-11-29 12:00:00.5+00"),
            ]),
        )
        .unwrap();
    assert_eq!(r.id, "0b3f6f6e-6f0e-4a43-9b53-3a3b1f4d9a10");
    assert_eq!(r.aggregate_type, "order");
    assert_eq!(r.aggregate_id, "o-1");
    assert_eq!(r.event_type, "OrderPlaced");
    assert_eq!(r.payload.as_ref(), br#"{"total": 42}"#);
    assert_eq!(
        r.timestamp.unwrap().to_rfc3339(),
        "2026-11-29T12:00:00.500+00:00"
    );
    assert_eq!(r.trace_parent, None);
}

#[test]
fn null_key_is_a_dead_letter_reason() {
    let rel = relation(COLS);
    let mut ex = RowExtractor::new(ColumnMap::default());
    let err = ex
        .extract(
            &rel,
            &row(vec![
                text("id-1"),
                text("order"),
                TupleValue::Null,
                text("OrderPlaced"),
                text("{}"),
                TupleValue::Null,
            ]),
        )
        .unwrap_err();
    assert_eq!(err.reason_code(), "null_key");
    assert!(err.to_string().contains("aggregateid"), "{err}");
}

#[test]
fn salvage_reads_what_it_can_of_a_row_that_cannot_be_extracted() {
    let rel = relation(&[
        "id",
        "aggregatetype",
        "aggregateid",
        "type",
        "payload",
        "timestamp",
        "tenant",
    ]);
    let ex = RowExtractor::new(ColumnMap {
        headers: vec![("tenant".into(), "tenant_id".into())],
        ..ColumnMap::default()
    });
    let tuple = row(vec![
        text("id-1"),
        text("order"),
        TupleValue::Null,
        TupleValue::UnchangedToast,
        text(r#"{"n": 1}"#),
        text("2026-11-29 12:00:00.5+00"),
        text("acme"),
    ]);
    let s = ex.salvage(&rel, &tuple);
    assert_eq!(s.payload.as_deref(), Some(&br#"{"n": 1}"#[..]));
    let names: Vec<&str> = s.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id", "aggregatetype", "timestamp", "tenant_id"]);
    assert_eq!(
        s.columns[2].1,
        Bytes::from_static(b"2026-11-29T12:00:00.500000Z")
    );
    // A row whose payload column was dropped keeps the rest.
    let rel = relation(&["id", "aggregatetype", "aggregateid", "type"]);
    let s = ex.salvage(&rel, &row(vec![text("2"), text("a"), text("k"), text("t")]));
    assert_eq!(s.payload, None);
    assert_eq!(s.columns.len(), 4);
}

#[test]
fn dropped_column_names_the_column_and_the_fix() {
    let rel = relation(&["id", "aggregatetype", "type", "payload"]);
    let mut ex = RowExtractor::new(ColumnMap::default());
    let err = ex
        .extract(
            &rel,
            &row(vec![text("id-1"), text("order"), text("T"), text("{}")]),
        )
        .unwrap_err();
    assert_eq!(err.reason_code(), "missing_column");
    let msg = err.to_string();
    assert!(
        msg.contains("\"aggregateid\"") && msg.contains("public.outbox"),
        "{msg}"
    );
    assert!(msg.contains("postgres.columns.aggregate_id"), "{msg}");
}

#[test]
fn new_relation_shape_is_picked_up() {
    let mut ex = RowExtractor::new(ColumnMap {
        headers: vec![("tenant".into(), "tenant".into())],
        ..ColumnMap::default()
    });
    let v1 = relation(&["id", "aggregatetype", "aggregateid", "type", "payload"]);
    let r = ex
        .extract(
            &v1,
            &row(vec![text("1"), text("a"), text("k"), text("t"), text("{}")]),
        )
        .unwrap();
    assert!(r.headers.is_empty());
    // ALTER TABLE ... ADD COLUMN tenant: a new Relation arrives.
    let v2 = relation(&[
        "id",
        "aggregatetype",
        "aggregateid",
        "type",
        "payload",
        "tenant",
    ]);
    let r = ex
        .extract(
            &v2,
            &row(vec![
                text("2"),
                text("a"),
                text("k"),
                text("t"),
                text("{}"),
                text("acme"),
            ]),
        )
        .unwrap();
    assert_eq!(
        r.headers,
        vec![("tenant".to_string(), Bytes::from_static(b"acme"))]
    );
}

#[test]
fn timestamps_with_and_without_zone() {
    assert_eq!(
        parse_pg_timestamp("2026-01-02 03:04:05.123456+02")
            .unwrap()
            .to_rfc3339(),
        "2026-01-02T01:04:05.123456+00:00"
    );
    assert_eq!(
        parse_pg_timestamp("2026-01-02 03:04:05+05:30")
            .unwrap()
            .to_rfc3339(),
        "2026-01-01T21:34:05+00:00"
    );
    assert_eq!(
        parse_pg_timestamp("2026-01-02 03:04:05.5")
            .unwrap()
            .to_rfc3339(),
        "2026-01-02T03:04:05.500+00:00"
    );
    assert_eq!(parse_pg_timestamp("yesterday"), None);
}

#[test]
fn the_fast_path_reads_what_postgresql_prints() {
    for (text, expected) in [
        (
            "2026-11-30 15:16:57.123456+00",
            "2026-11-30T15:16:57.123456+00:00",
        ),
        ("2026-11-30 15:16:57+00", "2026-11-30T15:16:57+00:00"),
        (
            "2026-11-30 00:30:00.5-03:30",
            "2026-11-30T04:00:00.500+00:00",
        ),
        ("2026-01-01 01:00:00+02", "2025-12-31T23:00:00+00:00"),
        (
            "2026-11-30 15:16:57.000001",
            "2026-11-30T15:16:57.000001+00:00",
        ),
    ] {
        let fast = parse_iso_timestamp(text.as_bytes()).map(|t| t.to_rfc3339());
        assert_eq!(fast.as_deref(), Some(expected), "{text}");
    }
    // Left to the general parser: offset with seconds, BC, seven
    // fraction digits, a day that does not exist, a leap second.
    for text in [
        "1890-01-01 00:00:00+00:53:28",
        "0044-03-15 12:00:00+00 BC",
        "2026-11-30 15:16:57.1234567+00",
        "2026-02-30 00:00:00+00",
        "2016-12-31 23:59:60+00",
        "2026-11-30T15:16:57+00",
    ] {
        assert_eq!(parse_iso_timestamp(text.as_bytes()), None, "{text}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// The fast path never disagrees with the general parser: on
    /// timestamps in PostgreSQL's shapes and on near misses.
    #[test]
    fn the_fast_path_agrees_with_the_general_parser(
        year in 0u32..10000, month in 0u32..14, day in 0u32..33,
        hour in 0u32..26, minute in 0u32..62, second in 0u32..62,
        fraction in proptest::option::of("[0-9]{1,8}"),
        offset in proptest::option::of((proptest::bool::ANY, 0u32..26, proptest::option::of(0u32..62))),
        noise in proptest::option::of("[ +:.a-zT0-9-]{1,3}"),
    ) {
        let mut text = format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}");
        if let Some(f) = &fraction {
            text.push('.');
            text.push_str(f);
        }
        if let Some((negative, hh, mm)) = offset {
            text.push(if negative { '-' } else { '+' });
            text.push_str(&format!("{hh:02}"));
            if let Some(mm) = mm {
                text.push_str(&format!(":{mm:02}"));
            }
        }
        if let Some(n) = &noise {
            text.push_str(n);
        }
        if let Some(fast) = parse_iso_timestamp(text.as_bytes()) {
            proptest::prop_assert_eq!(Some(fast), parse_pg_timestamp_general(&text), "{}", text);
        }
    }
}

/// Only a `jsonb` payload column in text format is marked as PostgreSQL's
/// own JSON (the envelope then skips parsing it); `json`, `text`, a domain
/// (its own OID) and the binary format are parsed as before.
#[test]
fn only_a_jsonb_payload_in_text_format_is_taken_as_json() {
    let values = |payload: TupleValue| {
        row(vec![
            text("e-1"),
            text("order"),
            text("o-1"),
            text("OrderPlaced"),
            payload,
            TupleValue::Null,
        ])
    };
    let typed = |payload_type: u32| {
        let mut rel = Relation::clone(&relation(COLS));
        rel.columns[4].type_oid = payload_type;
        Arc::new(rel)
    };
    let cases = [
        (JSONB_OID, text(r#"{"n": 1}"#), true),
        (
            JSONB_OID,
            TupleValue::Binary(Bytes::from_static(b"\x01{\"n\": 1}")),
            false,
        ),
        (114, text(r#"{"n": 1}"#), false),
        (25, text(r#"{"n": 1}"#), false),
        (90_001, text(r#"{"n": 1}"#), false),
    ];
    for (payload_type, payload, expected) in cases {
        let mut ex = RowExtractor::new(ColumnMap::default());
        let r = ex
            .extract(&typed(payload_type), &values(payload.clone()))
            .unwrap();
        assert_eq!(
            r.payload_is_jsonb, expected,
            "payload of type {payload_type} sent as {payload:?}"
        );
    }
}
