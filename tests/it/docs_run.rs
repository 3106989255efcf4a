//! The pages a user follows, run as written: every fenced block marked
//! ```` ```sh runnable ```` in docs/getting-started.md, docs/webhooks.md,
//! docs/exactly-once.md, docs/outbox-messages.md, docs/dead-letters.md and
//! docs/contracts.md runs, in page order, in one `bash -euo pipefail` per page, in a fresh
//! directory (with `scripts/` and `sql/` of this clone beside it, as in a
//! clone's root) against the services of `scripts/services`, with this
//! build's `outbox-relay` first on `PATH`. A block that fails names the
//! page, the block's number and text, and the output.
//!
//! A block whose fence says `file=NAME` (```` ```python file=verify.py ````:
//! code the page asks the reader to save) is written to NAME in that
//! directory at its place in the page, for the blocks after it to use.
//!
//! Each page gets a database of its own (`PG_URL` and `PG_RELAY_URL` point
//! at it) and a slot name of its own (`OUTBOX_RELAY__POSTGRES__SLOT`, which
//! the config file's `slot` gives way to), so runs never meet each other's
//! objects; both are dropped afterwards. Background jobs a page starts
//! (`outbox-relay run ... &`) get SIGTERM when the page ends. The directory
//! goes too, unless a block failed (the failure names it).
//!
//! `DOCS_RUN_PAGE=path` runs that one page instead (to try a change, or to
//! see a broken command fail).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;

const PAGES: [&str; 6] = [
    "docs/getting-started.md",
    "docs/webhooks.md",
    "docs/exactly-once.md",
    "docs/outbox-messages.md",
    "docs/dead-letters.md",
    "docs/contracts.md",
];

/// What a fence's info string asks for: `Some((head, tail))` to put around
/// the block's text when it is run (`sh runnable`: nothing) or saved
/// (`LANG file=NAME`: the heredoc that writes NAME), `None` for neither.
fn fence_action(info: &str, line: usize) -> Option<(String, &'static str)> {
    if info == "sh runnable" {
        return Some((String::new(), ""));
    }
    let name = info
        .split_whitespace()
        .find_map(|w| w.strip_prefix("file="))?;
    assert!(
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
        "line {line}: file={name} is not a plain file name"
    );
    Some((
        format!("cat > '{name}' <<'DOCS_RUN_FILE'\n"),
        "DOCS_RUN_FILE\n",
    ))
}

/// The runnable blocks of a page, in order: (line of the fence, text). A
/// `file=NAME` block becomes the command that writes it.
fn runnable_blocks(page: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    // The block open: its fence's line and indent, what closes its text if
    // it runs (None: it does not), its text.
    let mut open: Option<(usize, usize, Option<&'static str>, String)> = None;
    for (i, line) in page.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence = trimmed.starts_with("```");
        match open.take() {
            None if fence => {
                let (head, tail) = match fence_action(trimmed[3..].trim(), i + 1) {
                    Some((head, tail)) => (head, Some(tail)),
                    None => (String::new(), None),
                };
                open = Some((i + 1, line.len() - trimmed.len(), tail, head));
            }
            None => {}
            Some((start, _, Some(tail), text)) if fence => blocks.push((start, text + tail)),
            Some(_) if fence => {}
            Some((start, indent, tail, mut text)) => {
                if tail.is_some() {
                    let body = match line.get(..indent) {
                        Some(lead) if lead.trim().is_empty() => &line[indent..],
                        _ => trimmed,
                    };
                    text.push_str(body);
                    text.push('\n');
                }
                open = Some((start, indent, tail, text));
            }
        }
    }
    blocks
}

/// The script that runs `blocks` in order and says which one failed.
fn script(page: &str, blocks: &[(usize, String)]) -> String {
    let mut s = String::from(
        "set -euo pipefail\n\
         __block=0\n\
         trap '__st=$?; [[ $__st -eq 0 ]] || echo \"docs-run: block $__block failed (exit $__st)\" >&2; \
         for j in $(jobs -p); do kill -TERM $j 2>/dev/null || true; done; wait || true; exit $__st' EXIT\n",
    );
    for (n, (line, text)) in blocks.iter().enumerate() {
        s.push_str(&format!(
            "__block={}\necho \"docs-run: {page} block {} (line {line})\" >&2\n{text}\n",
            n + 1,
            n + 1
        ));
    }
    s
}

/// How long one page may run.
const PAGE_SECS: u32 = 300;

/// Runs the page's runnable blocks; Err with what to show when one fails.
fn run_page(
    root: &Path,
    name: &str,
    page: &str,
    env: &[(String, String)],
) -> Result<usize, String> {
    run_page_within(root, name, page, env, PAGE_SECS)
}

