//! Event contracts: which schema an event's payload must satisfy, chosen by
//! its aggregate type and event type, and the check itself.
//!
//! `[[contracts]]` in the config map `aggregatetype` and `type` globs (as
//! `[[routes]]` do, see `routes.rs`) to a JSON Schema file; the first
//! contract that matches wins, and an event no contract matches is sent
//! unchecked, as before contracts existed. The relay checks each event's
//! payload before it is sent: one that breaks its contract becomes a dead
//! letter with the reason (the first failing place in the payload and the
//! rule it broke) and its payload intact, and the stream goes on. The
//! CloudEvents `dataschema` attribute of a checked event names the schema
//! it was checked against.
//!
//! Pure: schemas are read and compiled once, where the config is built
//! (`config/build.rs`); checking does no I/O.
//!
//! Invariant: a violation's text never quotes the payload (logs and
//! dead-letter headers carry no payload values): it names the place (a
//! JSON pointer into the payload), the rule (the schema keyword) and what
//! the schema asks, with the offending value masked.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::routes::glob_match;

/// The dead-letter reason code of an event whose payload breaks its
/// contract.
pub const CONTRACT_VIOLATION: &str = "contract_violation";

/// The prefix of the `dataschema` the relay gives a schema without an
/// `$id` (and no `dataschema` in its contract): the file's name and the
/// SHA-256 of its content follow, so the attribute tells versions apart.
pub const DEFAULT_DATASCHEMA_PREFIX: &str = "urn:outbox-relay:contract:";

/// Why a schema cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    #[error("cannot read schema file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("schema file {path} is not JSON: {reason}")]
    NotJson { path: String, reason: String },
    #[error("schema file {path} is not a valid JSON Schema: {reason}")]
    Invalid { path: String, reason: String },
}

/// One compiled JSON Schema and what it is called.
pub struct Schema {
    /// The schema as the config names it (its file path, as given).
    name: String,
    /// The CloudEvents `dataschema` of events checked against it.
    dataschema: String,
    validator: jsonschema::Validator,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("name", &self.name)
            .field("dataschema", &self.dataschema)
            .finish_non_exhaustive()
    }
}

