//! Decoder + assembler throughput on a captured outbox stream: 1000
//! single-row transactions (Begin, Relation once, Insert, Commit) from
//! PostgreSQL 15, `crates/pgoutput/tests/fixtures/outbox.bin`.
//!
//! Reported twice over the same work: in bytes of pgoutput messages, and in
//! rows (outbox events). The relay needs ≥ 550k rows/s here: 10× what
//! pg_recvlogical decodes over TCP, so decoding is never the bottleneck.
//!
//! `outbox_row/extract_and_build` is the relay's per-event work after
//! decoding: one inserted row shaped like the benchmark's W3 rows (uuid id,
//! `timestamptz` column, ~500-byte jsonb payload) extracted into an
//! `OutboxRow` and built into its CloudEvents record (binary mode), the
//! step the W3 flame graph shows between the decoder and the producer.
//! `contract/check_w3_payload` is what `[[contracts]]` adds per event: the
//! same payloads parsed and checked against a JSON Schema of their shape;
//! `contract/encode_w3_payload_avro` parses them, encodes them to Avro by a
//! registry subject's schema of that shape and frames them;
//! `contract/encode_w3_payload_protobuf` likewise as a Protobuf message.
//! `time/*` sets the general timestamp parser beside the hand-written fast
//! path the relay uses for every event.
//!
//! Times are the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`),
//! not wall time: the machines this runs on are shared, and CPU time is
//! what other work on the box does not inflate (much).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use chrono::DateTime;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use outbox_relay::contracts::{RegistryContract, Schema};
use outbox_relay::envelope::{
    ContentMode, EnvelopeSettings, TopicCache, build_record, build_record_cached,
};
use outbox_relay::outbox::{
    ColumnMap, RowExtractor, parse_pg_timestamp, parse_pg_timestamp_general,
};
use outbox_relay::registry::{Schema as RegistrySchema, SchemaType, SubjectVersion};
use pgoutput::assembler::Relation;
use pgoutput::assembler::{TransactionAssembler, TxEvent};
use pgoutput::{Column, DecodeContext, TupleData, TupleValue, decode};

/// CPU time of the calling thread.
struct ThreadCpuTime(WallTime);

fn thread_cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // Linux always has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }
    fn end(&self, started: Duration) -> Duration {
        thread_cpu_now().saturating_sub(started)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Nanoseconds, shown like wall time.
        self.0.formatter()
    }
}

type Cpu = Criterion<ThreadCpuTime>;

fn load_outbox_stream() -> Vec<Bytes> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/pgoutput/tests/fixtures/outbox.bin"
    );
    let mut stream = Bytes::from(std::fs::read(path).expect("outbox fixture"));
    let mut messages = Vec::new();
    while stream.remaining() >= 4 {
        let len = stream.get_u32() as usize;
        messages.push(stream.split_to(len));
    }
    messages
}

/// Decodes and assembles the whole stream; returns the rows seen.
fn decode_and_assemble(messages: &[Bytes]) -> u64 {
    let ctx = DecodeContext::V1;
    let mut assembler = TransactionAssembler::new();
    let mut rows = 0;
    for message in messages {
        let mut buf = message.clone();
        let decoded = decode(&mut buf, &ctx).expect("fixture decodes");
        if let Some(TxEvent::Insert { tuple, .. }) =
            assembler.push(decoded).expect("fixture frames")
        {
            black_box(&tuple);
            rows += 1;
        }
    }
    rows
}

fn bench_outbox_stream(c: &mut Cpu) {
    let messages = load_outbox_stream();
    let bytes: u64 = messages.iter().map(|m| m.len() as u64).sum();
    let rows = decode_and_assemble(&messages);
    assert_eq!(rows, 1000);

    let mut group = c.benchmark_group("outbox_stream");
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("decode_and_assemble_bytes", |b| {
        b.iter(|| decode_and_assemble(black_box(&messages)))
    });
    group.throughput(Throughput::Elements(rows));
    group.bench_function("decode_and_assemble_rows", |b| {
        b.iter(|| decode_and_assemble(black_box(&messages)))
    });
    group.finish();
}

/// 100 rows like the ones `benches/run.py` loads for W3.
fn w3_rows() -> (Arc<Relation>, Vec<TupleData>) {
    let columns = [
        ("id", 2950),
        ("aggregatetype", 25),
        ("aggregateid", 25),
        ("type", 25),
        ("payload", 3802),
        ("timestamp", 1184),
    ]
    .iter()
    .map(|(name, type_oid)| Column {
        flags: 0,
        name: (*name).into(),
        type_oid: *type_oid,
        type_modifier: -1,
    })
    .collect();
    let relation = Arc::new(Relation {
        oid: 16384,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns,
    });
    let text = |s: String| TupleValue::Text(Bytes::from(s));
    let rows = (0..100)
        .map(|i| TupleData {
            columns: vec![
                text(format!("0b3f6f6e-6f0e-4a43-9b53-3a3b1f4d{i:04}")),
                text("order".into()),
                text(format!("agg-{}", i % 100)),
                text("OrderPlaced".into()),
                text(format!(
                    r#"{{"n": {i}, "pad": "{}", "seq": 1, "total": 42.5, "aggregate": "agg-{i}"}}"#,
                    "x".repeat(410)
                )),
                text(format!("2026-11-30 15:16:57.{:06}+00", i * 1013)),
            ],
        })
        .collect();
    (relation, rows)
}

