use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use proptest::prelude::*;
use serde_json::json;

use super::*;

/// Reads `bytes` back with the crate's reader: an encoder independent of
/// the mapping.
fn decode(encoder: &AvroEncoder, bytes: &[u8]) -> Value {
    let reader = GenericDatumReader::builder(encoder.schema())
        .build()
        .unwrap();
    let mut rest = bytes;
    let value = reader.read_value(&mut rest).unwrap();
    assert!(rest.is_empty(), "{} bytes left over", rest.len());
    value
}

fn encoder(schema: serde_json::Value) -> AvroEncoder {
    AvroEncoder::new(&schema.to_string()).unwrap()
}

/// A record with one field `f` of `field_type`.
fn one_field(field_type: serde_json::Value) -> AvroEncoder {
    encoder(
        json!({"type": "record", "name": "R", "namespace": "t", "fields": [
            {"name": "f", "type": field_type}
        ]}),
    )
}

fn field_value(encoder: &AvroEncoder, payload: serde_json::Value) -> Result<Value, String> {
    match encoder.to_value(&json!({ "f": payload })) {
        Ok(Value::Record(mut fields)) => Ok(fields.remove(0).1),
        Ok(other) => panic!("not a record: {other:?}"),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn a_simple_record_is_encoded_byte_for_byte_as_avro_specifies() {
    let e = encoder(json!({"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": "string"},
        {"name": "paid", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "int"}},
        {"name": "coupon", "type": ["null", "string"]}
    ]}));
    let bytes = e
        .encode(&json!({"id": -3, "note": "hé", "paid": true, "tags": [1, 64], "coupon": null}))
        .unwrap();
    // long -3 zigzag 5; string: length 3 (zigzag 6), UTF-8; true; array
    // block of 2 items (zigzag 4), 1 → 2, 64 → 128 as varint 0x80 0x01, end
    // 0; union branch 0 (null).
    assert_eq!(
        bytes,
        [5, 6, b'h', 0xc3, 0xa9, 1, 4, 2, 0x80, 0x01, 0, 0],
        "{bytes:?}"
    );
    assert_eq!(e.record_name().as_deref(), Some("Order"));
}

const ORDER: &str = r#"{
  "type": "record", "name": "OrderPlaced", "namespace": "com.acme",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "currency", "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD"]}},
    {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "due", "type": {"type": "int", "logicalType": "date"}},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
      {"name": "name", "type": "string"},
      {"name": "vip", "type": "boolean", "default": false},
      {"name": "email", "type": ["null", "string"], "default": null}
    ]}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
      {"name": "sku", "type": "string"},
      {"name": "qty", "type": "int"},
      {"name": "price", "type": "double"}
    ]}}},
    {"name": "attributes", "type": {"type": "map", "values": "string"}, "default": {}},
    {"name": "billing", "type": ["null", "Customer"], "default": null},
    {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "signature", "type": ["null", "bytes"]},
    {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
    {"name": "weight", "type": "float", "default": 1.5},
    {"name": "source", "type": "string", "default": "web"}
  ]
}"#;

