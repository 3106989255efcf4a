//! The structure guard: the relay's modules import one another only down
//! the layer order that `docs/design.md` ("Layers") draws, and no group of
//! files imports itself round in a circle. Beside it, the session machine
//! (`src/relay/machine.rs`, `src/relay/machine/`) does not log nor emit the
//! relay's events (`crate::events`): it has no I/O, and returns what it has
//! to say to the shell. Nor does it, or any other pure policy
//! ([`PURE_POLICIES`]), read a clock, bump a metric, draw a random number,
//! touch tokio or name an rdkafka type: the shell tells it the time, takes
//! its counts, and carries its actions out. No rdkafka type reaches it
//! inside the sink's types either: what it imports from `crate::sink`, and
//! the sink's types those hold, are the relay's own.
//!
//! Run by `make lint` (and with the rest of the suite). It reads the source,
//! not the compiled crate: every `crate::…`, `super::…` and `self::…` path in
//! code that is not a comment or a test is an import of the module it names.
//! Test code (files named `tests.rs`, `*_tests.rs`, `proptests.rs`, and
//! everything from a `#[cfg(test)]` module to the end of its file) may reach
//! anywhere: tests build inputs from any layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const DESIGN: &str = "docs/design.md";

/// The crate's modules, top to bottom, from the fenced `layers` block of
/// docs/design.md: one module per line, its name first.
fn layer_order(design: &str) -> Vec<String> {
    let mut inside = false;
    let mut order = Vec::new();
    for line in design.lines() {
        if line.trim_start().starts_with("```") {
            if inside {
                break;
            }
            inside = line.trim() == "```layers";
            continue;
        }
        if inside && let Some(name) = line.split_whitespace().next() {
            order.push(name.to_owned());
        }
    }
    order
}

/// One source file of the library: its module path (`relay::session`) and
/// its code lines, comments and test code left out.
struct Source {
    module: Vec<String>,
    path: PathBuf,
    code: Vec<(usize, String)>,
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    name == "tests" || name == "proptests" || name.ends_with("_tests")
}

fn module_of(src: &Path, path: &Path) -> Vec<String> {
    let relative = path.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// Code lines: no comment lines, no trailing comments, nothing from a
/// `#[cfg(test)]` module on.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines[i + 1..]
                .iter()
                .map(|l| l.trim_start())
                .find(|l| !l.starts_with("#["))
                .is_some_and(|next| next.starts_with("mod ") || next.starts_with("pub mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        // A trailing comment; `://` (a URL in a string) is not one.
        let cut = line
            .match_indices("//")
            .find(|(at, _)| !line[..*at].ends_with(':'))
            .map_or(line.len(), |(at, _)| at);
        code.push((i + 1, line[..cut].to_owned()));
    }
    code
}

fn sources(src: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                // The binaries sit on top of the library; they are not in it.
                if path != src.join("bin") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs")
                && path != src.join("main.rs")
                && !is_test_file(&path)
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read source");
            Source {
                module: module_of(src, &path),
                code: code_lines(&text),
                path,
            }
        })
        .collect()
}

/// The modules a line's paths name, resolved against the file's own module:
/// `crate::a::b` from the crate root, `super::` one level up per `super`,
/// `self::` from the module itself. Each name is cut to the longest prefix
/// that is a module of the crate.
fn imports(line: &str, from: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = line.as_bytes();
    let mut at = 0;
    while at < line.len() {
        let rest = &line[at..];
        let start_ok = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let base: Option<(Vec<String>, usize)> = if !start_ok {
            None
        } else if rest.starts_with("crate::") {
            Some((Vec::new(), "crate::".len()))
        } else if rest.starts_with("self::") {
            Some((from.to_vec(), "self::".len()))
        } else if rest.starts_with("super::") {
            let mut base = from.to_vec();
            let mut len = 0;
            while rest[len..].starts_with("super::") {
                base.pop();
                len += "super::".len();
            }
            Some((base, len))
        } else {
            None
        };
        let Some((mut path, len)) = base else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let tail = &rest[len..];
        let segments: Vec<&str> = tail
            .split("::")
            .map(|s| {
                let end = s
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(s.len());
                &s[..end]
            })
            .take_while(|s| !s.is_empty())
            .collect();
        let mut best = path.clone();
        for segment in &segments {
            path.push((*segment).to_owned());
            if modules.contains(&path) {
                best = path.clone();
            } else {
                break;
            }
        }
        // `use crate::a::{b, c}`: each of the group's names may be a module.
        if let Some(group) = tail.find('{').filter(|&g| {
            let prefix = tail[..g].trim_end_matches("::");
            let named = if prefix.is_empty() {
                0
            } else {
                prefix.split("::").count()
            };
            named == segments.len()
        }) {
            for name in tail[group + 1..].split([',', '}']) {
                let name = name.trim().split("::").next().unwrap_or("").trim();
                let mut candidate = best.clone();
                candidate.push(name.to_owned());
                if modules.contains(&candidate) {
                    found.push(candidate);
                }
            }
        }
        found.push(best);
        at += len;
    }
    found
}

