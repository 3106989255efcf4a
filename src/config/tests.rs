//! Tests for loading, overriding, validating and redacting the config.

use super::*;

const CANARY: &str = "Canary-Secret-90210";

/// The smallest valid config (the other config test modules start from it).
pub(in crate::config) const MINIMAL: &str = r#"
[postgres]
url = "postgres://relay:pw@127.0.0.1:5432/app"
slot = "outbox_relay"
publication = "outbox_pub"

[kafka]
brokers = "127.0.0.1:9092"

[cloudevents]
source = "/orders-service"
"#;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn load_str(toml: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_figment(&Config::figment_from_str(toml, env(vars)))
}

fn minimal() -> Config {
    load_str(MINIMAL, &[]).unwrap()
}

fn invalid_field(result: Result<Config, ConfigError>) -> (String, String) {
    match result {
        Err(ConfigError::Invalid { field, constraint }) => (field, constraint),
        other => panic!("expected ConfigError::Invalid, got {other:?}"),
    }
}

#[test]
fn example_config_parses_and_validates() {
    let config = load_str(EXAMPLE_TOML, &[]).unwrap();
    assert_eq!(config.postgres.slot, "outbox_relay");
    assert_eq!(config.postgres.publication, "outbox_pub");
    assert_eq!(
        config.postgres.table_parts(),
        ("public".into(), "outbox".into())
    );
    assert_eq!(config.kafka.topic, "outbox.event.{aggregatetype}");
    assert_eq!(config.kafka.properties["compression.type"], "zstd");
    assert_eq!(config.cloudevents.mode, ContentMode::Binary);
    assert_eq!(
        config.relay.metrics_addr,
        Some("127.0.0.1:9187".parse().unwrap())
    );
    assert_eq!(config.relay.log_format, LogFormat::Text);
    assert_eq!(config.postgres.columns, OutboxColumns::default());
    assert_eq!(config.kafka.delivery, Delivery::AtLeastOnce);
    assert_eq!(config.kafka.checkpoint_topic, DEFAULT_CHECKPOINT_TOPIC);
    // The example shows the defaults it documents.
    let defaults = KafkaConfig::default();
    assert_eq!(
        (
            config.kafka.transaction_max_events,
            config.kafka.transaction_max_bytes,
            config.kafka.transaction_max_ms
        ),
        (
            defaults.transaction_max_events,
            defaults.transaction_max_bytes,
            defaults.transaction_max_ms
        )
    );
}

/// The keys relay.example.toml names, set or commented out (`# key = ...`),
/// as dotted paths, each with whether it is set; and the tables it names
/// (`[sinks.billing]`, `# [[routes]]`).
fn example_keys() -> (Vec<(String, bool)>, Vec<String>) {
    let mut table = String::new();
    let (mut keys, mut tables) = (Vec::new(), Vec::new());
    for line in EXAMPLE_TOML.lines() {
        let set = !line.trim_start().starts_with('#');
        let text = line.trim_start().trim_start_matches('#').trim_start();
        if let Some(header) = text.strip_prefix('[') {
            table = header
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or_default()
                .to_owned();
            tables.push(table.clone());
            continue;
        }
        let Some((key, _)) = text.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            continue;
        }
        let key = key.trim_matches('"');
        let path = if table.is_empty() {
            key.to_owned()
        } else {
            format!("{table}.{key}")
        };
        keys.push((path, set));
    }
    (keys, tables)
}

/// relay.example.toml names every key of the config, set to its default or
/// commented out, so a key added to the config without an entry in the
/// example (or an example that drifted from a default) fails here. The
/// example sets a few keys to other values on purpose: the ones it must
/// (where to connect, the events' source) and ones it shows in use.
#[test]
fn the_example_names_every_key_with_its_default() {
    const SET_ON_PURPOSE: &[&str] = &[
        "postgres.url",
        "postgres.slot",
        "postgres.publication",
        "kafka.brokers",
        "kafka.properties.compression.type",
        "cloudevents.source",
        "relay.metrics_addr",
    ];
    let (named, tables) = example_keys();
    // Adversarial: a scanner that found nothing would pass every check below.
    assert!(named.len() >= 40, "{named:?}");
    let example: BTreeMap<String, serde_json::Value> = load_str(EXAMPLE_TOML, &[])
        .unwrap()
        .flattened()
        .into_iter()
        .collect();
    let (mut missing, mut changed) = (Vec::new(), Vec::new());
    for (key, default) in Config::default().flattened() {
        let is_named = |k: &str| k == key || k.starts_with(&format!("{key}."));
        if !(named.iter().any(|(k, _)| is_named(k)) || tables.iter().any(|t| is_named(t))) {
            missing.push(format!("{key} (default {default})"));
        }
        let set = named.iter().any(|(k, set)| *set && k == &key);
        if set && !SET_ON_PURPOSE.contains(&key.as_str()) && example.get(&key) != Some(&default) {
            changed.push(format!("{key} (default {default})"));
        }
    }
    assert!(
        missing.is_empty(),
        "relay.example.toml does not name these keys: add each, set to its default or \
         commented out, with what it does: {missing:?}"
    );
    assert!(
        changed.is_empty(),
        "relay.example.toml sets these keys to other than their defaults: {changed:?}"
    );
    for key in SET_ON_PURPOSE {
        assert!(
            named.iter().any(|(k, set)| *set && k == key),
            "relay.example.toml no longer sets `{key}`"
        );
    }
}

#[test]
fn minimal_config_gets_debezium_compatible_defaults() {
    let config = minimal();
    let columns = &config.postgres.columns;
    assert_eq!(
        [
            &columns.id,
            &columns.aggregate_type,
            &columns.aggregate_id,
            &columns.event_type,
            &columns.payload,
            &columns.timestamp,
            &columns.tracing_span_context,
        ],
        [
            "id",
            "aggregatetype",
            "aggregateid",
            "type",
            "payload",
            "timestamp",
            "tracingspancontext"
        ]
    );
    assert_eq!(columns.source_column(), None);
    assert_eq!(config.postgres.table, "public.outbox");
    assert_eq!(config.postgres.status_interval(), Duration::from_secs(10));
    assert_eq!(config.postgres.connect_timeout(), Duration::from_secs(10));
    assert_eq!(
        config.postgres.heartbeat_interval(),
        Some(Duration::from_secs(30))
    );
    assert_eq!(config.kafka.topic, DEFAULT_TOPIC_TEMPLATE);
    assert_eq!(config.kafka.dlq_topic, "outbox.dlq");
    assert_eq!(
        (
            config.kafka.linger_ms,
            config.kafka.message_timeout_ms,
            config.kafka.queue_max_messages
        ),
        (5, 30_000, 100_000)
    );
    assert_eq!(config.kafka.shutdown_drain(), Duration::from_secs(30));
    assert_eq!(config.relay.channel_capacity, 10_000);
    assert_eq!(config.relay.metrics_addr, None);
    assert_eq!(
        config.envelope_settings(),
        EnvelopeSettings {
            source: "/orders-service".into(),
            mode: ContentMode::Binary,
            topic_template: DEFAULT_TOPIC_TEMPLATE.into(),
        }
    );
}

