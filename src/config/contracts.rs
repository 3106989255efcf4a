//! `[[contracts]]`: which JSON Schema each event type's payload must
//! satisfy. Validated and compiled here, once; the relay and the CLI take
//! the compiled [`Contracts`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::contracts::{Contracts, Schema};

use super::{Config, ConfigError};

/// One `[[contracts]]` entry. A glob left out matches everything.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ContractConfig {
    pub aggregatetype: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// A JSON Schema file; a relative path is taken from the config file's
    /// directory.
    pub schema: String,
    /// The CloudEvents `dataschema` of events checked against it; default:
    /// the schema's `$id`, else a URN of the file's name and digest.
    pub dataschema: Option<String>,
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
        for (i, contract) in self.contracts.iter().enumerate() {
            let field = format!("contracts[{i}].schema");
            if contract.schema.trim().is_empty() {
                return Err(ConfigError::Invalid {
                    field,
                    constraint: "must name a JSON Schema file (a relative path is taken from \
                                 the config file's directory)"
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
                schema,
            ));
        }
        Ok(Contracts::from_parts(parts))
    }
}

#[cfg(test)]
mod tests;