/// [`run_page`], killed after `secs`.
fn run_page_within(
    root: &Path,
    name: &str,
    page: &str,
    env: &[(String, String)],
    secs: u32,
) -> Result<usize, String> {
    let blocks = runnable_blocks(page);
    if blocks.is_empty() {
        return Ok(0);
    }
    let dir = std::env::temp_dir().join(random_name("docs_run"));
    std::fs::create_dir_all(&dir).unwrap();
    for link in ["scripts", "sql", "services"] {
        std::os::unix::fs::symlink(root.join(link), dir.join(link)).unwrap();
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_outbox-relay"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("timeout")
        .args(["-s", "KILL", &secs.to_string(), "bash", "-c"])
        .arg(script(name, &blocks))
        .current_dir(&dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env_remove("OUTBOX_RELAY_CONFIG")
        .env_remove("OUTBOX_RELAY_ADMIN_URL")
        .output()
        .expect("run bash");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        // Kept only when a block failed, for a look at what it left.
        std::fs::remove_dir_all(&dir).unwrap();
        return Ok(blocks.len());
    }
    // The block that said it failed or, when the page was killed before it
    // could, the last one that started.
    let started = format!("docs-run: {name} block ");
    let failed: Option<usize> = stderr.lines().rev().find_map(|l| {
        l.strip_prefix("docs-run: block ")
            .or_else(|| l.strip_prefix(started.as_str()))?
            .split(' ')
            .next()?
            .parse()
            .ok()
    });
    let shown = failed
        .and_then(|n| blocks.get(n.wrapping_sub(1)))
        .map(|(line, text)| format!("block at line {line}:\n{text}"))
        .unwrap_or_else(|| "(no block started)".to_owned());
    let killed = if output.status.code().is_none() {
        format!(", the page was killed after {secs} s")
    } else {
        String::new()
    };
    Err(format!(
        "{name}: block {} failed ({:?}{killed}); directory {}\n{shown}\n--- stdout:\n{}\n--- stderr:\n{stderr}",
        failed.map_or_else(|| "?".to_owned(), |n| n.to_string()),
        output.status,
        dir.display(),
        String::from_utf8_lossy(&output.stdout),
    ))
}

/// `url` with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("a URL with a database");
    format!("{base}/{database}")
}

/// Runs `page` in a database and slot of its own, and drops them after.
async fn run_isolated(root: &Path, name: &str, page: &str) -> Result<usize, String> {
    let _shared = services::shared().await;
    let admin = pg_admin().await;
    let database = random_name("docs");
    let slot = random_name("docs_slot");
    admin
        .batch_execute(&format!("CREATE DATABASE {database}"))
        .await
        .unwrap();
    let env = vec![
        (
            "PG_URL".to_owned(),
            with_database(&env("PG_URL"), &database),
        ),
        (
            "PG_RELAY_URL".to_owned(),
            with_database(&env("PG_RELAY_URL"), &database),
        ),
        ("OUTBOX_RELAY__POSTGRES__SLOT".to_owned(), slot.clone()),
    ];
    let (root, name_owned, page_owned) = (root.to_owned(), name.to_owned(), page.to_owned());
    let result =
        tokio::task::spawn_blocking(move || run_page(&root, &name_owned, &page_owned, &env))
            .await
            .unwrap();
    // The relay the page started got SIGTERM; once it let go of the slot,
    // the slot and the database go.
    wait_until(
        "the page's slot released",
        Duration::from_secs(60),
        || async { slot_state(&admin, &slot).await.is_none_or(|s| !s.active) },
    )
    .await;
    admin
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE database = $1",
            &[&database],
        )
        .await
        .unwrap();
    admin
        .batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .await
        .unwrap();
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_run_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages: Vec<PathBuf> = match std::env::var_os("DOCS_RUN_PAGE") {
        Some(page) => vec![PathBuf::from(page)],
        None => PAGES.iter().map(|p| root.join(p)).collect(),
    };
    let mut ran = 0;
    for path in &pages {
        let text = std::fs::read_to_string(path).unwrap();
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string();
        match run_isolated(root, &name, &text).await {
            // The marker must be found: a parser that found nothing would pass.
            Ok(0) => panic!("{name}: no runnable block found"),
            Ok(n) => {
                println!("{name}: {n} runnable blocks ran");
                ran += n;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(ran >= pages.len(), "only {ran} runnable blocks found");
}

/// `error` (of a page failed on purpose), after removing the directory it
/// names and keeps.
fn forget_dir(error: String) -> String {
    let dir = error
        .split("; directory ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no directory in {error}"));
    std::fs::remove_dir_all(dir).unwrap();
    error
}

#[test]
fn a_file_block_is_saved_for_the_blocks_after_it() {
    // The heredoc is quoted: `$x` is saved as it is, not expanded.
    let page = "```sh runnable\ntest ! -e greet.py\n```\n\n\
                ```python file=greet.py\nprint('hello $x')\n```\n\n\
                ```sh runnable\ntest \"$(python3 greet.py)\" = 'hello $x'\n```\n";
    let blocks = runnable_blocks(page);
    assert_eq!(blocks.len(), 3, "{blocks:?}");
    assert_eq!(blocks[1].0, 5);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(run_page(root, "page.md", page, &[]), Ok(3));
    let broken = page.replace("print('hello", "print('bye");
    let error = forget_dir(run_page(root, "page.md", &broken, &[]).unwrap_err());
    assert!(error.starts_with("page.md: block 3 failed"), "{error}");
}

#[test]
fn the_runner_names_the_page_and_the_block_that_failed() {
    let page = "text\n\n```sh runnable\necho one\n```\n\n```sh\nnot run\n```\n\n  ```sh runnable\n  echo two\n  exit 3\n  ```\n";
    let blocks = runnable_blocks(page);
    assert_eq!(
        blocks,
        [
            (3, "echo one\n".to_owned()),
            (11, "echo two\nexit 3\n".to_owned())
        ]
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let error = forget_dir(run_page(root, "page.md", page, &[]).unwrap_err());
    assert!(
        error.starts_with("page.md: block 2 failed") && error.contains("line 11:\necho two"),
        "{error}"
    );
}

#[test]
fn a_page_out_of_time_names_the_block_it_was_in() {
    let page = "```sh runnable\necho one\n```\n\n```sh runnable\nsleep 30\n```\n";
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let error = forget_dir(run_page_within(root, "page.md", page, &[], 2).unwrap_err());
    assert!(
        error.starts_with("page.md: block 2 failed")
            && error.contains("killed after 2 s")
            && error.contains("line 5:\nsleep 30"),
        "{error}"
    );
}
