//! Which keys there are, for the messages of `providers.rs`: whether a
//! variable sets a key, the variable a mistyped one likely meant, and what
//! to write where a number or boolean was expected.
//!
//! The keys are those of [`Config::default`] serialized, so a key added to
//! the config is known here without a list to keep up to date. Tables whose
//! keys are free (`postgres.header_columns`, `kafka.properties`) take any
//! one more part; `sinks.NAME` takes the keys of [`SinkConfig`].

use figment::error::Actual;

use super::{Config, SinkConfig};

/// Prefix of the environment variables that override config keys.
pub const ENV_PREFIX: &str = "OUTBOX_RELAY__";
/// Separator between key path segments in a variable name.
pub(super) const ENV_SEPARATOR: &str = "__";

/// Tables whose keys are the user's.
const FREE_TABLES: [&str; 2] = ["postgres.header_columns", "kafka.properties"];
/// `OUTBOX_RELAY` without the separator.
const STEM: &str = "OUTBOX_RELAY";

/// Every fixed key, dotted, and the free tables themselves.
fn config_keys() -> Vec<String> {
    Config::default()
        .flattened()
        .into_iter()
        .map(|(key, _)| key)
        .collect()
}

fn sink_keys() -> Vec<String> {
    match serde_json::to_value(SinkConfig::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Lower-case letters and digits only: how a key and a variable name
/// compare whatever their separators.
fn canon(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Whether `path` (from an `OUTBOX_RELAY__` variable) is a key.
pub(super) fn is_key(path: &[String]) -> bool {
    match path {
        [table, name, _] if FREE_TABLES.contains(&format!("{table}.{name}").as_str()) => true,
        [sinks, _, key] if sinks == "sinks" => sink_keys().contains(key),
        _ => config_keys().contains(&path.join(".")),
    }
}

/// An `OUTBOX_RELAY_` variable (one `_`) that goes on with a section name:
/// a key's variable with the wrong separator. Other such variables
/// (`OUTBOX_RELAY_CONFIG`, `OUTBOX_RELAY_ADMIN_URL`, those of other tools)
/// are not the config's.
pub(super) fn looks_like_a_key(name: &str) -> bool {
    let single = STEM.len() + 1;
    if name.len() <= single || !name[..single].eq_ignore_ascii_case(&format!("{STEM}_")) {
        return false;
    }
    let rest = canon(&name[single..]);
    let keys = config_keys();
    keys.iter()
        .filter_map(|key| key.split('.').next())
        .any(|section| rest.starts_with(section))
}

/// Why an `OUTBOX_RELAY_SECTION_KEY` variable is refused.
pub(super) fn single_separator(name: &str) -> String {
    format!(
        "environment variable {name} sets no configuration key: a key's variable is \
         {ENV_PREFIX} and the key's parts joined by `__`{}",
        did_you_mean(name)
    )
}

/// Why an `OUTBOX_RELAY__` variable whose path is no key is refused.
pub(super) fn not_a_key(name: &str, path: &[String]) -> String {
    format!(
        "environment variable {name} sets `{}`, which is not a configuration key{}",
        path.join("."),
        did_you_mean(name)
    )
}

fn did_you_mean(name: &str) -> String {
    match suggest(name) {
        Some(path) => format!(
            "; did you mean {} (`{}`)?",
            env_var_name(&path),
            path.join(".")
        ),
        None => " (docs/configuration.md lists every key)".to_owned(),
    }
}

/// The key a variable name likely meant, as a path.
fn suggest(name: &str) -> Option<Vec<String>> {
    let rest = name.get(STEM.len()..)?.trim_start_matches('_');
    let wanted = canon(rest);
    let keys = config_keys();
    if let Some(key) = keys.iter().find(|k| canon(k) == wanted) {
        return Some(key.split('.').map(str::to_owned).collect());
    }
    for table in FREE_TABLES {
        let stem = canon(table);
        if wanted.len() > stem.len() && wanted.starts_with(&stem) {
            let mut free = after_alnum(rest, stem.len()).to_ascii_lowercase();
            if table == "kafka.properties" {
                free = free.replace('_', ".");
            }
            let mut path: Vec<String> = table.split('.').map(str::to_owned).collect();
            path.push(free);
            return Some(path);
        }
    }
    if let Some(path) = suggest_sink(rest) {
        return Some(path);
    }
    // A typo: the nearest key, if near.
    keys.iter()
        .map(|k| (crate::suggest::edit_distance(&canon(k), &wanted), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.split('.').map(str::to_owned).collect())
}

/// `SINKS_BILLING_SECRET` → `sinks.billing.secret`.
fn suggest_sink(rest: &str) -> Option<Vec<String>> {
    if !canon(rest).starts_with("sinks") {
        return None;
    }
    let after = after_alnum(rest, "sinks".len());
    let wanted = canon(after);
    let mut keys = sink_keys();
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    let key = keys.into_iter().find(|k| {
        let k = canon(k);
        wanted.len() > k.len() && wanted.ends_with(&k)
    })?;
    let name = before_alnum(after, canon(&key).len())
        .trim_end_matches('_')
        .to_ascii_lowercase();
    Some(vec!["sinks".to_owned(), name, key])
}

/// What follows the first `n` letters and digits of `s`, separators
/// after them dropped.
fn after_alnum(s: &str, n: usize) -> &str {
    let mut seen = 0;
    for (i, c) in s.char_indices() {
        if seen == n {
            return s[i..].trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
        }
        if c.is_ascii_alphanumeric() {
            seen += 1;
        }
    }
    ""
}

/// `s` without its last `n` letters and digits.
fn before_alnum(s: &str, n: usize) -> &str {
    let mut seen = 0;
    for (i, c) in s.char_indices().rev() {
        if c.is_ascii_alphanumeric() {
            seen += 1;
        }
        if seen == n {
            return &s[..i];
        }
    }
    ""
}

/// The variable that sets `path` (for messages).
pub(super) fn env_var_name(path: &[String]) -> String {
    let upper: Vec<String> = path
        .iter()
        .map(|s| s.to_ascii_uppercase().replace('.', "_"))
        .collect();
    format!("{ENV_PREFIX}{}", upper.join(ENV_SEPARATOR))
}

/// The kind of a value, never the value itself.
pub(super) fn kind_of(actual: &Actual) -> &'static str {
    match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Unsigned(_) | Actual::Signed(_) => "an integer",
        Actual::Float(_) => "a float",
        Actual::Char(_) | Actual::Str(_) => "a string",
        Actual::Bytes(_) => "bytes",
        Actual::Seq => "an array",
        Actual::Map => "a table",
        _ => "a value of another type",
    }
}

/// What a number or boolean key takes, by serde's name of the type;
/// `None` for other types.
pub(super) fn scalar(expected: &str) -> Option<&'static str> {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => Some("a whole number (0 or more)"),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => Some("a whole number"),
        "a boolean" => Some("true or false"),
        _ => None,
    }
}

