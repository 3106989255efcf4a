//! The configuration sources (TOML text, `OUTBOX_RELAY__*` variables) as
//! figment providers, and the translation of figment's errors into
//! [`ParseProblem`]s that never quote a value.
//!
//! The environment provider is ours rather than figment's `Env` because
//! figment's reads the process environment, and the library must take the
//! variables it is given; it also keeps the dots of Kafka property names.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use figment::error::Kind;
use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider, Source};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::env_names::{self, ENV_PREFIX, ENV_SEPARATOR, env_var_name, kind_of};
use super::{Config, ConfigError, ParseProblem};

/// File (or in-memory TOML) first, then the environment over it.
pub(super) fn figment(
    toml: Option<(String, Option<PathBuf>)>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Figment {
    let mut figment = Figment::new();
    if let Some((text, path)) = toml {
        figment = figment.merge(TomlText { text, path });
    }
    figment.merge(EnvOverrides::new(env))
}

/// Extracts the config, translating errors.
pub(super) fn extract(figment: &Figment) -> Result<Config, ConfigError> {
    // Lossy: a variable's text `"10"` may fill a number and `"true"` a bool.
    figment
        .extract_lossy::<Config>()
        .map_err(|e| ConfigError::Parse(e.into_iter().map(problem).collect()))
}

/// TOML text with the file it came from as its origin.
struct TomlText {
    text: String,
    path: Option<PathBuf>,
}

impl Provider for TomlText {
    fn metadata(&self) -> Metadata {
        let md = Metadata::named("config file");
        match &self.path {
            Some(path) => md.source(Source::File(path.clone())),
            None => md,
        }
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Toml::string(&self.text).data()
    }
}

/// `OUTBOX_RELAY__SECTION__KEY=value` pairs, keys lower-cased. Under
/// `kafka.properties` a `_` stands for `.` (`..._COMPRESSION_TYPE` →
/// `compression.type`): variable names cannot hold dots in most shells, and
/// librdkafka property names use none of `_` outside C-only callbacks.
///
/// A variable that sets no key is refused, naming the variable it likely
/// meant (`env_names.rs`): one of `OUTBOX_RELAY__` whose path is no key,
/// and one that starts `OUTBOX_RELAY_` and a section name with a single
/// `_` (`OUTBOX_RELAY_POSTGRES_SLOT`), which would otherwise be ignored.
struct EnvOverrides {
    vars: Vec<(String, String)>,
    /// Why each variable that sets no key is refused.
    refused: Vec<String>,
}

impl EnvOverrides {
    fn new(env: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut vars = Vec::new();
        let mut refused = Vec::new();
        for (name, value) in env {
            if name.len() > ENV_PREFIX.len()
                && name[..ENV_PREFIX.len()].eq_ignore_ascii_case(ENV_PREFIX)
            {
                if let Ok(path) = env_key_path(&name)
                    && !env_names::is_key(&path)
                {
                    refused.push(env_names::not_a_key(&name, &path));
                    continue;
                }
                vars.push((name, value));
            } else if env_names::looks_like_a_key(&name) {
                refused.push(env_names::single_separator(&name));
            }
        }
        refused.sort();
        EnvOverrides { vars, refused }
    }
}

impl Provider for EnvOverrides {
    fn metadata(&self) -> Metadata {
        Metadata::named("environment variable(s)").source(Source::Custom(format!("{ENV_PREFIX}*")))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        if !self.refused.is_empty() {
            return Err(figment::Error::from(self.refused.join("; ")));
        }
        let mut root = Dict::new();
        for (name, value) in &self.vars {
            let path = env_key_path(name).map_err(figment::Error::from)?;
            insert(&mut root, &path, Value::from(value.clone())).map_err(|existing| {
                figment::Error::from(format!(
                    "environment variable {name} sets `{}` inside `{existing}`, which is not a table",
                    path.join(".")
                ))
            })?;
        }
        Ok(Profile::Default.collect(root))
    }
}

/// The key path a variable name stands for.
pub(super) fn env_key_path(name: &str) -> Result<Vec<String>, String> {
    let rest = &name[ENV_PREFIX.len()..];
    let mut path: Vec<String> = rest
        .split(ENV_SEPARATOR)
        .map(str::to_ascii_lowercase)
        .collect();
    if path.iter().any(String::is_empty) {
        return Err(format!(
            "environment variable {name}: empty key between `{ENV_SEPARATOR}` separators"
        ));
    }
    if path.len() == 3 && path[0] == "kafka" && path[1] == "properties" {
        path[2] = path[2].replace('_', ".");
    }
    Ok(path)
}

/// Inserts `value` at `path`, creating tables; `Err` names the key that
/// already holds a non-table value.
fn insert(dict: &mut Dict, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut current = dict;
    for (i, key) in parents.iter().enumerate() {
        let entry = current
            .entry(key.clone())
            .or_insert_with(|| Value::from(Dict::new()));
        current = match entry {
            Value::Dict(_, inner) => inner,
            _ => return Err(path[..=i].join(".")),
        };
    }
    current.insert(last.clone(), value);
    Ok(())
}

/// One figment error as a [`ParseProblem`], without quoting any value: a
/// value in the wrong place may be a password.
fn problem(error: figment::Error) -> ParseProblem {
    let field = error.path.join(".");
    let message = match &error.kind {
        Kind::UnknownField(name, expected) => {
            format!("unknown key `{name}`; expected one of {}", list(expected))
        }
        Kind::UnknownVariant(_, expected) => {
            format!("unknown value; expected one of {}", list(expected))
        }
        Kind::InvalidType(actual, expected) | Kind::InvalidValue(actual, expected)
            if env_names::scalar(expected).is_some() =>
        {
            env_names::not_a_scalar(&error.path, actual, expected, from_env(&error))
        }
        Kind::InvalidType(actual, expected) => {
            format!("expected {expected}, found {}", kind_of(actual))
        }
        Kind::InvalidValue(actual, expected) => {
            format!("invalid value ({}): expected {expected}", kind_of(actual))
        }
        Kind::Message(message) => scrub_source_lines(message),
        Kind::DuplicateField(name) => format!("duplicate key `{name}`"),
        Kind::MissingField(name) => format!("missing key `{name}`"),
        Kind::InvalidLength(len, expected) => format!("length {len}, expected {expected}"),
        other @ (Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_)) => other.to_string(),
        Kind::Unsupported(actual) => format!("unsupported {}", kind_of(actual)),
        Kind::UnsupportedKey(actual, _) => format!("unsupported key type {}", kind_of(actual)),
    };
    let origin = error.metadata.as_ref().and_then(|md| match &md.source {
        Some(Source::File(path)) => Some(format!("{} {}", md.name, path.display())),
        Some(Source::Custom(_)) if !error.path.is_empty() => Some(format!(
            "environment variable {}",
            env_var_name(&error.path)
        )),
        // The provider's own refusals name their variables.
        Some(Source::Custom(_)) => None,
        _ => Some(md.name.to_string()),
    });
    ParseProblem {
        field,
        message,
        origin,
    }
}

