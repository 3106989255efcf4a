use super::*;
use crate::assembler::Column;

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