struct Edge {
    from: Vec<String>,
    to: Vec<String>,
    at: String,
}

fn edges(sources: &[Source]) -> Vec<Edge> {
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut edges = Vec::new();
    for source in sources {
        for (number, line) in &source.code {
            for to in imports(line, &source.module, &modules) {
                // A module and its own ancestors or descendants: a parent
                // declares its children, a child uses its parent's items.
                let related = to.starts_with(&source.module) || source.module.starts_with(&to);
                if !related && !to.is_empty() {
                    edges.push(Edge {
                        from: source.module.clone(),
                        to,
                        at: format!("{}:{number}", source.path.display()),
                    });
                }
            }
        }
    }
    edges
}

/// Strongly connected groups of more than one module (Tarjan).
fn circles(edges: &[Edge]) -> Vec<Vec<Vec<String>>> {
    let mut graph: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = BTreeMap::new();
    for edge in edges {
        graph.entry(&edge.from).or_default().insert(&edge.to);
        graph.entry(&edge.to).or_default();
    }
    struct State<'a> {
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(
        node: &'a Vec<String>,
        graph: &BTreeMap<&'a Vec<String>, BTreeSet<&'a Vec<String>>>,
        s: &mut State<'a>,
    ) {
        let i = s.index.len();
        s.index.insert(node, i);
        s.low.insert(node, i);
        s.stack.push(node);
        s.on_stack.insert(node);
        for &next in &graph[node] {
            if !s.index.contains_key(next) {
                visit(next, graph, s);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut group = Vec::new();
            while let Some(member) = s.stack.pop() {
                s.on_stack.remove(member);
                group.push(member.clone());
                if member == node {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.found.push(group);
            }
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(node, &graph, &mut state);
        }
    }
    state.found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_import_runs_down_the_documented_layers() {
    let design = std::fs::read_to_string(root().join(DESIGN)).expect("read docs/design.md");
    let order = layer_order(&design);
    assert!(
        order.len() > 5,
        "{DESIGN} has no ```layers block listing the modules top to bottom"
    );
    let sources = sources(&root().join("src"));
    let tops: BTreeSet<&String> = sources.iter().filter_map(|s| s.module.first()).collect();
    let unplaced: Vec<&&String> = tops.iter().filter(|t| !order.contains(t)).collect();
    assert!(
        unplaced.is_empty(),
        "modules missing from the ```layers block of {DESIGN}: {unplaced:?}"
    );
    let rank = |module: &String| order.iter().position(|m| m == module);
    let mut against = Vec::new();
    for edge in edges(&sources) {
        let (from, to) = (&edge.from[0], &edge.to[0]);
        if from != to && rank(from) >= rank(to) {
            against.push(format!(
                "{}: {} imports {} (above it in {DESIGN})",
                edge.at,
                edge.from.join("::"),
                edge.to.join("::")
            ));
        }
    }
    assert!(
        against.is_empty(),
        "imports against the layer order:\n{}",
        against.join("\n")
    );
}

#[test]
fn no_files_import_one_another_in_a_circle() {
    let sources = sources(&root().join("src"));
    let edges = edges(&sources);
    let found = circles(&edges);
    let described: Vec<String> = found
        .iter()
        .map(|group| {
            let names: Vec<String> = group.iter().map(|m| m.join("::")).collect();
            let within: Vec<String> = edges
                .iter()
                .filter(|e| group.contains(&e.from) && group.contains(&e.to))
                .map(|e| format!("  {} -> {} ({})", e.from.join("::"), e.to.join("::"), e.at))
                .collect();
            format!(
                "circle of {}: {}\n{}",
                group.len(),
                names.join(", "),
                within.join("\n")
            )
        })
        .collect();
    assert!(found.is_empty(), "{}", described.join("\n"));
}

#[test]
fn the_guard_sees_the_imports_it_must() {
    // What would make the two tests above pass while the tree is wrong: a
    // reader that finds no imports. These lines must each be found.
    let modules: BTreeSet<Vec<String>> = [
        vec!["relay"],
        vec!["relay", "session"],
        vec!["relay", "machine"],
        vec!["sink"],
        vec!["sink", "http"],
    ]
    .into_iter()
    .map(|m| m.into_iter().map(str::to_owned).collect())
    .collect();
    let from: Vec<String> = vec!["relay".into(), "session".into()];
    let names = |line: &str| -> Vec<String> {
        imports(line, &from, &modules)
            .into_iter()
            .map(|m| m.join("::"))
            .collect()
    };
    assert_eq!(names("use crate::sink::http::Dispatch;"), ["sink::http"]);
    assert_eq!(names("use super::machine::{Step};"), ["relay::machine"]);
    assert_eq!(names("use crate::{sink, relay};"), ["sink", "relay", ""]);
    assert_eq!(names("let x = crate::sink::KafkaSink::new();"), ["sink"]);
    assert_eq!(names("use super::super::sink::x;"), ["sink"]);
    assert!(names("let url = \"crate::sink\"; // crate::relay").contains(&"sink".to_owned()));
    assert!(
        code_lines("a\n// crate::sink\nb // crate::relay\n")
            .iter()
            .all(|(_, l)| !l.contains("crate::"))
    );
    assert_eq!(
        code_lines("use crate::a;\n#[cfg(test)]\nmod tests {\nuse crate::b;\n}\n").len(),
        1
    );
}

/// The session machine's files: `src/relay/machine.rs` and everything
/// under `src/relay/machine/` (its tests, `machine/tests.rs`, are a test
/// file and may log).
fn is_machine_file(src: &Path, path: &Path) -> bool {
    path == src.join("relay/machine.rs") || path.starts_with(src.join("relay/machine"))
}

/// What logs: the `tracing` crate by path, one of its (or the standard
/// library's printing) macros by name, or the relay's events (`emit`
/// logs and counts), by path.
fn logs(line: &str) -> Option<&'static str> {
    const LOGGING: [&str; 10] = [
        "tracing::",
        "events::",
        "trace!",
        "debug!",
        "info!",
        "warn!",
        "error!",
        "event!",
        "println!",
        "eprintln!",
    ];
    LOGGING.into_iter().find(|word| {
        line.match_indices(word).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn the_session_machine_does_not_log() {
    // The machine does no I/O, logging included: what it has to say goes
    // back to the shell as a `Notice`, which the shell logs
    // (src/relay/session/notices.rs).
    let src = root().join("src");
    let machine: Vec<Source> = sources(&src)
        .into_iter()
        .filter(|s| is_machine_file(&src, &s.path))
        .collect();
    assert!(
        machine.len() > 2,
        "the machine's files are not where this test looks"
    );
    let found: Vec<String> = machine
        .iter()
        .flat_map(|s| {
            s.code.iter().filter_map(move |(number, line)| {
                logs(line).map(|word| {
                    format!(
                        "{}:{number}: {word} (return a Notice instead)",
                        s.path.display()
                    )
                })
            })
        })
        .collect();
    assert!(
        found.is_empty(),
        "the session machine logs:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_log_guard_sees_what_logs() {
    assert_eq!(logs("tracing::warn!(x = 1, \"y\");"), Some("tracing::"));
    assert_eq!(logs("    warn!(\"y\");"), Some("warn!"));
    assert_eq!(logs("use tracing::error;"), Some("tracing::"));
    assert_eq!(
        logs("crate::events::SlotAhead { slot }.emit();"),
        Some("events::")
    );
    assert_eq!(logs("let prevents::x = 1;"), None);
    assert_eq!(logs("eprintln!(\"y\");"), Some("eprintln!"));
    assert_eq!(logs("self.notify(Notice::MessagesOff { prefix });"), None);
    assert_eq!(logs("let e = my_error!(x);"), None);
    let src = root().join("src");
    assert!(is_machine_file(
        &src,
        &src.join("relay/machine/messages_and_traces.rs")
    ));
    assert!(is_machine_file(&src, &src.join("relay/machine.rs")));
    assert!(is_test_file(&src.join("relay/machine/tests.rs")));
    assert!(!is_machine_file(&src, &src.join("relay/session.rs")));
}

/// Pure policies outside the machine's directory: decisions without I/O
/// that the shell carries out, held to the machine's rules.
const PURE_POLICIES: [&str; 1] = ["sink/http/retry.rs"];

/// What a pure policy must not use, and what to do instead.
const IMPURE: [(&str, &str); 8] = [
    (
        "Instant::now",
        "take the time from the shell (`set_time`, a `now` argument)",
    ),
    (
        "SystemTime::now",
        "take the time from the shell (`set_time`, a `now` argument)",
    ),
    (
        "Utc::now",
        "take the wall time from the shell (`Now::wall`, a `now` argument)",
    ),
    (
        "Local::now",
        "take the wall time from the shell (`Now::wall`, a `now` argument)",
    ),
    (
        "metrics::",
        "count in the machine's `Counts` (or return the outcome); the shell bumps the metric",
    ),
    (
        "rand::",
        "take the random draw as an argument from the shell",
    ),
    (
        "tokio::",
        "return what to wait for (a deadline, an action); the shell awaits it",
    ),
    (
        "rdkafka::",
        "use the relay's own types (`DeliveryError`, `TxnFailure`); the shell's producer converts",
    ),
];

/// The first impure word of `line`, with its fix.
fn impure(line: &str) -> Option<(&'static str, &'static str)> {
    IMPURE.into_iter().find(|(word, _)| {
        line.match_indices(word).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

fn is_pure_file(src: &Path, path: &Path) -> bool {
    is_machine_file(src, path) || PURE_POLICIES.iter().any(|p| path == src.join(p))
}

#[test]
fn the_session_machine_and_the_pure_policies_read_no_clock_and_do_no_io() {
    let src = root().join("src");
    let pure: Vec<Source> = sources(&src)
        .into_iter()
        .filter(|s| is_pure_file(&src, &s.path))
        .collect();
    let found: Vec<String> = pure
        .iter()
        .flat_map(|s| {
            s.code.iter().filter_map(move |(number, line)| {
                impure(line)
                    .map(|(word, fix)| format!("{}:{number}: {word} ({fix})", s.path.display()))
            })
        })
        .collect();
    assert!(
        found.is_empty(),
        "the session machine or a pure policy does I/O or reads a clock:\n{}",
        found.join("\n")
    );
    for policy in PURE_POLICIES {
        assert!(
            pure.iter().any(|s| s.path == src.join(policy)),
            "the pure policy {policy} is not where this test looks: fix PURE_POLICIES"
        );
    }
}

#[test]
fn the_purity_guard_sees_what_is_impure() {
    let word = |line: &str| impure(line).map(|(word, _)| word);
    assert_eq!(word("let t = Instant::now();"), Some("Instant::now"));
    assert_eq!(
        word("let t = std::time::Instant::now();"),
        Some("Instant::now")
    );
    assert_eq!(word(".unwrap_or_else(Utc::now)"), Some("Utc::now"));
    assert_eq!(
        word("metrics::counter!(m::X).increment(1);"),
        Some("metrics::")
    );
    assert_eq!(word("x: crate::metrics::Counter,"), Some("metrics::"));
    assert_eq!(
        word("Result<(), rdkafka::error::KafkaError>"),
        Some("rdkafka::")
    );
    assert_eq!(word("tokio::time::sleep(d).await"), Some("tokio::"));
    assert_eq!(word("rand::random::<f64>()"), Some("rand::"));
    assert_eq!(word("self.counts.transactions += 1;"), None);
    assert_eq!(word("let my_metrics::x = 1;"), None);
    let src = root().join("src");
    assert!(is_pure_file(&src, &src.join("relay/machine/commit.rs")));
    assert!(is_pure_file(&src, &src.join("sink/http/retry.rs")));
    assert!(!is_pure_file(&src, &src.join("sink/http/dispatch.rs")));
}

/// The sink's types the machine may hold although their definitions name
/// rdkafka, and why. The machine never looks inside them: it reaches them
/// only through its `Producer` trait, whose signatures the guard checks.
const SINK_TYPES_ALLOWED: [(&str, &str); 1] = [(
    "KafkaSink",
    "the shell's producer itself: the machine calls it only through `Producer`",
)];

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The names a `use` tree or a path imports, each as (its name where it is
/// defined, its name in the importing file): `a::{B, c::D as E}` gives
/// `(B, B)` and `(D, E)`. A path through a type (`Enum::Variant`) names the
/// type.
fn use_tree(tree: &str) -> Vec<(String, String)> {
    let tree = tree.trim_start();
    if let Some(inner) = tree.strip_prefix('{') {
        let mut names = Vec::new();
        let mut depth = 0;
        let mut start = 0;
        for (at, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    names.extend(use_tree(&inner[start..at]));
                    return names;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    names.extend(use_tree(&inner[start..at]));
                    start = at + 1;
                }
                _ => {}
            }
        }
        return names;
    }
    let end = tree
        .find(|c: char| !is_ident_char(c) && c != ':')
        .unwrap_or(tree.len());
    let path = &tree[..end];
    if path.ends_with("::") && tree[end..].starts_with('{') {
        return use_tree(&tree[end..]);
    }
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let Some(last) = segments.last() else {
        return Vec::new();
    };
    let name = segments
        .iter()
        .find(|s| s.starts_with(|c: char| c.is_ascii_uppercase()))
        .unwrap_or(last);
    let alias = tree[end..]
        .trim_start()
        .strip_prefix("as ")
        .map(|rest| rest.trim_start().split(|c: char| !is_ident_char(c)).next());
    let local = alias.flatten().unwrap_or(last);
    vec![((*name).to_owned(), local.to_owned())]
}

/// What `code` imports or names through the path `prefix` (`crate::sink::`,
/// `rdkafka::`), as [`use_tree`] gives it.
fn names_through(code: &str, prefix: &str) -> Vec<(String, String)> {
    code.match_indices(prefix)
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            !before.is_some_and(|c| is_ident_char(c) || c == ':')
        })
        .flat_map(|(at, _)| use_tree(&code[at + prefix.len()..]))
        .collect()
}

/// The structs, enums and type aliases `code` defines: each name with its
/// definition, string literals left out, up to its closing `}` or `;`.
fn definitions(code: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for keyword in ["struct ", "enum ", "type "] {
        for (at, _) in code.match_indices(keyword) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| !c.is_whitespace() && c != ')') {
                continue;
            }
            let rest = &code[at + keyword.len()..];
            let name: String = rest.chars().take_while(|c| is_ident_char(*c)).collect();
            if name.is_empty() {
                continue;
            }
            let mut body = String::new();
            let (mut depth, mut in_string, mut escaped) = (0, false, false);
            for c in rest.chars() {
                if in_string {
                    in_string = escaped || c != '"';
                    escaped = !escaped && c == '\\';
                    continue;
                }
                match c {
                    '"' => in_string = true,
                    '{' | '(' | '[' => depth += 1,
                    '}' | ')' | ']' => depth -= 1,
                    _ => {}
                }
                body.push(c);
                if depth == 0 && (c == ';' || c == '}') {
                    break;
                }
            }
            found.push((name, body));
        }
    }
    found
}

/// The identifiers of a definition.
fn identifiers(body: &str) -> impl Iterator<Item = &str> {
    body.split(|c: char| !is_ident_char(c))
        .filter(|w| !w.is_empty())
}

/// What the machine takes from the sink, and every sink type those types
/// hold, checked for rdkafka: `rdkafka` itself, anything the defining file
/// imports from rdkafka (under its local name), and rdkafka's error types
/// by name. Returns the names checked and what was found.
fn rdkafka_in_sink_types(src: &Path) -> (BTreeSet<String>, Vec<String>) {
    let all = sources(src);
    let machine_code: String = all
        .iter()
        .filter(|s| is_machine_file(src, &s.path))
        .flat_map(|s| s.code.iter().map(|(_, line)| line.as_str()))
        .collect::<Vec<_>>()
        .join("\n");
    let mut todo: Vec<(String, String)> = names_through(&machine_code, "crate::sink::")
        .into_iter()
        .map(|(name, _)| (name.clone(), name))
        .filter(|(name, _)| name.starts_with(|c: char| c.is_ascii_uppercase()))
        .filter(|(name, _)| {
            SINK_TYPES_ALLOWED
                .iter()
                .all(|(allowed, _)| name != allowed)
        })
        .collect();
    // Every definition under src/sink, with what its file calls rdkafka.
    let mut defined: BTreeMap<String, Vec<(PathBuf, String, BTreeSet<String>)>> = BTreeMap::new();
    for s in all.iter().filter(|s| s.path.starts_with(src.join("sink"))) {
        let code = s
            .code
            .iter()
            .map(|(_, line)| line.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let mut rdkafka: BTreeSet<String> = names_through(&code, "rdkafka::")
            .into_iter()
            .map(|(_, local)| local)
            .collect();
        rdkafka.extend(["rdkafka", "KafkaError", "RDKafkaErrorCode"].map(str::to_owned));
        for (name, body) in definitions(&code) {
            defined
                .entry(name)
                .or_default()
                .push((s.path.clone(), body, rdkafka.clone()));
        }
    }
    let mut checked = BTreeSet::new();
    let mut found = Vec::new();
    while let Some((name, chain)) = todo.pop() {
        if !checked.insert(name.clone()) {
            continue;
        }
        let Some(definitions) = defined.get(&name) else {
            found.push(format!(
                "{chain}: no definition of {name} under src/sink (a type from elsewhere \
                 re-exported by the sink, or a definition this guard cannot read)"
            ));
            continue;
        };
        for (path, body, rdkafka) in definitions {
            for word in identifiers(body).filter(|w| rdkafka.contains(*w)) {
                found.push(format!(
                    "{}: {chain} names {word}",
                    path.strip_prefix(src).unwrap_or(path).display()
                ));
            }
            for held in identifiers(body).filter(|w| *w != name && defined.contains_key(*w)) {
                todo.push((held.to_owned(), format!("{chain} -> {held}")));
            }
        }
    }
    (checked, found)
}

#[test]
fn no_rdkafka_type_reaches_the_machine_through_the_sink_types() {
    // The machine is pure (docs/design.md, "Layers"): a failed delivery
    // reaches it as the relay's own error, converted once by the shell's
    // producer, so its tests build that error and never a client's.
    let src = root().join("src");
    let (checked, found) = rdkafka_in_sink_types(&src);
    for needed in ["DeliveryReport", "DeliveryError", "SendError", "Refused"] {
        assert!(
            checked.contains(needed),
            "the guard did not check {needed}, which the machine receives from the sink: \
             it no longer finds the machine's `crate::sink::` imports (checked: {checked:?})"
        );
    }
    assert!(
        found.is_empty(),
        "an rdkafka type reaches the session machine through the sink's types; convert it \
         where the sink meets librdkafka into a relay-owned type:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_sink_type_guard_reads_imports_and_definitions() {
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        names_through(
            "use crate::sink::{\nA, http::B,\nc::{D as E}, f,\n};\nfn g(x: crate::sink::H::V) {}",
            "crate::sink::"
        ),
        [
            pair("A", "A"),
            pair("B", "B"),
            pair("D", "E"),
            pair("f", "f"),
            pair("H", "V")
        ]
    );
    assert_eq!(
        names_through(
            "use rdkafka::error::{KafkaError as Ke, RDKafkaErrorCode};",
            "rdkafka::"
        ),
        [
            pair("KafkaError", "Ke"),
            pair("RDKafkaErrorCode", "RDKafkaErrorCode")
        ]
    );
    assert!(names_through("use librdkafka::X;", "rdkafka::").is_empty());
    let code = "#[derive(Debug)]\npub enum E<T> {\n    #[error(\"{0} }\")]\n    A(Ke),\n    B { t: T },\n}\npub(crate) struct S(u8);\nimpl S { fn f() {} }";
    let defs = definitions(code);
    assert_eq!(defs.len(), 2, "{defs:?}");
    assert_eq!(defs[0].0, "S");
    assert_eq!(defs[0].1, "S(u8);");
    assert_eq!(defs[1].0, "E");
    assert!(defs[1].1.ends_with("B { t: T },\n}"), "{defs:?}");
    assert!(identifiers(&defs[1].1).any(|w| w == "Ke"));
}

/// Where a value may still be written into SQL text, and why. Everywhere
/// else a value travels as a bound parameter of tokio-postgres.
const SPLICE_ALLOWED: [(&str, &str); 5] = [
    (
        "pg/quote.rs",
        "defines the quoting the replication command grammar needs",
    ),
    (
        "pg/error.rs",
        "fix hints show SQL to a person; the relay never runs them",
    ),
    (
        "invocation.rs",
        "shell quoting of a config path inside fix hints, not SQL",
    ),
    (
        "replication/",
        "the walsender speaks only the simple query protocol: no parameters",
    ),
    (
        "admin/init/planning.rs",
        "DDL takes no parameters; the plan is also printed as a script (--dry-run), \
         and holds only names that passed the config's name rules and fixed words",
    ),
];

/// What in `line` writes a value into SQL text: a quoting call, a format
/// placeholder between single quotes, or bytes spelt as hex. A constant of
/// the code between quotes (`'{PENDING}'`: UPPER_CASE) is a fixed word, not
/// a value, and stays a literal on purpose: a partial index whose predicate
/// names it (`WHERE kind = 'HEAD'`) is used only when the query spells it.
fn splices(line: &str) -> Option<&'static str> {
    if line.contains("escape_literal(") || line.contains("replication_literal(") {
        return Some("quotes a value into the statement");
    }
    if line.contains("decode('") {
        return Some("spells bytes into the statement");
    }
    let quoted_placeholder = line.match_indices("'{").any(|(at, _)| {
        line[at + 2..].find('}').is_some_and(|end| {
            let inside = &line[at + 2..at + 2 + end];
            let constant = !inside.is_empty()
                && inside
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            !constant && line[at + 2 + end + 1..].starts_with('\'')
        })
    });
    quoted_placeholder.then_some("formats a value between quotes into the statement")
}

fn splice_allowed(src: &Path, path: &Path) -> bool {
    let relative = path.strip_prefix(src).expect("under src");
    SPLICE_ALLOWED
        .iter()
        .any(|(allowed, _)| relative.starts_with(allowed.trim_end_matches('/')))
}

#[test]
fn no_value_is_spliced_into_sql_text() {
    let src = root().join("src");
    let found: Vec<String> = sources(&src)
        .into_iter()
        .filter(|s| !splice_allowed(&src, &s.path))
        .flat_map(|s| {
            s.code
                .iter()
                .filter_map(|(number, line)| {
                    splices(line).map(|what| {
                        format!(
                            "{}:{number}: {what}: pass it as a parameter ($1, …) of a \
                             tokio-postgres statement instead",
                            s.path.display()
                        )
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "a value is written into SQL text:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_splice_guard_sees_what_splices() {
    assert!(splices("format!(\"WHERE slot_name = {}\", escape_literal(slot))").is_some());
    assert!(splices("\"AND h.{HOLD_COLUMN} = '{park}')\"").is_some());
    assert!(splices("format!(\"has_table_privilege(c.oid, '{p}')\")").is_some());
    assert!(splices("format!(\"decode('{}', 'hex')\", hex)").is_some());
    assert!(splices("format!(\"SET statement_timeout = '{}'\", t)").is_some());
    assert!(splices("\"WHERE d.status = '{PENDING}' AND d.route = $1\"").is_none());
    assert!(splices("\"WHERE slot_name = $1\"").is_none());
    assert!(splices("format!(\"SELECT {columns} FROM {table}\")").is_none());
    let src = root().join("src");
    assert!(splice_allowed(&src, &src.join("replication/catalog.rs")));
    assert!(!splice_allowed(&src, &src.join("parking/store.rs")));
}
