//! The CloudEvents distributed-tracing extension: a row's (or a message's)
//! W3C trace context, validated and passed on unchanged (docs/design.md,
//! "CloudEvents mapping"; W3C Trace Context §3.2, §3.3).
//!
//! Invariant: a malformed `traceparent` or `tracestate` is dropped, never
//! the event; [`TraceContext::dropped`] says which, for the relay's warning.

use crate::outbox::OutboxRow;

/// A row's W3C trace context: the CloudEvents distributed-tracing
/// extension, passed on unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The row's trace context, when its traceparent is valid: the bare
    /// value, or Debezium's Java properties text (`traceparent=…` and
    /// `tracestate=…` lines). A tracestate column with a value wins over
    /// the properties' line. A malformed tracestate is dropped, never the
    /// event.
    pub fn of_row(row: &OutboxRow) -> Option<TraceContext> {
        let text = row.trace_parent.as_deref()?;
        let traceparent = traceparent_from_span_context(text)?.to_owned();
        let from_column = row
            .trace_state
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        let tracestate = match from_column {
            Some(column) => Some(column.to_owned()),
            None => property(text, "tracestate"),
        }
        .filter(|s| is_tracestate(s));
        Some(TraceContext {
            traceparent,
            tracestate,
        })
    }

    /// Which part of the row's trace context [`TraceContext::of_row`]
    /// drops as malformed, if any: `"traceparent"` (and with it the whole
    /// context) or `"tracestate"`.
    pub fn dropped(row: &OutboxRow, kept: Option<&TraceContext>) -> Option<&'static str> {
        let text = row.trace_parent.as_deref().filter(|t| !t.trim().is_empty());
        let Some(kept) = kept else {
            return text.map(|_| "traceparent");
        };
        let had_state = row
            .trace_state
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty())
            || text.is_some_and(|t| property(t, "tracestate").is_some());
        (had_state && kept.tracestate.is_none()).then_some("tracestate")
    }
}

/// Extracts a W3C `traceparent` from the tracing span context column, which
/// holds either the bare value or the Java properties text Debezium's
/// OpenTelemetry integration writes (`traceparent=00-…` on its own line).
/// A malformed value yields `None`: a bad trace context must not dead-letter
/// an otherwise good event.
pub fn traceparent_from_span_context(text: &str) -> Option<&str> {
    let text = text.trim();
    if is_traceparent(text) {
        return Some(text);
    }
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("traceparent"))
        .filter_map(|rest| rest.trim_start().strip_prefix(['=', ':']))
        .map(str::trim)
        .find(|value| is_traceparent(value))
}

/// The value of `key` in Java properties text (`key=value` or `key:value`
/// lines, `\` escapes as `Properties.store` writes them: a tracestate's `=`
/// arrives as `\=`), when it is not empty.
fn property(text: &str, key: &str) -> Option<String> {
    let raw = text
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix(key))
        .filter_map(|rest| rest.trim_start().strip_prefix(['=', ':']))
        .map(str::trim)
        .next_back()?;
    let mut value = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            value.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => value.push('\t'),
            Some('n') => value.push('\n'),
            Some('r') => value.push('\r'),
            Some('f') => value.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                value.push(
                    u32::from_str_radix(&hex, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .unwrap_or('\u{fffd}'),
                );
            }
            Some(other) => value.push(other),
            None => {}
        }
    }
    (!value.is_empty()).then_some(value)
}

/// A W3C `tracestate` (Trace Context §3.3): at most 32 comma-separated
/// `key=value` members (empty members allowed), keys of `[a-z0-9_*/@-]`
/// starting with a letter or digit, values of printable ASCII without `,`
/// and `=`, at most 256 characters, not ending in a space.
pub fn is_tracestate(s: &str) -> bool {
    let mut members = 0;
    for member in s.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        members += 1;
        let Some((key, value)) = member.split_once('=') else {
            return false;
        };
        let key_ok = (1..=256).contains(&key.len())
            && key
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/@".contains(&b));
        let value_ok = (1..=256).contains(&value.len())
            && !value.ends_with(' ')
            && value
                .bytes()
                .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=');
        if !key_ok || !value_ok {
            return false;
        }
    }
    members <= 32
}

/// `version-traceid-parentid-flags`, lowercase hex, ids not all zero
/// (W3C Trace Context §3.2).
pub fn is_traceparent(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let hex = |p: &str, len: usize| {
        p.len() == len && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let non_zero = |p: &str| p.bytes().any(|b| b != b'0');
    parts.len() >= 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && non_zero(parts[1])
        && hex(parts[2], 16)
        && non_zero(parts[2])
        && hex(parts[3], 2)
        // Version 00 has exactly four fields; later versions may append more.
        && (parts.len() == 4 || parts[0] != "00")
}
