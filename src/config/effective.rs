//! The effective configuration: what the relay runs with, as TOML
//! (`check-config`) and as the start-up report in the log.
//!
//! It is the serialized config, so secrets are `***` (see `show.rs`), with
//! the defaults that are derived where the settings are built (`build.rs`)
//! taken from those settings, and without the keys of features not in use:
//! * `kafka.transactional_id` (`outbox-relay.<slot>` unless set) and
//!   `kafka.transaction_*` only with `kafka.delivery = "exactly-once"`,
//!   `transaction_timeout_ms` as derived;
//! * `[tracing]` only with an `otlp_endpoint`, `service_name` filled in;
//! * `[sinks.NAME]` and `postgres.delivery_table` only when a sink is
//!   configured, `[[routes]]` only when a route is, `[[contracts]]` only
//!   when a contract is;
//! * `postgres.shards` and `shard` only when sharded, `relay.lock_lease_ms`
//!   only with the standby lock;
//! * unset optional keys and empty tables left out.
//!
//! Invariant: the printed TOML, loaded as a config file (secrets given
//! again, e.g. by their environment variables), yields a config with the
//! same settings and prints the same TOML again. (A value set for a key
//! left out, which has no effect, is not carried over.)

use toml::{Table, Value};

use super::{Config, LogFormat};

/// The log target of the start-up report.
const LOG_TARGET: &str = "outbox_relay::config";

/// `kafka` keys of exactly-once delivery only.
const EXACTLY_ONCE_KEYS: [&str; 6] = [
    "transactional_id",
    "transaction_max_events",
    "transaction_max_bytes",
    "transaction_max_ms",
    "transaction_quiet_ms",
    "transaction_timeout_ms",
];

impl Config {
    /// The effective configuration as a TOML table, in the order the config
    /// declares its keys; see the module documentation.
    pub fn effective_table(&self) -> Table {
        // Plain data of bounded numbers: serializing cannot fail.
        let mut root = match Value::try_from(self) {
            Ok(Value::Table(table)) => table,
            _ => Table::new(),
        };
        let pg = &self.postgres;
        if let Some(postgres) = table_mut(&mut root, "postgres") {
            if pg.shards <= 1 {
                postgres.remove("shards");
                postgres.remove("shard");
            }
            if self.sinks.is_empty() {
                postgres.remove("delivery_table");
            }
            remove_if_empty(postgres, "header_columns");
        }
        if let Some(kafka) = table_mut(&mut root, "kafka") {
            remove_if_empty(kafka, "properties");
            match self.exactly_once() {
                Some(eo) => {
                    let t = &eo.transactions;
                    kafka.insert("transactional_id".into(), t.transactional_id.clone().into());
                    let ms = i64::try_from(t.transaction_timeout.as_millis()).unwrap_or(i64::MAX);
                    kafka.insert("transaction_timeout_ms".into(), ms.into());
                }
                None => {
                    for key in EXACTLY_ONCE_KEYS {
                        kafka.remove(key);
                    }
                }
            }
        }
        if let Some(relay) = table_mut(&mut root, "relay")
            && !self.relay.standby_lock
        {
            relay.remove("lock_lease_ms");
        }
        match self.otlp() {
            Ok(Some(otlp)) => {
                if let Some(tracing) = table_mut(&mut root, "tracing") {
                    tracing.insert("service_name".into(), otlp.service_name.into());
                }
            }
            _ => {
                root.remove("tracing");
            }
        }
        if self.contracts.is_empty() {
            root.remove("contracts");
        }
        if self.registry.url.is_empty() {
            root.remove("registry");
        }
        if self.routes.is_empty() {
            root.remove("routes");
        }
        if self.sinks.is_empty() {
            root.remove("sinks");
        } else if let Some(Value::Table(sinks)) = root.get_mut("sinks") {
            for (_, sink) in sinks.iter_mut() {
                if let Value::Table(sink) = sink {
                    remove_if_empty(sink, "secrets");
                }
            }
        }
        root
    }