/// A number or boolean key given something else: what it takes and what
/// to write, with the key's default as the example. Never quotes the value.
pub(super) fn not_a_scalar(path: &[String], actual: &Actual, expected: &str, env: bool) -> String {
    let what = scalar(expected).unwrap_or("another value");
    let boolean = expected == "a boolean";
    let found = match actual {
        Actual::Str(_) if boolean => "text that is neither",
        Actual::Str(_) => "text that is not a number",
        Actual::Signed(n) if *n < 0 => "a negative number",
        Actual::Float(_) => "a number with a fraction",
        other => kind_of(other),
    };
    let (example, is_default) = match default_of(path) {
        Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
            (v.to_string(), true)
        }
        _ if boolean => ("true".to_owned(), false),
        _ => ("10".to_owned(), false),
    };
    let written = if env {
        format!("{}={example}", env_var_name(path))
    } else {
        format!("{} = {example}", path.last().map_or("", String::as_str))
    };
    let how = if boolean { "" } else { "digits, " };
    let default = if is_default { " (the default)" } else { "" };
    format!("expected {what}, found {found}; write {how}e.g. {written}{default}")
}

fn default_of(path: &[String]) -> Option<serde_json::Value> {
    if let [sinks, _, key] = path
        && sinks == "sinks"
    {
        return serde_json::to_value(SinkConfig::default())
            .ok()?
            .get(key)
            .cloned();
    }
    let key = path.join(".");
    Config::default()
        .flattened()
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(s: &str) -> Vec<String> {
        s.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn keys_fixed_free_and_of_sinks_are_known() {
        for key in [
            "postgres.slot",
            "relay.metrics_addr",
            "postgres.columns.source",
            "kafka.properties.sasl.password",
            "postgres.header_columns.tenant",
            "sinks.billing.secret",
            "routes",
        ] {
            let mut p = path(key);
            if key.starts_with("kafka.properties.") {
                p = vec!["kafka".into(), "properties".into(), "sasl.password".into()];
            }
            assert!(is_key(&p), "{key}");
        }
        for key in [
            "postgres_slot",
            "postgres.slott",
            "sinks.billing.secrett",
            "kafka",
        ] {
            assert!(!is_key(&path(key)), "{key}");
        }
    }

    #[test]
    fn a_mistyped_variable_names_the_one_it_meant() {
        for (name, meant) in [
            ("OUTBOX_RELAY_POSTGRES_SLOT", "postgres.slot"),
            ("OUTBOX_RELAY__POSTGRES_SLOT", "postgres.slot"),
            ("OUTBOX_RELAY_RELAY_METRICS_ADDR", "relay.metrics_addr"),
            ("OUTBOX_RELAY__POSTGRES__SLOTT", "postgres.slot"),
            (
                "OUTBOX_RELAY_KAFKA_TRANSACTION_MAX_MS",
                "kafka.transaction_max_ms",
            ),
            (
                "OUTBOX_RELAY_KAFKA_PROPERTIES_SASL_PASSWORD",
                "kafka.properties.sasl.password",
            ),
            (
                "OUTBOX_RELAY_POSTGRES_HEADER_COLUMNS_TENANT_ID",
                "postgres.header_columns.tenant_id",
            ),
            (
                "OUTBOX_RELAY_SINKS_BILLING_EU_SECRETS",
                "sinks.billing_eu.secrets",
            ),
            (
                "OUTBOX_RELAY_SINKS_BILLING_BEARER_TOKEN",
                "sinks.billing.bearer_token",
            ),
        ] {
            let suggested = suggest(name).map(|p| p.join("."));
            assert_eq!(suggested.as_deref(), Some(meant), "{name}");
        }
        assert_eq!(suggest("OUTBOX_RELAY_KAFKA_NOTHING_LIKE_A_KEY"), None);
    }

    #[test]
    fn only_variables_that_go_on_with_a_section_look_like_keys() {
        for name in [
            "OUTBOX_RELAY_POSTGRES_SLOT",
            "outbox_relay_kafka_brokers",
            "OUTBOX_RELAY_CLOUD_EVENTS_SOURCE",
            "OUTBOX_RELAY_SINKS_B_URL",
        ] {
            assert!(looks_like_a_key(name), "{name}");
        }
        for name in [
            "OUTBOX_RELAY_CONFIG",
            "OUTBOX_RELAY_ADMIN_URL",
            "OUTBOX_RELAY_SERVICES",
            "OUTBOX_RELAY_",
            "OUTBOX_RELAYPOSTGRES_SLOT",
        ] {
            assert!(!looks_like_a_key(name), "{name}");
        }
    }
}
