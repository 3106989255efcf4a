//! The replication connection against the real PostgreSQL of
//! `scripts/services`: redelivery after reconnect, what the slot's
//! `confirmed_flush_lsn` shows, walsender termination, missing objects,
//! authentication and TLS.
//!
//! Each test creates its own table, publication and slot with random names
//! (as the superuser of `PG_URL`) and drops them at the end, also when it
//! fails (`Fixture`'s `Drop`). The relay side connects as the SCRAM role of
//! `PG_RELAY_URL`, as in production. Waits are on conditions with deadlines.

use std::str::FromStr;
use std::time::Duration;

use outbox_relay::error::Cause;
use outbox_relay::pg::{ConnectSettings, Conninfo, ErrorKind, PgError, SqlConnection};
use outbox_relay::replication::{ReplicationSettings, ReplicationStream, StreamItem};
use pgoutput::lsn::Lsn;
use pgoutput::{self, DecodeContext, Message, TupleValue};
use tokio::time::{Instant, sleep, timeout};
use tokio_postgres::Client;

use crate::support::services::{self, Shared};
use crate::support::tls::{ThrowawayCa, tls_man_in_the_middle};
use crate::support::{env, pg_admin, psql_as_superuser, slot_state};

/// Long enough for anything that should happen "at once" on loopback.
const WAIT: Duration = Duration::from_secs(5);

/// Host, port, database and relay credentials, from `PG_RELAY_URL`.
struct Server {
    host: String,
    port: u16,
    dbname: String,
    user: String,
    password: String,
}

impl Server {
    fn from_env() -> Server {
        let config = tokio_postgres::Config::from_str(&env("PG_RELAY_URL")).unwrap();
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            other => panic!("PG_RELAY_URL should be TCP, is {other:?}"),
        };
        Server {
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            dbname: config.get_dbname().unwrap_or("postgres").to_owned(),
            user: config.get_user().unwrap().to_owned(),
            password: String::from_utf8(config.get_password().unwrap().to_vec()).unwrap(),
        }
    }

    /// A key=value conninfo as `user` with `password`, plus `extra`.
    fn conninfo_as(&self, user: &str, password: &str, extra: &str) -> String {
        format!(
            "host={} port={} dbname={} user={user} password={password} {extra}",
            self.host, self.port, self.dbname
        )
    }

    fn relay_conninfo(&self, extra: &str) -> String {
        self.conninfo_as(&self.user, &self.password, extra)
    }
}

/// A table in the publication, one outside it, the publication and the slot.
struct Fixture {
    admin: Client,
    table: String,
    other_table: String,
    publication: String,
    slot: String,
    server: Server,
    /// No test stops PostgreSQL under this one.
    _services: Shared,
}

impl Fixture {
    async fn new() -> Fixture {
        let services = services::shared().await;
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        let fixture = Fixture {
            admin: pg_admin().await,
            table: format!("repl_outbox_{suffix}"),
            other_table: format!("repl_other_{suffix}"),
            publication: format!("repl_pub_{suffix}"),
            slot: format!("repl_slot_{suffix}"),
            server: Server::from_env(),
            _services: services,
        };
        // Separate statements: a slot cannot be created in a transaction
        // that already wrote (and a multi-statement batch is one transaction).
        let statements = [
            format!(
                "CREATE TABLE {} (id bigserial PRIMARY KEY, payload text NOT NULL)",
                fixture.table
            ),
            format!(
                "CREATE TABLE {} (id bigserial PRIMARY KEY, filler text)",
                fixture.other_table
            ),
            format!(
                "CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert')",
                fixture.publication, fixture.table
            ),
            format!(
                "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
                fixture.slot
            ),
        ];
        for statement in statements {
            fixture
                .admin
                .batch_execute(&statement)
                .await
                .expect("creating the test objects");
        }
        fixture
    }

    fn settings(&self, conninfo: String) -> ReplicationSettings {
        ReplicationSettings {
            connection: ConnectSettings {
                conninfo: Conninfo::parse(&conninfo).unwrap_or_else(|e| panic!("{e}")),
                connect_timeout: WAIT,
                application_name: "outbox-relay-test".into(),
            },
            slot: self.slot.clone(),
            publication: self.publication.clone(),
            outbox_table: None,
            outbox_table_optional: false,
            outbox_oid: None,
            status_interval: Duration::from_secs(10),
        }
    }