/// Whether the value in error came from a variable.
fn from_env(error: &figment::Error) -> bool {
    error
        .metadata
        .as_ref()
        .is_some_and(|md| matches!(md.source, Some(Source::Custom(_))))
}

fn list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(", ")
}

/// Drops the source excerpt TOML parse errors include (`2 | url = ...`):
/// the line may hold a password. Keeps the position and the explanation.
fn scrub_source_lines(message: &str) -> String {
    let kept: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| {
            !line.is_empty()
                && !line.starts_with('|')
                && !line
                    .split_once('|')
                    .is_some_and(|(gutter, _)| gutter.trim().chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    kept.join(": ")
}

/// Deserializes `[kafka.properties]`: librdkafka takes every value as text,
/// so numbers and booleans are accepted and turned into their text.
pub(super) fn deserialize_properties<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = BTreeMap::<String, PropertyText>::deserialize(deserializer)?;
    Ok(raw.into_iter().map(|(k, v)| (k, v.0)).collect())
}

struct PropertyText(String);

impl<'de> Deserialize<'de> for PropertyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PropertyTextVisitor)
    }
}

struct PropertyTextVisitor;

impl<'de> Visitor<'de> for PropertyTextVisitor {
    type Value = PropertyText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a string, number or boolean (quote dotted property names: \"compression.type\" = \"zstd\")",
        )
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<PropertyText, E> {
        Ok(PropertyText(v.to_owned()))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<PropertyText, E> {
        Ok(PropertyText(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<PropertyText, E> {
        Ok(PropertyText(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<PropertyText, E> {
        Ok(PropertyText(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<PropertyText, E> {
        Ok(PropertyText(v.to_string()))
    }
}
