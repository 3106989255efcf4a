//! The relay against a secured broker: the SASL_SSL listener of
//! `scripts/services` (SCRAM-SHA-512 over TLS from the services' own CA,
//! ACLs enforced by KRaft's StandardAuthorizer), the relay's principal
//! granted exactly the ACLs docs/operations.md lists and nothing else, its
//! password given as `OUTBOX_RELAY__KAFKA__PROPERTIES__SASL_PASSWORD`.
//!
//! At-least-once and exactly-once deliver, and read back (exactly-once
//! across a restart that reads its checkpoint again). Each listed ACL
//! removed in turn stops the relay (exit 4) with one ERROR line naming the
//! missing operation and its resource; DESCRIBE_CONFIGS on the checkpoint
//! topic, which only the compaction check at start needs, is one WARN and
//! the relay runs, as documented, and `outbox-relay check` warns with the
//! grant. No SASL password reaches any output.
//!
//! Topics are created ahead by the PLAINTEXT listener's super user, as
//! production teams create them (the relay's principal may not create
//! topics). Records are read back the same way.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::acls::{self, Acl};
use crate::support::*;

/// How long a relay refused an ACL may take to exit (it takes one to two
/// seconds: the slot, the replication stream, the first produce).
const FAST_EXIT: Duration = Duration::from_secs(30);

const AT_LEAST_ONCE: &str = "at-least-once";
const EXACTLY_ONCE: &str = "exactly-once";

/// One test's outbox with the names its ACLs grant: event topics under
/// `<prefix>.`, the dead-letter and checkpoint topics outside that prefix
/// (a prefixed grant on the event topics must not cover them).
struct Secured {
    outbox: TestOutbox,
    dlq: String,
    checkpoints: String,
}

impl Secured {
    async fn create() -> Self {
        let outbox = TestOutbox::create("jsonb").await;
        let dlq = format!("{}-dlq", outbox.topic_prefix);
        let checkpoints = format!("{}-checkpoints", outbox.topic_prefix);
        outbox.create_topic(&outbox.topic("order"), 3).await;
        outbox.create_topic(&dlq, 1).await;
        outbox
            .create_topic_with_config(&checkpoints, 1, &[("cleanup.policy", "compact")])
            .await;
        Secured {
            outbox,
            dlq,
            checkpoints,
        }
    }

    fn event_topic(&self) -> String {
        self.outbox.topic("order")
    }

    /// The ACLs docs/operations.md lists for `delivery`, for this outbox.
    fn acls(&self, delivery: &str) -> Vec<Acl> {
        let mut acls = vec![
            Acl::topic_prefix(&format!("{}.", self.outbox.topic_prefix), "Write"),
            Acl::topic(&self.dlq, "Write"),
        ];
        if delivery == EXACTLY_ONCE {
            acls.extend([
                Acl::topic(&self.checkpoints, "Write"),
                Acl::topic(&self.checkpoints, "Read"),
                Acl::topic(&self.checkpoints, "DescribeConfigs"),
                Acl::transactional_id(&format!("outbox-relay.{}", self.outbox.slot), "Write"),
            ]);
        }
        acls
    }

