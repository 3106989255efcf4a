//! The documentation that names tests: docs/reliability.md maps every fault
//! to the tests that show it, by function name, so a renamed or removed test
//! must show up there too.

use std::path::Path;

/// Every `.rs` file under `dir`, concatenated.
fn sources(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            text.push_str(&sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            text.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    text
}

/// The test names docs/reliability.md gives: the backticked names in the
/// last column of its tables, and on its `Test:` lines.
fn named_tests(doc: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in doc.lines() {
        let cell = if line.starts_with('|') && line.matches('|').count() >= 4 {
            line.trim()
                .trim_matches('|')
                .rsplit('|')
                .next()
                .unwrap_or("")
        } else if let Some(rest) = line.strip_prefix("Test: ") {
            rest
        } else {
            continue;
        };
        for (i, part) in cell.split('`').enumerate() {
            let is_name = i % 2 == 1
                && part.contains('_')
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if is_name {
                names.push(part.to_owned());
            }
        }
    }
    names
}

#[test]
fn every_test_reliability_md_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/reliability.md")).unwrap();
    let code = sources(&root.join("tests/it"));
    let names = named_tests(&doc);
    // The page names every fault's tests: a parser that found few names
    // would make this check pass without checking anything.
    assert!(names.len() > 60, "only {} names found", names.len());
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !code.contains(&format!("fn {n}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/reliability.md names tests that do not exist in tests/it: {missing:?}"
    );
}

#[test]
fn the_name_parser_finds_names_in_the_tests_column_only() {
    let doc = "| fault | does | tests |\n|---|---|---|\n\
               | `wal_status` lost | fatal | `slot_lost_is_fatal`, `other_one` |\n\
               Test: `soak_it`.\n`not_a_test_line` here";
    assert_eq!(
        named_tests(doc),
        ["slot_lost_is_fatal", "other_one", "soak_it"]
    );
}