#[test]
fn an_outbox_payload_maps_as_a_user_expects_and_reads_back() {
    let e = AvroEncoder::new(ORDER).unwrap();
    assert_eq!(e.record_name().as_deref(), Some("com.acme.OrderPlaced"));
    let payload = json!({
        "id": 42,
        "amount": "19.90",
        "currency": "EUR",
        "placed_at": "2024-03-01T13:45:00.250Z",
        "due": "2024-03-31",
        "customer": {"name": "Ada"},
        "lines": [{"sku": "A-1", "qty": 2, "price": 9.95}],
        "billing": {"name": "Ada Ltd", "vip": true, "email": "ada@example.com"},
        "ref": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "signature": "AAEC",
        "hash": "3q2+7w=="
    });
    let bytes = e.encode(&payload).unwrap();
    let customer = |name: &str, vip: bool, email: Value| {
        Value::Record(vec![
            ("name".into(), Value::String(name.into())),
            ("vip".into(), Value::Boolean(vip)),
            ("email".into(), email),
        ])
    };
    let expected = Value::Record(vec![
        ("id".into(), Value::Long(42)),
        (
            "amount".into(),
            Value::Decimal(Decimal::from(vec![0x07, 0xc6])),
        ), // 1990
        ("currency".into(), Value::Enum(0, "EUR".into())),
        (
            "placed_at".into(),
            Value::TimestampMillis(1_709_300_700_250),
        ),
        ("due".into(), Value::Date(19_813)),
        (
            "customer".into(),
            customer("Ada", false, Value::Union(0, Box::new(Value::Null))),
        ),
        (
            "lines".into(),
            Value::Array(vec![Value::Record(vec![
                ("sku".into(), Value::String("A-1".into())),
                ("qty".into(), Value::Int(2)),
                ("price".into(), Value::Double(9.95)),
            ])]),
        ),
        ("attributes".into(), Value::Map(HashMap::new())),
        (
            "billing".into(),
            Value::Union(
                1,
                Box::new(customer(
                    "Ada Ltd",
                    true,
                    Value::Union(1, Box::new(Value::String("ada@example.com".into()))),
                )),
            ),
        ),
        (
            "ref".into(),
            Value::Uuid("1b4e28ba-2fa1-11d2-883f-0016d3cca427".parse().unwrap()),
        ),
        (
            "signature".into(),
            Value::Union(1, Box::new(Value::Bytes(vec![0, 1, 2]))),
        ),
        ("hash".into(), Value::Fixed(4, vec![0xde, 0xad, 0xbe, 0xef])),
        ("weight".into(), Value::Float(1.5)),
        ("source".into(), Value::String("web".into())),
    ]);
    assert_eq!(e.to_value(&payload).unwrap(), expected);
    assert_eq!(decode(&e, &bytes), expected);
}