    fn relay_settings(&self) -> ReplicationSettings {
        self.settings(env("PG_RELAY_URL"))
    }

    /// One committed transaction inserting one outbox row.
    async fn insert(&self, payload: &str) {
        self.admin
            .execute(
                &format!("INSERT INTO {} (payload) VALUES ($1)", self.table),
                &[&payload],
            )
            .await
            .unwrap();
    }

    async fn slot_confirmed_flush(&self) -> Lsn {
        slot_state(&self.admin, &self.slot)
            .await
            .expect("slot exists")
            .confirmed_flush_lsn
            .expect("slot has a confirmed_flush_lsn")
    }

    async fn slot_active_pid(&self) -> Option<i32> {
        slot_state(&self.admin, &self.slot)
            .await
            .expect("slot exists")
            .active_pid
    }

    /// Polls the slot until `confirmed_flush_lsn` equals `expected`,
    /// asserting on every sample that it never went past it.
    async fn wait_slot_confirmed(&self, expected: Lsn) {
        let deadline = Instant::now() + WAIT;
        loop {
            let current = self.slot_confirmed_flush().await;
            assert!(current <= expected, "slot at {current}, past {expected}");
            if current == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "slot stuck at {current}, expected {expected}"
            );
            sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Fixture {
    /// Synchronous cleanup through psql so that it also runs when a test
    /// panics; terminates a walsender still holding the slot first.
    fn drop(&mut self) {
        let sql = format!(
            "DO $$ DECLARE tries int := 0; BEGIN
               LOOP
                 PERFORM pg_terminate_backend(active_pid) FROM pg_replication_slots
                   WHERE slot_name = '{s}' AND active_pid IS NOT NULL;
                 BEGIN
                   PERFORM pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                     WHERE slot_name = '{s}';
                   EXIT;
                 EXCEPTION WHEN object_in_use THEN
                   tries := tries + 1;
                   IF tries > 100 THEN RAISE; END IF;
                   PERFORM pg_sleep(0.05);
                 END;
               END LOOP;
             END $$;
             DROP PUBLICATION IF EXISTS {p};
             DROP TABLE IF EXISTS {t}, {o};",
            s = self.slot,
            p = self.publication,
            t = self.table,
            o = self.other_table
        );
        psql_cleanup(&sql, &self.slot);
    }
}

/// Runs `sql` through psql as the superuser of `PG_URL`: cleanup that also
/// runs while a test panics. Panics (unless already panicking) naming `what`.
fn psql_cleanup(sql: &str, what: &str) {
    if !psql_as_superuser(&[sql]) && !std::thread::panicking() {
        panic!("cleanup of {what} failed");
    }
}

/// Drops what a test created beyond the [`Fixture`], also when it panics.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        psql_cleanup(&self.0, "extra test objects");
    }
}

/// `"name"` with `"` doubled: written here independently of the relay's own
/// quoting, which the tests check.
fn sql_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One decoded transaction of the test table.
#[derive(Debug)]
struct Txn {
    commit_lsn: Lsn,
    end_lsn: Lsn,
    payloads: Vec<String>,
}

/// Reads until the next Commit; keepalives are skipped.
async fn next_txn(stream: &mut ReplicationStream) -> Txn {
    let read = async {
        let mut payloads = Vec::new();
        loop {
            let StreamItem::XLogData { mut data, .. } = stream.next().await.expect("stream") else {
                continue;
            };
            match pgoutput::decode(&mut data, &DecodeContext::V1).expect("pgoutput") {
                Message::Begin(_) => payloads.clear(),
                Message::Insert(insert) => match &insert.tuple.columns[1] {
                    TupleValue::Text(text) => {
                        payloads.push(String::from_utf8(text.to_vec()).unwrap());
                    }
                    other => panic!("payload column {other:?}"),
                },
                Message::Commit(commit) => {
                    return Txn {
                        commit_lsn: commit.commit_lsn,
                        end_lsn: commit.end_lsn,
                        payloads,
                    };
                }
                _ => {}
            }
        }
    };
    timeout(WAIT, read).await.expect("a transaction within 5 s")
}