#[test]
fn environment_overrides_every_level() {
    let config = load_str(
        MINIMAL,
        &[
            (
                "OUTBOX_RELAY__POSTGRES__URL",
                "host=/run/postgresql dbname=app user=relay",
            ),
            ("OUTBOX_RELAY__POSTGRES__SLOT", "slot_2"),
            ("OUTBOX_RELAY__POSTGRES__HEARTBEAT_INTERVAL_SECS", "0"),
            ("OUTBOX_RELAY__POSTGRES__COLUMNS__SOURCE", "origin"),
            ("OUTBOX_RELAY__POSTGRES__COLUMNS__TIMESTAMP", ""),
            (
                "OUTBOX_RELAY__POSTGRES__HEADER_COLUMNS__TENANT_ID",
                "tenant",
            ),
            ("OUTBOX_RELAY__KAFKA__LINGER_MS", "2"),
            ("OUTBOX_RELAY__KAFKA__PROPERTIES__COMPRESSION_TYPE", "lz4"),
            ("OUTBOX_RELAY__CLOUDEVENTS__MODE", "structured"),
            ("outbox_relay__relay__log_format", "json"),
            ("OUTBOX_RELAY__RELAY__METRICS_ADDR", "0.0.0.0:9187"),
            // Not ours: ignored.
            ("PATH", "/usr/bin"),
            ("OUTBOX_RELAYX__KAFKA__BROKERS", "nope"),
        ],
    )
    .unwrap();
    assert_eq!(
        config.postgres.url,
        "host=/run/postgresql dbname=app user=relay"
    );
    assert_eq!(config.postgres.slot, "slot_2");
    assert_eq!(config.postgres.heartbeat_interval(), None);
    assert_eq!(config.postgres.columns.source_column(), Some("origin"));
    assert_eq!(config.postgres.columns.timestamp_column(), None);
    assert_eq!(
        config.postgres.header_column_pairs(),
        vec![("tenant_id".to_owned(), "tenant".to_owned())]
    );
    assert_eq!(config.kafka.linger_ms, 2);
    assert_eq!(config.kafka.brokers, "127.0.0.1:9092", "file value kept");
    assert_eq!(
        config.kafka.property_pairs(),
        vec![("compression.type".into(), "lz4".into())]
    );
    assert_eq!(config.cloudevents.mode, ContentMode::Structured);
    assert_eq!(config.relay.log_format, LogFormat::Json);
    assert_eq!(
        config.relay.metrics_addr,
        Some("0.0.0.0:9187".parse().unwrap())
    );
}

#[test]
fn environment_alone_is_a_complete_source() {
    let vars = env(&[
        ("OUTBOX_RELAY__POSTGRES__URL", "postgres://relay@db/app"),
        ("OUTBOX_RELAY__POSTGRES__SLOT", "s"),
        ("OUTBOX_RELAY__POSTGRES__PUBLICATION", "p"),
        ("OUTBOX_RELAY__KAFKA__BROKERS", "k1:9092,k2:9092"),
        ("OUTBOX_RELAY__CLOUDEVENTS__SOURCE", "/svc"),
    ]);
    let config = Config::load(None, vars).unwrap();
    assert_eq!(config.kafka.brokers, "k1:9092,k2:9092");
}

