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
