//! One test's outbox: a Debezium-style table, its parking table, its publication, a pgoutput
//! slot and topic names, all randomly named; the relay config for it (the
//! same TOML for the relay binary and, through `Config::from_figment` and
//! `Config::relay_settings`, for the in-process relay); rows committed
//! like a service commits them; `outbox-loadgen` writing load.
//!
//! A [`TestOutbox`] holds a share of the services lock for its lifetime (see
//! [`super::services`]): while it lives, no test stops a service or changes
//! a server-wide setting under it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::time::Duration;

use outbox_relay::config::Config;
use outbox_relay::relay::RelaySettings;
use pgoutput::lsn::Lsn;
use tokio_postgres::Client;

use super::services::{self, Exclusive, Shared};
use super::{env, pg_admin, random_name, wait_until};

/// The parking table of the outbox table `table`.
pub fn parked_table_name(table: &str) -> String {
    format!("{table}_parked")
}

/// A parking table of its own for each test's outbox, from
/// `sql/outbox_parked.sql` as `init --grant relay` makes it: tests share
/// `public`, and aggregates of one test must not park another's. Created
/// here (with psql: `from_parts` is not async) since the relay needs it
/// (after_dead_letter = "park" is the default) and most tests do not run
/// init.
fn create_parked_table(table: &str) {
    use outbox_relay::parking::ParkedTable;
    let parked = ParkedTable {
        schema: "public".to_owned(),
        name: parked_table_name(table),
    };
    let create = parked.create_sql();
    let grant = format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO relay",
        parked.quoted()
    );
    assert!(
        super::psql_as_superuser(&[&create, &grant]),
        "create the parking table {}",
        parked.name
    );
}

/// One test's outbox: table, publication, slot and topic, all randomly named.
pub struct TestOutbox {
    pub admin: Client,
    pub table: String,
    pub publication: String,
    pub slot: String,
    /// Topic prefix; events go to `<topic_prefix>.<aggregatetype>`.
    pub topic_prefix: String,
    pub dlq_topic: String,
    /// Keeps the tests that disturb the services away while this lives.
    services: Shared,
}

impl TestOutbox {
    /// Creates a Debezium-style outbox. `payload_type` is `jsonb` normally,
    /// `text` to let a test write payloads that are not JSON.
    pub async fn create(payload_type: &str) -> Self {
        let services = services::shared().await;
        Self::create_holding(services, payload_type).await
    }

    /// [`TestOutbox::create`] for a test that holds the services lock
    /// exclusively (it stops services or changes server settings).
    pub async fn create_exclusive(_held: &Exclusive, payload_type: &str) -> Self {
        Self::create_holding(Shared::held_by_caller(), payload_type).await
    }

