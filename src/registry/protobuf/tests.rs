use base64::Engine as _;
use prost::Message as _;
use serde_json::json;

use super::*;

const SHOP: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message OrderPlaced {
  string order_id = 1;
  int64 amount = 2;
  repeated string tags = 3;
  Status status = 4;
  map<string, int32> counts = 5;
  repeated Line lines = 6;
  bytes blob = 7;
  google.protobuf.Timestamp at = 8;
  oneof payment { string card = 9; string iban = 10; }
  double ratio = 11;
  uint32 small = 12;
  message Line { string sku = 1; int32 qty = 2; }
}
enum Status { STATUS_UNKNOWN = 0; PAID = 1; }
message OrderCancelled { string order_id = 1; }
"#;

fn encoder(message: Option<&str>) -> ProtobufEncoder {
    ProtobufEncoder::new(SHOP, message).unwrap()
}

fn error(payload: serde_json::Value) -> MappingError {
    encoder(None).encode(&payload).unwrap_err()
}

#[test]
fn fields_encode_as_protobufs_own_encoder_writes_them() {
    // Bytes as protoc's Python code writes OrderPlaced(order_id="a",
    // amount=3): field 1 length-delimited, field 2 varint.
    let encoded = encoder(None)
        .encode(&json!({"orderId": "a", "amount": 3}))
        .unwrap();
    assert_eq!(encoded, b"\x0a\x01a\x10\x03");
    // The proto name reads the same as the JSON name; a 64-bit integer may
    // be a string; null leaves a field unset.
    let same = encoder(None)
        .encode(&json!({"order_id": "a", "amount": "3", "tags": null}))
        .unwrap();
    assert_eq!(same, encoded);
}

#[test]
fn every_kind_of_field_reads_back_as_written() {
    let payload = json!({
        "orderId": "o-1",
        "amount": "9007199254740993",
        "tags": ["x", "y"],
        "status": "PAID",
        "counts": {"a": 1, "b": 2},
        "lines": [{"sku": "s", "qty": 2}],
        "blob": "AQI",
        "at": "2024-03-01T13:45:00.250Z",
        "iban": "DE00",
        "ratio": "Infinity",
        "small": 4_000_000_000u32,
    });
    let encoder = encoder(None);
    let bytes = encoder.encode(&payload).unwrap();
    let back = DynamicMessage::decode(encoder.message.clone(), bytes.as_slice()).unwrap();
    let get = |name: &str| back.get_field_by_name(name).unwrap().into_owned();
    assert_eq!(get("order_id"), Value::String("o-1".into()));
    assert_eq!(get("amount"), Value::I64(9_007_199_254_740_993));
    assert_eq!(
        get("tags"),
        Value::List(vec![Value::String("x".into()), Value::String("y".into())])
    );
    assert_eq!(get("status"), Value::EnumNumber(1));
    let Value::Map(counts) = get("counts") else {
        panic!("counts is not a map")
    };
    assert_eq!(
        counts.get(&MapKey::String("b".into())),
        Some(&Value::I32(2))
    );
    let Value::List(lines) = get("lines") else {
        panic!("lines is not a list")
    };
    let line = lines[0].as_message().unwrap();
    assert_eq!(
        line.get_field_by_name("qty").unwrap().into_owned(),
        Value::I32(2)
    );
    assert_eq!(get("blob"), Value::Bytes(Bytes::from_static(&[1, 2])));
    let at = get("at");
    let at = at.as_message().unwrap();
    assert_eq!(
        at.get_field_by_name("seconds").unwrap().into_owned(),
        Value::I64(1_709_300_700)
    );
    assert_eq!(
        at.get_field_by_name("nanos").unwrap().into_owned(),
        Value::I32(250_000_000)
    );
    assert_eq!(get("iban"), Value::String("DE00".into()));
    assert_eq!(get("ratio"), Value::F64(f64::INFINITY));
    assert_eq!(get("small"), Value::U32(4_000_000_000));
}

#[test]
fn message_indexes_say_where_the_message_is_in_its_file() {
    assert_eq!(encoder(None).message_indexes(), [0]);
    assert_eq!(encoder(None).message_name(), "shop.OrderPlaced");
    let cancelled = encoder(Some("shop.OrderCancelled"));
    assert_eq!(cancelled.message_indexes(), [1]);
    // The map field's entry type is OrderPlaced's first nested message
    // (protoc makes it, and Confluent's deserializers count it): Line is
    // the second.
    let line = encoder(Some("shop.OrderPlaced.Line"));
    assert_eq!(line.message_indexes(), [0, 1]);
    assert_eq!(
        line.encode(&json!({"sku": "s", "qty": 1})).unwrap(),
        b"\x0a\x01s\x10\x01"
    );
}

