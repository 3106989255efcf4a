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

use bytes::Bytes;
use serde_json::Value;

use crate::registry::{
    AvroEncoder, ProtobufEncoder, RegistryClient, RegistryError, RegistrySettings, SchemaType,
    SubjectVersion, wire,
};
use crate::routes::glob_match;

pub mod draft;
pub mod exact;
pub mod vocabulary;

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
    /// A registry schema (`subject <s> version <n>`) the relay cannot use.
    #[error("{name} cannot be used: {reason}")]
    Unusable { name: String, reason: String },
}

/// One compiled schema and what it is called: a JSON Schema (from a file,
/// or a registry subject's), or a registry subject's Avro or Protobuf schema.
pub struct Schema {
    /// The schema as the config names it (its file path as given, or
    /// `subject <name> version <n>`).
    name: String,
    /// The CloudEvents `dataschema` of events checked against it.
    dataschema: String,
    kind: Kind,
}

/// How a payload is checked, and what is sent.
enum Kind {
    /// Validated; sent as written, or framed with the registry's schema id
    /// (Confluent's wire format) when `frame` holds one.
    Json {
        validator: Box<jsonschema::Validator>,
        frame: Option<u32>,
    },
    /// Encoded to Avro binary by the schema (which checks it), framed with
    /// the registry's schema id.
    Avro { encoder: Box<AvroEncoder>, id: u32 },
    /// Encoded as the schema's message (which checks it), framed with the
    /// registry's schema id and the message's indexes.
    Protobuf {
        encoder: Box<ProtobufEncoder>,
        id: u32,
    },
}

/// `content-type` of an event encoded as Avro.
pub const AVRO_CONTENT_TYPE: &str = "application/avro";

/// `content-type` of an event encoded as Protobuf (CloudEvents' Protobuf
/// format names it so).
pub const PROTOBUF_CONTENT_TYPE: &str = "application/protobuf";

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
        let validator =
            build_json_schema(value, base).map_err(|reason| ContractError::Invalid {
                path: name.to_owned(),
                reason,
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
            kind: Kind::Json {
                validator: Box::new(validator),
                frame: None,
            },
        })
    }

    /// A registry subject's version as the schema of `contract`: a JSON
    /// Schema validates (and, with `frame`, the event is sent in
    /// Confluent's wire format with the version's schema id), an Avro or
    /// Protobuf schema encodes (the contract's `record` naming the Avro
    /// record it must be, or which Protobuf message). `dataschema`: the
    /// contract's own, else `<registry>/schemas/ids/<id>`.
    ///
    /// # Errors
    /// The schema cannot be used: not valid, or not the record named.
    pub fn from_registry(
        version: &SubjectVersion,
        registry: &str,
        contract: &RegistryContract,
    ) -> Result<Schema, ContractError> {
        let frame = contract.frame;
        let name = format!("subject {} version {}", version.subject, version.version);
        let dataschema = contract.dataschema.as_deref();
        let dataschema = dataschema.filter(|d| !d.is_empty()).map_or_else(
            || {
                format!(
                    "{}/schemas/ids/{}",
                    registry.trim_end_matches('/'),
                    version.id
                )
            },
            str::to_owned,
        );
        let invalid = |reason: String| ContractError::Unusable {
            name: name.clone(),
            reason,
        };
        let kind = match version.schema.schema_type {
            SchemaType::Json => {
                let value: Value = serde_json::from_str(&version.schema.text)
                    .map_err(|e| invalid(format!("not JSON: {}", e.classify_text())))?;
                let validator = build_json_schema(&value, None).map_err(invalid)?;
                Kind::Json {
                    validator: Box::new(validator),
                    frame: frame.then_some(version.id),
                }
            }
            SchemaType::Avro => {
                let encoder =
                    AvroEncoder::new(&version.schema.text).map_err(|e| invalid(e.to_string()))?;
                if let Some(record) = &contract.record
                    && encoder.record_name().as_deref() != Some(record.as_str())
                {
                    return Err(invalid(format!(
                        "holds Avro record {}, not record {record} as the contract says",
                        encoder.record_name().as_deref().unwrap_or("(none)")
                    )));
                }
                Kind::Avro {
                    encoder: Box::new(encoder),
                    id: version.id,
                }
            }
            SchemaType::Protobuf => Kind::Protobuf {
                encoder: Box::new(
                    ProtobufEncoder::new(&version.schema.text, contract.record.as_deref())
                        .map_err(|e| invalid(e.to_string()))?,
                ),
                id: version.id,
            },
        };
        Ok(Schema {
            name,
            dataschema,
            kind,
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
        self.encode(payload).map(drop)
    }

    /// Checks a payload (JSON text) and gives the record value to send in
    /// its place when that is not the payload itself: framed JSON, or Avro.
    ///
    /// # Errors
    /// As [`Schema::check`].
    pub fn encode(&self, payload: &[u8]) -> Result<Option<Bytes>, Violation> {
        let value: Value = serde_json::from_slice(payload).map_err(|e| Violation {
            schema: self.name.clone(),
            path: String::new(),
            keyword: "type".to_owned(),
            message: format!("the payload is not JSON ({})", e.classify_text()),
        })?;
        match &self.kind {
            Kind::Json { validator, frame } => {
                validator.validate(&value).map_err(|e| Violation {
                    schema: self.name.clone(),
                    path: e.instance_path().to_string(),
                    keyword: e.kind().keyword().to_owned(),
                    message: e.masked().to_string(),
                })?;
                Ok(frame.map(|id| Bytes::from(wire::frame(id, payload))))
            }
            Kind::Avro { encoder, id } => {
                let body = encoder.encode(&value).map_err(|e| Violation {
                    schema: self.name.clone(),
                    path: e.path,
                    keyword: "avro".to_owned(),
                    message: e.reason,
                })?;
                Ok(Some(Bytes::from(wire::frame(*id, &body))))
            }
            Kind::Protobuf { encoder, id } => {
                let body = encoder.encode(&value).map_err(|e| Violation {
                    schema: self.name.clone(),
                    path: e.path,
                    keyword: "protobuf".to_owned(),
                    message: e.reason,
                })?;
                Ok(Some(Bytes::from(wire::frame_protobuf(
                    *id,
                    encoder.message_indexes(),
                    &body,
                ))))
            }
        }
    }

    /// The `content-type` of a checked event when it is not the payload's
    /// JSON: Avro, Protobuf.
    pub fn content_type(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Avro { .. } => Some(AVRO_CONTENT_TYPE),
            Kind::Protobuf { .. } => Some(PROTOBUF_CONTENT_TYPE),
            Kind::Json { .. } => None,
        }
    }

    /// Whether the record value is something else than the payload as
    /// written (framed, Avro, Protobuf), which CloudEvents' structured mode
    /// cannot carry.
    pub fn reframes(&self) -> bool {
        !matches!(self.kind, Kind::Json { frame: None, .. })
    }
}

