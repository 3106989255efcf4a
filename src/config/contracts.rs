//! `[[contracts]]`: which JSON Schema each event type's payload must
//! satisfy. Validated and compiled here, once; the relay and the CLI take
//! the compiled [`Contracts`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::contracts::{Contracts, RegistryContract, Schema};
use crate::envelope::{ContentMode, render_topic};
use crate::registry::{Credentials, RegistryClient, RegistrySettings, subject};

use super::{Config, ConfigError};

/// One `[[contracts]]` entry. A glob left out matches everything. The
/// schema is a file (`schema`) or a registry subject (`subject`, or
/// `subject_strategy`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ContractConfig {
    pub aggregatetype: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// A JSON Schema file; a relative path is taken from the config file's
    /// directory.
    pub schema: String,
    /// A subject of the `[registry]`: its JSON Schema, Avro or Protobuf
    /// schema.
    pub subject: Option<String>,
    /// The subject named as Confluent's serializers name it: `topic`
    /// (`<topic>-value`), `record` (`record`), `topic-record`
    /// (`<topic>-<record>`).
    pub subject_strategy: Option<SubjectStrategy>,
    /// The record's full name: the subject of the `record` and
    /// `topic-record` strategies; the Avro record the subject's schema
    /// must be; which message of a Protobuf schema the payload is (default:
    /// its first).
    pub record: Option<String>,
    /// A pinned version of the subject; default: its latest when the relay
    /// starts.
    pub version: Option<u32>,
    /// How an event checked against a registry JSON Schema is sent:
    /// `confluent` (magic byte and schema id before the JSON, what
    /// Confluent's JSON deserializer reads) or `none` (the JSON as written).
    pub framing: Option<Framing>,
    /// The CloudEvents `dataschema` of events checked against it; default:
    /// the schema's `$id`, else a URN of the file's name and digest (a
    /// file), `<registry url>/schemas/ids/<id>` (a subject).
    pub dataschema: Option<String>,
}

/// `subject_strategy`: Confluent's value subject name strategies.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SubjectStrategy {
    Topic,
    Record,
    TopicRecord,
}

/// `framing` of registry JSON Schema contracts.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Framing {
    #[default]
    Confluent,
    None,
}

/// `[registry]`: a Confluent-compatible schema registry.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// The API's root (Apicurio: `http://host:8080/apis/ccompat/v7`).
    pub url: String,
    /// HTTP Basic credentials.
    pub username: Option<String>,
    #[serde(serialize_with = "super::webhooks::serialize_redacted_option")]
    pub password: Option<String>,
    /// CA certificates (PEM) trusted for https besides the system store.
    pub ca_file: Option<String>,
    /// Per request; default 10000.
    pub timeout_ms: Option<u64>,
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("ca_file", &self.ca_file)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// Longest registry request timeout.
const MAX_REGISTRY_TIMEOUT_MS: u64 = 300_000;

impl RegistryConfig {
    fn settings(&self) -> Option<RegistrySettings> {
        (!self.url.is_empty()).then(|| RegistrySettings {
            url: self.url.clone(),
            timeout: Duration::from_millis(self.timeout_ms.unwrap_or(10_000)),
            ca_file: self.ca_file.as_ref().map(PathBuf::from),
            credentials: self.username.as_ref().map(|user| Credentials {
                user: user.clone(),
                password: self.password.clone().unwrap_or_default(),
            }),
        })
    }
}

impl ContractConfig {
    /// The schema file, relative paths taken from `base`.
    pub fn schema_path(&self, base: Option<&Path>) -> PathBuf {
        let path = Path::new(&self.schema);
        match base {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_owned(),
        }
    }
}

