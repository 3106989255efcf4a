//! Differential tests: the relay's encoders against each format's
//! reference implementation, on generated schemas and payloads.
//!
//! * [`avro`]: `AvroEncoder` against fastavro as Confluent's Python
//!   `AvroSerializer` drives it (JSON read with numbers as `Decimal`).
//! * [`protobuf`]: `ProtobufEncoder` against
//!   `google.protobuf.json_format.Parse` then `SerializeToString`.
//! * [`json_schema`]: the relay's JSON Schema contracts against the verdict
//!   of the `jsonschema` Python package.
//!
//! The rule each module checks: where the reference refuses, the relay
//! refuses (the event becomes a dead letter); where it accepts, the relay's
//! bytes are the same (or, where an encoding is not unique, the decoded
//! values are); where the relay is deliberately stricter, the case is one
//! docs/contracts.md lists, with why. Cases are generated from a seed
//! (`OUTBOX_REFERENCE_SEED`, default fixed) and counted by
//! `OUTBOX_REFERENCE_CASES` (default 10,000 per format; `make
//! test-reference-long` runs a million); a failing case is shrunk and
//! printed with its seed.
//!
//! The reference implementations run in the Python virtualenv of
//! `scripts/services` (`scripts/services venv` makes it and prints its
//! python); no service needs to run. Each module sends its cases to one
//! Python process as JSON lines and reads one JSON line back per case.

#[path = "reference/support.rs"]
mod support;

#[path = "reference/avro.rs"]
mod avro;
#[path = "reference/json_schema.rs"]
mod json_schema;
#[path = "reference/protobuf.rs"]
mod protobuf;

/// The reference implementations are there, at the versions the virtualenv
/// pins, and answer one line per case: what every module below relies on.
#[test]
fn the_reference_implementations_answer_one_line_per_case() {
    let cases: Vec<String> = [
        "fastavro",
        "google.protobuf",
        "jsonschema",
        "confluent_kafka",
    ]
    .iter()
    .map(|module| serde_json::json!({ "module": module }).to_string())
    .collect();
    let answers = support::run_script("versions.py", &[], &cases);
    for (case, answer) in cases.iter().zip(&answers) {
        let answer: serde_json::Value = serde_json::from_str(answer).expect("a JSON line");
        let version = answer["version"].as_str().unwrap_or_default();
        assert!(
            !version.is_empty() && version.chars().next().is_some_and(|c| c.is_ascii_digit()),
            "{case}: no version in {answer}"
        );
    }
}