/// Compiles a JSON Schema: its keywords and type names checked against its
/// draft ([`vocabulary`]), then its draft's meta-schema (the crate's), with
/// numbers compared exactly ([`exact`]). `base`: where relative `$ref`s
/// resolve.
///
/// # Errors
/// What is wrong, where in the schema, and what to fix.
fn build_json_schema(value: &Value, base: Option<&str>) -> Result<jsonschema::Validator, String> {
    let draft = vocabulary::check(value).map_err(|problem| problem.to_string())?;
    let mut options = jsonschema::options().with_draft(draft.to_jsonschema());
    if let Some(base) = base {
        options = options.with_base_uri(base);
    }
    exact::with_exact_numbers(options, draft)
        .build(value)
        .map_err(|e| {
            let place = e.instance_path().to_string();
            let place = if place.is_empty() {
                "/".to_owned()
            } else {
                place
            };
            format!(
                "at {place} in the schema: {e} (by the meta-schema of {}): correct the \
                 schema",
                draft.name()
            )
        })
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

/// One `[[contracts]]` entry.
#[derive(Debug, Clone)]
struct Contract {
    aggregate_type: Option<String>,
    event_type: Option<String>,
    schema: Slot,
}

/// A contract's schema: compiled, or still in the registry.
#[derive(Debug, Clone)]
enum Slot {
    Ready(Arc<Schema>),
    Registry(RegistryContract),
}

/// One contract as the config gives it: the `aggregatetype` and `type`
/// globs, and its compiled schema or the registry subject that holds it.
pub type ContractPart = (
    Option<String>,
    Option<String>,
    Result<Arc<Schema>, RegistryContract>,
);

/// The contracts of a config, in order. Those kept in a schema registry
/// are fetched by [`Contracts::resolve`] before the first event; until
/// then, [`Contracts::find`] may not be asked (it panics: an event must
/// never go unchecked because its schema was not fetched yet).
#[derive(Debug, Clone, Default)]
pub struct Contracts {
    contracts: Vec<Contract>,
    /// Where the registry contracts are, when there are any.
    registry: Option<RegistrySettings>,
}

impl PartialEq for Contracts {
    /// Equal when the same globs name schemas of the same names and
    /// `dataschema`s (the compiled validators are not compared).
    fn eq(&self, other: &Self) -> bool {
        self.contracts.len() == other.contracts.len()
            && self.contracts.iter().zip(&other.contracts).all(|(a, b)| {
                a.aggregate_type == b.aggregate_type
                    && a.event_type == b.event_type
                    && match (&a.schema, &b.schema) {
                        (Slot::Ready(a), Slot::Ready(b)) => {
                            a.name == b.name && a.dataschema == b.dataschema
                        }
                        (Slot::Registry(a), Slot::Registry(b)) => a == b,
                        _ => false,
                    }
            })
    }
}

impl Eq for Contracts {}

impl Contracts {
    /// Contracts from `(aggregatetype glob, type glob, schema)` triples, in
    /// the order given (the first match wins).
    pub fn from_parts(parts: Vec<(Option<String>, Option<String>, Arc<Schema>)>) -> Self {
        let parts = parts.into_iter().map(|(a, t, schema)| (a, t, Ok(schema)));
        Contracts::with_registry(parts.collect(), None)
    }

    /// Contracts of which some are kept in the registry `registry` (the
    /// `Err` entries), to [`Contracts::resolve`] before use.
    pub fn with_registry(parts: Vec<ContractPart>, registry: Option<RegistrySettings>) -> Self {
        Contracts {
            contracts: parts
                .into_iter()
                .map(|(aggregate_type, event_type, schema)| Contract {
                    aggregate_type,
                    event_type,
                    schema: match schema {
                        Ok(ready) => Slot::Ready(ready),
                        Err(kept) => Slot::Registry(kept),
                    },
                })
                .collect(),
            registry,
        }
    }

    /// The registry contracts, in order, and where the registry is.
    pub fn registry_contracts(&self) -> (Vec<&RegistryContract>, Option<&RegistrySettings>) {
        let kept = self
            .contracts
            .iter()
            .filter_map(|c| match &c.schema {
                Slot::Registry(kept) => Some(kept),
                Slot::Ready(_) => None,
            })
            .collect();
        (kept, self.registry.as_ref())
    }

    /// Some contracts are still in the registry.
    pub fn needs_registry(&self) -> bool {
        self.contracts
            .iter()
            .any(|c| matches!(c.schema, Slot::Registry(_)))
    }

    /// The contracts with every registry one fetched and compiled: a pinned
    /// version, else the subject's latest now.
    ///
    /// # Errors
    /// [`ResolveError`]: the registry did not answer (retryable: see
    /// [`ResolveError::is_retryable`]), a subject or version is missing, or
    /// a schema cannot be used.
    pub async fn resolve(&self) -> Result<Contracts, ResolveError> {
        if !self.needs_registry() {
            return Ok(self.clone());
        }
        let settings = self.registry.as_ref().ok_or(ResolveError::NoRegistry)?;
        let client = RegistryClient::new(settings)?;
        let mut contracts = Vec::with_capacity(self.contracts.len());
        // The contracts are the config's, in its order: `index` is N of
        // `contracts[N]`.
        for (index, contract) in self.contracts.iter().enumerate() {
            let schema = match &contract.schema {
                Slot::Ready(schema) => Slot::Ready(Arc::clone(schema)),
                Slot::Registry(kept) => {
                    let version = match kept.version {
                        Some(n) => client.version(&kept.subject, n).await,
                        None => client.latest(&kept.subject).await,
                    }
                    .map_err(|source| ResolveError::Subject { index, source })?;
                    let schema = Schema::from_registry(&version, client.url(), kept)
                        .map_err(|source| ResolveError::Unusable { index, source })?;
                    Slot::Ready(Arc::new(schema))
                }
            };
            contracts.push(Contract {
                schema,
                ..contract.clone()
            });
        }
        Ok(Contracts {
            contracts,
            registry: self.registry.clone(),
        })
    }

    /// No contract at all: every event goes unchecked.
    pub fn is_empty(&self) -> bool {
        self.contracts.is_empty()
    }

    /// The schema an event must satisfy, by its aggregate type and type;
    /// `None`: no contract covers it.
    ///
    /// # Panics
    /// When the contract that matches is still in the registry: resolve
    /// first.
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
            .map(|c| match &c.schema {
                Slot::Ready(schema) => schema.as_ref(),
                Slot::Registry(kept) => panic!(
                    "the contract of subject {:?} is used before it was fetched from the \
                     registry (Contracts::resolve)",
                    kept.subject
                ),
            })
    }
}