#[test]
fn load_reads_the_file_and_reports_a_missing_one() {
    let path = std::env::temp_dir().join(format!("outbox-relay-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&path, MINIMAL).unwrap();
    let loaded = Config::load(
        Some(&path),
        env(&[("OUTBOX_RELAY__POSTGRES__SLOT", "from_env")]),
    );
    std::fs::remove_file(&path).unwrap();
    assert_eq!(loaded.unwrap().postgres.slot, "from_env");

    let err = Config::load(Some(&path), Vec::new()).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn unknown_keys_are_refused_and_named() {
    type Vars<'a> = &'a [(&'a str, &'a str)];
    let cases: [(String, Vars, &str); 4] = [
        (
            format!("{MINIMAL}\n[postgres.columns]\nagregate_id = \"x\"\n"),
            &[],
            "unknown key `agregate_id`",
        ),
        (
            MINIMAL.replace("slot =", "slott ="),
            &[],
            "unknown key `slott`",
        ),
        (
            format!("{MINIMAL}\n[kafkaa]\nbrokers = \"x\"\n"),
            &[],
            "unknown key `kafkaa`",
        ),
        (
            MINIMAL.to_owned(),
            &[("OUTBOX_RELAY__KAFKA__LINGERMS", "3")],
            "environment variable OUTBOX_RELAY__KAFKA__LINGERMS sets `kafka.lingerms`, which is \
             not a configuration key; did you mean OUTBOX_RELAY__KAFKA__LINGER_MS \
             (`kafka.linger_ms`)?",
        ),
    ];
    for (toml, vars, says) in cases {
        let err = load_str(&toml, vars).unwrap_err();
        assert!(matches!(err, ConfigError::Parse(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(says), "{text}");
    }
    let err = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA__LINGERMS", "3")]).unwrap_err();
    assert!(err.to_string().contains("kafka"), "{err}");
}

#[test]
fn wrong_types_name_the_field_and_origin() {
    let err = load_str(
        &MINIMAL.replace("[kafka]", "[kafka]\nlinger_ms = \"soon\""),
        &[],
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("kafka.linger_ms"), "{text}");

    let err = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA__LINGER_MS", "soon")]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("kafka.linger_ms"), "{text}");
    assert!(text.contains("OUTBOX_RELAY__KAFKA__LINGER_MS"), "{text}");

    let err = load_str(MINIMAL, &[("OUTBOX_RELAY__CLOUDEVENTS__MODE", "binaryish")]).unwrap_err();
    assert!(err.to_string().contains("`binary`, `structured`"), "{err}");

    let err = load_str(
        MINIMAL,
        &[("OUTBOX_RELAY__RELAY__METRICS_ADDR", "localhost")],
    )
    .unwrap_err();
    assert!(err.to_string().contains("relay.metrics_addr"), "{err}");
}

/// A key's variable with one `_` after the prefix (the rest joined by `_`
/// too) would set nothing and leave the key at its default: refused, naming
/// the variable meant. Variables that are not keys stay allowed.
#[test]
fn a_variable_with_single_underscores_is_refused_naming_the_one_meant() {
    let err = load_str(
        MINIMAL,
        &[
            ("OUTBOX_RELAY_POSTGRES_SLOT", "other_slot"),
            ("OUTBOX_RELAY_KAFKA_PROPERTIES_SASL_PASSWORD", CANARY),
        ],
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::Parse(_)), "{err:?}");
    let text = err.to_string();
    for says in [
        "environment variable OUTBOX_RELAY_POSTGRES_SLOT sets no configuration key",
        "did you mean OUTBOX_RELAY__POSTGRES__SLOT (`postgres.slot`)?",
        "environment variable OUTBOX_RELAY_KAFKA_PROPERTIES_SASL_PASSWORD sets no",
        "OUTBOX_RELAY__KAFKA__PROPERTIES__SASL_PASSWORD (`kafka.properties.sasl.password`)",
    ] {
        assert!(text.contains(says), "{says} in {text}");
    }
    assert!(
        !text.contains(CANARY) && !text.contains("other_slot"),
        "{text}"
    );
    // With `__` after the prefix but `_` inside the path: the same.
    let err = load_str(MINIMAL, &[("OUTBOX_RELAY__POSTGRES_SLOT", "x")]).unwrap_err();
    assert!(
        err.to_string()
            .contains("did you mean OUTBOX_RELAY__POSTGRES__SLOT"),
        "{err}"
    );
    let config = load_str(
        MINIMAL,
        &[
            ("OUTBOX_RELAY_CONFIG", "/etc/relay.toml"),
            ("OUTBOX_RELAY_ADMIN_URL", "postgres://admin@db/app"),
            ("OUTBOX_RELAY_SERVICES", "scripts/services"),
            ("OUTBOX_RELAY__POSTGRES__SLOT", "from_env"),
        ],
    )
    .unwrap();
    assert_eq!(config.postgres.slot, "from_env");
}

/// A number may be written as digits or as digits in quotes (a variable's
/// value is always text); anything else is refused saying what to write.
#[test]
fn a_number_that_is_not_one_is_refused_saying_what_to_write() {
    let file = |value: &str| MINIMAL.replace("[kafka]", &format!("[kafka]\nlinger_ms = {value}"));
    for value in ["5", "\"5\""] {
        assert_eq!(load_str(&file(value), &[]).unwrap().kafka.linger_ms, 5);
    }
    let in_file = "kafka.linger_ms: expected a whole number (0 or more)";
    for (value, found) in [
        ("\"five\"", "found text that is not a number"),
        ("\"-5\"", "found a negative number"),
        ("-5", "found a negative number"),
        ("5.5", "found a number with a fraction"),
    ] {
        let text = load_str(&file(value), &[]).unwrap_err().to_string();
        assert!(
            text.contains(in_file) && text.contains(found),
            "{value}: {text}"
        );
        assert!(
            text.contains("write digits, e.g. linger_ms = 5 (the default)"),
            "{value}: {text}"
        );
        assert!(!text.contains("five"), "never quoted: {text}");
    }
    let text = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA__LINGER_MS", "five")])
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("write digits, e.g. OUTBOX_RELAY__KAFKA__LINGER_MS=5 (the default)"),
        "{text}"
    );
    let text = load_str(
        &format!("{MINIMAL}\n[sinks.b]\nurl = \"https://b.example/\"\ntimeout_ms = \"soon\""),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        text.contains("sinks.b.timeout_ms") && text.contains("timeout_ms = 10000 (the default)"),
        "{text}"
    );
    let text = load_str(MINIMAL, &[("OUTBOX_RELAY__RELAY__STANDBY_LOCK", "maybe")])
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("expected true or false")
            && text.contains("OUTBOX_RELAY__RELAY__STANDBY_LOCK=true (the default)"),
        "{text}"
    );
}

/// docs/configuration.md says `host:port`; a host name is one.
#[test]
fn the_metrics_address_takes_a_host_name() {
    let config = load_str(
        MINIMAL,
        &[("OUTBOX_RELAY__RELAY__METRICS_ADDR", "localhost:9187")],
    )
    .unwrap();
    let addr = config.relay.metrics_addr.expect("metrics_addr");
    assert_eq!((addr.host(), addr.port()), ("localhost", 9187));
    let config = load_str(
        &format!("{MINIMAL}\n[relay]\nmetrics_addr = \"[::1]:9187\""),
        &[],
    )
    .unwrap();
    assert_eq!(config.relay.metrics_addr.unwrap().host(), "::1");
    let text = load_str(
        MINIMAL,
        &[("OUTBOX_RELAY__RELAY__METRICS_ADDR", "localhost")],
    )
    .unwrap_err()
    .to_string();
    assert!(
        text.contains("relay.metrics_addr: no port: expected host:port"),
        "{text}"
    );
}

#[test]
fn env_variable_with_empty_segment_is_an_error() {
    let err = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA____BROKERS", "x")]).unwrap_err();
    assert!(
        err.to_string().contains("OUTBOX_RELAY__KAFKA____BROKERS"),
        "{err}"
    );
    let err = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA", "x")]).unwrap_err();
    assert!(matches!(err, ConfigError::Parse(_)), "{err:?}");
}

#[test]
fn properties_accept_numbers_and_booleans_as_text() {
    let toml = format!(
        "{MINIMAL}\n[kafka.properties]\n\"batch.num.messages\" = 1000\n\
         \"enable.ssl.certificate.verification\" = false\n\"max.in.flight\" = 5\n"
    );
    let config = load_str(&toml, &[]).unwrap();
    assert_eq!(config.kafka.properties["batch.num.messages"], "1000");
    assert_eq!(
        config.kafka.properties["enable.ssl.certificate.verification"],
        "false"
    );
}

#[test]
fn unquoted_dotted_property_gets_a_hint() {
    let toml = format!("{MINIMAL}\n[kafka.properties]\ncompression.type = \"zstd\"\n");
    let err = load_str(&toml, &[]).unwrap_err();
    assert!(
        err.to_string().contains("quote dotted property names"),
        "{err}"
    );
}

/// Applies `edit` to a valid config and returns the field `validate` names.
fn rule(edit: impl FnOnce(&mut Config)) -> (String, String) {
    let mut config = minimal();
    edit(&mut config);
    invalid_field(config.validate().map(|()| config))
}

#[test]
fn every_validation_rule_names_its_field() {
    type Edit = Box<dyn FnOnce(&mut Config)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("postgres.url", Box::new(|c| c.postgres.url.clear())),
        (
            "postgres.url",
            Box::new(|c| c.postgres.url = "localhost".into()),
        ),
        ("postgres.slot", Box::new(|c| c.postgres.slot.clear())),
        (
            "postgres.slot",
            Box::new(|c| c.postgres.slot = "Outbox".into()),
        ),
        (
            "postgres.slot",
            Box::new(|c| c.postgres.slot = "outbox-relay".into()),
        ),
        (
            "postgres.slot",
            Box::new(|c| c.postgres.slot = "s".repeat(64)),
        ),
        (
            "postgres.publication",
            Box::new(|c| c.postgres.publication.clear()),
        ),
        (
            "postgres.publication",
            Box::new(|c| c.postgres.publication = "p".repeat(64)),
        ),
        (
            "postgres.table",
            Box::new(|c| c.postgres.table = "a.b.c".into()),
        ),
        (
            "postgres.table",
            Box::new(|c| c.postgres.table = ".outbox".into()),
        ),
        (
            "postgres.table",
            Box::new(|c| c.postgres.table = "out box".into()),
        ),
        (
            "postgres.table",
            Box::new(|c| c.postgres.table = String::new()),
        ),
        (
            "postgres.status_interval_secs",
            Box::new(|c| c.postgres.status_interval_secs = 0),
        ),
        (
            "postgres.status_interval_secs",
            Box::new(|c| c.postgres.status_interval_secs = 11),
        ),
        (
            "postgres.connect_timeout_secs",
            Box::new(|c| c.postgres.connect_timeout_secs = 0),
        ),
        (
            "postgres.columns.id",
            Box::new(|c| c.postgres.columns.id.clear()),
        ),
        (
            "postgres.columns.aggregate_type",
            Box::new(|c| c.postgres.columns.aggregate_type.clear()),
        ),
        (
            "postgres.columns.aggregate_id",
            Box::new(|c| c.postgres.columns.aggregate_id.clear()),
        ),
        (
            "postgres.columns.event_type",
            Box::new(|c| c.postgres.columns.event_type.clear()),
        ),
        (
            "postgres.columns.payload",
            Box::new(|c| c.postgres.columns.payload.clear()),
        ),
        (
            "postgres.header_columns.tenant",
            Box::new(|c| {
                c.postgres
                    .header_columns
                    .insert("tenant".into(), "ce_tenant".into());
            }),
        ),
        (
            "postgres.header_columns.tenant",
            Box::new(|c| {
                c.postgres
                    .header_columns
                    .insert("tenant".into(), String::new());
            }),
        ),
        (
            "postgres.header_columns.x",
            Box::new(|c| {
                c.postgres
                    .header_columns
                    .insert("x".into(), "Content-Type".into());
            }),
        ),
        ("kafka.brokers", Box::new(|c| c.kafka.brokers = " ".into())),
        (
            "kafka.brokers",
            Box::new(|c| c.kafka.brokers = "a:1,,b:2".into()),
        ),
        (
            "kafka.topic",
            Box::new(|c| c.kafka.topic = "outbox/{aggregatetype}".into()),
        ),
        (
            "kafka.topic",
            Box::new(|c| c.kafka.topic = "outbox.{aggregate}".into()),
        ),
        ("kafka.topic", Box::new(|c| c.kafka.topic = String::new())),
        ("kafka.topic", Box::new(|c| c.kafka.topic = "t".repeat(250))),
        (
            "kafka.dlq_topic",
            Box::new(|c| c.kafka.dlq_topic = "dead letters".into()),
        ),
        (
            "kafka.dlq_topic",
            Box::new(|c| c.kafka.dlq_topic = "..".into()),
        ),
        (
            "kafka.dlq_topic",
            Box::new(|c| {
                c.kafka.topic = "events".into();
                c.kafka.dlq_topic = "events".into();
            }),
        ),
        ("kafka.linger_ms", Box::new(|c| c.kafka.linger_ms = 900_001)),
        (
            "kafka.message_timeout_ms",
            Box::new(|c| c.kafka.message_timeout_ms = 0),
        ),
        (
            "kafka.message_timeout_ms",
            Box::new(|c| c.kafka.message_timeout_ms = 1 << 31),
        ),
        (
            "kafka.message_timeout_ms",
            Box::new(|c| {
                c.kafka.linger_ms = 100;
                c.kafka.message_timeout_ms = 100;
            }),
        ),
        (
            "kafka.queue_max_messages",
            Box::new(|c| c.kafka.queue_max_messages = 0),
        ),
        (
            "kafka.queue_max_messages",
            Box::new(|c| c.kafka.queue_max_messages = 1 << 31),
        ),
        (
            "cloudevents.source",
            Box::new(|c| c.cloudevents.source = "  ".into()),
        ),
        (
            "relay.channel_capacity",
            Box::new(|c| c.relay.channel_capacity = 0),
        ),
        (
            "relay.max_in_flight_bytes",
            Box::new(|c| c.relay.max_in_flight_bytes = 0),
        ),
        (
            "relay.max_in_flight_bytes",
            Box::new(|c| c.relay.max_in_flight_bytes = (1 << 40) + 1),
        ),
    ];
    for (expected, edit) in cases {
        let (field, constraint) = rule(edit);
        assert_eq!(field, expected, "{constraint}");
        assert!(!constraint.is_empty());
    }
}

#[test]
fn validation_accepts_edge_values() {
    let mut config = minimal();
    config.postgres.slot = "a".repeat(63);
    config.postgres.table = "outbox".into();
    config.postgres.status_interval_secs = 1;
    config.postgres.heartbeat_interval_secs = 0;
    config.kafka.topic = "fixed".into();
    config.kafka.linger_ms = 0;
    config.kafka.message_timeout_ms = 1;
    config.relay.channel_capacity = 1;
    config.relay.max_in_flight_bytes = 1;
    config
        .postgres
        .header_columns
        .insert("tenant".into(), "tenant".into());
    config.validate().unwrap();
    assert_eq!(
        config.postgres.table_parts(),
        ("public".into(), "outbox".into())
    );
}

/// A slot name PostgreSQL would refuse is not "required": the text says
/// what is wrong with it and the rule.
#[test]
fn a_bad_slot_name_says_what_is_wrong_with_it() {
    let rule_text = "lowercase letters, digits and underscores";
    let (field, constraint) = rule(|c| c.postgres.slot = "Bad-Name".into());
    assert_eq!(field, "postgres.slot");
    assert!(
        !constraint.starts_with("required")
            && constraint.contains("\"Bad-Name\"")
            && constraint.contains("\"B-N\"")
            && constraint.contains(rule_text)
            && constraint.contains("63 bytes")
            && constraint.contains("\"bad_name\""),
        "{constraint}"
    );
    let (_, constraint) = rule(|c| c.postgres.slot = "s".repeat(64));
    assert!(
        constraint.starts_with("is 64 bytes long") && constraint.contains(rule_text),
        "{constraint}"
    );
    let (_, constraint) = rule(|c| c.postgres.slot.clear());
    assert!(constraint.starts_with("required"), "{constraint}");
}

#[test]
fn validation_errors_render_field_then_constraint() {
    let mut config = minimal();
    config.kafka.topic = "bad topic".into();
    let text = config.validate().unwrap_err().to_string();
    assert!(text.starts_with("kafka.topic: "), "{text}");
}

#[test]
fn properties_that_weaken_guarantees_are_refused() {
    let refused = [
        ("acks", "1"),
        ("ACKS", "all"),
        ("request.required.acks", "all"),
        ("enable.idempotence", "false"),
        ("partitioner", "consistent_random"),
        ("bootstrap.servers", "x:9092"),
        ("metadata.broker.list", "x:9092"),
        ("linger.ms", "1"),
        ("queue.buffering.max.ms", "1"),
        ("message.timeout.ms", "1"),
        ("delivery.timeout.ms", "1"),
        ("queue.buffering.max.messages", "1"),
        ("transactional.id", "relay-1"),
        ("max.in.flight.requests.per.connection", "6"),
        ("max.in.flight", "many"),
        ("max.in.flight", "0"),
        ("retries", "0"),
        ("enable.auto.commit", "false"),
        ("group.id", "g"),
        ("auto.offset.reset", "earliest"),
        ("isolation.level", "read_committed"),
        ("fetch.max.bytes", "1"),
    ];
    for (name, value) in refused {
        let (field, constraint) = rule(|c| {
            c.kafka.properties.insert(name.into(), value.into());
        });
        assert_eq!(field, format!("kafka.properties.\"{name}\""));
        assert!(!constraint.is_empty());
    }
    let (_, constraint) = rule(|c| {
        c.kafka.properties.insert("acks".into(), "1".into());
    });
    assert_eq!(
        constraint,
        "set by the relay (acks=all is required for the idempotent producer); remove it"
    );
    let (_, constraint) = rule(|c| {
        c.kafka.properties.insert("linger.ms".into(), "1".into());
    });
    assert!(constraint.contains("kafka.linger_ms"), "{constraint}");

    let mut config = minimal();
    for (name, value) in [
        ("max.in.flight.requests.per.connection", "5"),
        ("retries", "10"),
        ("compression.type", "zstd"),
        ("security.protocol", "sasl_ssl"),
        ("client.id", "relay"),
    ] {
        config.kafka.properties.insert(name.into(), value.into());
    }
    config.validate().unwrap();
}

/// librdkafka's own check of each pass-through property, at validation:
/// an unknown name or a value it cannot take fails here, naming the key as
/// TOML spells it and librdkafka's reason, instead of when the producer is
/// built once the relay is active.
#[test]
fn a_property_librdkafka_refuses_is_refused_at_validation_with_its_reason() {
    let (field, constraint) = invalid_field(load_str(
        &format!("{MINIMAL}\n[kafka.properties]\n\"lingerr.ms\" = \"1\"\n"),
        &[],
    ));
    assert_eq!(field, "kafka.properties.\"lingerr.ms\"");
    assert!(
        constraint.starts_with("librdkafka refuses it: No such configuration property")
            && constraint.contains("lingerr.ms")
            && constraint.contains("CONFIGURATION.md"),
        "{constraint}"
    );
    for (name, value) in [
        ("batch.num.messages", "abc"),
        ("security.protocol", "tls"),
        ("batch.size", "-1"),
        ("enable.ssl.certificate.verification", "maybe"),
    ] {
        let (field, constraint) = rule(|c| {
            c.kafka.properties.insert(name.into(), value.into());
        });
        assert_eq!(field, format!("kafka.properties.\"{name}\""));
        assert!(
            constraint.starts_with("librdkafka refuses it: ") && constraint.contains(name),
            "{name} = {value}: {constraint}"
        );
    }
    // A key the relay sets itself keeps the message naming the key to set.
    let (_, constraint) = rule(|c| {
        c.kafka.properties.insert("linger.ms".into(), "abc".into());
    });
    assert!(
        constraint.contains("kafka.linger_ms") && !constraint.contains("librdkafka refuses"),
        "{constraint}"
    );
}

/// librdkafka quotes a value it refuses; the value of a secret property
/// is never shown.
#[test]
fn a_refused_secret_property_is_not_quoted() {
    let (field, constraint) = rule(|c| {
        c.kafka
            .properties
            .insert("security.protocol".into(), CANARY.into());
    });
    assert_eq!(field, "kafka.properties.\"security.protocol\"");
    assert!(constraint.contains(CANARY), "not a secret: {constraint}");
    // The Java client's JAAS line, which holds the password: librdkafka has
    // no such property, and the refusal must not show the line.
    let (field, constraint) = rule(|c| {
        c.kafka.properties.insert(
            "sasl.jaas.config".into(),
            format!("ScramLoginModule required password=\"{CANARY}\";"),
        );
    });
    assert_eq!(field, "kafka.properties.\"sasl.jaas.config\"");
    assert!(
        constraint.starts_with("librdkafka refuses it: "),
        "{constraint}"
    );
    assert_hidden(&constraint);
    let problem = crate::sink::property_problem("sasl.password", "");
    assert_eq!(problem, None, "any text is a password");
}

#[test]
fn validation_never_quotes_a_bad_url() {
    let mut config = minimal();
    config.postgres.url = CANARY.into();
    let err = config.validate().unwrap_err();
    assert!(!err.to_string().contains(CANARY) && !format!("{err:?}").contains(CANARY));
}

fn secret_config() -> Config {
    let toml = format!(
        r#"
[postgres]
url = "postgres://relay:{CANARY}@127.0.0.1:5432/app?sslpassword={CANARY}"
slot = "s"
publication = "p"

[kafka]
brokers = "127.0.0.1:9092"

[kafka.properties]
"sasl.username" = "relay"
"sasl.password" = "{CANARY}"
"ssl.key.password" = "{CANARY}"
"ssl.key.pem" = "{CANARY}"
"sasl.jaas.config" = "org.apache.kafka.common.security.scram.ScramLoginModule required password=\"{CANARY}\";"
"sasl.oauthbearer.client.secret" = "{CANARY}"

[cloudevents]
source = "/svc"
"#
    );
    // Extracted without validation: the relay refuses `sslpassword` (it
    // has no client key passwords), but a config holding one must still
    // never show it.
    providers::extract(&Config::figment_from_str(&toml, env(&[]))).unwrap()
}

fn assert_hidden(text: &str) {
    assert!(!text.contains(CANARY), "secret leaked: {text}");
}

#[test]
fn secrets_never_serialize_and_the_effective_config_shows_the_rest() {
    let config = secret_config();
    let json = serde_json::to_string(&config).unwrap();
    assert_hidden(&json);
    let toml = config.effective_toml();
    assert_hidden(&toml);
    for line in config.effective_lines() {
        assert_hidden(&line);
    }
    for (key, value) in config.effective_keys() {
        assert_hidden(&format!("{key}={value}"));
    }
    for (key, value) in config.flattened() {
        assert_hidden(&format!("{key}={value}"));
    }
    // The keys are there, with their values; secrets as ***.
    for shown in [
        "url = \"postgres://relay:***@127.0.0.1:5432/app?sslpassword=***\"",
        "slot = \"s\"",
        "status_interval_secs = 10",
        "\"sasl.password\" = \"***\"",
        "\"sasl.username\" = \"relay\"",
        "on_unroutable = \"stop\"",
        "mode = \"binary\"",
        "log_format = \"text\"",
        "progress_interval_secs = 30",
    ] {
        assert!(toml.contains(shown), "{shown} in {toml}");
    }
}

#[test]
fn secrets_never_appear_in_debug_or_display() {
    let config = secret_config();
    assert_hidden(&format!("{config:?}"));
    assert_hidden(&format!("{config:#?}"));
    assert_hidden(&format!("{config}"));
    assert_hidden(&format!("{:?}", config.postgres));
    assert_hidden(&format!("{:?}", config.kafka));
    // The values are still there for the modules that need them.
    assert!(config.postgres.url.contains(CANARY));
    assert_eq!(config.kafka.properties["sasl.password"], CANARY);
    // And what is not secret is still shown.
    let shown = format!("{config:?}");
    assert!(
        shown.contains("relay:***@127.0.0.1:5432/app") && shown.contains("sasl.username"),
        "{shown}"
    );

    let mut config = secret_config();
    config.postgres.url = format!("host=/run/postgresql user=relay password={CANARY}");
    assert_hidden(&format!("{config:?}"));
    assert_hidden(&format!("{config}"));
}

#[test]
fn secrets_never_appear_in_errors() {
    // A validation failure elsewhere in a config holding secrets.
    let mut config = secret_config();
    config.postgres.slot = "Bad-Slot".into();
    let err = config.validate().unwrap_err();
    assert_hidden(&err.to_string());
    assert_hidden(&format!("{err:?}"));

    // TOML syntax error on the line with the password (unquoted URL).
    let toml = MINIMAL.replace(
        "url = \"postgres://relay:pw@127.0.0.1:5432/app\"",
        &format!("url = postgres://relay:{CANARY}@127.0.0.1/app"),
    );
    let err = load_str(&toml, &[]).unwrap_err();
    assert!(matches!(err, ConfigError::Parse(_)), "{err:?}");
    assert_hidden(&err.to_string());
    assert_hidden(&format!("{err:?}"));
    assert!(err.to_string().contains("line"), "position kept: {err}");

    // A secret in the wrong place, of the wrong type.
    let err = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA__LINGER_MS", CANARY)]).unwrap_err();
    assert_hidden(&err.to_string());
    assert_hidden(&format!("{err:?}"));
    let err = load_str(MINIMAL, &[("OUTBOX_RELAY__CLOUDEVENTS__MODE", CANARY)]).unwrap_err();
    assert_hidden(&err.to_string());
    assert_hidden(&format!("{err:?}"));
}

#[test]
fn every_property_the_producer_sets_is_refused() {
    for name in crate::sink::RELAY_OWNED_PROPERTIES {
        let (field, _) = rule(|c| {
            c.kafka.properties.insert((*name).into(), "x".into());
        });
        assert_eq!(field, format!("kafka.properties.\"{name}\""));
    }
}

#[test]
fn on_unroutable_stops_by_default_and_is_one_of_two_words() {
    let config = minimal();
    assert_eq!(config.kafka.on_unroutable, OnUnroutable::Stop);
    let config = load_str(
        &MINIMAL.replace("[kafka]", "[kafka]\non_unroutable = \"dead-letter\""),
        &[],
    )
    .unwrap();
    assert_eq!(config.kafka.on_unroutable, OnUnroutable::DeadLetter);
    let config = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA__ON_UNROUTABLE", "stop")]).unwrap();
    assert_eq!(config.kafka.on_unroutable, OnUnroutable::Stop);
    for bad in ["drop", "dead_letter", "Stop", ""] {
        let err = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA__ON_UNROUTABLE", bad)]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("kafka.on_unroutable") && text.contains("`stop`, `dead-letter`"),
            "{bad:?}: {text}"
        );
    }
}