#[test]
fn a_payload_that_does_not_fit_names_the_place_and_the_rule_not_the_value() {
    let cases = [
        (
            json!({"orderId": "secret-1", "extra": 1}),
            "/",
            "message shop.OrderPlaced has no field extra",
        ),
        (
            json!({"lines": [{"sku": "s"}, {"qty": "secret"}]}),
            "/lines/1/qty",
            "expected int32, got a string that is not an integer",
        ),
        (
            json!({"amount": 1.5}),
            "/amount",
            "expected int64, got a number with a fraction, not an integer",
        ),
        (json!({"small": -1}), "/small", "out of the range of uint32"),
        (
            json!({"status": "secret"}),
            "/status",
            "not a value of enum shop.Status",
        ),
        (
            json!({"card": "c", "iban": "secret"}),
            "/iban",
            "card and iban are both set, of oneof payment",
        ),
        (
            json!({"counts": {"secret": "x"}}),
            "/counts/*",
            "expected int32, got a string that is not an integer",
        ),
        (
            json!({"tags": ["a", null]}),
            "/tags/1",
            "null in a repeated field",
        ),
        (
            json!({"at": "secret"}),
            "/at",
            "expected google.protobuf.Timestamp in its JSON form, got string",
        ),
        (
            json!({"blob": "not base64 secret!"}),
            "/blob",
            "expected bytes as base64 (standard or URL-safe)",
        ),
        (
            json!(["secret"]),
            "/",
            "expected message shop.OrderPlaced, got array",
        ),
        (
            json!({"secret value": 1}),
            "/",
            "a field message shop.OrderPlaced does not have",
        ),
    ];
    for (payload, path, reason) in cases {
        let e = error(payload.clone());
        assert_eq!(
            (e.path.as_str(), e.reason.as_str()),
            (path, reason),
            "{payload}"
        );
        assert!(!e.to_string().contains("secret"), "{e} quotes the payload");
    }
}

#[test]
fn a_proto2_required_field_must_be_there_and_a_closed_enum_takes_its_numbers() {
    let schema = r#"
        syntax = "proto2";
        message Shipment { required string id = 1; optional Kind kind = 2; }
        enum Kind { PARCEL = 1; LETTER = 2; }
    "#;
    let shipment = ProtobufEncoder::new(schema, None).unwrap();
    let e = shipment.encode(&json!({"kind": 1})).unwrap_err();
    assert_eq!(e.reason, "required field id of message Shipment is missing");
    let e = shipment.encode(&json!({"id": "a", "kind": 7})).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.reason.as_str()),
        ("/kind", "not a number of enum Kind")
    );
    assert!(shipment.encode(&json!({"id": "a", "kind": 2})).is_ok());
    // proto3 enums are open: an unknown number is kept.
    assert!(encoder(None).encode(&json!({"status": 7})).is_ok());
}

#[test]
fn a_serialized_descriptor_in_base64_is_a_schema_too() {
    // What Confluent's Python serializer registers for a message.
    let mut compiler = protox::Compiler::with_file_resolver(OneFile(
        File::from_source(
            SCHEMA_FILE,
            "syntax = \"proto3\"; message A { int32 n = 1; }",
        )
        .unwrap(),
    ));
    compiler.open_file(SCHEMA_FILE).unwrap();
    let set = compiler.file_descriptor_set();
    let text = base64::engine::general_purpose::STANDARD.encode(set.file[0].encode_to_vec());
    let encoder = ProtobufEncoder::new(&text, None).unwrap();
    assert_eq!(encoder.message_name(), "A");
    assert_eq!(encoder.encode(&json!({"n": 5})).unwrap(), b"\x08\x05");
}

#[test]
fn a_schema_that_cannot_be_used_says_why() {
    let e = ProtobufEncoder::new("syntax = \"proto3\"; message {", None).unwrap_err();
    assert!(
        e.to_string().starts_with("not a usable Protobuf schema: "),
        "{e}"
    );
    let e = ProtobufEncoder::new("syntax = \"proto3\";", None).unwrap_err();
    assert_eq!(e.0, "the schema has no message");
    let e = ProtobufEncoder::new(SHOP, Some("shop.Missing")).unwrap_err();
    assert_eq!(e.0, "the schema has no message shop.Missing");
    let e = ProtobufEncoder::new(
        "syntax = \"proto3\"; import \"other.proto\"; message A { Other o = 1; }",
        None,
    )
    .unwrap_err();
    assert!(e.0.contains("other.proto"), "{e}");
    // A Google type by name is not a message of the schema.
    let e = ProtobufEncoder::new(SHOP, Some("google.protobuf.Timestamp")).unwrap_err();
    assert_eq!(e.0, "the schema has no message google.protobuf.Timestamp");
}

