//! The documentation that names tests: docs/reliability.md maps every fault
//! to the tests that show it, by function name, so a renamed or removed test
//! must show up there too. docs/design.md ("Where features meet") decides
//! every pair of features: works, naming a test that kills a relay with -9
//! and runs the checker, or refused, quoting the validation message.
//! docs/operations.md ("What each fault logs") names the event each fault
//! emits (`outbox_relay::events`) and quotes its line: the event type must
//! exist at the level the table says, every fault event type must have its
//! row, the code must say the line, and the named test must check the line
//! or the event.

use std::path::Path;

use outbox_relay::error::Cause;
use outbox_relay::events::{self, Info, Kind};

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

/// The features of docs/design.md "Where features meet", as its rows name them.
const FEATURES: [&str; 10] = [
    "delivery",
    "source",
    "cleanup",
    "shards",
    "webhook routes",
    "standby relays",
    "dead letters",
    "trace context",
    "contracts",
    "parking",
];

/// One clause of a verdict cell.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// `works, tested by `module::test`…`: the tests' paths.
    Works(Vec<String>),
    /// `refused at validation…: `message``.
    Refused(String),
}

/// The pair rows of the "Where features meet" table: (row label, verdict
/// clauses), or the problems that make the table unreadable.
fn feature_rows(doc: &str) -> (Vec<(String, Vec<Verdict>)>, Vec<String>) {
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let Some(start) = doc.find("\n## Where features meet\n") else {
        return (rows, vec!["no section \"## Where features meet\"".into()]);
    };
    let section = &doc[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.first() == Some(&"features") || cells.iter().all(|c| c.starts_with("---")) {
            continue;
        }
        let [label, cell] = cells[..] else {
            problems.push(format!("not a two-column row: {line}"));
            continue;
        };
        let mut clauses = Vec::new();
        if split_clauses(cell).is_empty() {
            problems.push(format!("{label}: empty"));
        }
        for clause in split_clauses(cell) {
            let quoted: Vec<&str> = clause.split('`').skip(1).step_by(2).collect();
            if clause.starts_with("works") {
                let tests: Vec<String> = quoted.iter().map(|q| (*q).to_owned()).collect();
                if tests.is_empty() {
                    problems.push(format!("{label}: \"works\" names no test: {clause:?}"));
                }
                for t in &tests {
                    if !t.contains("::") {
                        problems.push(format!("{label}: `{t}` is not a module::test path"));
                    }
                }
                clauses.push(Verdict::Works(tests));
            } else if clause.starts_with("refused at validation") {
                match quoted[..] {
                    [message] if !message.is_empty() => {
                        clauses.push(Verdict::Refused(message.to_owned()))
                    }
                    _ => problems.push(format!(
                        "{label}: a refusal quotes one message in backticks: {clause:?}"
                    )),
                }
            } else {
                problems.push(format!(
                    "{label}: undecided (neither \"works, tested by\" nor \"refused at validation\"): {clause:?}"
                ));
            }
        }
        rows.push((label.to_owned(), clauses));
    }
    (rows, problems)
}

/// A cell's clauses: split at `;` outside backticks.
fn split_clauses(cell: &str) -> Vec<&str> {
    let mut clauses = Vec::new();
    let (mut from, mut quoted) = (0, false);
    for (i, c) in cell.char_indices() {
        match c {
            '`' => quoted = !quoted,
            ';' if !quoted => {
                clauses.push(cell[from..i].trim());
                from = i + 1;
            }
            _ => {}
        }
    }
    clauses.push(cell[from..].trim());
    clauses.into_iter().filter(|c| !c.is_empty()).collect()
}