fn bench_outbox_row(c: &mut Cpu) {
    let (relation, rows) = w3_rows();
    let settings = EnvelopeSettings {
        source: "/bench".into(),
        mode: ContentMode::Binary,
        topic_template: "bench.{aggregatetype}".into(),
    };
    let commit_time = DateTime::from_timestamp(1_790_000_000, 0).expect("valid time");
    let mut extractor = RowExtractor::new(ColumnMap::default());
    let mut group = c.benchmark_group("outbox_row");
    group.throughput(Throughput::Elements(rows.len() as u64));
    group.bench_function("extract_and_build", |b| {
        b.iter(|| {
            for tuple in &rows {
                let row = extractor.extract(&relation, tuple).expect("row extracts");
                let record = build_record(&row, commit_time, &settings).expect("row builds");
                black_box(record);
            }
        })
    });
    // What the relay runs: topics rendered once per aggregate type.
    let mut topics = TopicCache::default();
    group.bench_function("extract_and_build_cached", |b| {
        b.iter(|| {
            for tuple in &rows {
                let row = extractor.extract(&relation, tuple).expect("row extracts");
                let record = build_record_cached(&row, commit_time, &settings, &mut topics, None)
                    .expect("row builds");
                black_box(record);
            }
        })
    });
    group.finish();
}

/// The JSON Schema a W3 payload keeps: the contract the W3 drain with
/// `[[contracts]]` runs under (benches/run.py writes the same schema).
const W3_SCHEMA: &str = r#"{
  "$id": "urn:bench:order-placed:v1",
  "type": "object",
  "required": ["n", "aggregate", "seq", "total"],
  "properties": {
    "n": {"type": "integer", "minimum": 0},
    "aggregate": {"type": "string", "pattern": "^agg-[0-9]+$"},
    "seq": {"type": "integer"},
    "total": {"type": "number"},
    "pad": {"type": "string"}
  }
}"#;

/// What a contract adds per event: the payload checked against its JSON
/// Schema (parse and validate), beside the event built without one.
fn bench_contract(c: &mut Cpu) {
    let (relation, rows) = w3_rows();
    let mut extractor = RowExtractor::new(ColumnMap::default());
    let payloads: Vec<Bytes> = rows
        .iter()
        .map(|tuple| {
            extractor
                .extract(&relation, tuple)
                .expect("row extracts")
                .payload
        })
        .collect();
    let schema: serde_json::Value = serde_json::from_str(W3_SCHEMA).expect("schema is JSON");
    let schema = Schema::from_value(&schema, "order-placed.json", None).expect("schema compiles");
    let mut group = c.benchmark_group("contract");
    group.throughput(Throughput::Elements(payloads.len() as u64));
    group.bench_function("check_w3_payload", |b| {
        b.iter(|| {
            for payload in &payloads {
                schema
                    .check(black_box(payload))
                    .expect("the payload keeps its contract");
            }
        })
    });
    // A registry subject's Avro schema of the same shape: the payload
    // parsed, encoded to Avro binary and framed (the record value sent).
    let avro = registry_schema(SchemaType::Avro, W3_AVRO);
    group.bench_function("encode_w3_payload_avro", |b| {
        b.iter(|| {
            for payload in &payloads {
                black_box(avro.encode(black_box(payload)).expect("the payload fits"));
            }
        })
    });
    // The same shape as a Protobuf message: parsed, encoded and framed.
    let protobuf = registry_schema(SchemaType::Protobuf, W3_PROTO);
    group.bench_function("encode_w3_payload_protobuf", |b| {
        b.iter(|| {
            for payload in &payloads {
                black_box(
                    protobuf
                        .encode(black_box(payload))
                        .expect("the payload fits"),
                );
            }
        })
    });
    group.finish();
}

/// A registry subject's schema `text` of type `kind`, compiled as the
/// relay compiles a contract's subject.
fn registry_schema(kind: SchemaType, text: &str) -> Schema {
    let version = SubjectVersion {
        subject: "bench.order-value".into(),
        version: 1,
        id: 1,
        schema: Arc::new(RegistrySchema {
            schema_type: kind,
            text: text.into(),
            references: Vec::new(),
        }),
    };
    let contract = RegistryContract {
        subject: version.subject.clone(),
        version: None,
        frame: true,
        dataschema: None,
        record: None,
    };
    Schema::from_registry(&version, "http://registry", &contract).expect("the schema compiles")
}

/// The Protobuf schema of a W3 payload.
const W3_PROTO: &str = "syntax = \"proto3\"; package bench; message OrderPlaced { \
    int64 n = 1; string pad = 2; int64 seq = 3; double total = 4; string aggregate = 5; }";

/// The Avro schema of a W3 payload.
const W3_AVRO: &str = r#"{
  "type": "record", "name": "OrderPlaced", "namespace": "bench",
  "fields": [
    {"name": "n", "type": "long"},
    {"name": "pad", "type": "string"},
    {"name": "seq", "type": "long"},
    {"name": "total", "type": "double"},
    {"name": "aggregate", "type": "string"}
  ]
}"#;

fn bench_time(c: &mut Cpu) {
    let texts: Vec<String> = (0..100)
        .map(|i| format!("2026-11-30 15:{:02}:57.{:06}+00", i % 60, i * 1013))
        .collect();
    let mut group = c.benchmark_group("time");
    group.throughput(Throughput::Elements(texts.len() as u64));
    group.bench_function("parse_general", |b| {
        b.iter(|| {
            texts
                .iter()
                .filter(|t| parse_pg_timestamp_general(black_box(t)).is_some())
                .count()
        })
    });
    group.bench_function("parse_fast", |b| {
        b.iter(|| {
            texts
                .iter()
                .filter(|t| parse_pg_timestamp(black_box(t)).is_some())
                .count()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime(WallTime));
    targets = bench_outbox_stream, bench_outbox_row, bench_contract, bench_time
}
criterion_main!(benches);
