//! What every differential module shares: the reference's Python, one
//! batch of cases through a script of `tests/reference/`, the seed and the
//! case count.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The python of the virtualenv that holds the reference implementations
/// (`scripts/services venv`, which makes it on first use).
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(root.join("scripts/services"))
            .arg("venv")
            .current_dir(root)
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/services venv runs");
        assert!(
            out.status.success(),
            "scripts/services venv failed: {}",
            out.status
        );
        let path = String::from_utf8(out.stdout).expect("a UTF-8 path");
        PathBuf::from(path.trim())
    })
}

/// Runs `tests/reference/<script>` with `args`, one JSON line per case in
/// on stdin, and returns its stdout's lines (one per case, in order).
///
/// # Panics
/// The script fails or answers with another number of lines.
pub fn run_script(script: &str, args: &[&str], cases: &[String]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new(python())
        .arg(root.join("tests/reference").join(script))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the reference's python starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = cases.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("the reference script ends");
    writer
        .join()
        .expect("writer thread")
        .expect("cases written to the reference");
    assert!(out.status.success(), "{script} failed: {}", out.status);
    let text = String::from_utf8(out.stdout).expect("UTF-8 answers");
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    assert_eq!(
        lines.len(),
        cases.len(),
        "{script} answered {} lines for {} cases",
        lines.len(),
        cases.len()
    );
    lines
}

/// How many cases each format generates: `OUTBOX_REFERENCE_CASES`, default
/// 10,000 (`make test-reference-long`: a million).
pub fn cases() -> usize {
    std::env::var("OUTBOX_REFERENCE_CASES")
        .ok()
        .map(|n| {
            n.parse()
                .expect("OUTBOX_REFERENCE_CASES: a number of cases")
        })
        .unwrap_or(10_000)
}

/// The seed of this run's cases: `OUTBOX_REFERENCE_SEED`, else the
/// module's own fixed `default`.
pub fn seed(default: u64) -> u64 {
    std::env::var("OUTBOX_REFERENCE_SEED")
        .ok()
        .map(|s| {
            s.parse()
                .expect("OUTBOX_REFERENCE_SEED: an unsigned integer")
        })
        .unwrap_or(default)
}

/// SplitMix64: small, and the same sequence for a seed on every platform
/// and version, which a printed seed needs.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("below a usize")
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// One of `items` (not empty), by reference.
    pub fn pick_ref<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
