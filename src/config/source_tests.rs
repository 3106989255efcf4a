//! Tests for the event source, cleanup and tracing keys of the config.

use super::*;

const BASE: &str = r#"
[postgres]
url = "postgres://relay:pw@127.0.0.1:5432/app"
slot = "outbox_relay"
publication = "outbox_pub"

[kafka]
brokers = "127.0.0.1:9092"

[cloudevents]
source = "/orders-service"
"#;

/// `BASE` with `postgres` lines added to `[postgres]` and `rest` appended.
fn load(postgres: &str, rest: &str) -> Result<Config, ConfigError> {
    let toml = BASE.replace(
        "publication = \"outbox_pub\"\n",
        &format!("publication = \"outbox_pub\"\n{postgres}\n"),
    ) + rest;
    Config::from_figment(&Config::figment_from_str(&toml, Vec::new()))
}

fn refused(result: Result<Config, ConfigError>) -> (String, String) {
    match result {
        Err(ConfigError::Invalid { field, constraint }) => (field, constraint),
        other => panic!("expected ConfigError::Invalid, got {other:?}"),
    }
}

#[test]
fn defaults_stream_the_table_keep_rows_and_trace_nothing() {
    let config = load("", "").unwrap();
    assert_eq!(config.postgres.source, Source::Table);
    assert_eq!(config.postgres.message_prefix, "outbox");
    assert_eq!(config.postgres.cleanup, Cleanup::None);
    assert_eq!(
        config.postgres.columns.tracestate_column(),
        Some("tracestate")
    );
    assert_eq!(config.tracing.otlp_endpoint, None);
}

#[test]
fn sources_cleanup_and_tracing_are_read_as_written() {
    let config = load(
        "source = \"both\"\nmessage_prefix = \"billing\"\ncleanup = \"delete-after-ack\"",
        "[tracing]\notlp_endpoint = \"http://collector:4318\"\nservice_name = \"relay-a\"\n",
    )
    .unwrap();
    assert_eq!(config.postgres.source, Source::Both);
    assert_eq!(config.postgres.message_prefix, "billing");
    assert_eq!(config.postgres.cleanup, Cleanup::DeleteAfterAck);
    assert_eq!(
        config.tracing.otlp_endpoint.as_deref(),
        Some("http://collector:4318")
    );
    let config = load("source = \"messages\"", "").unwrap();
    assert_eq!(config.postgres.source, Source::Messages);
}

#[test]
fn unknown_or_contradictory_values_are_refused_naming_the_key() {
    for (postgres, rest) in [
        ("source = \"queue\"", ""),
        ("cleanup = \"delete\"", ""),
        ("", "[tracing]\nendpoint = \"http://c:4318\"\n"),
    ] {
        assert!(load(postgres, rest).is_err(), "{postgres} {rest}");
    }
    let (field, why) = refused(load(
        "source = \"messages\"\ncleanup = \"delete-after-ack\"",
        "",
    ));
    assert_eq!(field, "postgres.cleanup");
    assert!(why.contains("messages"), "{why}");
    for prefix in ["", "outbox-relay-heartbeat"] {
        let (field, _) = refused(load(&format!("message_prefix = \"{prefix}\""), ""));
        assert_eq!(field, "postgres.message_prefix");
    }
    let (field, why) = refused(load("", "[tracing]\notlp_endpoint = \"https://c:4318\"\n"));
    assert_eq!(field, "tracing.otlp_endpoint");
    assert!(why.contains("http://"), "{why}");
    let (field, _) = refused(load(
        "[postgres.header_columns]\ntp = \"traceparent\"",
        "[tracing]\notlp_endpoint = \"http://c:4318\"\n",
    ));
    assert_eq!(field, "postgres.header_columns.tp");
    // Without an exporter the relay writes no traceparent header itself.
    load("[postgres.header_columns]\ntp = \"traceparent\"", "").unwrap();
}
