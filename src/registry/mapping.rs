//! What the JSON-to-record mappings (Avro, Protobuf) share: the error a
//! payload that does not fit gets, the path to its first failing place,
//! and how JSON values are named in it. Never a value of the payload.

use serde_json::Value as Json;

/// Why a payload does not fit the schema: where (a JSON pointer; `/` the
/// payload itself) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct MappingError {
    pub path: String,
    pub reason: String,
}

/// One step of the path to a failing value, innermost first.
pub enum Step {
    Field(String),
    Index(usize),
    /// A map's value: its key is payload data, shown as `*`.
    MapValue,
}

/// A failure on its way out of the mapping, collecting its path.
pub struct Fail {
    steps: Vec<Step>,
    reason: String,
}

impl Fail {
    /// The error, its path complete.
    pub fn finish(self) -> MappingError {
        MappingError {
            path: pointer(&self.steps),
            reason: self.reason,
        }
    }
}

/// A failure right here.
pub fn fail(reason: impl Into<String>) -> Fail {
    Fail {
        steps: Vec::new(),
        reason: reason.into(),
    }
}

/// Adds the step the failure was found under (`map_err(at(...))`).
pub fn at(step: Step) -> impl FnOnce(Fail) -> Fail {
    move |mut f| {
        f.steps.push(step);
        f
    }
}

/// What kind of JSON value it is, for "expected X, got Y".
pub fn json_kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(n) if n.is_f64() => "number",
        Json::Number(_) => "integer",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

/// The JSON pointer of `steps` (innermost first); `/` for the payload.
pub fn pointer(steps: &[Step]) -> String {
    if steps.is_empty() {
        return "/".into();
    }
    let mut out = String::new();
    for step in steps.iter().rev() {
        out.push('/');
        match step {
            Step::Field(name) => out.push_str(&name.replace('~', "~0").replace('/', "~1")),
            Step::Index(i) => out.push_str(&i.to_string()),
            Step::MapValue => out.push('*'),
        }
    }
    out
}

/// Cuts `text` to at most `max` bytes (on a character boundary), marking
/// the cut.
pub fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
}

/// The name syntax Avro and Protobuf share (a letter or `_`, then letters,
/// digits, `_`), which a payload's key shows in an error only if it has:
/// anything else may be data.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}
