use super::*;
use crate::ack::AckTracker;
use crate::envelope::ContentMode;
use crate::relay::refusals::RowFate;
use pgoutput::{Column, TupleValue};

fn relation() -> Arc<Relation> {
    let columns = ["id", "aggregatetype", "aggregateid", "type", "payload"]
        .iter()
        .map(|name| Column {
            flags: 0,
            name: (*name).into(),
            type_oid: 25,
            type_modifier: -1,
        })
        .collect();
    Arc::new(Relation {
        oid: 1,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns,
    })
}

fn tuple(values: [Option<&str>; 5]) -> TupleData {
    TupleData {
        columns: values
            .iter()
            .map(|v| match v {
                Some(v) => TupleValue::Text(Bytes::copy_from_slice(v.as_bytes())),
                None => TupleValue::Null,
            })
            .collect(),
    }
}

fn router() -> Router {
    Router::new(
        ColumnMap::default(),
        EnvelopeSettings {
            source: "/test".into(),
            mode: ContentMode::Binary,
            topic_template: "outbox.event.{aggregatetype}".into(),
        },
        "dlq".into(),
        "public.outbox".into(),
    )
}

fn commit() -> Commit {
    Commit {
        txn: AckTracker::new(Lsn::ZERO).open(),
        lsn: Lsn(0x100),
        time: DateTime::from_timestamp(0, 0).unwrap(),
    }
}

fn header<'r>(record: &'r KafkaRecord, name: &str) -> Option<&'r [u8]> {
    record
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_ref())
}

#[test]
fn a_good_row_becomes_its_event_keyed_by_the_aggregate() {
    let routed = router().route(
        &relation(),
        &tuple([
            Some("e1"),
            Some("order"),
            Some("7"),
            Some("Placed"),
            Some("{}"),
        ]),
        &commit(),
        &Refusals::new(),
    );
    let Routed::Event {
        record,
        tag,
        suspect,
        ..
    } = routed
    else {
        panic!("expected the event, got {routed:?}");
    };
    assert_eq!(record.topic, "outbox.event.order");
    assert_eq!(record.key.as_ref(), b"7");
    assert_eq!(record.value.as_ref(), b"{}");
    assert_eq!((tag.row_key.as_str(), tag.dead_letter), ("e1", false));
    assert!(!suspect);
}

