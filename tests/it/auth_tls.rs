//! Authentication, TLS and secrets, against the relay binary: a wrong
//! password, a role without REPLICATION and a login revoked mid-stream end
//! the relay fast with a message naming the fix; TLS modes encrypt the
//! replication session, verify the server's name and trust only the given
//! root certificate (or the system store when asked); settings the relay
//! cannot honour are refused; a canary password never appears in any log
//! line, even at trace level. Kafka: SASL refused by the broker stops the
//! relay without quoting the password. (Kafka ACL refusals are injected
//! with the mock cluster: see `broker_faults`.)
//!
//! Every test uses its own roles and never changes a server-wide setting.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use outbox_relay::error::Cause;

use crate::support::auth::*;
use crate::support::*;

/// How long a refused start may take to exit: "fast", with room for a
/// loaded 2-core machine (connect timeout is 10 s; a retry loop would not
/// end at all).
const FAST_EXIT: Duration = Duration::from_secs(15);

// ---------------------------------------------------- PostgreSQL authentication

/// Starts the relay with `config`, expects exit code [`EXIT_SOURCE`] within
/// [`FAST_EXIT`] and no retry; returns the log.
async fn expect_fast_refusal(config: &std::path::Path) -> String {
    expect_fast_exit(config, EXIT_SOURCE).await
}

