//! `[[routes]]` and `[sinks.NAME]`: which events go to a webhook instead of
//! Kafka, and how each webhook is reached.
//!
//! Routes are tried in order; the first whose `aggregatetype` and `type`
//! globs both match an event decides its sink; an event no route matches
//! goes to Kafka, as without any route. A sink is `kind = "http"`.
//!
//! Invariants: every route names a configured sink; every HTTP sink has an
//! `http://` or `https://` URL and a non-empty retry schedule; secrets
//! (`secret`, `secrets`, `bearer_token`) serialize as `***` and never reach
//! an error text.

use super::*;

/// Default quick attempts in line before an event is moved to the delivery
/// table.
pub const DEFAULT_INLINE_ATTEMPTS: u32 = 3;
/// Default retry schedule: a minute, five, half an hour, two hours, a day;
/// then DEAD.
pub const DEFAULT_RETRY_SCHEDULE_SECS: [u64; 5] = [60, 300, 1800, 7200, 86_400];
/// At most this many attempts (in line plus scheduled) per event.
const MAX_SCHEDULE_LEN: usize = 100;
/// A retry never waits more than a week.
const MAX_RETRY_DELAY_SECS: u64 = 7 * 86_400;
const MAX_TIMEOUT_MS: u64 = 300_000;

/// One `[[routes]]` entry. A glob left out matches everything.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    pub aggregatetype: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// A name under `[sinks]`.
    pub sink: String,
    /// What a dead letter of this route's events does to their aggregate;
    /// unset: the sink's `after_dead_letter`.
    pub after_dead_letter: Option<AfterDeadLetter>,
}

/// The kinds of sink a route may name.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    #[default]
    Http,
}

/// One `[sinks.NAME]` entry.
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SinkConfig {
    pub kind: SinkKind,
    pub url: String,
    /// The signing secret; `secrets` adds more (rotation: every active
    /// secret signs, receivers accept any).
    #[serde(serialize_with = "serialize_redacted_option")]
    pub secret: Option<String>,
    #[serde(serialize_with = "serialize_redacted_list")]
    pub secrets: Vec<String>,
    /// A PEM file of CA certificates trusted for the endpoint's TLS
    /// certificate, besides the system store (a private CA).
    pub ca_file: Option<String>,
    /// Sent as `Authorization: Bearer <token>` when set.
    #[serde(serialize_with = "serialize_redacted_option")]
    pub bearer_token: Option<String>,
    /// Delay before each scheduled retry; after the last the event is DEAD.
    pub retry_schedule_secs: Vec<u64>,
    /// Quick attempts in line (a second apart at most) before the event is
    /// moved to the delivery table.
    pub inline_attempts: u32,
    pub timeout_ms: u64,
    /// Events of different aggregates in flight at once (one per aggregate).
    pub max_concurrency: usize,
    /// How often the retry worker looks for due rows.
    pub retry_poll_ms: u64,
    /// Whether a DEAD event (or a dead letter of an event routed here)
    /// holds its aggregate's later events (`park`) or lets them go on
    /// (`skip`).
    pub after_dead_letter: AfterDeadLetter,
}

impl Default for SinkConfig {
    fn default() -> Self {
        SinkConfig {
            kind: SinkKind::Http,
            url: String::new(),
            secret: None,
            secrets: Vec::new(),
            ca_file: None,
            bearer_token: None,
            retry_schedule_secs: DEFAULT_RETRY_SCHEDULE_SECS.to_vec(),
            inline_attempts: DEFAULT_INLINE_ATTEMPTS,
            timeout_ms: 10_000,
            max_concurrency: 16,
            retry_poll_ms: 1_000,
            after_dead_letter: AfterDeadLetter::Park,
        }
    }
}

impl fmt::Debug for SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Through the redacting serializer: no secret in Debug either.
        match serde_json::to_string(self) {
            Ok(shown) => f.write_str(&shown),
            Err(_) => f.write_str("SinkConfig"),
        }
    }
}

impl SinkConfig {
    /// Every active signing secret, `secret` first.
    pub fn active_secrets(&self) -> Vec<String> {
        self.secret
            .iter()
            .chain(&self.secrets)
            .filter(|s| !s.is_empty())
            .cloned()
            .collect()
    }
}