#[test]
fn values_map_by_type() {
    use Value as V;
    let u = |i: u32, v: Value| V::Union(i, Box::new(v));
    let cases: Vec<(serde_json::Value, serde_json::Value, Value)> = vec![
        (json!("int"), json!(-7), V::Int(-7)),
        (
            json!("long"),
            json!(9_007_199_254_740_993_i64),
            V::Long(9_007_199_254_740_993),
        ),
        (json!("float"), json!(2), V::Float(2.0)),
        (json!("double"), json!(0.1), V::Double(0.1)),
        (json!("boolean"), json!(false), V::Boolean(false)),
        (json!("string"), json!(""), V::String(String::new())),
        (json!("bytes"), json!("aGk"), V::Bytes(b"hi".to_vec())),
        (json!("null"), json!(null), V::Null),
        (json!(["null", "long"]), json!(5), u(1, V::Long(5))),
        (json!(["long", "null"]), json!(null), u(1, V::Null)),
        // First branch the value fits, in the schema's order.
        (json!(["null", "int", "double"]), json!(3), u(1, V::Int(3))),
        (
            json!(["null", "int", "double"]),
            json!(3.5),
            u(2, V::Double(3.5)),
        ),
        (
            json!(["null", "int", "string"]),
            json!("3"),
            u(2, V::String("3".into())),
        ),
        // Avro's JSON encoding of a union.
        (
            json!(["null", "string", "bytes"]),
            json!({"bytes": "AQ=="}),
            u(2, V::Bytes(vec![1])),
        ),
        (
            json!(["null", "string", {"type": "map", "values": "long"}]),
            json!({"a": 1}),
            u(2, V::Map([("a".to_string(), V::Long(1))].into())),
        ),
        (
            json!({"type": "array", "items": ["null", "string"]}),
            json!([null, "x"]),
            V::Array(vec![u(0, V::Null), u(1, V::String("x".into()))]),
        ),
        (
            json!({"type": "int", "logicalType": "date"}),
            json!(-1),
            V::Date(-1),
        ),
        (
            json!({"type": "int", "logicalType": "time-millis"}),
            json!("00:00:01.5"),
            V::TimeMillis(1_500),
        ),
        (
            json!({"type": "long", "logicalType": "time-micros"}),
            json!("23:59:59.000001"),
            V::TimeMicros(86_399_000_001),
        ),
        (
            json!({"type": "long", "logicalType": "timestamp-micros"}),
            json!("1970-01-01T01:00:00.000001+01:00"),
            V::TimestampMicros(1),
        ),
        (
            json!({"type": "long", "logicalType": "timestamp-nanos"}),
            json!(7),
            V::TimestampNanos(7),
        ),
        (
            json!({"type": "long", "logicalType": "local-timestamp-millis"}),
            json!("1970-01-02T00:00:00"),
            V::LocalTimestampMillis(86_400_000),
        ),
        (
            json!({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}),
            json!(-0.5),
            V::Decimal(Decimal::from(vec![0xce])),
        ),
        (
            json!({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}),
            json!("1E1"),
            V::Decimal(Decimal::from(vec![0x03, 0xe8])),
        ),
        (
            json!({"type": "fixed", "name": "D", "size": 3, "logicalType": "decimal", "precision": 6, "scale": 0}),
            json!(128),
            V::Decimal(Decimal::from(vec![0x00, 0x80])),
        ),
        (
            json!({"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}),
            json!({"months": 1, "days": 2, "millis": 3}),
            V::Duration(Duration::new(Months::new(1), Days::new(2), Millis::new(3))),
        ),
        (
            json!({"type": "enum", "name": "E", "symbols": ["A", "B"]}),
            json!("B"),
            V::Enum(1, "B".into()),
        ),
    ];
    for (field_type, payload, expected) in cases {
        let e = one_field(field_type.clone());
        assert_eq!(
            field_value(&e, payload.clone()),
            Ok(expected),
            "{field_type} ← {payload}"
        );
        // And the crate encodes what the mapping made, reading it back.
        let bytes = e.encode(&json!({ "f": payload })).unwrap();
        let Value::Record(fields) = decode(&e, &bytes) else {
            panic!()
        };
        assert_eq!(
            Ok(&fields[0].1),
            field_value(&e, payload.clone()).as_ref(),
            "{field_type} ← {payload}"
        );
    }
}

#[test]
fn errors_name_the_first_failing_place_and_why() {
    let e = AvroEncoder::new(ORDER).unwrap();
    let good = json!({
        "id": 1, "amount": 1, "currency": "USD", "placed_at": 0, "due": 0,
        "customer": {"name": "x"}, "lines": [], "ref": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "signature": null, "hash": "AAAAAA=="
    });
    e.to_value(&good).unwrap();
    let with = |pointer: &str, value: serde_json::Value| {
        let mut payload = good.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let parent = payload
            .pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap();
        parent.insert(key.to_string(), value);
        e.to_value(&payload).unwrap_err().to_string()
    };
    let without = |field: &str| {
        let mut payload = good.clone();
        payload.as_object_mut().unwrap().remove(field);
        e.to_value(&payload).unwrap_err().to_string()
    };
    let cases = [
        (with("/id", json!("1")), "/id: expected long, got string"),
        (
            with("/id", json!(1.5)),
            "/id: expected long as an integer without fraction or exponent, got a number",
        ),
        (
            with("/id", json!(u64::MAX)),
            "/id: integer out of range for long (-2^63 to 2^63-1)",
        ),
        (without("id"), "/id: missing, and the field has no default"),
        (
            with("/amount", json!("1.234")),
            "/amount: more decimal places than the scale 2",
        ),
        (
            with("/amount", json!(12345678.9)),
            "/amount: more than the 9 digits of decimal(9, 2)",
        ),
        (
            with("/amount", json!("12,50")),
            "/amount: expected a decimal number such as 12.30 or 1.5e3",
        ),
        (
            with("/currency", json!("GBP")),
            "/currency: not one of the 2 symbols of enum com.acme.Currency",
        ),
        (
            with("/placed_at", json!("yesterday")),
            "/placed_at: expected an RFC 3339 date-time such as 2024-03-01T13:45:00.25Z",
        ),
        (
            with("/due", json!("2024-02-30")),
            "/due: expected date, got string",
        ),
        (
            with("/customer/name", json!(null)),
            "/customer/name: expected string, got null",
        ),
        (
            with("/customer", json!("Ada")),
            "/customer: expected record com.acme.Customer, got string",
        ),
        (
            with(
                "/lines",
                json!([{"sku": "a", "qty": 1, "price": 1}, {"sku": "b", "qty": "2", "price": 1}]),
            ),
            "/lines/1/qty: expected int, got string",
        ),
        (
            with(
                "/lines",
                json!([{"sku": "a", "qty": 3000000000_i64, "price": 1}]),
            ),
            "/lines/0/qty: integer out of range for int (-2^31 to 2^31-1)",
        ),
        (
            with("/billing", json!({"name": 5})),
            "/billing/name: expected string, got integer",
        ),
        (
            with("/ref", json!("not-a-uuid")),
            "/ref: expected a UUID as 8-4-4-4-12 hex digits with hyphens",
        ),
        (
            with("/signature", json!("%%%")),
            "/signature: expected bytes as base64",
        ),
        (
            with("/hash", json!("AAA=")),
            "/hash: expected 4 bytes for fixed com.acme.Hash, got 2",
        ),
        (
            with("/customer/vip", json!(1)),
            "/customer/vip: expected boolean, got integer",
        ),
        (
            with("/customer/nickname", json!("A")),
            "/customer: record com.acme.Customer has no field nickname",
        ),
        (
            with("/customer/a b@c", json!("A")),
            "/customer: a field record com.acme.Customer does not have",
        ),
        (
            e.to_value(&json!([1])).unwrap_err().to_string(),
            "/: expected record com.acme.OrderPlaced, got array",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
    let e = one_field(json!({"type": "map", "values": ["null", "int", "string"]}));
    assert_eq!(
        field_value(&e, json!({"secret-key": [1]})),
        Err("/f/*: array fits no branch of union [null, int, string]".into())
    );
    let e = one_field(json!(["int", "string"]));
    assert_eq!(
        field_value(&e, json!(null)),
        Err("/f: expected union [int, string], got null".into())
    );
    let e = one_field(json!("float"));
    assert_eq!(
        field_value(&e, json!(1e300)),
        Err("/f: number out of range for float".into())
    );
}

#[test]
fn defaults_are_read_as_avros_json_encoding() {
    // A union's default is its first branch's; bytes and fixed are code
    // points; a record default fills its own missing fields.
    let e = encoder(json!({"type": "record", "name": "R", "fields": [
        {"name": "u", "type": ["string", "null"], "default": "x"},
        {"name": "b", "type": "bytes", "default": "\u{00ff}\u{0000}"},
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 0}, "default": "\u{0001}"},
        {"name": "r", "type": {"type": "record", "name": "In", "fields": [
            {"name": "a", "type": "int"}, {"name": "z", "type": "int", "default": 9}
        ]}, "default": {"a": 1}},
        {"name": "n", "type": ["null", "int"]}
    ]}));
    let value = e.to_value(&json!({})).unwrap();
    assert_eq!(
        value,
        Value::Record(vec![
            (
                "u".into(),
                Value::Union(0, Box::new(Value::String("x".into())))
            ),
            ("b".into(), Value::Bytes(vec![0xff, 0])),
            ("d".into(), Value::Decimal(Decimal::from(vec![1]))),
            (
                "r".into(),
                Value::Record(vec![
                    ("a".into(), Value::Int(1)),
                    ("z".into(), Value::Int(9))
                ])
            ),
            // Nullable without a default: missing is null.
            ("n".into(), Value::Union(0, Box::new(Value::Null))),
        ])
    );
    let bytes = e.encode(&json!({})).unwrap();
    assert_eq!(decode(&e, &bytes), value);
}

#[test]
fn named_types_are_found_by_reference_across_namespaces() {
    let e = encoder(
        json!({"type": "record", "name": "Outer", "namespace": "a", "fields": [
            {"name": "x", "type": {"type": "record", "name": "Pair", "namespace": "b", "fields": [
                {"name": "l", "type": "long"}
            ]}},
            {"name": "y", "type": "b.Pair"},
            {"name": "z", "type": ["null", "b.Pair"]},
            {"name": "next", "type": ["null", "Outer"], "default": null}
        ]}),
    );
    let payload = json!({"x": {"l": 1}, "y": {"l": 2}, "z": {"b.Pair": {"l": 3}},
                         "next": {"x": {"l": 4}, "y": {"l": 5}, "z": null}});
    let bytes = e.encode(&payload).unwrap();
    assert_eq!(decode(&e, &bytes), e.to_value(&payload).unwrap());
    assert_eq!(
        e.to_value(&json!({"x": {"l": 1}, "y": {"l": "2"}, "z": null}))
            .unwrap_err()
            .to_string(),
        "/y/l: expected long, got string"
    );
}

#[test]
fn unusable_schemas_are_refused_up_front() {
    for (schema, want) in [
        (
            r#"{"type": "record", "name": "R", "fields": [{"name": "a", "type": "Nope"}]}"#,
            "not a usable Avro schema: ",
        ),
        (
            r#"{"type": "bytes", "logicalType": "big-decimal"}"#,
            "not a usable Avro schema: the big-decimal logical type is not supported",
        ),
        ("not json", "not a usable Avro schema: "),
    ] {
        let err = AvroEncoder::new(schema).unwrap_err().to_string();
        assert!(err.starts_with(want), "{schema}: {err}");
    }
    assert_eq!(AvroEncoder::new(r#""string""#).unwrap().record_name(), None);
}

#[test]
fn decimal_text_is_scaled_exactly() {
    for (text, scale, want) in [
        ("0", 2, Ok(0)),
        ("-0.10", 2, Ok(-10)),
        ("+3", 0, Ok(3)),
        ("1.5e-1", 2, Ok(15)),
        ("0.001e3", 0, Ok(1)),
        (".5", 1, Ok(5)),
        ("5.", 1, Ok(50)),
        ("1e40", 0, Err(logical::DecimalError::TooBig)),
        ("1.25", 1, Err(logical::DecimalError::Places(1))),
        // Places as written, zeros too: what the reference refuses.
        ("1.50", 1, Err(logical::DecimalError::Places(1))),
        ("150e-2", 1, Err(logical::DecimalError::Places(1))),
        ("0e-3", 2, Err(logical::DecimalError::Places(2))),
        ("1.5e3", 0, Ok(1500)),
        ("1E-2", 2, Ok(1)),
        ("-0", 2, Ok(0)),
        ("-0.00", 2, Ok(0)),
        ("", 0, Err(logical::DecimalError::Malformed)),
        ("1.2.3", 0, Err(logical::DecimalError::Malformed)),
        ("e5", 0, Err(logical::DecimalError::Malformed)),
        ("1e", 0, Err(logical::DecimalError::Malformed)),
    ] {
        assert_eq!(logical::unscaled(text, scale), want, "{text}");
    }
    for (value, bytes) in [
        (0_i128, &[0x00][..]),
        (127, &[0x7f]),
        (128, &[0x00, 0x80]),
        (-1, &[0xff]),
        (-128, &[0x80]),
        (-129, &[0xff, 0x7f]),
    ] {
        assert_eq!(logical::twos_complement(value), bytes, "{value}");
    }
    assert_eq!(logical::digits(0), 1);
    assert_eq!(logical::digits(-999), 3);
    assert_eq!(logical::digits(1000), 4);
}

/// JSON values of any shape, strings carrying a marker to look for.
fn any_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(|b| json!(b)),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z]{0,6}".prop_map(|s| json!(format!("SECRET{s}"))),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4).prop_map(|m| json!(m)),
        ]
    })
}