    /// The relay's config for the SASL_SSL listener (no password in it).
    fn config(&self, delivery: &str) -> PathBuf {
        let text = self.outbox.config_toml(&acls::relay_properties_toml());
        let brokers = format!("brokers = \"{}\"\n", env("KAFKA_BROKERS"));
        let dlq = format!("dlq_topic = \"{}\"\n", self.outbox.dlq_topic);
        assert!(
            text.contains(&brokers) && text.contains(&dlq),
            "config layout changed"
        );
        let text = text
            .replacen(
                &brokers,
                &format!(
                    "brokers = \"{}\"\ndelivery = \"{delivery}\"\ncheckpoint_topic = \"{}\"\n",
                    acls::sasl_bootstrap(),
                    self.checkpoints
                ),
                1,
            )
            .replacen(&dlq, &format!("dlq_topic = \"{}\"\n", self.dlq), 1);
        let dir = std::env::temp_dir().join(random_name("relay_cfg"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The relay binary with `config`, its SASL password from the
    /// environment.
    fn start(&self, config: &Path) -> Relay {
        let password = acls::relay_password();
        Relay::process_with_env(
            config,
            &[(
                "OUTBOX_RELAY__KAFKA__PROPERTIES__SASL_PASSWORD",
                password.as_str(),
            )],
        )
    }
}

/// The log lines at `level` ("ERROR", "WARN").
fn lines_at<'a>(log: &'a str, level: &str) -> Vec<&'a str> {
    let tag = format!(" {level} ");
    log.lines().filter(|l| l.contains(&tag)).collect()
}

/// Fails if either SASL password appears in `log`.
fn assert_no_password(what: &str, log: &str) {
    for secret in [acls::relay_password(), acls::admin_password()] {
        if let Some(line) = log.lines().find(|l| l.contains(&secret)) {
            panic!("{what}: a SASL password appears in the output: {line}");
        }
    }
}

/// `outbox-relay check` with `config` and the relay's SASL password;
/// returns its standard output, with no password in either stream.
async fn check(config: &Path) -> String {
    let config = config.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(["check", "--config"])
            .arg(&config)
            .env(
                "OUTBOX_RELAY__KAFKA__PROPERTIES__SASL_PASSWORD",
                acls::relay_password(),
            )
            .env_remove("OUTBOX_RELAY_ADMIN_URL")
            .env_remove("OUTBOX_RELAY_CONFIG")
            .output()
            .expect("run outbox-relay check")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_no_password("check", &stdout);
    assert_no_password("check", &String::from_utf8_lossy(&output.stderr));
    stdout
}

/// The line of `check`'s output for `item`, and the fix line after it.
fn check_item(out: &str, item: &str) -> String {
    let mut lines = out.lines().skip_while(|l| !l.contains(item));
    let line = lines
        .next()
        .unwrap_or_else(|| panic!("no {item} in:\n{out}"));
    let fix = lines.next().filter(|l| l.trim_start().starts_with("fix:"));
    format!("{line}\n{}", fix.unwrap_or_default())
}

/// A healthy run: no WARN, no ERROR, no password.
fn assert_quiet(what: &str, log: &str) {
    assert_no_password(what, log);
    let loud: Vec<_> = lines_at(log, "WARN")
        .into_iter()
        .chain(lines_at(log, "ERROR"))
        .collect();
    assert!(loud.is_empty(), "{what}: a healthy run logs {loud:#?}");
}

/// Runs the relay with `config` until every event of `committed` is on the
/// event topic, then stops it; returns its log.
async fn deliver(s: &Secured, config: &Path, committed: &[Committed]) -> String {
    let mut relay = s.start(config);
    let got = consume_all_ids(&s.event_topic(), committed, DEADLINE).await;
    let status = relay.terminate().await;
    let log = relay.log_text();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        got.len() >= committed.len(),
        "read back {} of {}:\n{log}",
        got.len(),
        committed.len()
    );
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_over_sasl_ssl_delivers_with_the_documented_acls() {
    let started = Instant::now();
    let s = Secured::create().await;
    acls::grant(&s.acls(AT_LEAST_ONCE)).await;
    let mut writer = s.outbox.writer().await;
    let committed = s
        .outbox
        .commit_events(&mut writer, 10, 3, 4, &mut HashMap::new())
        .await;
    let log = deliver(&s, &s.config(AT_LEAST_ONCE), &committed).await;
    assert_quiet("at-least-once", &log);
    let received = consume_ids_to_end(&s.event_topic()).await;
    check_delivery("sasl_ssl_at_least_once", &committed, &received);
    acls::revoke(&s.acls(AT_LEAST_ONCE)).await;
    s.outbox.drop_all().await;
    report_wall_time("sasl_ssl_at_least_once", started);
}

/// Exactly-once, twice: the second start reads the checkpoint the first
/// committed (a fetch through a consumer with a group, which the relay's
/// principal has no ACL for), and nothing is written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_over_sasl_ssl_delivers_and_resumes_from_its_checkpoint() {
    let started = Instant::now();
    let s = Secured::create().await;
    acls::grant(&s.acls(EXACTLY_ONCE)).await;
    let config = s.config(EXACTLY_ONCE);
    let mut writer = s.outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = s
        .outbox
        .commit_events(&mut writer, 10, 3, 4, &mut seqs)
        .await;
    let first = deliver(&s, &config, &committed).await;
    assert_quiet("exactly-once, first run", &first);
    committed.extend(
        s.outbox
            .commit_events(&mut writer, 10, 3, 4, &mut seqs)
            .await,
    );
    let second = deliver(&s, &config, &committed).await;
    assert_quiet("exactly-once, second run", &second);
    assert!(
        second.contains("resuming from the last committed checkpoint"),
        "the second run read the first one's checkpoint:\n{second}"
    );
    let received = consume_ids_to_end(&s.event_topic()).await;
    check_exactly_once("sasl_ssl_exactly_once", &committed, &received);
    acls::revoke(&s.acls(EXACTLY_ONCE)).await;
    s.outbox.drop_all().await;
    report_wall_time("sasl_ssl_exactly_once", started);
}