#[test]
fn the_relay_lock_is_on_by_default_and_its_lease_bounded() {
    let config = minimal();
    assert!(config.relay.standby_lock);
    assert_eq!(config.relay.lock_lease(), Duration::from_secs(3));
    for bad in [0, 999, 60_001, u64::MAX] {
        let (field, constraint) = rule(|c| c.relay.lock_lease_ms = bad);
        assert_eq!(field, "relay.lock_lease_ms", "{bad}: {constraint}");
    }
    for good in [1_000, 60_000] {
        let mut config = minimal();
        config.relay.lock_lease_ms = good;
        config.validate().unwrap();
    }
}

#[test]
fn unhealthy_after_is_bounded() {
    assert_eq!(minimal().relay.unhealthy_after(), Duration::from_secs(120));
    for bad in [0, 86_401, u64::MAX] {
        let (field, constraint) = rule(|c| c.relay.unhealthy_after_secs = bad);
        assert_eq!(field, "relay.unhealthy_after_secs", "{bad}: {constraint}");
    }
    for good in [1, 86_400] {
        let mut config = minimal();
        config.relay.unhealthy_after_secs = good;
        config.validate().unwrap();
    }
}

#[test]
fn progress_lines_every_30_s_by_default_and_0_turns_them_off() {
    assert_eq!(
        minimal().relay.progress_interval(),
        Some(Duration::from_secs(30))
    );
    let config = load_str(
        MINIMAL,
        &[("OUTBOX_RELAY__RELAY__PROGRESS_INTERVAL_SECS", "0")],
    )
    .unwrap();
    assert_eq!(config.relay.progress_interval(), None);
}