proptest! {
    /// Whatever the payload: either it maps, and the crate reads back what
    /// the mapping made; or the error names a place and a reason and never
    /// a string of the payload.
    #[test]
    fn any_payload_reads_back_or_fails_without_quoting_it(
        payload in prop_oneof![
            any_json(),
            (any::<i64>(), "[A-Z]{0,5}", prop::collection::vec(any::<i32>(), 0..5), any::<Option<bool>>())
                .prop_map(|(id, name, qtys, vip)| json!({
                    "id": id, "amount": "1.00", "currency": "EUR", "placed_at": id, "due": 1,
                    "customer": {"name": format!("SECRET{name}"), "vip": vip.unwrap_or(false)},
                    "lines": qtys.iter().map(|q| json!({"sku": "SECRETsku", "qty": q, "price": 1.0})).collect::<Vec<_>>(),
                    "attributes": {"k": format!("SECRET{name}")},
                    "ref": "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "signature": null, "hash": "AAAAAA==",
                    "source": if vip == Some(true) { json!(7) } else { json!("SECRETweb") }
                })),
        ],
    ) {
        let e = AvroEncoder::new(ORDER).unwrap();
        match e.encode(&payload) {
            Ok(bytes) => prop_assert_eq!(decode(&e, &bytes), e.to_value(&payload).unwrap()),
            Err(err) => {
                prop_assert!(err.path.starts_with('/'));
                prop_assert!(!err.reason.is_empty());
                prop_assert!(!err.to_string().contains("SECRET"), "{}", err);
            }
        }
    }
}