/// Connects, retrying while the slot is still held by a walsender that is
/// going away (the previous connection of the same test).
async fn connect_when_free(settings: &ReplicationSettings) -> ReplicationStream {
    let deadline = Instant::now() + WAIT;
    loop {
        match ReplicationStream::connect(settings, Lsn::ZERO).await {
            Ok(stream) => return stream,
            Err(e) if e.kind() == ErrorKind::SlotBusy && Instant::now() < deadline => {
                sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

async fn connect_error(settings: &ReplicationSettings) -> PgError {
    match ReplicationStream::connect(settings, Lsn::ZERO).await {
        Ok(_) => panic!("connect succeeded, expected an error"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn unconfirmed_transactions_are_redelivered_and_confirmed_ones_are_not() {
    let fx = Fixture::new().await;
    fx.insert("A").await;
    fx.insert("B").await;

    let mut stream = connect_when_free(&fx.relay_settings()).await;
    assert_eq!(
        stream.slot_confirmed_flush(),
        fx.slot_confirmed_flush().await
    );
    let a = next_txn(&mut stream).await;
    let b = next_txn(&mut stream).await;
    assert_eq!(
        (a.payloads.as_slice(), b.payloads.as_slice()),
        (&["A".to_owned()][..], &["B".to_owned()][..])
    );
    assert!(a.commit_lsn < a.end_lsn && a.end_lsn <= b.commit_lsn);
    stream.confirm(a.end_lsn);
    stream.shutdown().await.expect("clean shutdown");

    let mut stream = connect_when_free(&fx.relay_settings()).await;
    assert_eq!(stream.slot_confirmed_flush(), a.end_lsn);
    let first = next_txn(&mut stream).await;
    assert_eq!(first.payloads, ["B"], "A was confirmed, B was not");
    assert_eq!(first.end_lsn, b.end_lsn);
    stream.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn slot_never_passes_the_confirmed_lsn_across_keepalives_on_a_busy_database() {
    let fx = Fixture::new().await;
    fx.insert("T0").await;
    let mut stream = connect_when_free(&fx.relay_settings()).await;
    let t0 = next_txn(&mut stream).await;
    stream.confirm(t0.end_lsn);

    // WAL the slot has to read but that carries nothing for the publication.
    let busy = format!(
        "INSERT INTO {} (filler) SELECT repeat('x', 200) FROM generate_series(1, 2000);
         SELECT pg_switch_wal();",
        fx.other_table
    );
    let mut keepalives = 0;
    let mut max_wal_end = Lsn::ZERO;
    let deadline = Instant::now() + Duration::from_secs(8);
    while keepalives < 5 || max_wal_end <= t0.end_lsn {
        assert!(
            Instant::now() < deadline,
            "{keepalives} keepalives, wal_end {max_wal_end}"
        );
        fx.admin.batch_execute(&busy).await.unwrap();
        // Asking for a reply makes the walsender send a keepalive now
        // instead of after wal_sender_timeout / 2.
        stream.send_status(true).await.unwrap();
        let wal_end = timeout(WAIT, async {
            loop {
                match stream.next().await.expect("stream") {
                    StreamItem::Keepalive { wal_end } => return wal_end,
                    // Nothing of the other table is published; tolerate
                    // empty transactions from servers that send them.
                    StreamItem::XLogData { .. } => {}
                }
            }
        })
        .await
        .expect("a keepalive after asking for one");
        keepalives += 1;
        max_wal_end = max_wal_end.max(wal_end);
        let slot = fx.slot_confirmed_flush().await;
        assert!(
            slot <= t0.end_lsn,
            "slot at {slot} passed the confirmed {}",
            t0.end_lsn
        );
    }
    assert!(
        max_wal_end > t0.end_lsn,
        "the server had sent more than we confirmed"
    );
    // What the walsender recorded from our replies: the confirmed LSN, not wal_end.
    let flush: String = fx
        .admin
        .query_one(
            "SELECT flush_lsn::text FROM pg_stat_replication WHERE pid = $1",
            &[&stream.backend_pid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(flush.parse::<Lsn>().unwrap(), t0.end_lsn);
    fx.wait_slot_confirmed(t0.end_lsn).await;
    stream.shutdown().await.expect("clean shutdown");
    assert_eq!(fx.slot_confirmed_flush().await, t0.end_lsn);
}

#[tokio::test]
async fn walsender_with_a_short_timeout_never_drops_a_reading_stream() {
    let fx = Fixture::new().await;
    // wal_sender_timeout is user-settable: with 2 s the server asks for a
    // reply after 1 s of silence and drops the connection after 2 s.
    let conninfo = fx
        .server
        .relay_conninfo("options='-c wal_sender_timeout=2s'");
    let mut stream = connect_when_free(&fx.settings(conninfo)).await;
    assert_eq!(stream.status_interval(), Duration::from_secs(1));
    let pid = stream.backend_pid();
    // A caller busy elsewhere for a moment: the server's reply request waits
    // in the socket and is answered on the next call.
    sleep(Duration::from_millis(1200)).await;
    fx.insert("while-idle").await;
    let until = Instant::now() + Duration::from_secs(4);
    let mut keepalives = 0;
    let mut payloads = Vec::new();
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Err(_elapsed) => break,
            Ok(Ok(StreamItem::Keepalive { .. })) => keepalives += 1,
            Ok(Ok(StreamItem::XLogData { mut data, .. })) => {
                if let Message::Insert(_) = pgoutput::decode(&mut data, &DecodeContext::V1).unwrap()
                {
                    payloads.push(());
                }
            }
            Ok(Err(e)) => panic!("the stream failed under a 2 s wal_sender_timeout: {e}"),
        }
    }
    assert!(keepalives >= 1, "the server sent no keepalive in 4 s");
    assert_eq!(payloads.len(), 1);
    assert_eq!(
        fx.slot_active_pid().await,
        Some(pid),
        "still the same walsender"
    );
    stream.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn graceful_shutdown_persists_the_confirmed_lsn() {
    let fx = Fixture::new().await;
    for payload in ["1", "2", "3"] {
        fx.insert(payload).await;
    }
    let mut stream = connect_when_free(&fx.relay_settings()).await;
    let start = stream.slot_confirmed_flush();
    let _first = next_txn(&mut stream).await;
    let second = next_txn(&mut stream).await;
    let third = next_txn(&mut stream).await;
    stream.confirm(second.end_lsn);
    assert_eq!(stream.confirmed(), second.end_lsn);
    assert!(fx.slot_confirmed_flush().await <= second.end_lsn);
    stream.shutdown().await.expect("clean shutdown");

    fx.wait_slot_confirmed(second.end_lsn).await;
    assert!(start < second.end_lsn && second.end_lsn < third.end_lsn);
    assert_eq!(
        fx.slot_active_pid().await,
        None,
        "the walsender released the slot"
    );
}

#[tokio::test]
async fn terminated_walsender_is_transient_and_nothing_unconfirmed_is_lost() {
    let fx = Fixture::new().await;
    fx.insert("A").await;
    let mut stream = connect_when_free(&fx.relay_settings()).await;
    let a = next_txn(&mut stream).await;
    assert_eq!(fx.slot_active_pid().await, Some(stream.backend_pid()));

    fx.admin
        .execute("SELECT pg_terminate_backend($1)", &[&stream.backend_pid()])
        .await
        .unwrap();
    let error = timeout(WAIT, async {
        loop {
            if let Err(e) = stream.next().await {
                return e;
            }
        }
    })
    .await
    .expect("an error after the walsender was terminated");
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
    drop(stream);

    let mut stream = connect_when_free(&fx.relay_settings()).await;
    let again = next_txn(&mut stream).await;
    assert_eq!((again.payloads, again.end_lsn), (a.payloads, a.end_lsn));
    stream.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn missing_or_busy_slot_and_missing_publication_are_named() {
    let fx = Fixture::new().await;

    let first = connect_when_free(&fx.relay_settings()).await;
    let busy = connect_error(&fx.relay_settings()).await;
    assert_eq!(busy.kind(), ErrorKind::SlotBusy, "{busy}");
    assert_eq!(busy.cause(), Cause::SlotInUse);
    assert!(
        matches!(busy, PgError::SlotInUse { active_pid: Some(pid), .. } if pid == first.backend_pid()),
        "{busy}"
    );
    first.shutdown().await.expect("clean shutdown");

    let mut settings = fx.relay_settings();
    settings.publication = format!("{}_missing", fx.publication);
    let error = connect_error(&settings).await;
    assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
    assert_eq!(error.cause(), Cause::PublicationUnusable);
    let text = error.to_string();
    assert!(
        text.contains(&settings.publication) && text.contains("outbox-relay init"),
        "{text}"
    );

    fx.admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&fx.slot])
        .await
        .unwrap();
    let error = connect_error(&fx.relay_settings()).await;
    assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
    assert_eq!(error.cause(), Cause::SlotMissing);
    let text = error.to_string();
    assert!(
        text.contains(&fx.slot) && text.contains("outbox-relay init --config"),
        "{text}"
    );
    assert!(
        !text.contains("pg_create_logical_replication_slot"),
        "{text}"
    );
}

#[tokio::test]
async fn authentication_failures_are_fatal_quick_and_say_what_to_fix() {
    let fx = Fixture::new().await;

    let started = Instant::now();
    let wrong = fx.settings(
        fx.server
            .conninfo_as(&fx.server.user, "not-the-password-42", ""),
    );
    let error = connect_error(&wrong).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("authentication") && text.contains(&fx.server.user),
        "{text}"
    );
    assert!(!text.contains("not-the-password-42"), "{text}");

    let role = format!("norepl_{}", &fx.slot["repl_slot_".len()..]);
    fx.admin
        .batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'pw-norepl'"))
        .await
        .unwrap();
    let error = connect_error(&fx.settings(fx.server.conninfo_as(&role, "pw-norepl", ""))).await;
    fx.admin
        .batch_execute(&format!("DROP ROLE {role}"))
        .await
        .unwrap();
    assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
    let text = error.to_string();
    assert!(
        text.contains(&format!("ALTER ROLE {role} REPLICATION")),
        "{text}"
    );
}

async fn backend_uses_tls(fx: &Fixture, pid: i32) -> bool {
    fx.admin
        .query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn tls_modes_connect_verify_and_refuse_like_libpq() {
    let fx = Fixture::new().await;
    let ca = env("PG_CA_CERT");
    fx.insert("over-tls").await;

    let verify_full = fx.server.relay_conninfo(&format!(
        "host=localhost sslmode=verify-full sslrootcert={ca}"
    ));
    let mut stream = connect_when_free(&fx.settings(verify_full)).await;
    assert!(stream.is_tls());
    assert!(backend_uses_tls(&fx, stream.backend_pid()).await);
    assert_eq!(next_txn(&mut stream).await.payloads, ["over-tls"]);
    stream.shutdown().await.expect("clean shutdown");

    // libpq semantics: connect to hostaddr, verify against host.
    let wrong_name = fx.server.relay_conninfo(&format!(
        "host=wrong.example hostaddr=127.0.0.1 sslmode=verify-full sslrootcert={ca}"
    ));
    let error = connect_error(&fx.settings(wrong_name)).await;
    assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
    assert!(matches!(error, PgError::TlsVerify { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("wrong.example") && text.contains("certificate"),
        "{text}"
    );

    // verify-ca checks the chain only, so the same wrong name is accepted.
    let chain_only = fx.server.relay_conninfo(&format!(
        "host=wrong.example hostaddr=127.0.0.1 sslmode=verify-ca sslrootcert={ca}"
    ));
    connect_when_free(&fx.settings(chain_only))
        .await
        .shutdown()
        .await
        .unwrap();

    let require =
        connect_when_free(&fx.settings(fx.server.relay_conninfo("sslmode=require"))).await;
    assert!(require.is_tls());
    assert!(backend_uses_tls(&fx, require.backend_pid()).await);
    require.shutdown().await.unwrap();

    let disable =
        connect_when_free(&fx.settings(fx.server.relay_conninfo("sslmode=disable"))).await;
    assert!(!disable.is_tls());
    assert!(!backend_uses_tls(&fx, disable.backend_pid()).await);
    disable.shutdown().await.unwrap();
}

#[tokio::test]
async fn unix_socket_conninfo_connects() {
    let fx = Fixture::new().await;
    fx.insert("over-unix").await;
    let conninfo = format!(
        "host={} port={} dbname={} user=postgres sslmode=require",
        env("PG_SOCKET_DIR"),
        fx.server.port,
        fx.server.dbname
    );
    let mut stream = connect_when_free(&fx.settings(conninfo)).await;
    assert!(!stream.is_tls(), "sslmode does not apply to Unix sockets");
    assert_eq!(next_txn(&mut stream).await.payloads, ["over-unix"]);
    stream.shutdown().await.expect("clean shutdown");
}

// ---------------------------------------------------------------------------
// TLS verification and channel binding, against the real server and a TLS
// man in the middle.

#[tokio::test]
async fn tls_verification_needs_the_right_root_certificate() {
    let fx = Fixture::new().await;
    let ca = ThrowawayCa::create();

    // (a) The server's certificate does not chain to another CA.
    let other_ca = fx.server.relay_conninfo(&format!(
        "host=localhost sslmode=verify-ca sslrootcert={}",
        ca.ca_cert.display()
    ));
    let error = connect_error(&fx.settings(other_ca)).await;
    assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
    assert!(matches!(error, PgError::TlsVerify { .. }), "{error}");

    // (d) verify-ca / verify-full without sslrootcert: refused with the fix,
    // never verified against the system trust store behind the user's back.
    for mode in ["verify-ca", "verify-full"] {
        let started = Instant::now();
        let error = connect_error(
            &fx.settings(
                fx.server
                    .relay_conninfo(&format!("host=localhost sslmode={mode}")),
            ),
        )
        .await;
        assert!(started.elapsed() < WAIT);
        assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
        let text = error.to_string();
        assert!(
            text.contains(&format!("sslmode={mode}"))
                && text.contains("sslrootcert=<path")
                && text.contains("sslrootcert=system"),
            "{text}"
        );
    }

    // sslrootcert=system: only with verify-full (like libpq 16), which is
    // then also the default sslmode. Refused by the conninfo itself.
    for weak in ["verify-ca", "require", "prefer", "disable"] {
        let error = PgError::from(
            Conninfo::parse(
                &fx.server
                    .relay_conninfo(&format!("host=localhost sslmode={weak} sslrootcert=system")),
            )
            .unwrap_err(),
        );
        assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
        assert!(error.to_string().contains("verify-full"), "{weak}: {error}");
    }
    // The test server's self-signed certificate is in no system store, so
    // verification against it fails: proof that it was verified at all.
    for conninfo in [
        "host=localhost sslrootcert=system",
        "host=localhost sslmode=verify-full sslrootcert=system",
    ] {
        let error = connect_error(&fx.settings(fx.server.relay_conninfo(conninfo))).await;
        assert!(
            matches!(error, PgError::TlsVerify { .. }),
            "{conninfo}: {error}"
        );
    }
}

#[tokio::test]
async fn channel_binding_is_required_honoured_and_detects_a_tls_man_in_the_middle() {
    let fx = Fixture::new().await;
    fx.insert("bound").await;

    // (b) require without TLS is refused by the conninfo itself, naming the
    // fix.
    let error = PgError::from(
        Conninfo::parse(
            &fx.server
                .relay_conninfo("sslmode=disable channel_binding=require"),
        )
        .unwrap_err(),
    );
    assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("channel_binding=require") && text.contains("sslmode=require"),
        "{text}"
    );

    // (c) require over TLS: SCRAM-SHA-256-PLUS, and the stream works.
    let mut stream = connect_when_free(
        &fx.settings(
            fx.server
                .relay_conninfo("sslmode=require channel_binding=require"),
        ),
    )
    .await;
    assert!(stream.is_tls());
    assert_eq!(next_txn(&mut stream).await.payloads, ["bound"]);
    stream.shutdown().await.expect("clean shutdown");

    // Through a man in the middle that terminates TLS with a certificate
    // of its own: without binding the relay cannot tell...
    let ca = ThrowawayCa::create();
    let mitm = tls_man_in_the_middle((fx.server.host.clone(), fx.server.port), &ca).await;
    let through_mitm = |binding: &str| {
        fx.settings(format!(
            "host=127.0.0.1 port={mitm} dbname={} user={} password={} sslmode=require {binding}",
            fx.server.dbname, fx.server.user, fx.server.password
        ))
    };
    connect_when_free(&through_mitm("channel_binding=disable"))
        .await
        .shutdown()
        .await
        .unwrap();
    // ...with it (required, or by default when the server offers it) the
    // server's certificate hash does not match and the connection is refused.
    for binding in ["channel_binding=require", "channel_binding=prefer", ""] {
        let error = connect_error(&through_mitm(binding)).await;
        println!("through a man in the middle with {binding:?}: {error}");
        assert_eq!(error.kind(), ErrorKind::Fatal, "{binding}: {error}");
        assert!(
            matches!(error, PgError::ChannelBinding { .. }),
            "{binding}: {error}"
        );
        assert!(
            error.to_string().contains("terminates TLS"),
            "says what it means: {error}"
        );
    }
}

/// The catalog checks quote names as SQL literals and START_REPLICATION
/// quotes the publication inside a replication-command literal: names with
/// a backslash before a quote, a double quote and upper case must reach the
/// server intact whether the session reads backslashes as escapes
/// (`standard_conforming_strings = off`) or not.
#[tokio::test]
async fn names_with_quotes_and_backslashes_work_whatever_standard_conforming_strings_is() {
    let fx = Fixture::new().await;
    let suffix = &fx.slot["repl_slot_".len()..];
    let table = format!("Out\\'\"box_{suffix}");
    let publication = format!("Pub\\'\"x_{suffix}");
    let _cleanup = Cleanup(format!(
        "DROP PUBLICATION IF EXISTS {}; DROP TABLE IF EXISTS public.{};",
        sql_ident(&publication),
        sql_ident(&table)
    ));
    fx.admin
        .batch_execute(&format!(
            "CREATE TABLE public.{t} (id bigserial PRIMARY KEY, payload text NOT NULL); \
             CREATE PUBLICATION {p} FOR TABLE public.{t} WITH (publish = 'insert')",
            t = sql_ident(&table),
            p = sql_ident(&publication),
        ))
        .await
        .unwrap();
    // A slot must start after its publication exists: pgoutput looks the
    // publication up as of each change it decodes, and another test's
    // insert from before the CREATE PUBLICATION would fail with "does not
    // exist". So the fixture's slot is made again, now.
    for statement in [
        "SELECT pg_drop_replication_slot($1)",
        "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
    ] {
        fx.admin.execute(statement, &[&fx.slot]).await.unwrap();
    }
    for scs in ["off", "on"] {
        let mut settings = fx.settings(
            fx.server
                .relay_conninfo(&format!("options='-c standard_conforming_strings={scs}'")),
        );
        settings.publication = publication.clone();
        // The setting reaches the relay's sessions (else this proves little).
        let mut sql = SqlConnection::connect(&settings.connection).await.unwrap();
        let shown = sql
            .query("SHOW standard_conforming_strings", "test")
            .await
            .unwrap();
        assert_eq!(shown, [[Some(scs.to_owned())]]);
        sql.close().await;

        // The publication check alone, then the table's resolution with it.
        connect_when_free(&settings).await.shutdown().await.unwrap();
        settings.outbox_table = Some(("public".into(), table.clone()));
        let mut stream = connect_when_free(&settings).await;
        let resolved = stream.outbox_table().expect("resolved").clone();
        assert_eq!(resolved.current_name, format!("public.{table}"));
        fx.admin
            .execute(
                &format!(
                    "INSERT INTO public.{} (payload) VALUES ($1)",
                    sql_ident(&table)
                ),
                &[&scs],
            )
            .await
            .unwrap();
        // PostgreSQL 14's pgoutput also sends the empty transactions of
        // the DDL above (15 skips them): read past those.
        let txn = loop {
            let txn = next_txn(&mut stream).await;
            if !txn.payloads.is_empty() {
                break txn;
            }
            stream.confirm(txn.end_lsn);
        };
        assert_eq!(txn.payloads, [scs], "standard_conforming_strings={scs}");
        stream.confirm(txn.end_lsn);
        stream.shutdown().await.unwrap();
    }
}