/// Every duration the relay adds to `Instant::now()` (deadlines, intervals),
/// built from `config`. Each one must be addable without overflow.
fn durations(config: &Config) -> Vec<(&'static str, Duration)> {
    let mut all = vec![
        (
            "postgres.status_interval_secs",
            config.postgres.status_interval(),
        ),
        (
            "postgres.connect_timeout_secs",
            config.postgres.connect_timeout(),
        ),
        ("kafka.message_timeout_ms", config.kafka.message_timeout()),
        ("kafka.shutdown_drain_secs", config.kafka.shutdown_drain()),
        (
            "kafka.transaction_max_ms",
            config.kafka.transaction_max_duration(),
        ),
        (
            "kafka.transaction_timeout",
            config.kafka.transaction_timeout(),
        ),
        (
            "kafka.linger_ms",
            Duration::from_millis(config.kafka.linger_ms),
        ),
    ];
    if let Some(heartbeat) = config.postgres.heartbeat_interval() {
        all.push(("postgres.heartbeat_interval_secs", heartbeat));
    }
    if let Some(progress) = config.relay.progress_interval() {
        all.push(("relay.progress_interval_secs", progress));
    }
    all
}

#[test]
fn a_drain_of_u64_max_seconds_is_refused_by_name() {
    // TOML integers stop at i64::MAX; the environment carries any u64.
    let huge = u64::MAX.to_string();
    let (field, constraint) = invalid_field(load_str(
        MINIMAL,
        &[("OUTBOX_RELAY__KAFKA__SHUTDOWN_DRAIN_SECS", &huge)],
    ));
    assert_eq!(field, "kafka.shutdown_drain_secs", "{constraint}");
    // Why it matters: accepted, the relay's stop deadline
    // `Instant::now() + shutdown_drain` would panic on the first SIGTERM.
    assert!(
        std::time::Instant::now()
            .checked_add(Duration::from_secs(u64::MAX))
            .is_none()
    );
}