/// A payload as the relay gets it: JSON text, numbers kept as written.
fn parse(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

/// The unscaled value an encoded decimal field holds.
fn unscaled_of(encoder: &AvroEncoder, payload: &str) -> Result<i128, String> {
    let bytes = encoder.encode(&parse(payload)).map_err(|e| e.to_string())?;
    match decode(encoder, &bytes) {
        Value::Record(fields) => match &fields[0].1 {
            Value::Decimal(d) => {
                let b: Vec<u8> = d.try_into().unwrap();
                let mut full = [if b[0] & 0x80 != 0 { 0xff } else { 0 }; 16];
                full[16 - b.len()..].copy_from_slice(&b);
                Ok(i128::from_be_bytes(full))
            }
            other => panic!("not a decimal: {other:?}"),
        },
        other => panic!("not a record: {other:?}"),
    }
}

#[test]
fn money_keeps_every_digit_as_written() {
    let bytes_backed =
        one_field(json!({"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}));
    let wide =
        one_field(json!({"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 4}));
    let fixed_backed = one_field(json!({"type": "fixed", "name": "Money", "size": 16,
        "logicalType": "decimal", "precision": 38, "scale": 2}));
    for (encoder, payload, want) in [
        // Both went through an f64 once: 1e17 and ...56.80.
        (
            &bytes_backed,
            r#"{"f": 99999999999999999.99}"#,
            9_999_999_999_999_999_999,
        ),
        (
            &bytes_backed,
            r#"{"f": 1234567890123456.78}"#,
            123_456_789_012_345_678,
        ),
        (
            &bytes_backed,
            r#"{"f": "-99999999999999999.99"}"#,
            -9_999_999_999_999_999_999,
        ),
        (&bytes_backed, r#"{"f": 1.5e3}"#, 150_000),
        (&bytes_backed, r#"{"f": 1E-2}"#, 1),
        (&bytes_backed, r#"{"f": -0}"#, 0),
        (&bytes_backed, r#"{"f": -0.0}"#, 0),
        (
            &bytes_backed,
            r#"{"f": 123456789012345678}"#,
            12_345_678_901_234_567_800,
        ),
        (
            &wide,
            r#"{"f": 1234567890123456789012345678901234.5678}"#,
            12_345_678_901_234_567_890_123_456_789_012_345_678,
        ),
        (
            &wide,
            r#"{"f": -9999999999999999999999999999999999.9999}"#,
            -99_999_999_999_999_999_999_999_999_999_999_999_999,
        ),
        (
            &fixed_backed,
            r#"{"f": 999999999999999999999999999999999999.99}"#,
            99_999_999_999_999_999_999_999_999_999_999_999_999,
        ),
        (
            &fixed_backed,
            r#"{"f": -123456789012345678.9}"#,
            -12_345_678_901_234_567_890,
        ),
        (&fixed_backed, r#"{"f": 0.01}"#, 1),
    ] {
        assert_eq!(unscaled_of(encoder, payload), Ok(want), "{payload}");
    }
    for (encoder, payload, want) in [
        (
            &bytes_backed,
            r#"{"f": 1999999999999999999.99}"#,
            "/f: more than the 20 digits of decimal(20, 2)",
        ),
        // 1e19 at scale 2 is 22 digits: as written, only one.
        (
            &bytes_backed,
            r#"{"f": 1e19}"#,
            "/f: more than the 20 digits of decimal(20, 2)",
        ),
        (
            &bytes_backed,
            r#"{"f": 0.001}"#,
            "/f: more decimal places than the scale 2",
        ),
        (
            &bytes_backed,
            r#"{"f": 1.230}"#,
            "/f: more decimal places than the scale 2",
        ),
        (
            &wide,
            r#"{"f": 12345678901234567890123456789012345.6789}"#,
            "/f: more than the 38 digits of decimal(38, 4)",
        ),
        (
            &wide,
            r#"{"f": 1e99}"#,
            "/f: more than the 38 digits of decimal(38, 4)",
        ),
    ] {
        assert_eq!(unscaled_of(encoder, payload), Err(want.into()), "{payload}");
    }
}

#[test]
fn numbers_are_read_from_their_text_never_through_f64() {
    let value = |field_type: serde_json::Value, text: &str| {
        field_value(&one_field(field_type), parse(text))
    };
    // 2^53 + 1 has no f64.
    assert_eq!(
        value(json!("long"), "9007199254740993"),
        Ok(Value::Long(9_007_199_254_740_993))
    );
    assert_eq!(
        value(json!("long"), "-9223372036854775808"),
        Ok(Value::Long(i64::MIN))
    );
    assert_eq!(value(json!("long"), "-0"), Ok(Value::Long(0)));
    assert_eq!(value(json!("int"), "-2147483648"), Ok(Value::Int(i32::MIN)));
    assert_eq!(
        value(
            json!({"type": "long", "logicalType": "timestamp-micros"}),
            "9007199254740993"
        ),
        Ok(Value::TimestampMicros(9_007_199_254_740_993))
    );
    for (field_type, text, want) in [
        (
            json!("long"),
            "9223372036854775808",
            "/f: integer out of range for long (-2^63 to 2^63-1)",
        ),
        (
            json!("long"),
            "-9223372036854775809",
            "/f: integer out of range for long (-2^63 to 2^63-1)",
        ),
        (
            json!("int"),
            "2147483648",
            "/f: integer out of range for int (-2^31 to 2^31-1)",
        ),
        (
            json!("int"),
            "1.0",
            "/f: expected int as an integer without fraction or exponent, got a number",
        ),
        (
            json!("long"),
            "1e3",
            "/f: expected long as an integer without fraction or exponent, got a number",
        ),
        (
            json!("long"),
            "1.5",
            "/f: expected long as an integer without fraction or exponent, got a number",
        ),
        (
            json!({"type": "long", "logicalType": "timestamp-millis"}),
            "1.0",
            "/f: expected timestamp-millis as an integer without fraction or exponent, got a number",
        ),
        (
            json!("double"),
            "1e400",
            "/f: number out of range for double",
        ),
        (json!("float"), "1e39", "/f: number out of range for float"),
    ] {
        assert_eq!(
            value(field_type.clone(), text),
            Err(want.to_string()),
            "{field_type} {text}"
        );
    }
    // Rounded once, from the text, to the nearest: through an f64 first,
    // this one lands on a tie between two floats and goes to 1.0.
    let Ok(Value::Float(f)) = value(json!("float"), "1.00000005960464477539062500000000001") else {
        panic!("not a float");
    };
    assert_eq!(f.to_bits(), 0x3f80_0001);
    let Ok(Value::Double(d)) = value(json!("double"), "-0") else {
        panic!("not a double");
    };
    assert_eq!(d.to_bits(), (-0.0f64).to_bits());
    assert_eq!(
        value(json!("double"), "0.1000000000000000055511151231257827"),
        Ok(Value::Double(0.1))
    );
}

#[test]
fn a_field_given_by_an_alias_is_refused_not_dropped() {
    let e = encoder(json!({"type": "record", "name": "R", "fields": [
        {"name": "amount", "type": ["null", "long"], "aliases": ["total"], "default": null}
    ]}));
    assert_eq!(
        e.encode(&json!({"total": 5})).unwrap_err().to_string(),
        "/total: total is an alias of field amount of record R: give the field by its name"
    );
    assert_eq!(
        e.encode(&json!({"amount": 5, "total": 5}))
            .unwrap_err()
            .to_string(),
        "/total: total is an alias of field amount of record R: give the field by its name"
    );
    assert_eq!(
        e.encode(&json!({"other": 5})).unwrap_err().to_string(),
        "/: record R has no field other"
    );
    assert_eq!(e.encode(&json!({"amount": 5})).unwrap(), [2, 10]);
}

#[test]
fn a_uuid_is_written_as_the_payload_has_it() {
    let e = one_field(json!({"type": "string", "logicalType": "uuid"}));
    let upper = "1B4E28BA-2FA1-11D2-883F-0016D3CCA427";
    let mut want = vec![72];
    want.extend_from_slice(upper.as_bytes());
    assert_eq!(e.encode(&json!({ "f": upper })).unwrap(), want);
    for text in [
        "1b4e28ba2fa111d2883f0016d3cca427",
        "{1b4e28ba-2fa1-11d2-883f-0016d3cca427}",
        "urn:uuid:1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    ] {
        assert_eq!(
            e.encode(&json!({ "f": text })).unwrap_err().to_string(),
            "/f: expected a UUID as 8-4-4-4-12 hex digits with hyphens",
            "{text}"
        );
    }
}

#[test]
fn dates_and_times_take_only_the_forms_the_mapping_names() {
    let value = |logical: &str, base: &str, text: &str| {
        field_value(
            &one_field(json!({"type": base, "logicalType": logical})),
            json!(text),
        )
    };
    assert_eq!(value("date", "int", "1970-01-02"), Ok(Value::Date(1)));
    assert_eq!(
        value("time-millis", "int", "01:02:03.5"),
        Ok(Value::TimeMillis(3_723_500))
    );
    assert_eq!(
        value("timestamp-millis", "long", "1970-01-01T00:00:01.5+00:00"),
        Ok(Value::TimestampMillis(1_500))
    );
    assert_eq!(
        value("local-timestamp-micros", "long", "1970-01-01T00:00:01"),
        Ok(Value::LocalTimestampMicros(1_000_000))
    );
    // chrono alone takes the first of each.
    for (logical, base, text) in [
        ("date", "int", "2024-3-1"),
        ("date", "int", "20240301"),
        ("time-millis", "int", "1:02:03"),
        ("time-micros", "long", "13:45"),
        ("time-micros", "long", "13:45:00."),
        ("timestamp-millis", "long", "2024-03-01 13:45:00Z"),
        ("timestamp-millis", "long", "2024-03-01t13:45:00z"),
        ("timestamp-millis", "long", "2024-03-01T13:45:00"),
        ("local-timestamp-millis", "long", "2024-03-01T13:45:00Z"),
    ] {
        assert!(value(logical, base, text).is_err(), "{logical} {text}");
    }
}
