//! How `dead list` shows its entries: a table for people, one JSON
//! document for scripts (its shape is documented in docs/dead-letters.md).
//!
//! Invariant: text that comes from rows, records and endpoints (ids,
//! routes, reasons) never reaches a terminal with its control characters:
//! they are escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{Entry, Inventory, State, shown_id};
use crate::admin::human_duration;

/// The `--json` document of `dead list`.
#[derive(Debug, Serialize)]
pub struct ListDocument<'a> {
    pub dead_letters: Vec<&'a Entry>,
    /// The live heads of the parking table.
    pub parked: Vec<&'a super::parked::Parked>,
    pub problems: &'a [String],
    pub notes: &'a [String],
}

/// `dead list --json`: one document (shape in docs/dead-letters.md).
pub fn render_json(
    entries: Vec<&Entry>,
    parked: Vec<&super::parked::Parked>,
    inventory: &Inventory,
) -> String {
    let document = ListDocument {
        dead_letters: entries,
        parked,
        problems: &inventory.problems,
        notes: &inventory.notes,
    };
    serde_json::to_string_pretty(&document).unwrap_or_else(|e| format!("{{\"error\":{e:?}}}"))
}

/// Longest reason in the text table; `--json` has it whole.
const REASON_WIDTH: usize = 60;

/// A cell of the text table: control characters escaped (ids, routes and
/// reasons come from rows and endpoints), cut to `max` characters.
pub(super) fn cell(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if out.chars().count() > max {
        out = out.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
    }
    out
}

/// Rows as aligned columns, the first row the header.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, value) in row.iter().enumerate() {
            if i + 1 == columns {
                line.push_str(value);
            } else {
                let pad = widths[i] - value.chars().count();
                let _ = write!(line, "{value}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `dead list`: one table of every entry given, a count, and a line for
/// each dead letter `retry` would refuse, saying why.
pub fn render_text(entries: &[&Entry], with_state: bool) -> String {
    let mut header = vec!["ID", "SINK", "ROUTE/TOPIC", "REASON", "ATTEMPTS", "AGE"];
    if with_state {
        header.push("STATE");
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for e in entries {
        let reason = match (&e.reason_code, e.reason.is_empty()) {
            (Some(code), false) => format!("{code}: {}", e.reason),
            (Some(code), true) => code.clone(),
            (None, _) => e.reason.clone(),
        };
        let attempts = match (e.attempts, e.max_attempts) {
            (Some(a), Some(m)) => format!("{a}/{m}"),
            (Some(a), None) => a.to_string(),
            _ => "-".to_owned(),
        };
        let mut row = vec![
            cell(&e.id, usize::MAX),
            e.sink.as_str().to_owned(),
            cell(if e.route.is_empty() { "?" } else { &e.route }, usize::MAX),
            cell(&reason, REASON_WIDTH),
            attempts,
            e.age_seconds.map_or("-".to_owned(), human_duration),
        ];
        if with_state {
            row.push(e.state.as_str().to_owned());
        }
        rows.push(row);
    }
    let mut out = table(&rows);
    let counts = entries.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.sink.as_str()).or_insert(0) += 1;
        m
    });
    let _ = writeln!(
        out,
        "{} dead letter{} ({})",
        entries.len(),
        if entries.len() == 1 { "" } else { "s" },
        if counts.is_empty() {
            "none".to_owned()
        } else {
            counts
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    for e in entries {
        if let (State::Dead, Some(why)) = (e.state, &e.not_retryable) {
            let _ = writeln!(
                out,
                "cannot retry {}: {}",
                shown_id(&e.id),
                cell(why, usize::MAX)
            );
        }
    }
    out
}

/// `list`'s section of parked aggregates (nothing when none is parked).
pub fn parked_text(parked: &[&super::parked::Parked]) -> String {
    use std::fmt::Write as _;
    if parked.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nparked aggregates (each waits behind its head's dead letter):\n");
    let mut rows = vec![vec![
        "HEAD ID".to_owned(),
        "AGGREGATE".to_owned(),
        "WAITING".to_owned(),
        "AGE".to_owned(),
        "REASON".to_owned(),
    ]];
    for p in parked {
        let h = &p.head;
        rows.push(vec![
            cell(&h.event_id, usize::MAX),
            cell(&format!("{}/{}", h.aggregatetype, h.aggregateid), 60),
            h.waiting.to_string(),
            crate::admin::human_duration(h.age_seconds),
            cell(&h.reason, 60),
        ]);
    }
    out.push_str(&table(&rows));
    let _ = writeln!(
        out,
        "{} parked aggregate{}: `dead retry HEAD-ID` sends the head again, then its queue; `dead \
         discard HEAD-ID` sends the queue without it",
        parked.len(),
        if parked.len() == 1 { "" } else { "s" }
    );
    for p in parked {
        if let Some(hint) = &p.release_interrupted {
            let _ = writeln!(out, "{}: {hint}", cell(&p.head.event_id, usize::MAX));
        }
    }
    out
}