/// Each ACL docs/operations.md lists, removed alone, in exactly-once mode
/// (which needs them all) and then at-least-once: the relay exits 4 with
/// one ERROR line naming the operation and the resource, and no WARN.
/// DESCRIBE_CONFIGS on the checkpoint topic: one WARN naming it, and the
/// relay delivers. One outbox and topic set for every case; the grant is
/// restored after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_missing_acl_stops_the_relay_with_one_error_naming_it() {
    let started = Instant::now();
    let s = Secured::create().await;
    acls::grant(&s.acls(EXACTLY_ONCE)).await;
    let mut writer = s.outbox.writer().await;
    let mut seqs = HashMap::new();
    // A checkpoint to read at every start: only then does the read fetch,
    // which needs READ on the checkpoint topic.
    let mut committed = s
        .outbox
        .commit_events(&mut writer, 1, 1, 1, &mut seqs)
        .await;
    let log = deliver(&s, &s.config(EXACTLY_ONCE), &committed).await;
    assert_quiet("exactly-once, all granted", &log);
    // `check` over SASL_SSL with the same grants.
    let out = check(&s.config(EXACTLY_ONCE)).await;
    for item in ["kafka.checkpoint_topic", "kafka.transactional_id"] {
        let line = check_item(&out, item);
        assert!(line.starts_with("ok"), "{line}");
    }

    for delivery in [EXACTLY_ONCE, AT_LEAST_ONCE] {
        let config = s.config(delivery);
        for acl in s.acls(delivery) {
            let case = format!("{delivery} without {}", acl.grant_args());
            let t0 = Instant::now();
            acls::revoke(std::slice::from_ref(&acl)).await;
            // An event waits, so that the produce path is taken too.
            committed.extend(
                s.outbox
                    .commit_events(&mut writer, 1, 1, 1, &mut seqs)
                    .await,
            );
            if acl.operation == "DescribeConfigs" {
                let log = deliver(&s, &config, &committed).await;
                assert_no_password(&case, &log);
                assert!(lines_at(&log, "ERROR").is_empty(), "{case}:\n{log}");
                let warns = lines_at(&log, "WARN");
                assert!(
                    warns.len() == 1
                        && warns[0].contains("DESCRIBE_CONFIGS")
                        && warns[0].contains(&s.checkpoints),
                    "{case}: one WARN naming the grant and the topic:\n{log}"
                );
                // `check` reports it too, with the grant.
                let line = check_item(&check(&config).await, "kafka.checkpoint_topic");
                assert!(
                    line.starts_with("WARN")
                        && line.contains(&format!(
                            "--operation DescribeConfigs --topic {}",
                            s.checkpoints
                        )),
                    "{case}: check says {line}"
                );
            } else {
                let mut relay = s.start(&config);
                let status = relay.wait(FAST_EXIT).await;
                let log = relay.log_text();
                assert_eq!(status.code(), Some(EXIT_SINK), "{case}:\n{log}");
                assert_no_password(&case, &log);
                assert!(lines_at(&log, "WARN").is_empty(), "{case}:\n{log}");
                let errors = lines_at(&log, "ERROR");
                assert_eq!(errors.len(), 1, "{case}: one ERROR line:\n{log}");
                // A prefixed grant is named by the topic that needs it.
                let resource = if acl.prefixed {
                    s.event_topic()
                } else {
                    acl.name.clone()
                };
                let operation = format!("--operation {} ", acl.operation);
                assert!(
                    errors[0].contains(&operation) && errors[0].contains(&resource),
                    "{case}: the ERROR names {operation:?} and {resource:?}: {}",
                    errors[0]
                );
                println!(
                    "{case}: exit 4 after {:.1} s: {}",
                    t0.elapsed().as_secs_f64(),
                    errors[0]
                );
            }
            acls::grant(std::slice::from_ref(&acl)).await;
        }
    }
    // Everything granted again: every event arrives.
    let log = deliver(&s, &s.config(AT_LEAST_ONCE), &committed).await;
    assert_quiet("at-least-once, all granted again", &log);
    acls::revoke(&s.acls(EXACTLY_ONCE)).await;
    s.outbox.drop_all().await;
    report_wall_time("sasl_ssl_missing_acls", started);
}