/// The payload as the relay gets it: parsed text, numbers as written.
fn parsed(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn an_integer_written_with_a_fraction_or_exponent_is_read_exactly_or_refused() {
    // json_format.Parse reads {"amount": 10.0} as 10: so does the relay.
    let ten = encoder(None).encode(&parsed(r#"{"amount": 10}"#)).unwrap();
    for text in [
        r#"{"amount": 10.0}"#,
        r#"{"amount": 1e1}"#,
        r#"{"amount": "10.0"}"#,
        r#"{"amount": "1E+1"}"#,
        r#"{"amount": "+10"}"#,
    ] {
        assert_eq!(encoder(None).encode(&parsed(text)).unwrap(), ten, "{text}");
    }
    // Digits stay exact at any size; a fraction a double would round is
    // refused with what to write instead.
    let exact = encoder(None)
        .encode(&parsed(r#"{"amount": 9007199254740993}"#))
        .unwrap();
    assert_eq!(exact, b"\x10\x81\x80\x80\x80\x80\x80\x80\x10");
    let e = encoder(None)
        .encode(&parsed(r#"{"amount": 9007199254740993.0}"#))
        .unwrap_err();
    assert_eq!(e.path, "/amount");
    assert!(e.reason.contains("write it as digits"), "{e}");
    for (text, reason) in [
        (
            r#"{"amount": 10.5}"#,
            "expected int64, got a number with a fraction, not an integer",
        ),
        (
            r#"{"amount": "1_0"}"#,
            "expected int64, got a string that is not an integer",
        ),
        (
            r#"{"amount": 9223372036854775808}"#,
            "out of the range of int64",
        ),
        (r#"{"small": 4294967296.0}"#, "out of the range of uint32"),
        (r#"{"small": -1e0}"#, "out of the range of uint32"),
        (
            r#"{"lines": [{"qty": 2147483648}]}"#,
            "out of the range of int32",
        ),
    ] {
        let e = encoder(None).encode(&parsed(text)).unwrap_err();
        assert_eq!(e.reason, reason, "{text}");
    }
    assert_eq!(
        encoder(None)
            .encode(&parsed(r#"{"small": 4294967295.0}"#))
            .unwrap(),
        b"\x60\xff\xff\xff\xff\x0f"
    );
}

#[test]
fn one_field_under_its_json_name_and_its_proto_name_is_refused() {
    // Python's json_format keeps the last of the two, Java's refuses: the
    // relay refuses, naming the field, never the values.
    for text in [
        r#"{"orderId": "secret-a", "order_id": "secret-b"}"#,
        r#"{"order_id": "secret-a", "orderId": "secret-a"}"#,
        r#"{"orderId": "secret-a", "order_id": null}"#,
    ] {
        let e = encoder(None).encode(&parsed(text)).unwrap_err();
        assert_eq!(e.path, "/orderId", "{text}");
        assert_eq!(
            e.reason,
            "field order_id is given twice, as orderId and as order_id: keep one"
        );
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}

#[test]
fn struct_and_value_numbers_keep_their_text_to_the_nearest_double() {
    let schema = r#"
        syntax = "proto3";
        import "google/protobuf/struct.proto";
        message Doc { google.protobuf.Struct attrs = 1; }
    "#;
    let doc = ProtobufEncoder::new(schema, None).unwrap();
    // 1.10 is a number whose text is not the shortest of its double: the
    // payload's exact text reaches the mapping, which reads it as 1.1.
    let bytes = doc
        .encode(&parsed(r#"{"attrs": {"w": 1.10, "n": [1e2, null, "x"]}}"#))
        .unwrap();
    let back = DynamicMessage::decode(doc.message.clone(), bytes.as_slice()).unwrap();
    let attrs: prost_types::Struct = back
        .get_field_by_name("attrs")
        .unwrap()
        .as_message()
        .unwrap()
        .transcode_to()
        .unwrap();
    assert_eq!(
        attrs.fields["w"].kind,
        Some(prost_types::value::Kind::NumberValue(1.1))
    );
    let Some(prost_types::value::Kind::ListValue(list)) = &attrs.fields["n"].kind else {
        panic!("n is not a list")
    };
    assert_eq!(
        list.values[0].kind,
        Some(prost_types::value::Kind::NumberValue(100.0))
    );
}
