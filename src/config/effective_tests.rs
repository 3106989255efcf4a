//! Tests of the effective configuration: `check-config`'s TOML and the
//! start-up report.

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::*;

const BASE: &str = r#"
[postgres]
url = "postgres://relay@127.0.0.1:5432/app"
slot = "orders_slot"
publication = "outbox_pub"

[kafka]
brokers = "127.0.0.1:9092"

[cloudevents]
source = "/orders-service"
"#;

/// Configs without secrets that use each optional feature.
const FEATURES: [&str; 5] = [
    "",
    "[kafka]\ndelivery = \"exactly-once\"\ntransaction_max_ms = 250",
    "[kafka]\ndelivery = \"exactly-once\"\ntransactional_id = \"orders-relay\"\n\
     transaction_timeout_ms = 120000",
    "[[routes]]\naggregatetype = \"payment*\"\nsink = \"billing\"\n\
     [[routes]]\ntype = \"audit.*\"\nsink = \"audit\"\n\
     [sinks.billing]\nurl = \"https://billing.example/hooks\"\nretry_schedule_secs = [5, 60]\n\
     [sinks.audit]\nurl = \"http://127.0.0.1:9/x\"\ntimeout_ms = 500",
    "[postgres]\nshards = 4\nshard = 3\nsource = \"both\"\nmessage_prefix = \"orders\"\n\
     [postgres.header_columns]\ntenant = \"x-tenant\"\n\
     [postgres.columns]\nsource = \"origin\"\ntimestamp = \"\"\n\
     [kafka.properties]\n\"compression.type\" = \"zstd\"\n\"batch.size\" = 65536\n\
     [relay]\nmetrics_addr = \"localhost:9187\"\nstandby_lock = false\n\
     [tracing]\notlp_endpoint = \"http://collector:4318\"",
];

/// `BASE` with `extra` merged in (its tables as extra files would be).
fn load(extra: &str, env: &[(&str, &str)]) -> Config {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let figment = Config::figment_from_str(BASE, Vec::new())
        .merge(<figment::providers::Toml as figment::providers::Format>::string(extra))
        .merge(Config::figment_from_str("", env));
    Config::from_figment(&figment).unwrap_or_else(|e| panic!("{extra}: {e}"))
}

/// What the relay runs with, compared as text: the settings types have no
/// `PartialEq`, and their `Debug` shows every field.
fn settings(config: &Config) -> String {
    format!(
        "{:?} {:?}",
        config.relay_settings().unwrap(),
        config.observability()
    )
}

fn reload(toml: &str, env: &[(&str, &str)]) -> Config {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::from_figment(&Config::figment_from_str(toml, env))
        .unwrap_or_else(|e| panic!("the printed config does not load: {e}\n{toml}"))
}

#[test]
fn the_printed_toml_loads_back_into_the_same_settings() {
    for extra in FEATURES {
        let config = load(extra, &[]);
        let printed = config.effective_toml();
        let again = reload(&printed, &[]);
        assert_eq!(settings(&again), settings(&config), "{printed}");
        assert_eq!(again.effective_toml(), printed, "a fixed point");
        // Filling in the defaults is all that changes.
        let mut expected = config.clone();
        expected.kafka.transactional_id = config
            .exactly_once()
            .map(|eo| eo.transactions.transactional_id)
            .unwrap_or_default();
        if config.exactly_once().is_some() {
            expected.kafka.transaction_timeout_ms =
                config.kafka.transaction_timeout().as_millis() as u64;
        }
        if config.tracing.otlp_endpoint.is_some() {
            expected.tracing.service_name = config.service_name().to_owned();
        }
        assert_eq!(again, expected, "{printed}");
    }
}

#[test]
fn secrets_print_as_stars_and_given_again_load_the_same_settings() {
    let secrets = [
        (
            "OUTBOX_RELAY__POSTGRES__URL",
            "postgres://relay:Pw-s3cret@db:5432/app",
        ),
        (
            "OUTBOX_RELAY__KAFKA__PROPERTIES__SASL_PASSWORD",
            "Kafka-s3cret",
        ),
        ("OUTBOX_RELAY__SINKS__BILLING__SECRET", "Hook-s3cret"),
        ("OUTBOX_RELAY__SINKS__BILLING__BEARER_TOKEN", "Token-s3cret"),
    ];
    let config = load(FEATURES[3], &secrets);
    let printed = config.effective_toml();
    assert!(!printed.contains("s3cret"), "{printed}");
    for shown in [
        "url = \"postgres://relay:***@db:5432/app\"",
        "\"sasl.password\" = \"***\"",
        "secret = \"***\"",
        "bearer_token = \"***\"",
    ] {
        assert!(printed.contains(shown), "{shown} in {printed}");
    }
    let again = reload(&printed, &secrets);
    assert_eq!(settings(&again), settings(&config));
    assert_eq!(again, config);
}

