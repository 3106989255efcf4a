//! The schema registry building blocks (`outbox_relay::registry`) against
//! a real registry, Apicurio Registry's Confluent-compatible API
//! (`OUTBOX_TEST_REGISTRY=1 scripts/services up`, or `scripts/services
//! start-registry`), and a real consumer: records framed here are read
//! back by the official Python client's `AvroDeserializer` and
//! `JSONDeserializer` (`scripts/services registry-consume`).
//!
//! Where Apicurio 2.6 differs from Confluent's registry, as met here:
//! * Its default compatibility is NONE (Confluent's is BACKWARD): any new
//!   version of a subject is accepted; a test of incompatibility must set
//!   the subject's compatibility first.
//! * Schema ids are its content ids: the same schema text under two
//!   subjects has one id, as in Confluent's; but ids start at 1 per fresh
//!   registry, so tests never assume an id.
//! * Its 404 answers carry Confluent's error codes (40401 subject, 40402
//!   version, 40403 schema) with messages of its own wording.
//! * A JSON Schema it cannot recognise as one (`{"type": "object"}` with no
//!   `$schema` or `properties`) is refused with 422 (error code 42201),
//!   which Confluent accepts: tests give `$schema`.

use std::time::Duration;

use outbox_relay::registry::{
    AvroEncoder, RegistryClient, RegistryError, RegistrySettings, Schema, SchemaType,
    SubjectNameStrategy, wire,
};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::json;

use crate::support::{env, random_name, services};

pub(crate) fn registry_url() -> String {
    std::env::var("OUTBOX_TEST_REGISTRY_URL").unwrap_or_else(|_| {
        panic!(
            "OUTBOX_TEST_REGISTRY_URL is not set: start the registry with \
             `OUTBOX_TEST_REGISTRY=1 scripts/services up` (or `scripts/services \
             start-registry`) and eval its export lines"
        )
    })
}

pub(crate) fn client() -> RegistryClient {
    RegistryClient::new(&RegistrySettings {
        url: registry_url(),
        timeout: Duration::from_secs(10),
        ca_file: None,
        credentials: None,
    })
    .expect("registry client")
}

async fn produce(topic: &str, values: &[Vec<u8>]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for value in values {
        producer
            .send(
                FutureRecord::<(), _>::to(topic).payload(value),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("delivered");
    }
}

/// The values of the first `n` records of `topic` as the Python
/// deserializer for `format` (avro, json) reads them, one JSON value each.
pub(crate) async fn python_reads(topic: &str, n: usize, format: &str) -> Vec<serde_json::Value> {
    registry_consume(topic, n, &["--format", format]).await
}

/// The values of the first `n` records of `topic` as Confluent's Python
/// Protobuf deserializer reads them into the message class `message`,
/// which protoc generates from `proto` (as a consumer's build would).
pub(crate) async fn python_reads_protobuf(
    topic: &str,
    n: usize,
    proto: &std::path::Path,
    message: &str,
) -> Vec<serde_json::Value> {
    let proto = proto.to_str().expect("a UTF-8 path");
    let args = [
        "--format",
        "protobuf",
        "--proto",
        proto,
        "--message",
        message,
    ];
    registry_consume(topic, n, &args).await
}

async fn registry_consume(topic: &str, n: usize, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args: Vec<String> = [
        "registry-consume",
        topic,
        "--max",
        &n.to_string(),
        "--timeout",
        "90",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env("OUTBOX_RELAY_SERVICES"))
            .args(&args)
            .output()
            .expect("run scripts/services registry-consume")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "registry-consume {topic}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

const ORDER: &str = r#"{
  "type": "record", "name": "OrderPlaced", "namespace": "com.acme.it",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
      {"name": "name", "type": "string"},
      {"name": "email", "type": ["null", "string"], "default": null}
    ]}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
      {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "double"}
    ]}}},
    {"name": "attributes", "type": {"type": "map", "values": "string"}},
    {"name": "signature", "type": ["null", "bytes"]},
    {"name": "gift", "type": "boolean", "default": false},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "due", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}}
  ]
}"#;

