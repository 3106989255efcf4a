// Shared by the fuzz target (fuzz/fuzz_targets/decode.rs) and the corpus
// replay test (tests/it/fuzz_corpus.rs) through `include!`, so both run
// the same code over the same inputs. Both depend on the pgoutput crate
// (crates/pgoutput) and name it directly.
//
// Runs the pgoutput decoder over `data` under every decoder configuration
// (protocol 1–4, inside or outside a streamed block, parallel streaming or
// not), feeds each decoded message to a fresh transaction assembler, and does
// the same for `data` read as a replication CopyData payload. Returns how many
// decodes succeeded. Panicking is the only failure.
fn exercise(data: &[u8]) -> usize {
    use pgoutput::assembler::TransactionAssembler;
    use pgoutput::{Bytes, DecodeContext, ReplicationMessage, decode, decode_copy_data};

    fn decode_everywhere(input: &Bytes) -> usize {
        let mut ok = 0;
        for protocol_version in 1..=4 {
            for in_stream in [false, true] {
                for parallel_streaming in [false, true] {
                    let ctx = DecodeContext {
                        protocol_version,
                        in_stream,
                        parallel_streaming,
                    };
                    let mut buf = input.clone();
                    if let Ok(message) = decode(&mut buf, &ctx) {
                        ok += 1;
                        let _ = TransactionAssembler::new().push(message);
                    }
                }
            }
        }
        ok
    }

    let input = Bytes::copy_from_slice(data);
    let mut ok = decode_everywhere(&input);
    let mut envelope = input.clone();
    if let Ok(message) = decode_copy_data(&mut envelope) {
        ok += 1;
        if let ReplicationMessage::XLogData { data, .. } = message {
            ok += decode_everywhere(&data);
        }
    }
    ok
}