/// A contract kept in a schema registry: which subject, which version
/// (`None`: the latest when the relay starts), whether a JSON Schema's
/// events go in Confluent's wire format, the `dataschema` to give them
/// (`None`: `<registry>/schemas/ids/<id>`), and the record's full name
/// (an Avro schema must be that record; a Protobuf schema's message it
/// names, `None` its first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryContract {
    pub subject: String,
    pub version: Option<u32>,
    pub frame: bool,
    pub dataschema: Option<String>,
    pub record: Option<String>,
}

/// Why the registry contracts could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The subject of `contracts[index]` could not be fetched.
    #[error("contracts[{index}]: {source}")]
    Subject { index: usize, source: RegistryError },
    /// The schema of `contracts[index]` cannot be used.
    #[error("contracts[{index}]: {source}")]
    Unusable { index: usize, source: ContractError },
    #[error("contracts name registry subjects but no [registry] url is set")]
    NoRegistry,
}

impl ResolveError {
    /// Whether asking the registry again later can help (it did not
    /// answer, or failed): the relay waits, sending nothing unchecked.
    pub fn is_retryable(&self) -> bool {
        match self {
            ResolveError::Registry(e) | ResolveError::Subject { source: e, .. } => e.is_retryable(),
            ResolveError::Unusable { .. } | ResolveError::NoRegistry => false,
        }
    }
}

#[cfg(test)]
mod tests;