/// Rust string literals as they read at run time: continuation lines
/// joined, `\"` unescaped, so a message split over source lines is found
/// whole.
fn literal_text(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(next) = after.strip_prefix('\n') {
            rest = next.trim_start();
        } else if let Some(next) = after.strip_prefix('"') {
            out.push('"');
            rest = next;
        } else {
            out.push('\\');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Everything wrong with the table in `doc`: a pair of [`FEATURES`]
/// missing, repeated or undecided; a test that `test_body` (module, name ->
/// the function's text) does not find, or that does not both kill a relay
/// with -9 and run the checker; a refusal whose message `validation` (the
/// validation code) does not hold.
fn feature_table_problems(
    doc: &str,
    test_body: &dyn Fn(&str, &str) -> Option<String>,
    validation: &str,
) -> Vec<String> {
    let (rows, mut problems) = feature_rows(doc);
    let validation = literal_text(validation);
    let mut seen = std::collections::HashMap::new();
    for (label, clauses) in &rows {
        let pair: Vec<&str> = label.split(" × ").collect();
        let known =
            pair.len() == 2 && pair.iter().all(|f| FEATURES.contains(f)) && pair[0] != pair[1];
        if !known {
            problems.push(format!("{label}: not a pair of two of {FEATURES:?}"));
            continue;
        }
        let mut key = [pair[0], pair[1]];
        key.sort();
        *seen.entry(key).or_insert(0) += 1;
        for clause in clauses {
            match clause {
                Verdict::Works(tests) => {
                    for path in tests {
                        let Some((module, name)) = path.split_once("::") else {
                            continue;
                        };
                        match test_body(module, name) {
                            None => problems.push(format!("{label}: no test {path} in tests/it")),
                            Some(body) => {
                                if !body.contains("kill9") {
                                    problems.push(format!(
                                        "{label}: {path} never kills a relay with -9 (kill9)"
                                    ));
                                }
                                if !body.contains("check_delivery")
                                    && !body.contains("check_exactly_once")
                                    && !body.contains("check_webhook_delivery")
                                {
                                    problems.push(format!("{label}: {path} runs no checker (check_delivery, check_exactly_once, check_webhook_delivery)"));
                                }
                            }
                        }
                    }
                }
                Verdict::Refused(message) => {
                    if !validation.contains(message.as_str()) {
                        problems.push(format!(
                            "{label}: the relay has no validation message {message:?}"
                        ));
                    }
                }
            }
        }
    }
    for (i, a) in FEATURES.iter().enumerate() {
        for b in &FEATURES[i + 1..] {
            let mut key = [*a, *b];
            key.sort();
            match seen.get(&key) {
                None => problems.push(format!("{a} × {b}: no row")),
                Some(1) => {}
                Some(n) => problems.push(format!("{a} × {b}: {n} rows")),
            }
        }
    }
    problems
}

/// The text of test function `name` in tests/it/`module`.rs (see
/// [`function_body`]).
fn test_body_in(root: &Path, module: &str, name: &str) -> Option<String> {
    let source = std::fs::read_to_string(root.join(format!("tests/it/{module}.rs"))).ok()?;
    function_body(&source, name)
}

#[test]
fn the_feature_table_is_decided_and_honest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/design.md")).unwrap();
    let validation = sources(&root.join("src/config"));
    let problems = feature_table_problems(&doc, &|m, n| test_body_in(root, m, n), &validation);
    assert!(
        problems.is_empty(),
        "docs/design.md \"Where features meet\":\n{}",
        problems.join("\n")
    );
}

/// The table check fails on each way a table can be wrong: a missing pair,
/// an undecided cell, a test that does not exist, one without kill -9 or
/// without the checker, a refusal the relay never gives.
#[test]
fn the_feature_table_check_fails_on_a_bad_table() {
    let mut rows = String::new();
    for (i, a) in FEATURES.iter().enumerate() {
        for b in &FEATURES[i + 1..] {
            rows.push_str(&format!("| {a} × {b} | works, tested by `m::good` |\n"));
        }
    }
    let table = |rows: &str| {
        format!(
            "# x\n\n## Where features meet\n\n| features | verdict |\n|---|---|\n{rows}\n## Next\n| a × b | nonsense |\n"
        )
    };
    let body = |_: &str, name: &str| match name {
        "good" => Some("relay.kill9(); check_delivery(case, &c, &r);".to_owned()),
        "no_kill" => Some("check_exactly_once(case, &c, &r);".to_owned()),
        "no_check" => Some("relay.kill9();".to_owned()),
        _ => None,
    };
    let validation = r#"return Err(invalid("k", "\"exactly-once\" covers Kafka only and \
             cannot be combined"));"#;
    assert_eq!(
        feature_table_problems(&table(&rows), &body, validation),
        Vec::<String>::new()
    );

    let bad = rows
        .replace("| delivery × source | works, tested by `m::good` |\n", "")
        .replace("| cleanup × shards | works, tested by `m::good` |", "| cleanup × shards | |")
        .replace("| source × cleanup | works, tested by `m::good` |", "| source × cleanup | maybe |")
        .replace("| shards × dead letters | works, tested by `m::good` |", "| shards × dead letters | works, tested by `m::gone` |")
        .replace("| delivery × cleanup | works, tested by `m::good` |", "| delivery × cleanup | works, tested by `m::no_kill` |")
        .replace("| delivery × shards | works, tested by `m::good` |", "| delivery × shards | works, tested by `m::no_check` |")
        .replace(
            "| delivery × webhook routes | works, tested by `m::good` |",
            "| delivery × webhook routes | works, tested by `m::good`; refused at validation: `\"exactly-once\" covers Kafka only and cannot be combined`; refused at validation: `never said` |",
        );
    let problems = feature_table_problems(&table(&bad), &body, validation);
    let expect = [
        "delivery × source: no row",
        "cleanup × shards: empty",
        "source × cleanup: undecided",
        "shards × dead letters: no test m::gone",
        "delivery × cleanup: m::no_kill never kills",
        "delivery × shards: m::no_check runs no checker",
        "delivery × webhook routes: the relay has no validation message \"never said\"",
    ];
    for e in expect {
        assert!(
            problems.iter().any(|p| p.starts_with(e)),
            "expected a problem {e:?} in {problems:#?}"
        );
    }
    assert_eq!(problems.len(), expect.len(), "{problems:#?}");
}

/// The text of function `name` somewhere under tests/it: from its `fn` to
/// the line that closes it at the `fn`'s own indent.
fn function_body(sources: &str, name: &str) -> Option<String> {
    let start = sources
        .find(&format!("async fn {name}("))
        .or_else(|| sources.find(&format!("fn {name}(")))?;
    let line_start = sources[..start].rfind('\n').map_or(0, |i| i + 1);
    let indent: String = sources[line_start..start]
        .chars()
        .take_while(|c| *c == ' ')
        .collect();
    let body = &sources[start..];
    let close = format!("\n{indent}}}\n");
    let end = body.find(&close).map_or(body.len(), |e| e + close.len());
    Some(body[..end].to_owned())
}

/// One row of the table under "### What each fault logs".
struct FaultRow {
    fault: String,
    /// The event type's name (`outbox_relay::events`).
    event: String,
    /// For `fatal_error`, the cause's stable name (`cause=slot_missing`
    /// beside the event: `outbox_relay::error::Cause`).
    cause: Option<String>,
    level: String,
    /// The quoted line.
    line: String,
    tests: Vec<String>,
}

/// The rows of the table under "### What each fault logs" in `doc`.
fn fault_line_rows(doc: &str) -> Vec<FaultRow> {
    let Some(at) = doc.find("### What each fault logs") else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for line in doc[at..].lines().skip(1) {
        if line.starts_with('#') {
            break;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if !line.starts_with('|') || cells.len() != 5 || cells[0].trim() == "fault" {
            continue;
        }
        if cells[0].trim().starts_with("---") {
            continue;
        }
        let quoted = |cell: &str| cell.split('`').nth(1).unwrap_or("").to_owned();
        let tests = cells[4]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        let cause = cells[1]
            .split('`')
            .skip(1)
            .step_by(2)
            .find_map(|q| q.strip_prefix("cause="))
            .map(str::to_owned);
        rows.push(FaultRow {
            fault: cells[0].trim().to_owned(),
            event: quoted(cells[1]),
            cause,
            level: cells[2].trim().to_owned(),
            line: quoted(cells[3]),
            tests,
        });
    }
    rows
}

/// Everything wrong with the fault-line table against `catalogue` (the
/// event types) and `causes` (the fatal causes' names): an event that is
/// not a type, or logs at another level than the row says; a fault event
/// type without a row; a `fatal_error` row without a cause, or with one
/// that is not a cause; a line the code never says; a test that does not
/// exist, or one whose body (or a helper of its file that it calls) checks
/// neither the line nor the event (for a `fatal_error` row: not its cause,
/// by name or by `Cause::` variant).
fn fault_line_problems(
    doc: &str,
    code: &str,
    tests: &str,
    catalogue: &[Info],
    causes: &[&str],
) -> Vec<String> {
    let code = literal_text(code);
    let mut problems = Vec::new();
    let rows = fault_line_rows(doc);
    if rows.len() < 10 {
        problems.push(format!("only {} rows found", rows.len()));
    }
    for info in catalogue.iter().filter(|info| info.kind == Kind::Fault) {
        if !rows.iter().any(|row| row.event == info.name) {
            problems.push(format!("the fault event {} has no row", info.name));
        }
    }
    for FaultRow {
        fault,
        event,
        cause,
        level,
        line,
        tests: names,
    } in rows
    {
        match (&cause, event == "fatal_error") {
            (None, true) => problems.push(format!("{fault}: a fatal_error row names no cause")),
            (Some(c), _) if !causes.contains(&c.as_str()) => {
                problems.push(format!("{fault}: no cause is named {c:?}"));
            }
            _ => {}
        }
        match catalogue.iter().find(|info| info.name == event) {
            None => problems.push(format!("{fault}: no event type is named {event:?}")),
            Some(info) if !level.starts_with(info.level.as_str()) => problems.push(format!(
                "{fault}: the row says {level:?}, {event} logs at {}",
                info.level
            )),
            Some(_) => {}
        }
        if line.is_empty() || !code.contains(&line) {
            problems.push(format!("{fault}: the relay's code never says {line:?}"));
        }
        if names.is_empty() {
            problems.push(format!("{fault}: no test named"));
        }
        let event_quoted = format!("\"{event}\"");
        // A cause is checked by its name or its variant (`Cause::SlotMissing`).
        let cause_forms = cause.as_ref().map(|c| {
            let variant: String = c
                .split('_')
                .map(|w| {
                    let mut chars = w.chars();
                    chars.next().map_or_else(String::new, |f| {
                        f.to_ascii_uppercase().to_string() + chars.as_str()
                    })
                })
                .collect();
            [format!("\"{c}\""), format!("Cause::{variant}")]
        });
        for name in names {
            let Some(body) = function_body(tests, &name) else {
                problems.push(format!("{fault}: no test {name} in tests/it"));
                continue;
            };
            // The line or the event, or a helper the test calls that
            // checks either.
            let helpers = body
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.contains('_') && *word != name)
                .filter_map(|word| function_body(tests, word));
            // Code only: a line named in a comment is not checked.
            let in_code = |text: &str| {
                text.lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .any(|l| match &cause_forms {
                        Some(forms) => forms.iter().any(|f| l.contains(f.as_str())),
                        None => l.contains(&line) || l.contains(&event_quoted),
                    })
            };
            let checked = in_code(&body) || helpers.into_iter().any(|h| in_code(&h));
            match (&cause, checked) {
                (_, true) => {}
                (Some(c), false) => {
                    problems.push(format!("{fault}: {name} does not check the cause {c}"));
                }
                (None, false) => problems.push(format!(
                    "{fault}: {name} checks neither {line:?} nor {event}"
                )),
            }
        }
    }
    problems
}

#[test]
fn every_fault_line_is_in_the_code_and_its_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let problems = fault_line_problems(
        &doc,
        &sources(&root.join("src")),
        &sources(&root.join("tests/it")),
        events::ALL,
        &Cause::ALL.iter().map(|c| c.name()).collect::<Vec<_>>(),
    );
    assert!(
        problems.is_empty(),
        "docs/operations.md \"What each fault logs\":\n{}",
        problems.join("\n")
    );
}