#[test]
fn every_duration_has_an_upper_bound_naming_its_field() {
    type Edit = fn(&mut Config, u64);
    // (field, setter, largest accepted value)
    let cases: [(&str, Edit, u64); 8] = [
        (
            "postgres.status_interval_secs",
            |c, v| c.postgres.status_interval_secs = v,
            10,
        ),
        (
            "postgres.connect_timeout_secs",
            |c, v| c.postgres.connect_timeout_secs = v,
            300,
        ),
        (
            "postgres.heartbeat_interval_secs",
            |c, v| c.postgres.heartbeat_interval_secs = v,
            3_600,
        ),
        (
            "kafka.linger_ms",
            |c, v| {
                // librdkafka wants message.timeout.ms above linger.ms.
                c.kafka.message_timeout_ms = i32::MAX as u64;
                c.kafka.linger_ms = v;
            },
            900_000,
        ),
        (
            "kafka.message_timeout_ms",
            |c, v| c.kafka.message_timeout_ms = v,
            i32::MAX as u64,
        ),
        (
            "kafka.shutdown_drain_secs",
            |c, v| c.kafka.shutdown_drain_secs = v,
            3_600,
        ),
        (
            "relay.progress_interval_secs",
            |c, v| c.relay.progress_interval_secs = v,
            3_600,
        ),
        (
            "kafka.transaction_max_ms",
            |c, v| c.kafka.transaction_max_ms = v,
            30_000,
        ),
    ];
    for (name, set, max) in cases {
        let mut config = minimal();
        set(&mut config, max);
        config
            .validate()
            .unwrap_or_else(|e| panic!("{name} = {max} must be accepted: {e}"));
        for (field, d) in durations(&config) {
            assert!(
                std::time::Instant::now().checked_add(d).is_some(),
                "{field}: {d:?} overflows an Instant"
            );
        }
        for above in [max + 1, max * 2, u64::MAX / 1_000, u64::MAX] {
            let (field, constraint) = rule(|c| set(c, above));
            assert_eq!(field, name, "{name} = {above}: {constraint}");
            assert!(
                constraint.contains(&max.to_string()),
                "{name}: the constraint names the bound: {constraint}"
            );
        }
    }
}

