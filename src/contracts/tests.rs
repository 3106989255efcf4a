use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::registry::SchemaType;

fn order_schema() -> Schema {
    Schema::from_value(
        &json!({
            "$id": "https://schemas.example.com/order-placed/v1",
            "type": "object",
            "required": ["order_id", "amount"],
            "properties": {
                "order_id": {"type": "string"},
                "amount": {"type": "integer", "minimum": 0},
                "lines": {"type": "array", "items": {"type": "object", "required": ["sku"]}}
            }
        }),
        "schemas/order-placed.json",
        None,
    )
    .expect("a valid schema")
}

#[test]
fn a_payload_that_satisfies_its_schema_passes() {
    let schema = order_schema();
    assert_eq!(schema.check(br#"{"order_id":"o-1","amount":5}"#), Ok(()));
}

#[test]
fn a_violation_names_the_place_and_the_rule() {
    let schema = order_schema();
    let missing = schema.check(br#"{"order_id":"o-1"}"#).unwrap_err();
    assert_eq!(missing.path, "");
    assert_eq!(missing.keyword, "required");
    assert!(missing.message.contains("amount"), "{missing}");
    assert_eq!(
        missing.to_string(),
        format!(
            "payload breaks contract schemas/order-placed.json: at /: {} (rule `required`)",
            missing.message
        )
    );

    let negative = schema
        .check(br#"{"order_id":"o-1","amount":-3}"#)
        .unwrap_err();
    assert_eq!(
        (negative.path.as_str(), negative.keyword.as_str()),
        ("/amount", "minimum")
    );

    let nested = schema
        .check(br#"{"order_id":"o-1","amount":1,"lines":[{"sku":"a"},{}]}"#)
        .unwrap_err();
    assert_eq!(
        (nested.path.as_str(), nested.keyword.as_str()),
        ("/lines/1", "required")
    );
}

#[test]
fn a_violation_never_quotes_the_payload() {
    let schema = order_schema();
    let secret = "card-4111-1111-1111-1111";
    for payload in [
        format!(r#"{{"order_id":"o-1","amount":"{secret}"}}"#),
        format!(r#"{{"order_id":["{secret}"],"amount":1}}"#),
        format!(r#""{secret}""#),
    ] {
        let violation = schema.check(payload.as_bytes()).unwrap_err();
        assert!(!violation.to_string().contains(secret), "{violation}");
    }
    let not_json = schema.check(format!("{{{secret}").as_bytes()).unwrap_err();
    assert!(!not_json.to_string().contains(secret), "{not_json}");
}

#[test]
fn dataschema_is_the_contracts_else_the_id_else_a_digest_of_the_file() {
    assert_eq!(
        order_schema().dataschema(),
        "https://schemas.example.com/order-placed/v1"
    );
    let given = Schema::from_value(&json!({"$id": "urn:a"}), "a.json", Some("urn:b")).unwrap();
    assert_eq!(given.dataschema(), "urn:b");

    let dir = std::env::temp_dir().join(format!("contracts-digest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("order.json");
    std::fs::write(&path, r#"{"type": "object"}"#).unwrap();
    let v1 = Schema::load(&path, "order.json", None).unwrap();
    std::fs::write(&path, r#"{"type": "object", "required": ["id"]}"#).unwrap();
    let v2 = Schema::load(&path, "order.json", None).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    for schema in [&v1, &v2] {
        assert!(
            schema
                .dataschema()
                .starts_with("urn:outbox-relay:contract:order.json:sha256:"),
            "{}",
            schema.dataschema()
        );
    }
    assert_ne!(
        v1.dataschema(),
        v2.dataschema(),
        "a new version, a new dataschema"
    );
}

#[test]
fn a_ref_to_a_sibling_file_resolves_against_the_schemas_place() {
    let dir = std::env::temp_dir().join(format!("contracts-ref-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("money.json"),
        r#"{"type": "object", "required": ["currency"]}"#,
    )
    .unwrap();
    let path = dir.join("order.json");
    std::fs::write(
        &path,
        r#"{"type": "object", "properties": {"total": {"$ref": "money.json"}}}"#,
    )
    .unwrap();
    let schema = Schema::load(&path, "order.json", None);
    std::fs::remove_dir_all(&dir).unwrap();
    let schema = schema.unwrap();
    assert_eq!(schema.check(br#"{"total":{"currency":"EUR"}}"#), Ok(()));
    let broken = schema.check(br#"{"total":{}}"#).unwrap_err();
    assert_eq!(
        (broken.path.as_str(), broken.keyword.as_str()),
        ("/total", "required")
    );
}

#[test]
fn a_schema_that_cannot_be_used_says_why() {
    assert!(matches!(
        Schema::from_value(&json!({"type": 5}), "bad.json", None),
        Err(ContractError::Invalid { .. })
    ));
    let missing = Schema::load(Path::new("/nonexistent/order.json"), "order.json", None);
    assert!(
        matches!(missing, Err(ContractError::Read { .. })),
        "{missing:?}"
    );
}

#[test]
fn the_first_contract_that_matches_wins() {
    let named = |name: &str| Arc::new(Schema::from_value(&json!({}), name, None).unwrap());
    let contracts = Contracts::from_parts(vec![
        (
            Some("order".into()),
            Some("order.placed".into()),
            named("placed"),
        ),
        (Some("order".into()), None, named("any-order")),
        (None, Some("*.deleted".into()), named("deleted")),
    ]);
    let found = |a: &str, t: &str| contracts.find(a, t).map(Schema::name);
    assert_eq!(found("order", "order.placed"), Some("placed"));
    assert_eq!(found("order", "order.shipped"), Some("any-order"));
    assert_eq!(found("order", "order.deleted"), Some("any-order"));
    assert_eq!(found("customer", "customer.deleted"), Some("deleted"));
    assert_eq!(found("customer", "customer.created"), None);
    assert!(Contracts::default().find("order", "order.placed").is_none());
}

fn version(schema_type: crate::registry::SchemaType, text: &str, id: u32) -> SubjectVersion {
    SubjectVersion {
        subject: "orders-value".into(),
        version: 2,
        id,
        schema: Arc::new(crate::registry::Schema {
            schema_type,
            text: text.into(),
            references: Vec::new(),
        }),
    }
}

#[test]
fn a_registry_json_schema_validates_and_frames_with_its_id() {
    let v = version(
        SchemaType::Json,
        r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","required":["amount"]}"#,
        7,
    );
    let framed =
        Schema::from_registry(&v, "http://r/apis/ccompat/v7/", &kept(true, None, None)).unwrap();
    assert_eq!(
        framed.dataschema(),
        "http://r/apis/ccompat/v7/schemas/ids/7"
    );
    assert_eq!(framed.name(), "subject orders-value version 2");
    let value = framed.encode(br#"{"amount":1}"#).unwrap().expect("framed");
    assert_eq!(&value[..5], &[0, 0, 0, 0, 7]);
    assert_eq!(&value[5..], br#"{"amount":1}"#);
    assert!(framed.reframes());
    assert_eq!(framed.content_type(), None);
    assert!(framed.encode(br#"{}"#).is_err());
    let plain = Schema::from_registry(&v, "http://r", &kept(false, Some("urn:x"), None)).unwrap();
    assert_eq!(plain.encode(br#"{"amount":1}"#).unwrap(), None);
    assert_eq!(plain.dataschema(), "urn:x");
}

#[test]
fn a_registry_avro_schema_encodes_and_its_mismatch_is_a_violation() {
    let v = version(
        SchemaType::Avro,
        r#"{"type":"record","name":"OrderPlaced","namespace":"com.acme","fields":[{"name":"amount","type":"long"}]}"#,
        9,
    );
    let avro = Schema::from_registry(&v, "http://r", &kept(true, None, None)).unwrap();
    assert_eq!(avro.content_type(), Some(AVRO_CONTENT_TYPE));
    let value = avro.encode(br#"{"amount":3}"#).unwrap().expect("avro");
    // Magic, id 9, then the zigzag varint of 3.
    assert_eq!(value.as_ref(), &[0, 0, 0, 0, 9, 6]);
    let broken = avro.encode(br#"{"amount":"card-4111"}"#).unwrap_err();
    assert_eq!(
        (broken.path.as_str(), broken.keyword.as_str()),
        ("/amount", "avro")
    );
    assert!(!broken.to_string().contains("4111"), "{broken}");
    // The contract's record must be the schema's.
    let other = Schema::from_registry(&v, "http://r", &kept(true, None, Some("com.acme.Other")));
    assert_eq!(
        other.unwrap_err().to_string(),
        "subject orders-value version 2 cannot be used: holds Avro record \
         com.acme.OrderPlaced, not record com.acme.Other as the contract says"
    );
}

#[test]
fn a_registry_protobuf_schema_encodes_the_message_the_contract_names() {
    let v = version(
        SchemaType::Protobuf,
        "syntax = \"proto3\"; package shop; message A { int64 n = 1; } message B { int64 amount = 1; }",
        4,
    );
    let first = Schema::from_registry(&v, "http://r", &kept(true, None, None)).unwrap();
    assert_eq!(first.content_type(), Some(PROTOBUF_CONTENT_TYPE));
    assert!(first.reframes());
    // Magic, id 4, message indexes [0] as one 0, then field 1 = 3.
    let value = first.encode(br#"{"n":3}"#).unwrap().expect("protobuf");
    assert_eq!(value.as_ref(), &[0, 0, 0, 0, 4, 0, 0x08, 3]);
    let b = Schema::from_registry(&v, "http://r", &kept(true, None, Some("shop.B"))).unwrap();
    // Indexes [1]: a count of 1 and the index 1, each a zigzag varint.
    let value = b.encode(br#"{"amount":"3"}"#).unwrap().expect("protobuf");
    assert_eq!(value.as_ref(), &[0, 0, 0, 0, 4, 2, 2, 0x08, 3]);
    let broken = b.encode(br#"{"amount":"card-4111"}"#).unwrap_err();
    assert_eq!(
        (broken.path.as_str(), broken.keyword.as_str()),
        ("/amount", "protobuf")
    );
    assert!(!broken.to_string().contains("4111"), "{broken}");
    assert!(Schema::from_registry(&v, "http://r", &kept(true, None, Some("shop.C"))).is_err());
}

fn kept(frame: bool, dataschema: Option<&str>, record: Option<&str>) -> RegistryContract {
    RegistryContract {
        subject: "s".into(),
        version: None,
        frame,
        dataschema: dataschema.map(str::to_owned),
        record: record.map(str::to_owned),
    }
}

#[test]
#[should_panic(expected = "before it was fetched")]
fn a_registry_contract_is_never_used_unfetched() {
    let contracts = Contracts::with_registry(
        vec![(
            None,
            None,
            Err(RegistryContract {
                subject: "s".into(),
                version: None,
                frame: true,
                dataschema: None,
                record: None,
            }),
        )],
        None,
    );
    assert!(contracts.needs_registry());
    let _ = contracts.find("order", "placed");
}

/// The reason a schema is refused with.
fn refused(schema: Value) -> String {
    match Schema::from_value(&schema, "s.json", None) {
        Err(ContractError::Invalid { reason, .. }) => reason,
        other => panic!("{schema} was not refused: {other:?}"),
    }
}

#[test]
fn a_misspelled_keyword_is_refused_naming_its_place_and_the_fix() {
    let reason = refused(json!({
        "type": "object",
        "properties": {"lines": {"type": "array", "items": {"requird": ["sku"]}}}
    }));
    assert!(
        reason.starts_with("at /properties/lines/items/requird in the schema: unknown keyword \"requird\" (did you mean \"required\"?)"),
        "{reason}"
    );
    assert!(reason.contains("\"x-requird\""), "{reason}");
    // Unknown to the schema's draft, though another draft has it.
    let reason = refused(json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "prefixItems": [{"type": "string"}]
    }));
    assert!(
        reason.contains("\"prefixItems\" is a keyword of draft 2020-12, not of draft-07"),
        "{reason}"
    );
    let reason = refused(
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "dependencies": {}}),
    );
    assert!(
        reason.starts_with("at /dependencies in the schema"),
        "{reason}"
    );
    let reason = refused(json!({"$schema": "http://example.com/my-meta", "type": "object"}));
    assert!(
        reason.starts_with("at /$schema in the schema: names no JSON Schema draft"),
        "{reason}"
    );
}

#[test]
fn an_unknown_type_name_is_refused_naming_its_place() {
    for (schema, place) in [
        (json!({"type": "integr"}), "/type"),
        (
            json!({"properties": {"a": {"type": ["string", "integr"]}}}),
            "/properties/a/type",
        ),
        (
            json!({"$defs": {"a~b": {"anyOf": [{"type": "integr"}]}}}),
            "/$defs/a~0b/anyOf/0/type",
        ),
    ] {
        let reason = refused(schema);
        assert!(
            reason.starts_with(&format!(
                "at {place} in the schema: unknown type \"integr\" (did you mean \"integer\"?): \
                 the types are array, boolean, integer, null, number, object, string"
            )),
            "{reason}"
        );
    }
    // What only the meta-schema knows is refused with its place too.
    let reason = refused(json!({"properties": {"a": {"minimum": "5"}}}));
    assert!(
        reason.starts_with("at /properties/a/minimum in the schema: "),
        "{reason}"
    );
}

#[test]
fn annotations_definitions_and_x_extensions_are_accepted() {
    for schema in [
        json!({
            "$schema": "http://json-schema.org/draft-04/schema#",
            "id": "urn:a", "title": "t", "description": "d", "default": {}, "examples": [],
            "$comment": "c", "format": "date", "definitions": {"a": {"type": "string"}},
            "x-owner": {"requird": "not a schema: never looked into"},
            "properties": {"a": {"$ref": "#/definitions/a", "x-ui": 1}},
            "maximum": 5, "exclusiveMaximum": true
        }),
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$defs": {"a": {"type": "integer"}}, "definitions": {"b": true},
            "prefixItems": [{"$ref": "#/$defs/a"}], "dependentRequired": {"a": ["b"]},
            "deprecated": false, "readOnly": true
        }),
        json!({"$schema": "http://json-schema.org/draft-07/schema", "if": {}, "then": {}, "else": {}}),
    ] {
        assert!(
            Schema::from_value(&schema, "s.json", None).is_ok(),
            "{schema}"
        );
    }
}

#[test]
fn numbers_are_checked_by_their_exact_value() {
    let check = |schema: Value, payload: &str| {
        Schema::from_value(&schema, "s.json", None)
            .unwrap()
            .check(payload.as_bytes())
            .map_err(|v| v.keyword)
    };
    let integer = json!({"type": "integer"});
    assert_eq!(
        check(integer.clone(), "99999999999999999.99"),
        Err("type".into())
    );
    assert_eq!(check(integer.clone(), "1e400"), Ok(()));
    assert_eq!(check(integer.clone(), "1.0"), Ok(()));
    let draft4 = json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"});
    assert_eq!(check(draft4.clone(), "1.0"), Err("type".into()));
    assert_eq!(check(draft4, "-0"), Ok(()));
    assert_eq!(
        check(
            json!({"maximum": 9007199254740992_u64}),
            "9007199254740992.5"
        ),
        Err("maximum".into())
    );
    let cents: Value =
        serde_json::from_str(r#"{"minimum": 0.1, "enum": [99999999999999999.98, 0.1]}"#).unwrap();
    let tenth_up: Value = serde_json::from_str(r#"{"minimum": 0.1}"#).unwrap();
    assert_eq!(
        check(tenth_up, "0.09999999999999999999"),
        Err("minimum".into())
    );
    assert_eq!(
        check(cents.clone(), "99999999999999999.99"),
        Err("enum".into())
    );
    assert_eq!(check(cents, "0.10"), Ok(()));
    assert_eq!(
        check(
            json!({"uniqueItems": true}),
            "[99999999999999999.99, 99999999999999999.98]"
        ),
        Ok(())
    );
    assert_eq!(
        check(json!({"uniqueItems": true}), "[1.0, 1]"),
        Err("uniqueItems".into())
    );
    let tenth: Value = serde_json::from_str(r#"{"multipleOf": 0.1}"#).unwrap();
    assert_eq!(check(tenth.clone(), "0.3"), Ok(()));
    assert_eq!(check(tenth, "0.35"), Err("multipleOf".into()));
    let draft4_exclusive = json!({"$schema": "http://json-schema.org/draft-04/schema#", "minimum": 0, "exclusiveMinimum": true});
    assert_eq!(check(draft4_exclusive, "0"), Err("minimum".into()));
    // A violation still never quotes the payload.
    let violation = Schema::from_value(&json!({"maximum": 1}), "s.json", None)
        .unwrap()
        .check(b"4111111111111111")
        .unwrap_err();
    assert!(!violation.to_string().contains("4111"), "{violation}");
    assert_eq!(violation.message, "value is greater than the maximum of 1");
}

#[tokio::test]
async fn a_registry_contract_that_cannot_be_had_names_its_entry() {
    use crate::registry::tests::{Routed, types_route};
    let misspelled = r#"{"subject":"typo-value","version":1,"id":3,"schemaType":"JSON","schema":"{\"requird\":[\"a\"]}"}"#;
    let gone = r#"{"error_code":40401,"message":"Subject not found."}"#;
    let registry = Routed::start(vec![
        types_route(),
        (
            "/subjects/gone-value/",
            format!(
                "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n{gone}",
                gone.len()
            ),
        ),
        (
            "/subjects/typo-value/",
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{misspelled}",
                misspelled.len()
            ),
        ),
    ])
    .await;
    let settings = RegistrySettings {
        url: registry.url("/apis/ccompat/v7"),
        timeout: std::time::Duration::from_secs(5),
        ca_file: None,
        credentials: None,
    };
    let subject = |name: &str| RegistryContract {
        subject: name.into(),
        ..kept(true, None, None)
    };
    let file = Arc::new(Schema::from_value(&json!({}), "file.json", None).unwrap());
    let contracts = |second: &str| {
        Contracts::with_registry(
            vec![
                (None, None, Ok(Arc::clone(&file))),
                (None, None, Err(subject(second))),
            ],
            Some(settings.clone()),
        )
    };
    let missing = contracts("gone-value").resolve().await.unwrap_err();
    assert!(!missing.is_retryable());
    assert!(
        missing.to_string().starts_with(
            "contracts[1]: subject \"gone-value\" does not exist in the schema registry"
        ),
        "{missing}"
    );
    let unusable = contracts("typo-value").resolve().await.unwrap_err();
    assert!(!unusable.is_retryable());
    assert!(
        unusable.to_string().starts_with(
            "contracts[1]: subject typo-value version 1 cannot be used: at /requird in the \
             schema: unknown keyword \"requird\""
        ),
        "{unusable}"
    );
}

#[test]
fn a_checked_payload_keeps_its_numbers_as_written_framed_or_not() {
    let payload =
        br#"{"a": 99999999999999999.99, "b": 1e400, "c": -0, "d": 18446744073709551617, "e": 1.0}"#;
    let v = version(
        SchemaType::Json,
        r#"{"type":"object","properties":{"a":{"type":"number","multipleOf":0.01},"b":{"type":"integer"},"c":{"maximum":0},"d":{"minimum":18446744073709551617},"e":{"type":"integer"}}}"#,
        7,
    );
    let framed = Schema::from_registry(&v, "http://r", &kept(true, None, None)).unwrap();
    let value = framed.encode(payload).unwrap().expect("framed");
    assert_eq!(&value[..5], &[0, 0, 0, 0, 7]);
    assert_eq!(&value[5..], payload);
    let plain = Schema::from_registry(&v, "http://r", &kept(false, None, None)).unwrap();
    assert_eq!(plain.encode(payload).unwrap(), None, "the payload itself");
}