    /// The effective configuration as a TOML document, secrets as `***`.
    pub fn effective_toml(&self) -> String {
        let body = toml::to_string(&self.effective_table()).unwrap_or_default();
        format!(
            "# outbox-relay {}: the effective configuration. Defaults are filled in, keys of\n\
             # features not in use are left out, secrets are shown as ***.\n\n{body}",
            env!("CARGO_PKG_VERSION")
        )
    }

    /// The effective configuration one table a line, each line TOML
    /// (`kafka = { brokers = "...", ... }`; `[[routes]]` as one array),
    /// secrets as `***`: the start-up report of text logs.
    pub fn effective_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (key, value) in self.effective_table() {
            push_lines(&toml_key(&key), value, &mut lines);
        }
        lines
    }

    /// The effective configuration as `(dotted key, value)` leaves (arrays
    /// of tables indexed: `routes[0].sink`), secrets as `***`: the start-up
    /// report of JSON logs.
    pub fn effective_keys(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        flatten("", Value::Table(self.effective_table()), &mut out);
        out
    }

    /// Logs the effective configuration at INFO, message `config`: in text
    /// logs one line a table ([`Config::effective_lines`]), in JSON logs one
    /// record a key with the fields `key` and `value`, a number or boolean
    /// as such, text that is a number too ([`Config::effective_keys`]).
    pub fn log_effective(&self) {
        match self.relay.log_format {
            LogFormat::Text => {
                for line in self.effective_lines() {
                    tracing::info!(target: LOG_TARGET, "config {line}");
                }
            }
            LogFormat::Json => {
                for (key, value) in self.effective_keys() {
                    let key = key.as_str();
                    // JSON logs hold no number in a string: a Kafka
                    // property's value is text, but `"65536"` is a number.
                    let value = match value {
                        Value::String(s) => match (s.parse::<i64>(), s.parse::<f64>()) {
                            (Ok(i), _) => Value::Integer(i),
                            (_, Ok(f)) if f.is_finite() => Value::Float(f),
                            _ => Value::String(s),
                        },
                        other => other,
                    };
                    match value {
                        Value::String(s) => {
                            tracing::info!(target: LOG_TARGET, key, value = s.as_str(), "config")
                        }
                        Value::Integer(i) => {
                            tracing::info!(target: LOG_TARGET, key, value = i, "config")
                        }
                        Value::Float(f) => {
                            tracing::info!(target: LOG_TARGET, key, value = f, "config")
                        }
                        Value::Boolean(b) => {
                            tracing::info!(target: LOG_TARGET, key, value = b, "config")
                        }
                        other => tracing::info!(target: LOG_TARGET, key, value = %other, "config"),
                    }
                }
            }
        }
    }
}

fn table_mut<'a>(root: &'a mut Table, key: &str) -> Option<&'a mut Table> {
    match root.get_mut(key) {
        Some(Value::Table(table)) => Some(table),
        _ => None,
    }
}

fn remove_if_empty(table: &mut Table, key: &str) {
    let empty = match table.get(key) {
        Some(Value::Table(t)) => t.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    if empty {
        table.remove(key);
    }
}

/// A key as TOML writes it: bare when it can be, else quoted
/// (`"compression.type"`).
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        Value::String(key.to_owned()).to_string()
    }
}

/// `path = { scalars }` for a table, then a line per table inside it.
fn push_lines(path: &str, value: Value, lines: &mut Vec<String>) {
    let Value::Table(table) = value else {
        lines.push(format!("{path} = {value}"));
        return;
    };
    let (tables, scalars): (Vec<_>, Vec<_>) = table
        .into_iter()
        .partition(|(_, v)| matches!(v, Value::Table(_)));
    if !scalars.is_empty() {
        let inline: Table = scalars.into_iter().collect();
        lines.push(format!("{path} = {}", Value::Table(inline)));
    }
    for (key, inner) in tables {
        push_lines(&format!("{path}.{}", toml_key(&key)), inner, lines);
    }
}

fn flatten(prefix: &str, value: Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Table(table) => {
            for (key, inner) in table {
                let path = if prefix.is_empty() {
                    key
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, inner, out);
            }
        }
        Value::Array(items) if items.iter().all(|v| matches!(v, Value::Table(_))) => {
            for (i, item) in items.into_iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), item, out);
            }
        }
        leaf => out.push((prefix.to_owned(), leaf)),
    }
}
