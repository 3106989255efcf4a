//! Fuzz target: no byte string may make the pgoutput or replication envelope
//! decoders (or the assembler behind them) panic. Seeds in corpus/decode/ are
//! real messages captured by scripts/capture-pgoutput-fixtures.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../exercise.rs");

fuzz_target!(|data: &[u8]| {
    exercise(data);
});
