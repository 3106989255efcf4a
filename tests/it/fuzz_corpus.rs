//! Replays every input of the fuzz seed corpus (fuzz/corpus/decode/) through
//! the decoders in the normal test suite, so the fuzz target's property (no
//! panic on any input) is checked on every `cargo test`, without nightly.

use std::path::Path;

include!("../../fuzz/exercise.rs");

#[test]
fn fuzz_corpus_replays_without_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the seed corpus in {} is empty",
        dir.display()
    );

    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ok = exercise(&data);
        // Named seeds (case-index-kind, copydata-*) are real messages and must
        // decode under some configuration; inputs cargo-fuzz adds later are
        // named by hash and only need to not panic.
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.contains('-') {
            assert!(ok > 0, "seed {name} decodes under no configuration");
        }
    }
}

#[test]
fn truncations_of_every_seed_do_not_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus dir") {
        let data = std::fs::read(entry.expect("entry").path()).expect("seed");
        for len in 0..data.len() {
            exercise(&data[..len]);
        }
        seeds += 1;
    }
    assert!(seeds > 0, "no seeds in {}", dir.display());
}