#[test]
fn a_row_without_a_key_is_dead_lettered_with_its_payload() {
    let routed = router().route(
        &relation(),
        &tuple([
            Some("e1"),
            Some("order"),
            None,
            Some("Placed"),
            Some(r#"{"a":1}"#),
        ]),
        &commit(),
        &Refusals::new(),
    );
    let Routed::DeadLetter { record, tag } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(record.topic, "dlq");
    assert_eq!(record.value.as_ref(), br#"{"a":1}"#);
    assert_eq!(header(&record, "dlq_reason_code"), Some(&b"null_key"[..]));
    assert_eq!(header(&record, "id"), Some(&b"e1"[..]));
    assert_eq!(tag.row_key, "e1");
    assert!(tag.dead_letter);
}

#[test]
fn a_payload_that_is_not_json_is_dead_lettered_unchanged() {
    let routed = router().route(
        &relation(),
        &tuple([
            Some("e1"),
            Some("order"),
            Some("7"),
            Some("Placed"),
            Some("not json"),
        ]),
        &commit(),
        &Refusals::new(),
    );
    let Routed::DeadLetter { record, tag } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(record.value.as_ref(), b"not json");
    assert_eq!(record.key.as_ref(), b"7");
    assert_eq!(tag.row_key, "e1");
}

#[test]
fn a_fate_left_by_a_refusal_decides_the_replay() {
    let row = tuple([
        Some("e1"),
        Some("order"),
        Some("7"),
        Some("Placed"),
        Some("{}"),
    ]);
    let mut refusals = Refusals::new();
    refusals.insert(
        "e1".into(),
        RowFate {
            event: EventFate::Suspect,
            ..RowFate::default()
        },
    );
    let routed = router().route(&relation(), &row, &commit(), &refusals);
    assert!(matches!(routed, Routed::Event { suspect: true, .. }));
    refusals.get_mut("e1").unwrap().event = EventFate::DeadLetter {
        reason: "too large".into(),
        code: "too_large",
    };
    let routed = router().route(&relation(), &row, &commit(), &refusals);
    let Routed::DeadLetter { record, .. } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(header(&record, "dlq_reason_code"), Some(&b"too_large"[..]));
    assert_eq!(record.value.as_ref(), b"{}");
}

fn content(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn a_message_routes_like_a_row() {
    let message = content(
        r#"{"id":"e1","aggregatetype":"order","aggregateid":"7","type":"Placed","payload":{"a": 1}}"#,
    );
    let routed = router().route_message(&message, Lsn(0x180), &commit(), &Refusals::new());
    let Routed::Event {
        record,
        tag,
        origin,
        ..
    } = routed
    else {
        panic!("expected the event, got {routed:?}");
    };
    assert_eq!(origin, Origin::Message);
    assert_eq!(record.topic, "outbox.event.order");
    assert_eq!(record.key.as_ref(), b"7");
    assert_eq!(record.value.as_ref(), br#"{"a": 1}"#);
    assert_eq!(header(&record, "ce_id"), Some(&b"e1"[..]));
    assert_eq!((tag.row_key.as_str(), tag.dead_letter), ("e1", false));
}

#[test]
fn a_broken_message_is_dead_lettered_with_its_whole_content() {
    let broken = content(r#"{"id":"e1","aggregatetype":"order","#);
    let routed = router().with_message_prefix("orders").route_message(
        &broken,
        Lsn(0x180),
        &commit(),
        &Refusals::new(),
    );
    let Routed::DeadLetter { record, tag } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(record.topic, "dlq");
    assert_eq!(record.value, broken);
    assert_eq!(
        header(&record, "dlq_reason_code"),
        Some(&b"message_invalid"[..])
    );
    assert_eq!(
        header(&record, "source_table"),
        Some(&b"message:orders"[..])
    );
    assert!(tag.row_key.starts_with("@0/180/"), "{}", tag.row_key);
    // Two broken messages with the same content are told apart by LSN.
    let other = router().route_message(&broken, Lsn(0x190), &commit(), &Refusals::new());
    let Routed::DeadLetter { tag: other, .. } = other else {
        panic!("expected a dead letter");
    };
    assert_ne!(tag.row_key, other.row_key);

    // Readable but without a key: its payload and members are kept.
    let keyless =
        content(r#"{"id":"e2","aggregatetype":"order","type":"Placed","payload":{"b":2}}"#);
    let routed = router().route_message(&keyless, Lsn(0x1a0), &commit(), &Refusals::new());
    let Routed::DeadLetter { record, tag } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(record.value.as_ref(), br#"{"b":2}"#);
    assert_eq!(header(&record, "dlq_reason_code"), Some(&b"null_key"[..]));
    assert_eq!(header(&record, "id"), Some(&b"e2"[..]));
    assert_eq!(tag.row_key, "e2");
}

#[test]
fn a_dead_letter_names_the_topic_its_event_was_meant_for() {
    let routed = router().route(
        &relation(),
        &tuple([
            Some("e1"),
            Some("order"),
            Some("7"),
            Some("Placed"),
            Some("not json"),
        ]),
        &commit(),
        &Refusals::new(),
    );
    let Routed::DeadLetter { record, .. } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(
        header(&record, "dlq_original_topic"),
        Some(&b"outbox.event.order"[..])
    );
    // A row whose aggregatetype makes no valid topic has no topic to name.
    let routed = router().route(
        &relation(),
        &tuple([
            Some("e2"),
            Some("no/such topic"),
            Some("7"),
            Some("Placed"),
            Some("{}"),
        ]),
        &commit(),
        &Refusals::new(),
    );
    let Routed::DeadLetter { record, .. } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(header(&record, "dlq_original_topic"), None);
    assert_eq!(
        header(&record, "dlq_reason_code"),
        Some(&b"invalid_topic"[..])
    );
}

/// The checkpoint topic is the relay's own: an event whose topic renders
/// to it (here `outbox.event.{aggregatetype}` with aggregate type
/// `checkpoints`) becomes a dead letter saying so, from a table row or a
/// logical message; its neighbours are events as before.
#[test]
fn an_event_bound_for_the_checkpoint_topic_is_dead_lettered() {
    let mut router = router().with_checkpoint_topic("outbox.event.checkpoints");
    let row = |id: &str, aggregate_type: &str| {
        tuple([
            Some(id),
            Some(aggregate_type),
            Some("7"),
            Some("Placed"),
            Some("{}"),
        ])
    };
    let routed = router.route(
        &relation(),
        &row("e1", "checkpoints"),
        &commit(),
        &Refusals::new(),
    );
    let Routed::DeadLetter { record, tag } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(record.topic, "dlq");
    assert!(tag.dead_letter);
    assert_eq!(
        header(&record, "dlq_reason_code"),
        Some(CHECKPOINT_TOPIC.as_bytes())
    );
    let reason = String::from_utf8_lossy(header(&record, "dlq_reason").unwrap()).into_owned();
    assert!(reason.contains("kafka.checkpoint_topic"), "{reason}");
    assert_eq!(
        header(&record, "dlq_original_topic"),
        Some(&b"outbox.event.checkpoints"[..])
    );
    // Asked again (the topic now cached), the same.
    let again = router.route(
        &relation(),
        &row("e2", "checkpoints"),
        &commit(),
        &Refusals::new(),
    );
    assert!(matches!(again, Routed::DeadLetter { .. }), "{again:?}");
    let message = Bytes::from_static(
        br#"{"id":"m1","aggregatetype":"checkpoints","aggregateid":"7","type":"Placed","payload":{}}"#,
    );
    let routed = router.route_message(&message, Lsn(0x180), &commit(), &Refusals::new());
    assert!(matches!(routed, Routed::DeadLetter { .. }), "{routed:?}");
    let routed = router.route(
        &relation(),
        &row("e3", "order"),
        &commit(),
        &Refusals::new(),
    );
    let Routed::Event { record, .. } = routed else {
        panic!("expected an event, got {routed:?}");
    };
    assert_eq!(record.topic, "outbox.event.order");
}

/// Every reason code a dead letter can carry is a series of the
/// dead-letter counter made at 0 at start-up
/// (`metrics::DEAD_LETTER_REASONS`): an alert on a reason that first
/// appears at 1 would miss it. A new reason (a new variant below) does not
/// compile here until it is listed.
#[test]
fn every_dead_letter_reason_code_is_a_known_series() {
    use crate::envelope::EnvelopeError;
    use crate::outbox::RowError;
    use crate::sink::{RefusalClass, RefusalKind};
    let (c, role) = ("c".to_owned(), "payload");
    let rows = [
        RowError::MissingColumn {
            table: "t".into(),
            column: c.clone(),
            role,
        },
        RowError::Null {
            column: c.clone(),
            role: "aggregate_id",
        },
        RowError::Null {
            column: c.clone(),
            role,
        },
        RowError::NotUtf8 {
            column: c.clone(),
            role,
        },
        RowError::UnchangedToast { column: c, role },
        RowError::MessageInvalid { reason: "r".into() },
        RowError::ShapeMismatch {
            table: "t".into(),
            got: 1,
            expected: 2,
        },
    ];
    for row in &rows {
        match row {
            RowError::MissingColumn { .. }
            | RowError::Null { .. }
            | RowError::NotUtf8 { .. }
            | RowError::UnchangedToast { .. }
            | RowError::MessageInvalid { .. }
            | RowError::ShapeMismatch { .. } => {}
        }
    }
    let envelopes = [
        EnvelopeError::PayloadNotJson { reason: "r".into() },
        EnvelopeError::MissingAttribute { attribute: "type" },
        EnvelopeError::InvalidTopic {
            topic: "t".into(),
            reason: "r",
        },
    ];
    for envelope in &envelopes {
        match envelope {
            EnvelopeError::PayloadNotJson { .. }
            | EnvelopeError::MissingAttribute { .. }
            | EnvelopeError::InvalidTopic { .. } => {}
        }
    }
    let refusals = [
        RefusalKind::TooLarge,
        RefusalKind::TopicMissing,
        RefusalKind::PolicyViolation,
        RefusalKind::InvalidRecord,
        RefusalKind::TopicUnauthorized,
        RefusalKind::ClusterUnauthorized,
        RefusalKind::AuthenticationFailed,
    ];
    for refusal in refusals {
        match refusal {
            RefusalKind::TooLarge
            | RefusalKind::TopicMissing
            | RefusalKind::PolicyViolation
            | RefusalKind::InvalidRecord
            | RefusalKind::TopicUnauthorized
            | RefusalKind::ClusterUnauthorized
            | RefusalKind::AuthenticationFailed => {}
        }
    }
    let codes = rows
        .iter()
        .map(RowError::reason_code)
        .chain(envelopes.iter().map(EnvelopeError::reason_code))
        // Credentials and permissions stop the relay; nothing is
        // dead-lettered for them.
        .chain(
            refusals
                .iter()
                .filter(|k| k.class() != RefusalClass::Unauthorized)
                .map(|k| k.reason_code()),
        )
        .chain([CHECKPOINT_TOPIC, CONTRACT_VIOLATION]);
    for code in codes {
        assert!(
            crate::metrics::DEAD_LETTER_REASONS.contains(&code),
            "dead-letter reason {code} is not made at 0 at start-up"
        );
    }
}

fn contracted_router(mode: ContentMode) -> Router {
    use crate::contracts::Schema;
    let schema = Schema::from_value(
        &serde_json::json!({
            "$id": "https://schemas.example.com/order-placed/v1",
            "type": "object",
            "required": ["amount"],
            "properties": {"amount": {"type": "integer", "minimum": 0}}
        }),
        "order-placed.json",
        None,
    )
    .unwrap();
    let contracts = Contracts::from_parts(vec![(
        Some("order".into()),
        Some("Placed".into()),
        Arc::new(schema),
    )]);
    let mut router = router().with_contracts(contracts);
    router.envelope.mode = mode;
    router
}

fn order_row(event_type: &str, payload: &str) -> TupleData {
    tuple([
        Some("e1"),
        Some("order"),
        Some("7"),
        Some(event_type),
        Some(payload),
    ])
}

#[test]
fn an_event_that_keeps_its_contract_names_the_schema_in_dataschema() {
    let mut router = contracted_router(ContentMode::Binary);
    let routed = router.route(
        &relation(),
        &order_row("Placed", r#"{"amount":3}"#),
        &commit(),
        &Refusals::new(),
    );
    let Routed::Event { record, .. } = routed else {
        panic!("expected the event, got {routed:?}");
    };
    assert_eq!(
        header(&record, "ce_dataschema"),
        Some(&b"https://schemas.example.com/order-placed/v1"[..])
    );
    assert_eq!(record.value.as_ref(), br#"{"amount":3}"#);

    let mut structured = contracted_router(ContentMode::Structured);
    let routed = structured.route(
        &relation(),
        &order_row("Placed", r#"{"amount":3}"#),
        &commit(),
        &Refusals::new(),
    );
    let Routed::Event { record, .. } = routed else {
        panic!("expected the event, got {routed:?}");
    };
    let doc: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
    assert_eq!(
        doc["dataschema"],
        "https://schemas.example.com/order-placed/v1"
    );
    assert_eq!(doc["data"], serde_json::json!({"amount": 3}));
}

#[test]
fn an_event_no_contract_covers_goes_unchecked_without_dataschema() {
    let mut router = contracted_router(ContentMode::Binary);
    let routed = router.route(
        &relation(),
        &order_row("Shipped", r#"{"amount":"not checked"}"#),
        &commit(),
        &Refusals::new(),
    );
    let Routed::Event { record, .. } = routed else {
        panic!("expected the event, got {routed:?}");
    };
    assert_eq!(header(&record, "ce_dataschema"), None);
}

#[test]
fn an_event_that_breaks_its_contract_is_dead_lettered_with_the_reason_and_payload() {
    let mut router = contracted_router(ContentMode::Binary);
    let payload = r#"{"amount":-1,"note":"kept byte for byte"}"#;
    let routed = router.route(
        &relation(),
        &order_row("Placed", payload),
        &commit(),
        &Refusals::new(),
    );
    let Routed::DeadLetter { record, tag } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(record.topic, "dlq");
    assert_eq!(record.value.as_ref(), payload.as_bytes());
    assert_eq!(
        header(&record, "dlq_reason_code"),
        Some(CONTRACT_VIOLATION.as_bytes())
    );
    let reason = std::str::from_utf8(header(&record, "dlq_reason").unwrap()).unwrap();
    assert!(
        reason.starts_with("payload breaks contract order-placed.json: at /amount:")
            && reason.ends_with("(rule `minimum`)"),
        "{reason}"
    );
    assert_eq!(
        header(&record, "dlq_original_topic"),
        Some(&b"outbox.event.order"[..])
    );
    assert!(tag.dead_letter);
}

#[test]
fn a_payload_that_is_not_json_keeps_its_own_reason_under_a_contract() {
    let mut router = contracted_router(ContentMode::Binary);
    let routed = router.route(
        &relation(),
        &order_row("Placed", "not json"),
        &commit(),
        &Refusals::new(),
    );
    let Routed::DeadLetter { record, .. } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_ne!(
        header(&record, "dlq_reason_code"),
        Some(CONTRACT_VIOLATION.as_bytes())
    );
}

#[test]
fn a_message_is_checked_against_its_contract_as_a_row_is() {
    let mut router = contracted_router(ContentMode::Binary);
    let content = Bytes::from_static(
        br#"{"id":"m1","aggregatetype":"order","aggregateid":"7","type":"Placed","payload":{"amount":"x"}}"#,
    );
    let routed = router.route_message(&content, Lsn(0x200), &commit(), &Refusals::new());
    let Routed::DeadLetter { record, .. } = routed else {
        panic!("expected a dead letter, got {routed:?}");
    };
    assert_eq!(
        header(&record, "dlq_reason_code"),
        Some(CONTRACT_VIOLATION.as_bytes())
    );
    assert_eq!(record.value.as_ref(), br#"{"amount":"x"}"#);
}
