//! Test support for the integration tests, one module per concern:
//!
//! * [`outbox`]: one test's outbox (random table, publication, slot and
//!   topic names), its relay config (the TOML the relay binary reads, which
//!   also gives the in-process relay its settings), rows committed like a
//!   service commits them, `outbox-loadgen`.
//! * [`slot`]: the one query of `pg_replication_slots` ([`SlotState`]) and
//!   what tests do to a slot and its walsender.
//! * [`kafka`]: topics, and reading them back.
//! * [`relay`]: the relay under test, in-process or as a process, and its
//!   log lines.
//! * [`checker`]: the verdict on what a topic holds against what was
//!   committed (`summary: case=…` lines).
//! * [`services`]: `scripts/services` (stopping and starting Kafka and
//!   PostgreSQL, standbys) and the lock that keeps the tests that disturb
//!   the shared services apart from every other test.
//! * [`messages`]: `sql/outbox_emit.sql` installed, and transactions whose
//!   events are outbox messages, rows, or both.
//! * [`mixed`]: transactions that exercise several features at once (rows
//!   and messages, trace contexts, webhook events, bad rows), written in the
//!   background while a test kills relays.
//! * [`shards`]: shards of one outbox (row-filtered publications, slots,
//!   per-shard configs).
//! * [`acls`]: the secured Kafka listener (SASL_SSL, SCRAM, ACLs): the
//!   relay's properties for it, ACLs granted and removed as its admin.
//! * [`mock`] (librdkafka's mock cluster), [`proxy`] (a TCP proxy that
//!   stalls), [`tls`] (a throwaway CA, a TLS man in the middle), [`auth`]
//!   (roles and connection strings), [`http`] (/health and /metrics).
//!
//! Every test names its objects randomly ([`random_name`]), so tests run
//! side by side on the same servers without meeting.
#![allow(dead_code)]

use std::time::Duration;

use tokio_postgres::{Client, NoTls};

pub mod acls;
pub mod auth;
pub mod checker;
pub mod cli;
pub mod cluster;
pub mod http;
pub mod kafka;
pub mod messages;
pub mod mixed;
pub mod mock;
pub mod outbox;
pub mod proxy;
pub mod relay;
pub mod services;
pub mod shards;
pub mod slot;
pub mod tls;
pub mod webhook;

pub use checker::*;
pub use kafka::*;
pub use outbox::*;
pub use relay::*;
pub use slot::*;

/// How long a test waits for anything that should happen in the normal
/// course (records arriving, the slot confirming, a relay exiting) before
/// it fails: generous, for a loaded 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(120);

pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run under `make test` or `eval \"$(scripts/services up)\"`")
    })
}

/// Runs `statements` (each one `psql -c`) as the superuser of `PG_URL`, for
/// cleanup in a `Drop`: that cannot await, and must also run while a test
/// panics. Whether psql succeeded.
pub fn psql_as_superuser(statements: &[&str]) -> bool {
    let mut command = std::process::Command::new("psql");
    command.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", &env("PG_URL")]);
    for statement in statements {
        command.args(["-c", statement]);
    }
    command
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn random_name(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A superuser connection to the test cluster (`PG_URL`).
pub async fn pg_admin() -> Client {
    let (client, conn) = tokio_postgres::connect(&env("PG_URL"), NoTls)
        .await
        .expect("connect to PG_URL");
    tokio::spawn(conn);
    PUBLIC_REPLAY_RECORD
        .get_or_init(|| replay_record(&client, "public"))
        .await;
    client
}

/// The replay record in `public` is made once, before any test's `init`
/// could: tests share `public`, and two `CREATE TABLE IF NOT EXISTS` at
/// once can collide.
static PUBLIC_REPLAY_RECORD: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// The dead-letter replay record in `schema` as `outbox-relay init --grant
/// relay` makes it: its `CREATE TABLE` and the relay role's privileges.
/// Under a lock, as tests share `public`.
pub async fn replay_record(admin: &Client, schema: &str) {
    use outbox_relay::admin::dead::table;
    let replay = table::replay_table(schema);
    admin
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock(74151); {}; GRANT {} ON {} TO relay; COMMIT;",
            table::create_replay_sql(&replay),
            table::REPLAY_PRIVILEGES.join(", "),
            replay.sql()
        ))
        .await
        .expect("create the replay record");
}

/// Waits until `cond` holds, checking every 100 ms, or panics after `within`.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_until_explained(what, within, cond, || async { String::new() }).await
}

/// [`wait_until`], and on a timeout the panic also carries what `explain`
/// finds out about why the condition never held.
pub async fn wait_until_explained<F, Fut, E, EFut>(
    what: &str,
    within: Duration,
    mut cond: F,
    explain: E,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
    E: FnOnce() -> EFut,
    EFut: std::future::Future<Output = String>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !cond().await {
        if tokio::time::Instant::now() >= deadline {
            let why = explain().await;
            let sep = if why.is_empty() { "" } else { ": " };
            panic!("timed out after {within:?} waiting for {what}{sep}{why}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
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