impl Config {
    /// The compiled `[[contracts]]`: each schema file read and compiled once
    /// (a file named by several contracts is compiled once and shared).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the entry: no schema given, or a file
    /// that cannot be read or is not a valid JSON Schema.
    pub fn contracts(&self) -> Result<Contracts, ConfigError> {
        let mut compiled: HashMap<(PathBuf, Option<String>), Arc<Schema>> = HashMap::new();
        let mut parts = Vec::with_capacity(self.contracts.len());
        let registry = self.registry.settings();
        if let Some(timeout) = self.registry.timeout_ms
            && !(1..=MAX_REGISTRY_TIMEOUT_MS).contains(&timeout)
        {
            return Err(invalid(
                "registry.timeout_ms",
                format!("must be between 1 and {MAX_REGISTRY_TIMEOUT_MS} (milliseconds)"),
            ));
        }
        if let Some(settings) = &registry {
            // The client's own checks of the URL and TLS, now, naming the key.
            RegistryClient::new(settings).map_err(|e| invalid("registry.url", e.to_string()))?;
        }
        for (i, contract) in self.contracts.iter().enumerate() {
            let field = format!("contracts[{i}].schema");
            let from_registry = contract.subject.is_some() || contract.subject_strategy.is_some();
            if from_registry {
                let kept = self.registry_contract(i, contract)?;
                parts.push((
                    contract.aggregatetype.clone(),
                    contract.event_type.clone(),
                    Err(kept),
                ));
                continue;
            }
            for key in ["record", "version", "framing"] {
                let set = match key {
                    "record" => contract.record.is_some(),
                    "version" => contract.version.is_some(),
                    _ => contract.framing.is_some(),
                };
                if set {
                    return Err(invalid(
                        format!("contracts[{i}].{key}"),
                        "belongs to a registry contract (subject or subject_strategy)",
                    ));
                }
            }
            if contract.schema.trim().is_empty() {
                return Err(ConfigError::Invalid {
                    field,
                    constraint: "must name a JSON Schema file (a relative path is taken from \
                                 the config file's directory), or set subject to use a schema \
                                 of the [registry]"
                        .to_owned(),
                });
            }
            for (glob, name) in [
                (&contract.aggregatetype, "aggregatetype"),
                (&contract.event_type, "type"),
            ] {
                if glob.as_deref().is_some_and(str::is_empty) {
                    return Err(ConfigError::Invalid {
                        field: format!("contracts[{i}].{name}"),
                        constraint: "must not be empty: leave the key out to match every value"
                            .to_owned(),
                    });
                }
            }
            let path = contract.schema_path(self.config_dir.as_deref());
            let key = (path.clone(), contract.dataschema.clone());
            let schema = match compiled.get(&key) {
                Some(schema) => Arc::clone(schema),
                None => {
                    let schema =
                        Schema::load(&path, &contract.schema, contract.dataschema.as_deref())
                            .map_err(|e| ConfigError::Invalid {
                                field,
                                constraint: e.to_string(),
                            })?;
                    let schema = Arc::new(schema);
                    compiled.insert(key, Arc::clone(&schema));
                    schema
                }
            };
            parts.push((
                contract.aggregatetype.clone(),
                contract.event_type.clone(),
                Ok(schema),
            ));
        }
        Ok(Contracts::with_registry(parts, registry))
    }

    /// Entry `i`, a registry contract: its subject known now, whatever
    /// the rows (the relay fetches each subject before the first event).
    fn registry_contract(
        &self,
        i: usize,
        contract: &ContractConfig,
    ) -> Result<RegistryContract, ConfigError> {
        let at = |key: &str| format!("contracts[{i}].{key}");
        if self.registry.url.is_empty() {
            return Err(invalid(
                "registry.url",
                format!(
                    "required: contracts[{i}] names a registry subject; set the schema \
                     registry's API root (Apicurio: http://host:8080/apis/ccompat/v7)"
                ),
            ));
        }
        if !contract.schema.is_empty() {
            return Err(invalid(
                at("schema"),
                "a contract takes its schema from a file or from the registry, not both",
            ));
        }
        if self.cloudevents.mode == ContentMode::Structured {
            return Err(invalid(
                at("subject"),
                "registry contracts send the record value in the registry's wire format \
                 (Avro, Protobuf, or framed JSON), which cloudevents.mode = \"structured\" cannot \
                 carry: use binary mode",
            ));
        }
        let topic = || -> Result<String, ConfigError> {
            let literal = |glob: &Option<String>| {
                glob.as_deref()
                    .filter(|g| !g.contains(['*', '?']))
                    .map(str::to_owned)
            };
            let aggregate_type = literal(&contract.aggregatetype);
            let uses_type = self.kafka.topic.contains("{type}");
            let event_type = literal(&contract.event_type);
            match (aggregate_type, uses_type, event_type) {
                (Some(a), false, _) => render_topic(&self.kafka.topic, &a, ""),
                (Some(a), true, Some(t)) => render_topic(&self.kafka.topic, &a, &t),
                _ => {
                    return Err(invalid(
                        at("subject_strategy"),
                        "a topic strategy needs the contract's topic when the relay starts: \
                         give aggregatetype (and type, if kafka.topic uses {type}) without \
                         wildcards, or name the subject",
                    ));
                }
            }
            .map_err(|e| invalid(at("aggregatetype"), e.to_string()))
        };
        let record = || {
            contract
                .record
                .clone()
                .filter(|r| !r.is_empty())
                .ok_or_else(|| {
                    invalid(
                        at("record"),
                        "required by this subject_strategy: the record's full name",
                    )
                })
        };
        let subject = match (&contract.subject, contract.subject_strategy) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    at("subject_strategy"),
                    "name the subject, or give a strategy, not both",
                ));
            }
            (Some(subject), None) if subject.is_empty() => {
                return Err(invalid(at("subject"), "must not be empty"));
            }
            (Some(subject), None) => subject.clone(),
            (None, Some(SubjectStrategy::Topic)) => subject::topic_name(&topic()?),
            (None, Some(SubjectStrategy::Record)) => record()?,
            (None, Some(SubjectStrategy::TopicRecord)) => {
                subject::topic_record_name(&topic()?, &record()?)
            }
            (None, None) => unreachable!("a registry contract has a subject or a strategy"),
        };
        if contract.version == Some(0) {
            return Err(invalid(at("version"), "versions start at 1"));
        }
        Ok(RegistryContract {
            subject,
            version: contract.version,
            frame: contract.framing.unwrap_or_default() == Framing::Confluent,
            dataschema: contract.dataschema.clone(),
            record: contract.record.clone().filter(|r| !r.is_empty()),
        })
    }
}

fn invalid(field: impl Into<String>, constraint: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        constraint: constraint.into(),
    }
}

#[cfg(test)]
mod tests;
