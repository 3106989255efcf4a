//! Probes for the fault tests that need no service restart
//! (`tests/faults_relay.rs`): the walsender that holds a test's slot, the
//! relay process's memory, its /metrics and /health endpoint, per-test roles,
//! relay configs with another connection string, and a lean reader for topics
//! too large to hold whole records in memory.
//!
//! Everything here is scoped to one test's own objects (its slot, its role,
//! its relay process): the servers are shared with other tests running at the
//! same time, so nothing here changes a server-wide setting.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::Client;

use super::{Received, RelayProcess, TestOutbox, env, random_name};

impl TestOutbox {
    /// The pid of the walsender holding this test's slot, if one does.
    pub async fn walsender_pid(&self) -> Option<i32> {
        self.admin
            .query_opt(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await
            .unwrap()
            .and_then(|row| row.get(0))
    }

    /// Waits for a walsender to hold the slot (a pid other than `not`), then
    /// terminates it with `pg_terminate_backend`; returns its pid.
    pub async fn terminate_walsender(&self, not: Option<i32>, within: Duration) -> i32 {
        let deadline = tokio::time::Instant::now() + within;
        let pid = loop {
            if let Some(pid) = self.walsender_pid().await.filter(|p| Some(*p) != not) {
                break pid;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no walsender took the slot within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let done: bool = self
            .admin
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap()
            .get(0);
        assert!(done, "pg_terminate_backend({pid}) failed");
        pid
    }

    /// Writes a relay config for this outbox that connects with `conninfo`
    /// instead of `PG_RELAY_URL`.
    pub fn write_config_with_url(&self, conninfo: &str, extra: &str) -> PathBuf {
        let path = self.write_config(extra);
        let text = std::fs::read_to_string(&path).unwrap();
        let default_line = format!("url = \"{}\"", env("PG_RELAY_URL"));
        assert!(text.contains(&default_line), "config layout changed");
        let text = text.replace(&default_line, &format!("url = {}", toml_string(conninfo)));
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// Records on `topic` right now: the sum of the partitions' high minus low
/// watermarks (0 while the topic does not exist).
pub async fn topic_len(topic: &str) -> i64 {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = lean_consumer();
        let Ok(md) = consumer.fetch_metadata(Some(&topic), Duration::from_secs(5)) else {
            return 0;
        };
        let Some(t) = md.topics().first().filter(|t| t.error().is_none()) else {
            return 0;
        };
        t.partitions()
            .iter()
            .filter_map(|p| {
                consumer
                    .fetch_watermarks(&topic, p.id(), Duration::from_secs(5))
                    .ok()
            })
            .map(|(low, high)| high - low)
            .sum()
    })
    .await
    .unwrap()
}

/// A TOML basic string holding `s`.
pub fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `postgres://user:password@127.0.0.1:<PG_PORT>/postgres?<query>`, the
/// password percent-encoded.
pub fn pg_url_for(user: &str, password: &str, query: &str) -> String {
    pg_url_at("127.0.0.1", user, password, query)
}

/// As [`pg_url_for`] with another host (e.g. `localhost` for verify-full).
pub fn pg_url_at(host: &str, user: &str, password: &str, query: &str) -> String {
    pg_url_written(host, user, &percent_encode_all(password), query)
}

/// As [`pg_url_at`] with the password written as given (`written` must
/// already be encoded where the URL needs it, see [`percent_encode_minimal`]).
pub fn pg_url_written(host: &str, user: &str, written: &str, query: &str) -> String {
    let sep = if query.is_empty() { "" } else { "?" };
    format!(
        "postgres://{user}:{written}@{host}:{}/postgres{sep}{query}",
        env("PG_PORT")
    )
}

/// Every byte but RFC 3986's unreserved ones as `%XX`.
pub fn percent_encode_all(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Only what a URL password cannot hold raw: `%` and `@`. `/ ? # : = ' "`
/// and spaces stay as they are (tokio-postgres reads the password up to
/// the `@`).
pub fn percent_encode_minimal(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '%' | '@' => percent_encode_all(&c.to_string()),
            c => c.to_string(),
        })
        .collect()
}

/// A key=value conninfo for 127.0.0.1:<PG_PORT>, the password single-quoted
/// with `\` escapes, plus `extra`.
pub fn pg_key_value_for(user: &str, password: &str, extra: &str) -> String {
    let quoted: String = password
        .chars()
        .flat_map(|c| match c {
            '\'' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    format!(
        "host=127.0.0.1 port={} dbname=postgres user={user} password='{quoted}' {extra}",
        env("PG_PORT")
    )
}

/// A role created for one test; dropped by [`TestRole::drop_role`] (after the
/// objects granted to it are gone).
pub struct TestRole {
    pub name: String,
    pub password: String,
}

impl TestRole {
    /// `CREATE ROLE <random> <attributes> PASSWORD '<password>'`, with
    /// SELECT on the outbox table (what the relay's checks read). The
    /// password may hold any character but NUL.
    pub async fn create(outbox: &TestOutbox, attributes: &str, password: &str) -> Self {
        let name = random_name("role");
        // A standard SQL string literal: quotes doubled, backslashes literal.
        let literal = password.replace('\'', "''");
        outbox
            .admin
            .batch_execute(&format!(
                "CREATE ROLE {name} {attributes} PASSWORD '{literal}';
                 GRANT SELECT ON public.{} TO {name};",
                outbox.table
            ))
            .await
            .expect("create role");
        TestRole {
            name,
            password: password.to_string(),
        }
    }

    /// Drops the role; call after `drop_all` (the table held its grant).
    pub async fn drop_role(&self, admin: &Client) {
        let _ = admin
            .batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name))
            .await;
    }
}

impl RelayProcess {
    /// Starts the relay binary with `RUST_LOG` set to `log_filter`.
    pub fn start_with_log(config: &Path, log_filter: &str) -> Self {
        Self::start_with_env(config, &[("RUST_LOG", log_filter)])
    }

    /// Starts the relay binary with `RUST_LOG=info` and the variables `vars`
    /// (which may set `RUST_LOG` too) in its environment.
    pub fn start_with_env(config: &Path, vars: &[(&str, &str)]) -> Self {
        let log = config.with_extension(format!("{}.log", random_name("run")));
        let file = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .envs(vars.iter().copied())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start outbox-relay");
        RelayProcess {
            child,
            config: config.to_path_buf(),
            log,
        }
    }

    /// Waits until the relay's log contains `needle`.
    pub async fn wait_for_log(&self, needle: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while !self.log_text().contains(needle) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay log did not say {needle:?} within {within:?}; log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The process's resident set size in bytes (`VmRSS`), while it runs.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over plain HTTP/1.1; returns the status code and the body.
/// `None` when nothing listens yet.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or_else(String::new, |(_, b)| b.to_string());
    Some((status, body))
}

/// The value of the Prometheus sample `name{labels}` (labels verbatim, e.g.
/// `kind="update"`), or 0 when absent.
pub fn metric_value(metrics: &str, name: &str, labels: &str) -> f64 {
    let series = if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{labels}}}")
    };
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            (key == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

fn lean_consumer() -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", env("KAFKA_BROKERS"))
        .set("group.id", random_name("checker"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer")
}

/// Reads every record of `topic` up to the high watermarks, keeping only
/// partition, offset and the `ce_id` header (no key, value or other
/// headers): enough for [`super::check_delivery`] on a million records.
pub async fn consume_ids_to_end(topic: &str) -> Vec<Received> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = lean_consumer();
        let md = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .expect("metadata");
        let partitions: Vec<i32> = md.topics()[0].partitions().iter().map(|p| p.id()).collect();
        let mut tpl = TopicPartitionList::new();
        let mut high: HashMap<i32, i64> = HashMap::new();
        for &p in &partitions {
            let (_, h) = consumer
                .fetch_watermarks(&topic, p, Duration::from_secs(10))
                .expect("watermarks");
            high.insert(p, h);
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).expect("assign");
        let mut done: HashMap<i32, bool> = high.iter().map(|(p, h)| (*p, *h == 0)).collect();
        let mut out = Vec::with_capacity(high.values().sum::<i64>() as usize);
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        while done.values().any(|d| !d) {
            assert!(
                std::time::Instant::now() < deadline,
                "reading {topic} to its end took over 10 minutes"
            );
            match consumer.poll(Duration::from_millis(500)) {
                Some(Ok(m)) => {
                    let id = m
                        .headers()
                        .and_then(|h| h.iter().find(|h| h.key == "ce_id"))
                        .and_then(|h| h.value)
                        .unwrap_or_default()
                        .to_vec();
                    if m.offset() + 1 >= high[&m.partition()] {
                        done.insert(m.partition(), true);
                    }
                    out.push(Received {
                        topic: String::new(),
                        partition: m.partition(),
                        offset: m.offset(),
                        key: None,
                        value: None,
                        headers: HashMap::from([("ce_id".to_string(), id)]),
                    });
                }
                Some(Err(e)) => panic!("consume {topic}: {e}"),
                None => {
                    // Transaction markers can sit at the end of a partition:
                    // a partition whose position reached its high watermark
                    // has nothing more to give.
                    if let Ok(pos) = consumer.position() {
                        for e in pos.elements() {
                            if let Offset::Offset(o) = e.offset()
                                && o >= high[&e.partition()]
                            {
                                done.insert(e.partition(), true);
                            }
                        }
                    }
                }
            }
        }
        out
    })
    .await
    .unwrap()
}