impl Schema {
    /// Reads and compiles the JSON Schema file at `path`, called `name`.
    /// `$ref`s to other local files resolve against the file's own place.
    /// `dataschema`: the attribute to give checked events; `None` takes the
    /// schema's `$id`, else a URN of the file's name and content digest.
    ///
    /// # Errors
    /// The file cannot be read, is not JSON, or is not a valid schema.
    pub fn load(
        path: &Path,
        name: &str,
        dataschema: Option<&str>,
    ) -> Result<Schema, ContractError> {
        let shown = path.display().to_string();
        let text = std::fs::read(path).map_err(|e| ContractError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let value: Value = serde_json::from_slice(&text).map_err(|e| ContractError::NotJson {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let absolute = std::path::absolute(path).map_err(|e| ContractError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let base = format!("file://{}", absolute.display());
        let file_name = path
            .file_name()
            .map_or_else(|| name.to_owned(), |n| n.to_string_lossy().into_owned());
        let fallback = format!(
            "{DEFAULT_DATASCHEMA_PREFIX}{file_name}:sha256:{}",
            &hex::encode(openssl::sha::sha256(&text))[..16]
        );
        Schema::compile(&value, name, dataschema, Some(&base), fallback)
    }

    /// Compiles a schema given as JSON (tests, `schema check`).
    ///
    /// # Errors
    /// [`ContractError::Invalid`].
    pub fn from_value(
        value: &Value,
        name: &str,
        dataschema: Option<&str>,
    ) -> Result<Schema, ContractError> {
        let fallback = format!("{DEFAULT_DATASCHEMA_PREFIX}{name}");
        Schema::compile(value, name, dataschema, None, fallback)
    }

    fn compile(
        value: &Value,
        name: &str,
        dataschema: Option<&str>,
        base: Option<&str>,
        fallback: String,
    ) -> Result<Schema, ContractError> {
        let mut options = jsonschema::options();
        if let Some(base) = base {
            options = options.with_base_uri(base);
        }
        let validator = options.build(value).map_err(|e| ContractError::Invalid {
            path: name.to_owned(),
            reason: e.to_string(),
        })?;
        let id = value
            .get("$id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let dataschema = dataschema
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .or_else(|| id.map(str::to_owned))
            .unwrap_or(fallback);
        Ok(Schema {
            name: name.to_owned(),
            dataschema,
            validator,
        })
    }

    /// The schema as the config names it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The CloudEvents `dataschema` of events checked against it.
    pub fn dataschema(&self) -> &str {
        &self.dataschema
    }

    /// Checks a payload (JSON text).
    ///
    /// # Errors
    /// The first [`Violation`]: where, which rule, what it asks.
    pub fn check(&self, payload: &[u8]) -> Result<(), Violation> {
        let value: Value = serde_json::from_slice(payload).map_err(|e| Violation {
            schema: self.name.clone(),
            path: String::new(),
            keyword: "type".to_owned(),
            message: format!("the payload is not JSON ({})", e.classify_text()),
        })?;
        self.validator.validate(&value).map_err(|e| Violation {
            schema: self.name.clone(),
            path: e.instance_path().to_string(),
            keyword: e.kind().keyword().to_owned(),
            message: e.masked().to_string(),
        })
    }
}

/// Why a payload breaks its contract: the first failing place and rule,
/// without the payload's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The schema's name.
    pub schema: String,
    /// A JSON pointer into the payload (empty: the payload itself).
    pub path: String,
    /// The schema keyword that failed (`required`, `type`, `minimum`, ...).
    pub keyword: String,
    /// What the rule asks, the offending value masked as `value`.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(
            f,
            "payload breaks contract {}: at {path}: {} (rule `{}`)",
            self.schema, self.message, self.keyword
        )
    }
}

/// How serde_json classifies a parse error, without the input's text.
trait ClassifyText {
    fn classify_text(&self) -> &'static str;
}

impl ClassifyText for serde_json::Error {
    fn classify_text(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected data",
            serde_json::error::Category::Eof => "unexpected end",
        }
    }
}

/// One `[[contracts]]` entry, compiled.
#[derive(Debug, Clone)]
struct Contract {
    aggregate_type: Option<String>,
    event_type: Option<String>,
    schema: Arc<Schema>,
}

/// The contracts of a config, in order.
#[derive(Debug, Clone, Default)]
pub struct Contracts {
    contracts: Vec<Contract>,
}

impl PartialEq for Contracts {
    /// Equal when the same globs name schemas of the same names and
    /// `dataschema`s (the compiled validators are not compared).
    fn eq(&self, other: &Self) -> bool {
        self.contracts.len() == other.contracts.len()
            && self.contracts.iter().zip(&other.contracts).all(|(a, b)| {
                a.aggregate_type == b.aggregate_type
                    && a.event_type == b.event_type
                    && a.schema.name == b.schema.name
                    && a.schema.dataschema == b.schema.dataschema
            })
    }
}

impl Eq for Contracts {}

impl Contracts {
    /// Contracts from `(aggregatetype glob, type glob, schema)` triples, in
    /// the order given (the first match wins).
    pub fn from_parts(parts: Vec<(Option<String>, Option<String>, Arc<Schema>)>) -> Self {
        Contracts {
            contracts: parts
                .into_iter()
                .map(|(aggregate_type, event_type, schema)| Contract {
                    aggregate_type,
                    event_type,
                    schema,
                })
                .collect(),
        }
    }

    /// No contract at all: every event goes unchecked.
    pub fn is_empty(&self) -> bool {
        self.contracts.is_empty()
    }

    /// The schema an event must satisfy, by its aggregate type and type;
    /// `None`: no contract covers it.
    pub fn find(&self, aggregate_type: &str, event_type: &str) -> Option<&Schema> {
        self.contracts
            .iter()
            .find(|c| {
                c.aggregate_type
                    .as_deref()
                    .is_none_or(|g| glob_match(g, aggregate_type))
                    && c.event_type
                        .as_deref()
                        .is_none_or(|g| glob_match(g, event_type))
            })
            .map(|c| c.schema.as_ref())
    }
}

#[cfg(test)]
mod tests;