#[tokio::test]
async fn avro_records_framed_here_are_read_back_by_confluents_python_deserializer() {
    let _services = services::shared().await;
    let registry = client();
    let topic = random_name("registry_avro");
    let subject = SubjectNameStrategy::TopicName
        .subject(&topic, None)
        .unwrap();
    let schema = Schema {
        schema_type: SchemaType::Avro,
        text: ORDER.into(),
        references: vec![],
    };
    let id = registry
        .register(&subject, &schema)
        .await
        .expect("register");
    let latest = registry.latest(&subject).await.expect("latest");
    assert_eq!((latest.id, latest.version), (id, 1));
    assert_eq!(latest.schema.schema_type, SchemaType::Avro);
    assert_eq!(registry.version(&subject, 1).await.unwrap(), latest);
    assert_eq!(registry.schema(id).await.unwrap(), latest.schema);
    // Registering the same schema again is no new version.
    assert_eq!(registry.register(&subject, &schema).await.unwrap(), id);

    let encoder = AvroEncoder::new(&latest.schema.text).expect("the registry's schema parses");
    assert_eq!(
        SubjectNameStrategy::TopicRecordName
            .subject(&topic, encoder.record_name().as_deref())
            .unwrap(),
        format!("{topic}-com.acme.it.OrderPlaced")
    );
    let payloads = [
        json!({
            "id": 1, "status": "NEW", "customer": {"name": "Ada"},
            "lines": [{"sku": "A-1", "qty": 2, "price": 9.5}], "attributes": {"channel": "web"},
            "signature": "AAEC/w==", "amount": "19.90", "placed_at": "2024-03-01T13:45:00.250Z",
            "due": "2024-03-31", "ref": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
        }),
        json!({
            "id": 9007199254740993_i64, "status": "PAID",
            "customer": {"name": "Grace", "email": "grace@example.com"},
            "lines": [], "attributes": {}, "signature": null, "gift": true,
            "amount": -0.5, "placed_at": 0, "due": 0, "ref": "00000000-0000-0000-0000-000000000000"
        }),
    ];
    let framed: Vec<Vec<u8>> = payloads
        .iter()
        .map(|p| wire::frame(id, &encoder.encode(p).expect("the payload fits")))
        .collect();
    assert_eq!(wire::unframe(&framed[0]).unwrap().schema_id, id);
    produce(&topic, &framed).await;

    // What a Python consumer sees: the same values, defaults filled in,
    // logical types as Python prints them (decimal as text, datetime and
    // date in ISO 8601, bytes in base64 as the payload gave them).
    let mut expected = payloads.to_vec();
    expected[0]["customer"]["email"] = json!(null);
    expected[0]["gift"] = json!(false);
    expected[0]["placed_at"] = json!("2024-03-01T13:45:00.250000+00:00");
    expected[1]["amount"] = json!("-0.50");
    expected[1]["placed_at"] = json!("1970-01-01T00:00:00+00:00");
    expected[1]["due"] = json!("1970-01-01");
    assert_eq!(python_reads(&topic, 2, "avro").await, expected);
}

#[tokio::test]
async fn json_schema_records_framed_here_are_read_back_by_confluents_python_deserializer() {
    let _services = services::shared().await;
    let registry = client();
    let topic = random_name("registry_json");
    let schema = Schema {
        schema_type: SchemaType::Json,
        text: json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "OrderShipped",
            "type": "object",
            "properties": {"id": {"type": "integer"}, "carrier": {"type": "string"}},
            "required": ["id"]
        })
        .to_string(),
        references: vec![],
    };
    let id = registry
        .register(&format!("{topic}-value"), &schema)
        .await
        .expect("register");
    let fetched = registry.schema(id).await.unwrap();
    assert_eq!(fetched.schema_type, SchemaType::Json);
    let payload = json!({"id": 7, "carrier": "DHL"});
    produce(&topic, &[wire::frame(id, payload.to_string().as_bytes())]).await;
    assert_eq!(python_reads(&topic, 1, "json").await, [payload]);
}

#[tokio::test]
async fn what_the_registry_lacks_is_a_config_error_not_a_retry() {
    let _services = services::shared().await;
    let registry = client();
    let subject = random_name("registry_missing");
    let err = registry.latest(&subject).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::SubjectNotFound { subject: s, .. } if *s == subject),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("register the schema"), "{err}");

    let id = registry
        .register(
            &subject,
            &Schema {
                schema_type: SchemaType::Avro,
                text: r#"{"type": "enum", "name": "E", "symbols": ["A"]}"#.into(),
                references: vec![],
            },
        )
        .await
        .unwrap();
    let err = registry.version(&subject, 2).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::VersionNotFound { version: 2, .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let err = registry.schema(id + 1_000_000).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::SchemaNotFound { .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}

mod alone {
    use super::*;

    /// A registry outage: a client with the version cached goes on; one
    /// without gets a retryable error; the registry back (stop-registry,
    /// start-registry) has kept its schemas and ids.
    #[tokio::test]
    async fn a_registry_outage_is_retryable_and_the_registry_comes_back_with_its_schemas() {
        let _services = services::exclusive().await;
        let warm = client();
        let subject = random_name("registry_outage");
        let id = warm
            .register(
                &subject,
                &Schema {
                    schema_type: SchemaType::Avro,
                    text: r#""string""#.into(),
                    references: vec![],
                },
            )
            .await
            .unwrap();
        let before = warm.version(&subject, 1).await.unwrap();

        let down = services::ServiceDown::stop(&["stop-registry"], "start-registry").await;
        let cold = client();
        let err = cold.version(&subject, 1).await.unwrap_err();
        assert!(matches!(err, RegistryError::Unreachable { .. }), "{err:?}");
        assert!(err.is_retryable());
        assert_eq!(warm.version(&subject, 1).await.unwrap(), before);
        assert!(
            warm.latest(&subject).await.unwrap_err().is_retryable(),
            "latest always asks"
        );

        down.start().await;
        let after = cold.latest(&subject).await.unwrap();
        assert_eq!((after.id, after.version), (id, 1));
        assert_eq!(after.schema, before.schema);
    }
}