pub(super) fn serialize_redacted_option<S: Serializer>(
    value: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(_) => serializer.serialize_some("***"),
        None => serializer.serialize_none(),
    }
}

fn serialize_redacted_list<S: Serializer>(
    value: &[String],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(value.iter().map(|_| "***"))
}

fn invalid(field: impl Into<String>, constraint: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        constraint: constraint.into(),
    }
}

/// The rules of `[[routes]]`, `[sinks]` and `postgres.delivery_table`.
pub(super) fn validate(config: &Config) -> Result<(), ConfigError> {
    let parked = config.postgres.parked_table.trim();
    let parts: Vec<&str> = parked.split('.').collect();
    if !parked.is_empty() && (parts.len() > 2 || parts.iter().any(|p| !is_plain_identifier(p))) {
        return Err(invalid(
            "postgres.parked_table",
            "must be a table name or schema.name of lower-case letters, digits and \
             underscores (unset: the outbox table's name followed by _parked, in its schema)",
        ));
    }
    let table = config.postgres.delivery_table.trim();
    let parts: Vec<&str> = table.split('.').collect();
    if table.is_empty() || parts.len() > 2 || parts.iter().any(|p| !is_plain_identifier(p)) {
        return Err(invalid(
            "postgres.delivery_table",
            "must be a table name or schema.name of lower-case letters, digits and \
             underscores (default \"outbox_delivery\", in the outbox table's schema)",
        ));
    }
    for (i, route) in config.routes.iter().enumerate() {
        let field = format!("routes[{i}].sink");
        if route.sink.is_empty() {
            return Err(invalid(
                field,
                "required: the name of a sink under [sinks] (e.g. sink = \"billing\" with a \
                 [sinks.billing] table)",
            ));
        }
        if !config.sinks.contains_key(&route.sink) {
            let known: Vec<&str> = config.sinks.keys().map(String::as_str).collect();
            return Err(invalid(
                field,
                format!(
                    "no sink named \"{}\"; add a [sinks.{}] table or use one of: {}",
                    route.sink,
                    route.sink,
                    if known.is_empty() {
                        "(none configured)".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
        for (key, glob) in [
            ("aggregatetype", &route.aggregatetype),
            ("type", &route.event_type),
        ] {
            if glob.as_deref().is_some_and(str::is_empty) {
                return Err(invalid(
                    format!("routes[{i}].{key}"),
                    "must not be empty; leave the key out to match every event",
                ));
            }
        }
    }
    for (name, sink) in &config.sinks {
        validate_sink(name, sink)?;
    }
    Ok(())
}

fn validate_sink(name: &str, sink: &SinkConfig) -> Result<(), ConfigError> {
    let field = |key: &str| format!("sinks.{name}.{key}");
    if !is_plain_identifier(name) {
        return Err(invalid(
            format!("sinks.{name}"),
            "sink names are lower-case letters, digits and underscores (they label metrics and \
             delivery rows)",
        ));
    }
    let url = sink.url.trim();
    if url.is_empty() {
        return Err(invalid(
            field("url"),
            "required for kind = \"http\": the endpoint events are POSTed to, \
             e.g. \"https://billing.example/hooks/outbox\"",
        ));
    }
    if let Some(ca_file) = &sink.ca_file {
        if ca_file.trim().is_empty() {
            return Err(invalid(
                field("ca_file"),
                "must name a PEM file of CA certificates, or be left out to trust the system \
                 store only",
            ));
        }
        if !url.starts_with("https://") {
            return Err(invalid(
                field("ca_file"),
                "only applies to an https:// url; remove it or use https",
            ));
        }
    }
    if sink.retry_schedule_secs.is_empty() || sink.retry_schedule_secs.len() > MAX_SCHEDULE_LEN {
        return Err(invalid(
            field("retry_schedule_secs"),
            format!(
                "must list 1 to {MAX_SCHEDULE_LEN} delays in seconds, e.g. [60, 300, 1800, \
                 7200, 86400]; after the last one an event is DEAD"
            ),
        ));
    }
    if sink
        .retry_schedule_secs
        .iter()
        .any(|&d| d == 0 || d > MAX_RETRY_DELAY_SECS)
    {
        return Err(invalid(
            field("retry_schedule_secs"),
            format!("every delay must be between 1 and {MAX_RETRY_DELAY_SECS} seconds"),
        ));
    }
    if sink.inline_attempts == 0 || sink.inline_attempts > 10 {
        return Err(invalid(
            field("inline_attempts"),
            "must be between 1 and 10: quick attempts before an event moves to the delivery \
             table (the slot waits meanwhile)",
        ));
    }
    if sink.timeout_ms == 0 || sink.timeout_ms > MAX_TIMEOUT_MS {
        return Err(invalid(
            field("timeout_ms"),
            format!("must be between 1 and {MAX_TIMEOUT_MS} (milliseconds per request)"),
        ));
    }
    if sink.max_concurrency == 0 || sink.max_concurrency > 1024 {
        return Err(invalid(
            field("max_concurrency"),
            "must be between 1 and 1024",
        ));
    }
    if sink.retry_poll_ms == 0 || sink.retry_poll_ms > 60_000 {
        return Err(invalid(
            field("retry_poll_ms"),
            "must be between 1 and 60000 (milliseconds)",
        ));
    }
    if sink.secrets.iter().any(String::is_empty) || sink.secret.as_deref() == Some("") {
        return Err(invalid(
            field("secrets"),
            "a signing secret must not be empty; remove it instead",
        ));
    }
    Ok(())
}

/// Lower-case letters, digits and underscores, not starting with a digit,
/// at most 63 bytes.
fn is_plain_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// What is allowed but probably a mistake, one sentence each, naming the
/// key: a signing secret or bearer token sent in clear text to a host that
/// is not this machine.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for sink in config.http_sinks().unwrap_or_default() {
        let endpoint = &sink.endpoint;
        let signs = !sink.secrets.is_empty() || sink.bearer_token.is_some();
        if !endpoint.tls && signs && !endpoint.is_loopback() {
            out.push(format!(
                "sinks.{}.url: http:// to {} sends signed events and any bearer token in \
                 clear text; use https:// for anything but a loopback address",
                sink.name, endpoint.host
            ));
        }
    }
    if !config.sinks.is_empty() && config.routes.is_empty() {
        out.push(
            "sinks: sinks are configured but no [[routes]] entry names one; every event goes \
             to Kafka"
                .to_owned(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(extra: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        crate::config::load_for_test(extra, env)
    }

    fn invalid_field(extra: &str) -> (String, String) {
        match load(extra, &[]) {
            Err(ConfigError::Invalid { field, constraint }) => (field, constraint),
            other => panic!("expected a validation error for {extra}: {other:?}"),
        }
    }

    #[test]
    fn exactly_once_is_refused_together_with_webhook_routes() {
        let routes = "[[routes]]\nsink = \"billing\"\n[sinks.billing]\nkind = \"http\"\n\
                      url = \"https://billing.example/hooks\"\nsecret = \"s\"";
        assert!(load(routes, &[]).is_ok(), "the routes alone are valid");
        let field_why = match load(routes, &[("OUTBOX_RELAY__KAFKA__DELIVERY", "exactly-once")]) {
            Err(ConfigError::Invalid { field, constraint }) => (field, constraint),
            other => panic!("exactly-once with webhook routes was accepted: {other:?}"),
        };
        let (field, why) = field_why;
        assert_eq!(field, "kafka.delivery");
        assert!(
            why.contains("[[routes]]") && why.contains("at-least-once"),
            "{why}"
        );
    }

    #[test]
    fn errors_name_the_key_and_the_fix() {
        let (field, why) = invalid_field(
            "[[routes]]\nsink = \"billing\"\n[sinks.other]\nurl = \"https://x.example/\"",
        );
        assert_eq!(field, "routes[0].sink");
        assert!(
            why.contains("[sinks.billing]") && why.contains("other"),
            "{why}"
        );
        let (field, why) =
            invalid_field("[[routes]]\nsink = \"billing\"\n[sinks.billing]\nkind = \"http\"");
        assert_eq!(field, "sinks.billing.url");
        assert!(why.contains("required"), "{why}");
        let (field, _) = invalid_field("[sinks.billing]\nurl = \"ftp://x\"");
        assert_eq!(field, "sinks.billing.url");
        let (field, _) =
            invalid_field("[sinks.billing]\nurl = \"https://x/\"\nretry_schedule_secs = []");
        assert_eq!(field, "sinks.billing.retry_schedule_secs");
        let (field, _) =
            invalid_field("[sinks.billing]\nurl = \"https://x/\"\ninline_attempts = 0");
        assert_eq!(field, "sinks.billing.inline_attempts");
        let (field, _) = invalid_field(
            "[[routes]]\naggregatetype = \"\"\nsink = \"b\"\n[sinks.b]\nurl = \"https://x/\"",
        );
        assert_eq!(field, "routes[0].aggregatetype");
        let (field, _) = invalid_field("[sinks.b]\nurl = \"https://x/\"\nsecrets = [\"\"]");
        assert_eq!(field, "sinks.b.secrets");
        let (field, _) = invalid_field("[sinks.b]\nurl = \"https://u:p@x/\"");
        assert_eq!(field, "sinks.b.url");
        let (field, _) = invalid_field("[sinks.Billing]\nurl = \"https://x/\"");
        assert_eq!(field, "sinks.Billing");
        let (field, why) = invalid_field("[sinks.b]\nurl = \"http://x/\"\nca_file = \"/ca.pem\"");
        assert_eq!(field, "sinks.b.ca_file");
        assert!(why.contains("https"), "{why}");
    }

    #[test]
    fn the_documented_example_loads_with_its_defaults() {
        let config = load(
            r#"
            [[routes]]
            aggregatetype = "payment*"
            type = "*"
            sink = "billing"

            [sinks.billing]
            kind = "http"
            url = "https://billing.example/hooks/outbox"
            secret = "s1"
            retry_schedule_secs = [60, 300, 1800, 7200, 86400]
            timeout_ms = 10000
            "#,
            &[],
        )
        .unwrap();
        let sink = &config.sinks["billing"];
        assert_eq!(sink.active_secrets(), vec!["s1".to_owned()]);
        assert_eq!(sink.inline_attempts, DEFAULT_INLINE_ATTEMPTS);
        assert_eq!(config.postgres.delivery_table, "outbox_delivery");
        assert_eq!(
            config.postgres.delivery_table_parts(),
            ("public".to_owned(), "outbox_delivery".to_owned())
        );
    }

    #[test]
    fn secrets_from_the_environment_are_redacted_everywhere() {
        let canary = "Wh00k-s3cret/?@#:%='\" x";
        let config = load(
            "[[routes]]\nsink = \"billing\"\n[sinks.billing]\nurl = \"https://b.example/\"\nsecrets = [\"Wh00k-older\"]\nbearer_token = \"Wh00k-token\"",
            &[("OUTBOX_RELAY__SINKS__BILLING__SECRET", canary)],
        )
        .unwrap();
        let sink = &config.sinks["billing"];
        assert_eq!(
            sink.active_secrets(),
            vec![canary.to_owned(), "Wh00k-older".to_owned()],
            "the variable sets the secret, rotation keeps the listed one"
        );
        let flattened = format!("{:?}", config.flattened());
        for shown in [
            format!("{config:?}"),
            format!("{config:#?}"),
            format!("{config}"),
            flattened,
            serde_json::to_string(&config).unwrap(),
            format!("{:?}", config.http_sinks().unwrap()),
        ] {
            assert!(!shown.contains("Wh00k"), "{shown}");
        }
    }

    #[test]
    fn plain_http_with_a_secret_to_another_host_is_a_warning() {
        let config = load(
            "[[routes]]\nsink = \"b\"\n[sinks.b]\nurl = \"http://hooks.example/x\"\nsecret = \"s\"",
            &[],
        )
        .unwrap();
        let warnings = warnings(&config);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("sinks.b.url: "), "{warnings:?}");
        assert!(!warnings[0].contains("\"s\""), "{warnings:?}");
        for quiet in [
            "[[routes]]\nsink = \"b\"\n[sinks.b]\nurl = \"http://127.0.0.1:9/x\"\nsecret = \"s\"",
            "[[routes]]\nsink = \"b\"\n[sinks.b]\nurl = \"https://hooks.example/x\"\nsecret = \"s\"",
        ] {
            assert!(warnings_of(quiet).is_empty(), "{quiet}");
        }
    }

    fn warnings_of(extra: &str) -> Vec<String> {
        warnings(&load(extra, &[]).unwrap())
    }
}