    async fn create_holding(services: Shared, payload_type: &str) -> Self {
        let admin = pg_admin().await;
        let table = random_name("outbox");
        let publication = random_name("pub");
        let slot = random_name("slot");
        admin
            .batch_execute(&format!(
                "CREATE TABLE public.{table} (
                    id uuid PRIMARY KEY,
                    aggregatetype text NOT NULL,
                    aggregateid text,
                    type text NOT NULL,
                    payload {payload_type},
                    \"timestamp\" timestamptz NOT NULL DEFAULT now(),
                    tracingspancontext text,
                    seq bigint
                 );
                 CREATE TABLE public.{table}_orders (id bigserial PRIMARY KEY, aggregateid text, seq bigint);
                 GRANT SELECT ON public.{table} TO relay;
                 CREATE PUBLICATION {publication} FOR TABLE public.{table} WITH (publish = 'insert');"
            ))
            .await
            .expect("create outbox");
        admin
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await
            .expect("create slot");
        Self::from_parts(services, admin, table, publication, slot)
    }

    /// An outbox whose table, publication and slot the test made itself
    /// (after taking `services`, so no service stops while it does);
    /// topic names are chosen here.
    pub fn from_parts(
        services: Shared,
        admin: Client,
        table: String,
        publication: String,
        slot: String,
    ) -> Self {
        let topic_prefix = random_name("t");
        let dlq_topic = format!("{topic_prefix}.dlq");
        create_parked_table(&table);
        Self {
            admin,
            table,
            publication,
            slot,
            topic_prefix,
            dlq_topic,
            services,
        }
    }

    /// The same outbox names on another server (a promoted standby), reached
    /// through `admin`. It shares this outbox's hold on the services lock,
    /// so it must not outlive it.
    pub fn on_server(&self, admin: Client) -> TestOutbox {
        TestOutbox {
            admin,
            table: self.table.clone(),
            publication: self.publication.clone(),
            slot: self.slot.clone(),
            topic_prefix: self.topic_prefix.clone(),
            dlq_topic: self.dlq_topic.clone(),
            services: Shared::held_by_caller(),
        }
    }

    /// This outbox's parking table (`public.<table>_parked`, the
    /// config's `postgres.parked_table`).
    pub fn parked_table(&self) -> String {
        parked_table_name(&self.table)
    }

    pub fn topic(&self, aggregate_type: &str) -> String {
        format!("{}.{aggregate_type}", self.topic_prefix)
    }

    /// The relay config for this outbox, as `relay.toml` text, with `extra`
    /// appended (after `[cloudevents]`, so it may add keys there or open
    /// sections of its own, such as `[relay]` or `[kafka.properties]`).
    pub fn config_toml(&self, extra: &str) -> String {
        format!(
            r#"[postgres]
url = "{url}"
slot = "{slot}"
publication = "{publication}"
table = "public.{table}"
parked_table = "public.{table}_parked"
status_interval_secs = 1
heartbeat_interval_secs = 0
[kafka]
brokers = "{brokers}"
topic = "{prefix}.{{aggregatetype}}"
dlq_topic = "{dlq}"
[cloudevents]
source = "/orders-service"
{extra}
"#,
            url = env("PG_RELAY_URL"),
            slot = self.slot,
            publication = self.publication,
            table = self.table,
            brokers = env("KAFKA_BROKERS"),
            prefix = self.topic_prefix,
            dlq = self.dlq_topic,
        )
    }

    /// Writes [`TestOutbox::config_toml`] into a relay.toml in a temporary
    /// directory of its own.
    pub fn write_config(&self, extra: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(random_name("relay_cfg"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay.toml");
        std::fs::write(&path, self.config_toml(extra)).unwrap();
        path
    }

    /// Writes [`TestOutbox::config_toml`] with `postgres` lines added to
    /// its `[postgres]` section and `kafka` lines to its `[kafka]` section
    /// (each empty, or whole lines), and `extra` appended.
    pub fn write_config_with(&self, postgres: &str, kafka: &str, extra: &str) -> PathBuf {
        let path = self.write_config(extra);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("heartbeat_interval_secs = 0\n") && text.contains("[kafka]\n"),
            "config layout changed"
        );
        let text = text
            .replacen(
                "heartbeat_interval_secs = 0\n",
                &format!("heartbeat_interval_secs = 0\n{postgres}\n"),
                1,
            )
            .replacen("[kafka]\n", &format!("[kafka]\n{kafka}\n"), 1);
        std::fs::write(&path, text).unwrap();
        path
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

    /// The in-process relay's settings: [`TestOutbox::config_toml`] read the
    /// way the binary reads its file. A test adjusts them by changing a
    /// field afterwards, or through [`TestOutbox::settings_with`].
    pub fn settings(&self) -> RelaySettings {
        self.settings_with("")
    }

    /// [`TestOutbox::settings`] from the config with `extra` TOML.
    pub fn settings_with(&self, extra: &str) -> RelaySettings {
        settings_from_toml(&self.config_toml(extra))
    }

    /// [`TestOutbox::settings`] with keys of `[postgres]` set as the
    /// environment sets them (`("source", "messages")` is
    /// `OUTBOX_RELAY__POSTGRES__SOURCE=messages`): the settings are built
    /// from the config, as the binary builds them, never patched after.
    pub fn settings_with_postgres(&self, keys: &[(&str, &str)]) -> RelaySettings {
        self.settings_with_env("POSTGRES", keys)
    }

    /// [`TestOutbox::settings_with_postgres`] for keys of `[kafka]`.
    pub fn settings_with_kafka(&self, keys: &[(&str, &str)]) -> RelaySettings {
        self.settings_with_env("KAFKA", keys)
    }

    fn settings_with_env(&self, section: &str, keys: &[(&str, &str)]) -> RelaySettings {
        let env = keys.iter().map(|(key, value)| {
            (
                format!("OUTBOX_RELAY__{section}__{}", key.to_uppercase()),
                (*value).to_owned(),
            )
        });
        let figment = Config::figment_from_str(&self.config_toml(""), env);
        let config = Config::from_figment(&figment)
            .unwrap_or_else(|e| panic!("the test's relay config is refused: {e}"));
        config
            .relay_settings()
            .unwrap_or_else(|e| panic!("the test's relay config is refused: {e}"))
    }

    /// Commits `rows_per_txn`-row transactions, each inserting a business row
    /// and the outbox rows in one transaction. Aggregates are chosen round
    /// robin from `aggregates`; each aggregate's rows carry a rising `seq`.
    /// Returns the committed events in commit order.
    pub async fn commit_events(
        &self,
        writer: &mut Client,
        txns: usize,
        rows_per_txn: usize,
        aggregates: usize,
        seqs: &mut HashMap<String, i64>,
    ) -> Vec<Committed> {
        let mut out = Vec::with_capacity(txns * rows_per_txn);
        let insert = writer
            .prepare(&format!(
                "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
                 VALUES ($1::text::uuid, 'order', $2, 'OrderPlaced', $3::text::jsonb, $4)",
                self.table
            ))
            .await
            .unwrap();
        let business = writer
            .prepare(&format!(
                "INSERT INTO public.{}_orders (aggregateid, seq) VALUES ($1, $2)",
                self.table
            ))
            .await
            .unwrap();
        let mut n = seqs.values().map(|v| *v as usize).sum::<usize>();
        for _ in 0..txns {
            let tx = writer.transaction().await.unwrap();
            for _ in 0..rows_per_txn {
                let aggregate = format!("agg-{}", n % aggregates);
                n += 1;
                let seq = seqs.entry(aggregate.clone()).or_insert(0);
                *seq += 1;
                let id = uuid::Uuid::new_v4().to_string();
                let payload = format!(r#"{{"aggregate":"{aggregate}","seq":{seq},"total":42.5}}"#);
                tx.execute(&business, &[&aggregate, &*seq]).await.unwrap();
                tx.execute(&insert, &[&id, &aggregate, &payload, &*seq])
                    .await
                    .unwrap();
                out.push(Committed {
                    id,
                    aggregate,
                    seq: *seq,
                });
            }
            tx.commit().await.unwrap();
        }
        out
    }

    pub async fn writer(&self) -> Client {
        pg_admin().await
    }

    /// The rows of this outbox's parking table (`public.<table>_parked`),
    /// in each aggregate's commit order: `(aggregateid, kind, event_id)`,
    /// kind `HEAD` (live), `EVENT` or `DEAD`.
    pub async fn parked(&self) -> Vec<(String, String, String)> {
        self.admin
            .query(
                &format!(
                    "SELECT aggregateid, kind, event_id FROM public.{}_parked \
                     WHERE released_at IS NULL \
                     ORDER BY aggregatetype, aggregateid, commit_lsn, position",
                    self.table
                ),
                &[],
            )
            .await
            .expect("read the parking table")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    pub async fn current_wal_lsn(&self) -> Lsn {
        let row = self
            .admin
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .unwrap();
        row.get::<_, String>(0).parse().unwrap()
    }

    /// Every committed outbox row, ordered per aggregate by its `seq` (the
    /// payload's, as `outbox-loadgen` and [`TestOutbox::commit_events`] write
    /// it), which is the aggregate's commit order. Read from the table, so it
    /// is right whatever happened to the writer.
    pub async fn committed_from_table(&self) -> Vec<Committed> {
        self.admin
            .query(
                &format!(
                    "SELECT id::text, aggregateid, (payload->>'seq')::bigint AS seq
                     FROM public.{} ORDER BY aggregateid, seq",
                    self.table
                ),
                &[],
            )
            .await
            .expect("read committed rows")
            .into_iter()
            .map(|r| Committed {
                id: r.get(0),
                aggregate: r.get(1),
                seq: r.get(2),
            })
            .collect()
    }

    /// Runs `outbox-loadgen` against this outbox with extra arguments (e.g.
    /// `["--events", "5000", "--rate", "2000"]`); returns the child process.
    pub fn start_loadgen(&self, args: &[&str]) -> Child {
        let url = env("PG_URL");
        let separator = if url.contains('?') { '&' } else { '?' };
        let url = format!(
            "{url}{separator}application_name={}",
            self.loadgen_application_name()
        );
        std::process::Command::new(env!("CARGO_BIN_EXE_outbox-loadgen"))
            .args(["--url", &url, "--table", &format!("public.{}", self.table)])
            .args(args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start outbox-loadgen")
    }

    /// The `application_name` of this outbox's load generators' sessions.
    fn loadgen_application_name(&self) -> String {
        format!("loadgen_{}", self.table)
    }

    /// Waits (bounded) until no session of this outbox's load generators
    /// is left on the server. A generator killed while its COMMIT was on
    /// the wire leaves a backend that still commits it: rows read before
    /// it ends miss that transaction, which the relay then delivers.
    pub async fn wait_loadgen_sessions_ended(&self) {
        let name = self.loadgen_application_name();
        wait_until(
            "the load generator's sessions to end",
            Duration::from_secs(30),
            || async {
                let left: i64 = self
                    .admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                        &[&name],
                    )
                    .await
                    .unwrap()
                    .get(0);
                left == 0
            },
        )
        .await;
    }

    pub async fn drop_all(&self) {
        // The slot may still be held for a moment by a walsender that is
        // shutting down; wait for it to let go (bounded).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.slot_active().await && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = self
            .admin
            .execute("SELECT pg_drop_replication_slot($1)", &[&self.slot])
            .await;
        let _ = self
            .admin
            .batch_execute(&format!(
                "DROP PUBLICATION IF EXISTS {}; DROP TABLE IF EXISTS public.{} ; DROP TABLE IF EXISTS public.{}_orders; DROP TABLE IF EXISTS public.{}_parked;",
                self.publication, self.table, self.table, self.table
            ))
            .await;
    }
}

/// The relay's settings from relay.toml text, through the same
/// `Config::from_figment` and `Config::relay_settings` as the binary
/// (no environment variables). Panics with the config error.
pub fn settings_from_toml(toml: &str) -> RelaySettings {
    let figment = Config::figment_from_str(toml, std::iter::empty());
    let config = Config::from_figment(&figment)
        .unwrap_or_else(|e| panic!("the test's relay config is refused: {e}"));
    config
        .relay_settings()
        .unwrap_or_else(|e| panic!("the test's relay config is refused: {e}"))
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

/// Count of committed outbox rows now (what the writers have committed).
pub async fn committed_rows(outbox: &TestOutbox) -> i64 {
    outbox
        .admin
        .query_one(
            &format!("SELECT count(*) FROM public.{}", outbox.table),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// An outbox row the test committed.
#[derive(Debug, Clone)]
pub struct Committed {
    pub id: String,
    pub aggregate: String,
    pub seq: i64,
}

/// Waits for a child process to exit (bounded) and asserts it succeeded.
pub async fn wait_child(child: &mut Child, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "child exited with {status}");
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "child still running after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `outbox-loadgen`, killed if still running when dropped.
pub struct Loadgen(Child);

impl Loadgen {
    pub fn start(outbox: &TestOutbox, args: &[&str]) -> Self {
        Loadgen(outbox.start_loadgen(args))
    }

    /// Waits for it to end by itself (bounded); returns the status.
    pub async fn wait(&mut self, within: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "outbox-loadgen still running after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Loadgen {
    fn drop(&mut self) {
        self.kill();
    }
}