/// The conninfo is parsed when the config is validated, by the PostgreSQL
/// client's own parser: what the relay could not connect with is a
/// config error naming `postgres.url` and the fix, never quoting the value.
#[test]
fn a_conninfo_the_relay_cannot_use_is_refused_naming_the_fix_not_the_value() {
    for (url, fix) in [
        (
            format!("postgres://relay:{CANARY}@db/app?sslmode=disable&channel_binding=require"),
            "channel_binding=require needs TLS",
        ),
        (
            format!("host=db user=relay password={CANARY} sslmode=verify-ca sslrootcert=system"),
            "use sslmode=verify-full",
        ),
        (
            format!("postgres://relay:{CANARY}@db/app?sslmode=allow"),
            "sslmode \"allow\" is not supported",
        ),
        (format!("host=db password={CANARY}"), "no user given"),
        (
            format!("postgres://relay:{CANARY}@x@db/app"),
            "more than one '@'",
        ),
    ] {
        let mut config = minimal();
        config.postgres.url = url.clone();
        let (field, constraint) = invalid_field(config.validate().map(|()| config.clone()));
        assert_eq!(field, "postgres.url", "{url}");
        assert!(constraint.contains(fix), "{url}: {constraint}");
        assert!(!constraint.contains(CANARY), "{constraint}");
        assert!(
            !constraint.contains("db/app"),
            "the value is not quoted: {constraint}"
        );
    }
}

#[test]
fn delivery_is_at_least_once_by_default_and_one_of_two_words() {
    let config = minimal();
    assert_eq!(config.kafka.delivery, Delivery::AtLeastOnce);
    let config = load_str(
        MINIMAL,
        &[("OUTBOX_RELAY__KAFKA__DELIVERY", "exactly-once")],
    )
    .unwrap();
    assert_eq!(config.kafka.delivery, Delivery::ExactlyOnce);
    for bad in ["exactly_once", "eos", "Exactly-Once", ""] {
        let err = load_str(MINIMAL, &[("OUTBOX_RELAY__KAFKA__DELIVERY", bad)]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("kafka.delivery") && text.contains("`at-least-once`, `exactly-once`"),
            "{bad:?}: {text}"
        );
    }
}

/// docs/configuration.md documents every key the config has, each with its
/// environment variable: adding a field without documenting it fails here.
#[test]
fn every_config_key_is_in_the_configuration_reference() {
    let reference = include_str!("../../docs/configuration.md");
    let keys: Vec<String> = Config::default()
        .flattened()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    // Adversarial: a flattening that lost the nested tables would pass
    // trivially with a handful of keys.
    assert!(keys.len() >= 30, "{keys:?}");
    for key in &keys {
        let row = reference
            .lines()
            .find(|line| line.starts_with(&format!("| `{key}` |")))
            .unwrap_or_else(|| panic!("docs/configuration.md has no row for `{key}`"));
        let variable = format!(
            "OUTBOX_RELAY__{}",
            key.to_ascii_uppercase().replace('.', "__")
        );
        assert!(
            row.contains(&format!("`{variable}")),
            "the row of `{key}` names {variable}: {row}"
        );
    }
}

#[test]
fn the_transactional_id_is_derived_from_the_slot_unless_configured() {
    let mut kafka = minimal().kafka;
    assert_eq!(
        kafka.transactional_id_for("orders_slot"),
        "outbox-relay.orders_slot"
    );
    kafka.transactional_id = "relay-eu.orders".into();
    assert_eq!(kafka.transactional_id_for("orders_slot"), "relay-eu.orders");
    for bad in ["has space", "tab\there", "é", &"x".repeat(250)] {
        let (field, constraint) = rule(|c| c.kafka.transactional_id = bad.to_string());
        assert_eq!(field, "kafka.transactional_id", "{bad:?}");
        assert!(constraint.contains("outbox-relay.<slot>"), "{constraint}");
    }
    let mut config = minimal();
    config.kafka.transactional_id = "x".repeat(249);
    config.validate().unwrap();
}