/// The causes listed under "Why the relay stopped" in docs/operations.md,
/// in the order of the table.
fn listed_causes(doc: &str) -> Vec<String> {
    let Some(at) = doc.find("### Why the relay stopped") else {
        return Vec::new();
    };
    doc[at..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_fatal_cause_is_listed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let listed = listed_causes(&doc);
    let causes: Vec<String> = Cause::ALL.iter().map(|c| c.name().to_owned()).collect();
    assert_eq!(
        listed, causes,
        "docs/operations.md \"Why the relay stopped\" lists every cause of \
         outbox_relay::error::Cause, in its order, and no other"
    );
}

/// The check fails on a line the code does not say, a missing test, a
/// test that checks neither the line nor the event, an event that is no
/// type or logs at another level, and a fault type without a row.
#[test]
fn the_fault_line_check_fails_on_a_bad_table() {
    let row = |fault: &str, event: &str, line: &str, test: &str| {
        format!("| {fault} | `{event}` | WARN, retries | `{line}` | `{test}` |\n")
    };
    let mut doc = String::from(
        "### What each fault logs\n\n| fault | event | level | the line says | test |\n\
         |---|---|---|---|---|\n",
    );
    for i in 0..8 {
        doc.push_str(&row(
            &format!("fine {i}"),
            "broker_gone",
            "broker gone",
            "checks_it",
        ));
    }
    doc.push_str(&row(
        "by name",
        "broker_gone",
        "broker gone",
        "waits_for_it",
    ));
    doc.push_str(&row("unsaid", "broker_gone", "never said", "waits_for_it"));
    doc.push_str(&row(
        "untested",
        "broker_gone",
        "broker gone",
        "no_such_test",
    ));
    doc.push_str(&row(
        "unchecked",
        "broker_gone",
        "broker gone",
        "ignores_it",
    ));
    doc.push_str(&row(
        "commented",
        "broker_gone",
        "broker gone",
        "only_says_it",
    ));
    doc.push_str(&row("no type", "broker_went", "broker gone", "checks_it"));
    doc.push_str(&row("too loud", "loud", "broker gone", "checks_it"));
    doc.push_str(&row(
        "fatal, no cause",
        "fatal_error",
        "broker gone",
        "checks_it",
    ));
    doc.push_str(&row(
        "fatal, unknown cause",
        "fatal_error` `cause=no_such",
        "broker gone",
        "checks_cause",
    ));
    doc.push_str(&row(
        "fatal, cause unchecked",
        "fatal_error` `cause=broker_gone",
        "broker gone",
        "checks_it",
    ));
    doc.push_str(&row(
        "fatal, cause checked",
        "fatal_error` `cause=broker_gone",
        "broker gone",
        "checks_cause",
    ));
    doc.push_str(&row(
        "fatal, cause checked by name",
        "fatal_error` `cause=broker_gone",
        "broker gone",
        "checks_cause_name",
    ));
    let info = |name, level, kind| Info { name, level, kind };
    let catalogue = [
        info("broker_gone", tracing::Level::WARN, Kind::Fault),
        info("loud", tracing::Level::ERROR, Kind::Notice),
        info("rowless", tracing::Level::WARN, Kind::Fault),
        info("quiet", tracing::Level::INFO, Kind::Lifecycle),
        info("fatal_error", tracing::Level::WARN, Kind::Fault),
    ];
    let code = "warn!(\"the broker \\\n    gone\");\nwarn!(\"broker gone\")";
    let tests = "async fn checks_it() {\n    assert!(log.contains(\"broker gone\"));\n}\n\
                 async fn waits_for_it() {\n    relay.wait_for_event(\"broker_gone\", D).await;\n}\n\
                 fn ignores_it() {\n    assert!(true);\n}\n\
                 fn only_says_it() {\n    // the log says \"broker gone\"\n    assert!(true);\n}\n\
                 fn checks_cause() {\n    assert_eq!(e.cause(), Cause::BrokerGone);\n}\n\
                 fn checks_cause_name() {\n    assert_fatal_cause(&log, \"broker_gone\");\n}\n";
    let problems = fault_line_problems(&doc, code, tests, &catalogue, &["broker_gone"]);
    let expect = [
        "the fault event rowless has no row",
        "unsaid: the relay's code never says \"never said\"",
        "untested: no test no_such_test",
        "unchecked: ignores_it checks neither",
        "commented: only_says_it checks neither",
        "no type: no event type is named \"broker_went\"",
        "too loud: the row says \"WARN, retries\", loud logs at ERROR",
        "fatal, no cause: a fatal_error row names no cause",
        "fatal, unknown cause: no cause is named \"no_such\"",
        "fatal, unknown cause: checks_cause does not check the cause no_such",
        "fatal, cause unchecked: checks_it does not check the cause broker_gone",
    ];
    for e in expect {
        assert!(
            problems.iter().any(|p| p.starts_with(e)),
            "expected a problem {e:?} in {problems:#?}"
        );
    }
    assert_eq!(problems.len(), expect.len(), "{problems:#?}");
}