/// Starts the relay with `config`, expects exit code `code` within
/// [`FAST_EXIT`] and no retry; returns the log.
async fn expect_fast_exit(config: &std::path::Path, code: i32) -> String {
    let started = Instant::now();
    let mut relay = Relay::process(config);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert!(
        !status.success(),
        "refused start exits non-zero: {status:?}\n{log}"
    );
    assert_eq!(status.code(), Some(code), "exit code\n{log}");
    assert!(
        !log.contains("retrying"),
        "no retry for a fatal error:\n{log}"
    );
    println!(
        "refused start exited after {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        log.lines()
            .find(|l| l.starts_with("outbox-relay:"))
            .unwrap_or_default()
    );
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_exits_fast_naming_authentication_and_the_role() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let config =
        outbox.write_config_with_url(&pg_url_for("relay", "not-the-relay-password", ""), "");
    let log = expect_fast_refusal(&config).await;
    assert_fatal_cause(&log, "postgres_authentication_failed");
    assert!(log.contains("authentication failed"), "{log}");
    assert!(log.contains("\"relay\""), "names the role: {log}");
    // Said once, with the fix, on each line that says it (the ERROR line
    // and the one on stderr): not once per layer the error went through.
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("authentication failed"))
        .collect();
    assert!(!lines.is_empty(), "{log}");
    for line in lines {
        assert_eq!(
            line.matches("authentication failed for role").count(),
            1,
            "the refusal said once: {line}"
        );
        assert_eq!(line.matches("check the password").count(), 1, "{line}");
    }
    assert!(
        !log.contains("not-the-relay-password"),
        "no password in the log"
    );
    assert!(!outbox.slot_active().await);
    outbox.drop_all().await;
    report_wall_time("auth-wrong-password", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_without_replication_exits_fast_telling_to_alter_role() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let role = TestRole::create(&outbox, "LOGIN", "no-repl-pw").await;
    let config = outbox.write_config_with_url(&pg_url_for(&role.name, &role.password, ""), "");
    let log = expect_fast_refusal(&config).await;
    assert_fatal_cause(&log, "replication_privilege_missing");
    assert!(
        log.contains(&format!("ALTER ROLE {} REPLICATION", role.name)),
        "{log}"
    );
    outbox.drop_all().await;
    role.drop_role(&outbox.admin).await;
    report_wall_time("auth-no-replication", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_revoked_mid_stream_exits_with_a_clear_message() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let role = TestRole::create(&outbox, "LOGIN REPLICATION", "revoked-pw").await;
    let config = outbox.write_config_with_url(&pg_url_for(&role.name, &role.password, ""), "");
    let mut relay = Relay::process(&config);
    let mut writer = outbox.writer().await;
    let committed = outbox
        .commit_events(&mut writer, 50, 2, 10, &mut HashMap::new())
        .await;
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    check_delivery("login-revoked-before", &committed, &received);

    outbox
        .admin
        .batch_execute(&format!("ALTER ROLE {} NOLOGIN", role.name))
        .await
        .unwrap();
    let revoked_at = Instant::now();
    outbox.terminate_walsender(None, DEADLINE).await;
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert!(!status.success(), "{status:?}\n{log}");
    assert!(log.contains("authentication failed"), "{log}");
    assert!(log.contains(&role.name), "names the role: {log}");
    assert!(log.contains("not permitted to log in"), "says why: {log}");
    println!(
        "login revoked: exited {:.1} s after the walsender was terminated: {}",
        revoked_at.elapsed().as_secs_f64(),
        log.lines()
            .find(|l| l.starts_with("outbox-relay:"))
            .unwrap_or_default()
    );
    outbox.drop_all().await;
    role.drop_role(&outbox.admin).await;
    report_wall_time("auth-login-revoked", started);
}

// ------------------------------------------------------------ TLS to PostgreSQL

/// Whether the walsender holding the slot speaks TLS, per `pg_stat_ssl`.
async fn walsender_ssl(outbox: &TestOutbox) -> (bool, Option<String>) {
    let pid = outbox
        .walsender_pid()
        .await
        .expect("a walsender holds the slot");
    let row = outbox
        .admin
        .query_one(
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = $1",
            &[&pid],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

async fn tls_delivers(case: &str, conninfo: &str) {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let config = outbox.write_config_with_url(conninfo, "");
    let mut relay = Relay::process(&config);
    wait_until("the relay to hold the slot", DEADLINE, || {
        outbox.slot_active()
    })
    .await;
    let (ssl, version) = walsender_ssl(&outbox).await;
    assert!(ssl, "{case}: the replication session is encrypted");
    println!("{case}: walsender TLS version {version:?}");
    let mut writer = outbox.writer().await;
    let committed = outbox
        .commit_events(&mut writer, 20, 2, 5, &mut HashMap::new())
        .await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}");
    let received = consume_to_end(&topic).await;
    let summary = check_delivery(case, &committed, &received);
    assert_eq!(summary.duplicated, 0);
    outbox.drop_all().await;
    report_wall_time(case, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verify_full_against_localhost_connects_and_delivers() {
    let query = format!("sslmode=verify-full&sslrootcert={}", env("PG_CA_CERT"));
    let url = pg_url_at("localhost", "relay", "relay-test-password", &query);
    tls_delivers("tls-verify-full", &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_require_encrypts_the_replication_session() {
    let url = pg_url_for("relay", "relay-test-password", "sslmode=require");
    tls_delivers("tls-require", &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verify_full_against_a_wrong_host_name_refuses_fast() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let conninfo = format!(
        "host=wrong.example hostaddr=127.0.0.1 port={} user=relay password=relay-test-password \
         dbname=postgres sslmode=verify-full sslrootcert={}",
        env("PG_PORT"),
        env("PG_CA_CERT")
    );
    let config = outbox.write_config_with_url(&conninfo, "");
    let log = expect_fast_refusal(&config).await;
    assert!(log.contains("certificate"), "{log}");
    assert!(
        log.contains("wrong.example"),
        "names the host checked: {log}"
    );
    assert!(
        !log.contains("relay-test-password"),
        "no password in the log"
    );
    assert!(!outbox.slot_active().await);
    outbox.drop_all().await;
    report_wall_time("tls-wrong-host", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_the_relay_cannot_honour_refuse_fast_naming_the_fix() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    // What the conninfo alone rules out is a config error; a verify mode
    // without a root certificate only at connect (over a Unix socket,
    // where sslmode does not apply, it is fine).
    for (query, says, code) in [
        (
            "sslmode=disable&channel_binding=require",
            "channel_binding=require needs TLS",
            EXIT_CONFIG,
        ),
        ("sslmode=verify-full", "sslrootcert=<path", EXIT_SOURCE),
        (
            "sslmode=verify-ca&sslrootcert=system",
            "sslmode=verify-full",
            EXIT_CONFIG,
        ),
    ] {
        let url = pg_url_at("localhost", "relay", "relay-test-password", query);
        let config = outbox.write_config_with_url(&url, "");
        let log = expect_fast_exit(&config, code).await;
        assert!(log.contains(says), "{query}: {log}");
        if code == EXIT_CONFIG {
            assert!(log.contains("postgres.url"), "names the field: {log}");
        }
    }
    assert!(!outbox.slot_active().await);
    outbox.drop_all().await;
    report_wall_time("tls-refused-settings", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslrootcert_file_is_the_only_trust_and_system_means_the_system_store() {
    use crate::support::tls::ThrowawayCa;
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    // The relay's "system trust store" here is the test server's CA
    // (OpenSSL reads SSL_CERT_FILE), so trusting the system store would let
    // the server's certificate pass.
    let system_store = [("SSL_CERT_FILE", env("PG_CA_CERT"))];
    let system_store: Vec<(&str, &str)> =
        system_store.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // sslrootcert=<another CA's file>: the system store must not count.
    let other = ThrowawayCa::create();
    let url = pg_url_at(
        "localhost",
        "relay",
        "relay-test-password",
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            other.ca_cert.display()
        ),
    );
    let config = outbox.write_config_with_url(&url, "");
    let mut relay = Relay::process_with_env(&config, &system_store);
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SOURCE), "refused: {log}");
    assert!(log.contains("certificate"), "{log}");

    // sslrootcert=system: that store, and verify-full by default.
    let url = pg_url_at(
        "localhost",
        "relay",
        "relay-test-password",
        "sslrootcert=system",
    );
    let config = outbox.write_config_with_url(&url, "");
    let mut relay = Relay::process_with_env(&config, &system_store);
    let mut writer = outbox.writer().await;
    let committed = outbox
        .commit_events(&mut writer, 10, 2, 5, &mut HashMap::new())
        .await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let (ssl, _) = walsender_ssl(&outbox).await;
    assert!(ssl);
    assert!(relay.terminate().await.success());
    outbox.drop_all().await;
    report_wall_time("tls-root-cert-trust", started);
}

// -------------------------------------------------------- secrets never in logs

/// A secret with every character that URLs and key=value strings give a
/// meaning to, between two unique markers: a leak of its beginning or its
/// end shows even where the middle was cut off or escaped.
struct Canary {
    text: String,
    head: String,
    tail: String,
}

impl Canary {
    fn new(prefix: &str) -> Canary {
        let marker = || uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let head = format!("{prefix}{}", marker());
        let tail = format!("{}{prefix}", marker());
        Canary {
            text: format!("{head}/?@#:%='\" &x {tail}"),
            head,
            tail,
        }
    }

    /// What must appear in no output line: the secret, as the URL and the
    /// key=value string carry it, percent-encoded, and its markers.
    fn forms(&self) -> Vec<String> {
        vec![
            self.text.clone(),
            percent_encode_all(&self.text),
            percent_encode_minimal(&self.text),
            self.head.clone(),
            self.tail.clone(),
        ]
    }
}

/// Replaces `line` (which must be there) in the config at `path`.
fn edit_config(path: &std::path::Path, line: &str, replacement: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(line), "{line:?} not in the config");
    std::fs::write(path, text.replace(line, replacement)).unwrap();
}

/// Starts a relay at trace level with `config`, waits for it to exit with
/// `code` within [`FAST_EXIT`], returns its output.
async fn refused_run(config: &std::path::Path, code: i32, says: &str) -> String {
    let mut relay = Relay::process_with_log(config, "trace");
    let status = relay.wait(FAST_EXIT).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(code), "exit code\n{log}");
    assert!(log.contains(says), "says {says:?}:\n{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_secrets_never_appear_in_trace_logs() {
    let started = Instant::now();
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    let pg = Canary::new("pgcanary");
    let kafka = Canary::new("kcanary");
    let role = TestRole::create(&outbox, "LOGIN REPLICATION", &pg.text).await;
    let kafka_secrets = format!(
        "[kafka.properties]\n\"sasl.password\" = {k}\n\"ssl.key.password\" = {k}",
        k = toml_string(&kafka.text)
    );
    // The URL carries '/', '?', '#', ':', '=', quotes and the space raw, as
    // tokio-postgres accepts them; only '%' and '@' are encoded.
    let url = pg_url_written(
        "127.0.0.1",
        &role.name,
        &percent_encode_minimal(&pg.text),
        "",
    );
    let key_value = pg_key_value_for(&role.name, &pg.text, "");
    let config = outbox.write_config_with_url(&url, &kafka_secrets);
    let forbidden: Vec<String> = pg.forms().into_iter().chain(kafka.forms()).collect();
    // Each output is checked as soon as it is complete, so the first leak
    // is what fails the test.
    let mut lines_checked = 0;
    let mut check = |what: &str, text: String| {
        assert_no_secret(what, &text, &forbidden);
        lines_checked += text.lines().count();
    };

    // Start path, URL form. A full cycle: connect, deliver, reconnect after a
    // walsender kill, graceful stop; everything logged at trace level.
    let mut relay = Relay::process_with_log(&config, "trace");
    let cycle_log = relay.log_path().to_path_buf();
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 20, 2, 5, &mut seqs).await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let killed = outbox.terminate_walsender(None, DEADLINE).await;
    wait_until("the relay to reconnect", DEADLINE, || async {
        outbox.walsender_pid().await.is_some_and(|p| p != killed)
    })
    .await;
    committed.extend(outbox.commit_events(&mut writer, 20, 2, 5, &mut seqs).await);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}");
    let cycle = std::fs::read_to_string(&cycle_log).unwrap();
    // The trace filter took effect (otherwise this proves little).
    assert!(cycle.contains("TRACE"), "trace-level lines were written");
    assert!(cycle.contains("replication stream started"), "{cycle}");
    check("start, URL form", cycle);

    // Start path, key=value form.
    let kv_config = outbox.write_config_with_url(&key_value, &kafka_secrets);
    let mut relay = Relay::process_with_log(&kv_config, "trace");
    committed.extend(outbox.commit_events(&mut writer, 10, 2, 5, &mut seqs).await);
    consume_all_ids(&topic, &committed, DEADLINE).await;
    let kv_log = relay.log_path().to_path_buf();
    assert!(relay.terminate().await.success());
    check(
        "start, key=value form",
        std::fs::read_to_string(&kv_log).unwrap(),
    );
    let received = consume_to_end(&topic).await;
    check_delivery("canary", &committed, &received);

    // Failure path: the broker is unreachable; deliveries time out and the
    // relay rebuilds its producer.
    let unreachable = outbox.write_config_with_url(&url, &kafka_secrets);
    edit_config(
        &unreachable,
        &format!("brokers = \"{}\"", env("KAFKA_BROKERS")),
        &format!(
            "brokers = \"127.0.0.1:{}\"\nmessage_timeout_ms = 2000\nshutdown_drain_secs = 1",
            free_port()
        ),
    );
    let mut relay = Relay::process_with_log(&unreachable, "trace");
    outbox.commit_events(&mut writer, 4, 2, 2, &mut seqs).await;
    relay.wait_for_event("delivery_failed", DEADLINE).await;
    let unreachable_log = relay.log_path().to_path_buf();
    relay.terminate().await;
    check(
        "broker unreachable",
        std::fs::read_to_string(&unreachable_log).unwrap(),
    );

    // Failure path: a wrong password that contains the canary, both forms.
    let wrong = format!("{}-wrong", pg.text);
    let wrong_url = pg_url_written("127.0.0.1", &role.name, &percent_encode_minimal(&wrong), "");
    for conninfo in [wrong_url, pg_key_value_for(&role.name, &wrong, "")] {
        let config = outbox.write_config_with_url(&conninfo, &kafka_secrets);
        check(
            "wrong password",
            refused_run(&config, EXIT_SOURCE, "authentication failed").await,
        );
    }

    // Config path: a conninfo the relay refuses, whose error names the
    // field and the fix: an unsupported sslmode, and a raw '@' in the
    // password.
    for (conninfo, says) in [
        (
            pg_key_value_for(&role.name, &pg.text, "sslmode=allow"),
            "sslmode",
        ),
        (
            pg_url_written("127.0.0.1", &role.name, &pg.text, "sslmode=disable"),
            "more than one '@'",
        ),
    ] {
        let config = outbox.write_config_with_url(&conninfo, &kafka_secrets);
        check(
            "refused conninfo",
            refused_run(&config, EXIT_CONFIG, says).await,
        );
    }

    // And the config check, which prints the whole config.
    for config in [&config, &kv_config] {
        let checked = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(["check-config", "--config"])
            .arg(config)
            .env("RUST_LOG", "trace")
            .output()
            .unwrap();
        assert!(checked.status.success());
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        check("check-config", output);
    }
    println!("canary: {lines_checked} log lines checked");
    outbox.drop_all().await;
    role.drop_role(&outbox.admin).await;
    report_wall_time("canary", started);
}

/// Panics naming the first line of `text` that holds one of `forbidden`.
fn assert_no_secret(what: &str, text: &str, forbidden: &[String]) {
    // Colour codes sit between a field's name and value; strip them so that
    // a secret cannot hide behind one.
    let text = strip_ansi(text);
    for secret in forbidden {
        if let Some(line) = text.lines().find(|l| l.contains(secret.as_str())) {
            panic!("{what}: a secret ({secret}) appears in the output: {line}");
        }
    }
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

// --------------------------------------------------------- Kafka authentication

/// The client speaks SASL to a listener that does not: the broker refuses
/// the handshake, which librdkafka reports as an authentication failure.
/// The relay stops at once, saying so, without quoting the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_refused_by_the_broker_stops_the_relay() {
    let outbox = TestOutbox::create("jsonb").await;
    let mut settings = outbox.settings();
    settings.sink.properties.extend(
        [
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", "relay"),
            ("sasl.password", "Canary-Not-The-Password"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let relay = Relay::in_process(settings);
    let (_, commit_end) = insert_watched(&outbox, "order").await;
    let err = relay
        .join(Duration::from_secs(30))
        .await
        .expect_err("refused credentials stop the relay");
    let msg = err.to_string();
    println!("{msg}");
    assert_eq!(err.cause(), Cause::KafkaAuthenticationFailed, "{msg}");
    assert!(
        msg.contains("SASL credentials") && msg.contains("sasl.password"),
        "{msg}"
    );
    assert!(!msg.contains("Canary-Not-The-Password"), "{msg}");
    let confirmed = outbox.confirmed_flush_lsn().await.expect("slot");
    assert!(confirmed < commit_end);
    outbox.drop_all().await;
}