#[test]
fn the_checkpoint_topic_is_a_valid_topic_of_its_own() {
    assert_eq!(minimal().kafka.checkpoint_topic, "outbox-relay.checkpoints");
    for bad in ["", "bad topic", "a/b"] {
        let (field, _) = rule(|c| c.kafka.checkpoint_topic = bad.into());
        assert_eq!(field, "kafka.checkpoint_topic", "{bad:?}");
    }
    let (field, constraint) = rule(|c| c.kafka.checkpoint_topic = c.kafka.dlq_topic.clone());
    assert_eq!(field, "kafka.checkpoint_topic");
    assert!(constraint.contains("kafka.dlq_topic"), "{constraint}");
    let (field, _) = rule(|c| {
        c.kafka.topic = "events".into();
        c.kafka.checkpoint_topic = "events".into();
    });
    assert_eq!(field, "kafka.checkpoint_topic");
}

#[test]
fn transaction_bounds_are_bounded_and_named() {
    type Edit = fn(&mut Config, u64);
    let cases: [(&str, Edit, u64); 3] = [
        (
            "kafka.transaction_max_events",
            |c, v| c.kafka.transaction_max_events = v,
            1_000_000,
        ),
        (
            "kafka.transaction_max_bytes",
            |c, v| c.kafka.transaction_max_bytes = v,
            1 << 30,
        ),
        (
            "kafka.transaction_max_ms",
            |c, v| c.kafka.transaction_max_ms = v,
            30_000,
        ),
    ];
    for (name, set, max) in cases {
        for good in [1, max] {
            let mut config = minimal();
            set(&mut config, good);
            config
                .validate()
                .unwrap_or_else(|e| panic!("{name} = {good}: {e}"));
        }
        for bad in [0, max + 1, u64::MAX] {
            let (field, constraint) = rule(|c| set(c, bad));
            assert_eq!(field, name, "{bad}");
            assert!(constraint.contains(&max.to_string()), "{constraint}");
        }
    }
}

#[test]
fn exactly_once_caps_the_message_timeout_under_the_brokers_transaction_cap() {
    let mut config = minimal();
    config.kafka.message_timeout_ms = 900_000;
    config.validate().expect("at-least-once: no cap");
    config.kafka.delivery = Delivery::ExactlyOnce;
    let (field, constraint) = invalid_field(config.validate().map(|()| config.clone()));
    assert_eq!(field, "kafka.message_timeout_ms");
    assert!(constraint.contains("600000"), "{constraint}");
    config.kafka.message_timeout_ms = 600_000;
    config.kafka.transaction_max_ms = 30_000;
    config.validate().unwrap();
    // librdkafka refuses a message timeout above the transaction timeout;
    // brokers refuse a transaction timeout above 15 minutes by default.
    let timeout = config.kafka.transaction_timeout();
    assert!(timeout >= config.kafka.message_timeout(), "{timeout:?}");
    assert!(timeout <= Duration::from_secs(15 * 60), "{timeout:?}");
    assert_eq!(
        minimal().kafka.transaction_timeout(),
        Duration::from_secs(60)
    );
}

#[test]
fn the_effective_config_shows_the_delivery_mode() {
    let shown = minimal().effective_toml();
    assert!(shown.contains("delivery = \"at-least-once\""), "{shown}");
    let config = load_str(
        MINIMAL,
        &[("OUTBOX_RELAY__KAFKA__DELIVERY", "exactly-once")],
    )
    .unwrap();
    let shown = config.effective_toml();
    assert!(shown.contains("delivery = \"exactly-once\""), "{shown}");
    assert!(
        shown.contains("checkpoint_topic = \"outbox-relay.checkpoints\""),
        "{shown}"
    );
}

/// The Kubernetes example in deploy/kubernetes/ is a config the relay
/// accepts once the Secret gives it the URL, with the relay lock on and
/// the probes' port where the Deployment looks for it.
#[test]
fn the_kubernetes_example_config_loads_with_the_secrets_url() {
    let configmap = include_str!("../../deploy/kubernetes/configmap.yaml");
    let toml: String = configmap
        .split_once("relay.toml: |\n")
        .expect("relay.toml in the ConfigMap")
        .1
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    assert!(
        toml.contains("[postgres]") && toml.contains("[relay]"),
        "{toml}"
    );
    let secret = include_str!("../../deploy/kubernetes/secret.example.yaml");
    let url = secret
        .lines()
        .find_map(|l| l.trim().strip_prefix("OUTBOX_RELAY__POSTGRES__URL: "))
        .expect("the URL in the Secret")
        .trim_matches('"');
    let config = load_str(&toml, &[("OUTBOX_RELAY__POSTGRES__URL", url)]).unwrap();
    assert!(config.relay.standby_lock);
    let port = config.relay.metrics_addr.expect("metrics_addr").port();
    let deployment = include_str!("../../deploy/kubernetes/deployment.yaml");
    assert!(
        deployment.contains(&format!("containerPort: {port}")),
        "the Deployment exposes {port}"
    );
    for probe in ["path: /health", "path: /ready?standby=ok"] {
        assert!(deployment.contains(probe), "{probe}");
    }
    // A SIGTERM drains within the grace period the kubelet gives.
    let grace: u64 = deployment
        .lines()
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds: "))
        .expect("terminationGracePeriodSeconds")
        .parse()
        .unwrap();
    assert!(config.kafka.shutdown_drain_secs < grace);
}

/// The relay's byte bound reaches its settings and, with one record of
/// `message.max.bytes` beside it, librdkafka's queue; 0 is refused with
/// the fix.
#[test]
fn the_byte_bound_reaches_the_relay_and_librdkafkas_queue() {
    let mut config = minimal();
    assert_eq!(config.relay.max_in_flight_bytes, 128 * 1024 * 1024);
    config.validate().unwrap();
    // 128 MiB and librdkafka's default message.max.bytes (1,000,000), in KiB.
    assert_eq!(config.sink_settings().queue_max_kbytes, Some(132_049));
    config.relay.max_in_flight_bytes = 8 * 1024 * 1024;
    config
        .kafka
        .properties
        .insert("message.max.bytes".into(), "2097152".into());
    assert_eq!(
        config.sink_settings().queue_max_kbytes,
        Some(8 * 1024 + 2048)
    );
    config.relay.max_in_flight_bytes = 0;
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("relay.max_in_flight_bytes") && err.contains("between 1 and"),
        "{err}"
    );
}