fn keys(config: &Config) -> Vec<String> {
    config
        .effective_keys()
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

fn value(config: &Config, key: &str) -> Option<toml::Value> {
    config
        .effective_keys()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

#[test]
fn at_least_once_shows_no_transaction_keys_and_exactly_once_its_real_defaults() {
    let config = load("", &[]);
    let shown = keys(&config);
    for absent in [
        "kafka.transactional_id",
        "kafka.transaction_max_events",
        "kafka.transaction_max_bytes",
        "kafka.transaction_max_ms",
        "kafka.transaction_timeout_ms",
    ] {
        assert!(!shown.iter().any(|k| k == absent), "{absent}: {shown:?}");
    }
    assert_eq!(
        value(&config, "kafka.delivery"),
        Some("at-least-once".into())
    );
    // The checkpoint topic is reserved in either mode.
    assert!(value(&config, "kafka.checkpoint_topic").is_some());

    let config = load(FEATURES[1], &[]);
    assert_eq!(
        value(&config, "kafka.transactional_id"),
        Some("outbox-relay.orders_slot".into())
    );
    assert_eq!(
        value(&config, "kafka.transaction_timeout_ms"),
        Some(60_000.into())
    );
    assert_eq!(value(&config, "kafka.transaction_max_ms"), Some(250.into()));
    let config = load(FEATURES[2], &[]);
    assert_eq!(
        value(&config, "kafka.transactional_id"),
        Some("orders-relay".into())
    );
    assert_eq!(
        value(&config, "kafka.transaction_timeout_ms"),
        Some(120_000.into())
    );
}

#[test]
fn only_the_features_in_use_show_their_keys() {
    let plain = keys(&load("", &[]));
    for prefix in [
        "tracing.",
        "routes",
        "sinks.",
        "postgres.delivery_table",
        "postgres.shard",
        "postgres.header_columns",
        "kafka.properties",
        "relay.metrics_addr",
        "postgres.columns.source",
    ] {
        assert!(
            !plain.iter().any(|k| k.starts_with(prefix)),
            "{prefix}: {plain:?}"
        );
    }
    assert!(plain.contains(&"relay.lock_lease_ms".to_owned()));
    assert!(plain.len() >= 30, "every key in use: {plain:?}");

    let config = load(FEATURES[4], &[]);
    for (key, expected) in [
        ("postgres.shards", toml::Value::from(4)),
        ("postgres.shard", 3.into()),
        ("postgres.message_prefix", "orders".into()),
        ("postgres.header_columns.tenant", "x-tenant".into()),
        ("postgres.columns.source", "origin".into()),
        ("postgres.columns.timestamp", "".into()),
        ("kafka.properties.batch.size", "65536".into()),
        ("relay.metrics_addr", "localhost:9187".into()),
        ("tracing.otlp_endpoint", "http://collector:4318".into()),
        ("tracing.service_name", "outbox-relay".into()),
    ] {
        assert_eq!(value(&config, key), Some(expected), "{key}");
    }
    assert!(!keys(&config).contains(&"relay.lock_lease_ms".to_owned()));

    let config = load(FEATURES[3], &[]);
    for (key, expected) in [
        ("routes[0].aggregatetype", toml::Value::from("payment*")),
        ("routes[1].type", "audit.*".into()),
        ("sinks.billing.url", "https://billing.example/hooks".into()),
        ("sinks.audit.timeout_ms", 500.into()),
        ("sinks.audit.inline_attempts", 3.into()),
        ("postgres.delivery_table", "outbox_delivery".into()),
    ] {
        assert_eq!(value(&config, key), Some(expected), "{key}");
    }
    // Sinks without routes still run their retry worker over the delivery
    // table: they stay; routes do not show.
    let sinks_only = keys(&load("[sinks.b]\nurl = \"https://b.example/\"", &[]));
    assert!(
        sinks_only.contains(&"sinks.b.url".to_owned()),
        "{sinks_only:?}"
    );
    assert!(sinks_only.contains(&"postgres.delivery_table".to_owned()));
    assert!(!sinks_only.iter().any(|k| k.starts_with("routes")));
}

#[test]
fn each_line_of_the_text_report_is_toml_of_one_table() {
    let config = load(
        FEATURES[3],
        &[("OUTBOX_RELAY__TRACING__OTLP_ENDPOINT", "http://c:4318")],
    );
    let lines = config.effective_lines();
    let starts: Vec<&str> = lines
        .iter()
        .map(|l| l.split(" = ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        starts,
        [
            "postgres",
            "postgres.columns",
            "kafka",
            "cloudevents",
            "relay",
            "tracing",
            "routes",
            "sinks.audit",
            "sinks.billing",
        ]
    );
    // Together the lines hold every key with its value.
    let mut from_lines = Vec::new();
    for line in &lines {
        assert!(!line.contains('\n'), "{line}");
        let table: toml::Table = toml::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        flatten("", toml::Value::Table(table), &mut from_lines);
    }
    from_lines.sort_by(|a, b| a.0.cmp(&b.0));
    let mut keys = config.effective_keys();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(from_lines, keys);
    let quoted = load("[kafka.properties]\n\"compression.type\" = \"zstd\"", &[]);
    assert!(
        quoted
            .effective_lines()
            .contains(&"kafka.properties = { \"compression.type\" = \"zstd\" }".to_owned()),
        "{:?}",
        quoted.effective_lines()
    );
}

fn flatten(prefix: &str, value: toml::Value, out: &mut Vec<(String, toml::Value)>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let p = if prefix.is_empty() {
                    k
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, v, out);
            }
        }
        toml::Value::Array(items) if items.iter().all(toml::Value::is_table) => {
            for (i, v) in items.into_iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        leaf => out.push((prefix.to_owned(), leaf)),
    }
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `log_effective` writes through a subscriber of the config's format.
fn logged(config: &Config) -> String {
    let out = Captured::default();
    let writer = out.clone();
    let builder = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone());
    match config.relay.log_format {
        LogFormat::Json => {
            tracing::subscriber::with_default(builder.json().finish(), || config.log_effective())
        }
        LogFormat::Text => {
            tracing::subscriber::with_default(builder.finish(), || config.log_effective())
        }
    }
    let bytes = out.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

/// The start-up report is the behaviour here: what the log shows.
#[test]
fn json_logs_report_one_record_a_key_with_typed_values() {
    let config = load(
        "[relay]\nlog_format = \"json\"\n[kafka.properties]\n\"sasl.password\" = \"Pw-s3cret\"\n\
         \"batch.size\" = \"65536\"",
        &[],
    );
    let log = logged(&config);
    assert!(!log.contains("s3cret"), "{log}");
    let records: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(records.len(), config.effective_keys().len());
    let field = |key: &str| {
        records
            .iter()
            .find(|r| r["fields"]["key"] == key)
            .map(|r| r["fields"]["value"].clone())
            .unwrap_or_else(|| panic!("no record of {key}:\n{log}"))
    };
    assert_eq!(field("kafka.linger_ms"), serde_json::json!(5));
    assert_eq!(field("relay.standby_lock"), serde_json::json!(true));
    assert_eq!(field("postgres.slot"), serde_json::json!("orders_slot"));
    assert_eq!(
        field("kafka.properties.sasl.password"),
        serde_json::json!("***")
    );
    // No number in a string, as everywhere in JSON logs.
    assert_eq!(
        field("kafka.properties.batch.size"),
        serde_json::json!(65536)
    );
    assert!(
        records
            .iter()
            .all(|r| r["fields"]["message"] == "config" && r["level"] == "INFO"),
        "{log}"
    );
}

#[test]
fn text_logs_report_one_line_a_table() {
    let config = load(FEATURES[1], &[]);
    let log = logged(&config);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), config.effective_lines().len(), "{log}");
    let kafka = lines
        .iter()
        .find(|l| l.contains(" config kafka = { "))
        .unwrap_or_else(|| panic!("no kafka line:\n{log}"));
    assert!(kafka.contains(" INFO "), "{kafka}");
    assert!(
        kafka.contains("transactional_id = \"outbox-relay.orders_slot\""),
        "{kafka}"
    );
}
