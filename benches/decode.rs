//! Decoder + assembler throughput on a captured outbox stream: 1000
//! single-row transactions (Begin, Relation once, Insert, Commit) from
//! PostgreSQL 15, `crates/pgoutput/tests/fixtures/outbox.bin`.
//!
//! Reported twice over the same work: in bytes of pgoutput messages, and in
//! rows (outbox events). The relay needs ≥ 550k rows/s here: 10× what
//! pg_recvlogical decodes over TCP, so decoding is never the bottleneck.

use std::hint::black_box;

use bytes::{Buf, Bytes};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use outbox_relay::assembler::{TransactionAssembler, TxEvent};
use outbox_relay::pgoutput::{DecodeContext, decode};

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

fn bench_outbox_stream(c: &mut Criterion) {
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

criterion_group!(benches, bench_outbox_stream);
criterion_main!(benches);
