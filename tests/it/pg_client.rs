//! The ordinary SQL session ([`PgClient`]: tokio-postgres on the relay's
//! own transport and TLS) against the real PostgreSQL of `scripts/services`:
//! typed parameters, server errors keeping their SQLSTATE and class, a
//! session the server ends, the connect semantics it shares with the
//! replication connection (endpoints in order, the application name,
//! refused logins naming the role and never the password, TLS verification,
//! channel binding that detects a TLS man in the middle).

use outbox_relay::pg::{
    AsText, ConnectSettings, Conninfo, ErrorKind, PgClient, PgError, TextArray,
};

use crate::support::auth::{pg_url_at, pg_url_for};
use crate::support::services;
use crate::support::tls::{ThrowawayCa, tls_man_in_the_middle};
use crate::support::{DEADLINE, Relay, TestOutbox, env, random_name, wait_until};

fn settings(conninfo: &str) -> ConnectSettings {
    ConnectSettings::new(Conninfo::parse(conninfo).expect("conninfo"))
}

async fn connect(conninfo: &str) -> PgClient {
    PgClient::connect(&settings(conninfo))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

async fn refused(conninfo: &str) -> PgError {
    match PgClient::connect(&settings(conninfo)).await {
        Ok(_) => panic!("connected, expected a refusal"),
        Err(e) => e,
    }
}

const PASSWORD: &str = "relay-test-password";

#[tokio::test]
async fn typed_parameters_reach_the_server_intact_and_errors_keep_their_sqlstate() {
    let _services = services::shared().await;
    let client = connect(&env("PG_RELAY_URL")).await;
    // A value with every character the old text splicing had to escape.
    let value = "it's a \\' \"quoted\" \\\\ value";
    let row = client
        .query_one("SELECT $1::text || '!', $2::bigint + 1", &[&value, &41_i64])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), format!("{value}!"));
    assert_eq!(row.get::<_, i64>(1), 42);
    // The fallback application name shows in pg_stat_activity.
    let name: String = client
        .query_one("SELECT current_setting('application_name')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, "outbox-relay");

    // A statement's error: SQLSTATE, message and class kept.
    let e = client.query_one("SELECT 1 / 0", &[]).await.unwrap_err();
    let error = client.error("dividing", e);
    assert_eq!(error.sqlstate(), Some("22012"), "{error}");
    assert_eq!(error.kind(), ErrorKind::Fatal, "{error}");
    let PgError::Server { server, action, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(*action, "dividing");
    assert_eq!(server.severity, "ERROR");
    assert!(server.message.contains("division by zero"), "{server}");

    // The server ending the session (admin shutdown, 57P01): transient, and
    // so is every request after it.
    let e = client
        .simple_query("SELECT pg_terminate_backend(pg_backend_pid())")
        .await
        .unwrap_err();
    let error = client.error("being terminated", e);
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
    assert_eq!(error.sqlstate(), Some("57P01"), "{error}");
    let e = client.query_one("SELECT 1", &[]).await.unwrap_err();
    let error = client.error("after the end", e);
    assert_eq!(error.kind(), ErrorKind::Transient, "{error:?}");
}

#[tokio::test]
async fn endpoints_are_tried_in_order_and_the_one_that_answered_is_kept() {
    let _services = services::shared().await;
    // Port 1 on loopback refuses at once.
    let conninfo = format!(
        "host=127.0.0.1,127.0.0.1 port=1,{} dbname=postgres user=relay password={PASSWORD} \
         application_name=mine",
        env("PG_PORT")
    );
    let client = connect(&conninfo).await;
    assert_eq!(client.target(), format!("127.0.0.1:{}", env("PG_PORT")));
    assert_eq!(
        client.endpoint().to_string(),
        format!("127.0.0.1:{}", env("PG_PORT"))
    );
    let name: String = client
        .query_one("SELECT current_setting('application_name')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, "mine");
    // Nothing answers: the last endpoint's error, transient.
    let error = refused("host=127.0.0.1 port=1 user=relay password=x").await;
    assert!(matches!(error, PgError::Connect { .. }), "{error}");
    assert_eq!(error.kind(), ErrorKind::Transient);
}

#[tokio::test]
async fn a_refused_login_names_the_role_and_never_the_password() {
    let _services = services::shared().await;
    let wrong = "Not-The-Password-'\\";
    let error = refused(&pg_url_for("relay", wrong, "sslmode=disable")).await;
    assert!(matches!(error, PgError::AuthFailed { .. }), "{error:?}");
    assert_eq!(error.kind(), ErrorKind::Fatal);
    let text = error.to_string();
    assert!(
        text.contains("\"relay\"") && text.contains("28P01"),
        "{text}"
    );
    assert!(!text.contains("Not-The-Password"), "{text}");
    assert!(!format!("{error:?}").contains("Not-The-Password"));

    let missing = random_name("nodb");
    let error = refused(&format!(
        "host=127.0.0.1 port={} dbname={missing} user=relay password={PASSWORD}",
        env("PG_PORT")
    ))
    .await;
    assert!(matches!(error, PgError::DatabaseMissing { .. }), "{error}");
    assert!(error.to_string().contains(&missing), "{error}");

    let error = refused(&format!(
        "host=127.0.0.1 port={} dbname=postgres user=relay",
        env("PG_PORT")
    ))
    .await;
    assert!(matches!(error, PgError::PasswordMissing { .. }), "{error}");
}

#[tokio::test]
async fn tls_is_verified_as_on_the_replication_connection() {
    let _services = services::shared().await;
    let ca = env("PG_CA_CERT");
    let verified = pg_url_at(
        "localhost",
        "relay",
        PASSWORD,
        &format!("sslmode=verify-full&sslrootcert={ca}&channel_binding=require"),
    );
    let client = connect(&verified).await;
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "the session is encrypted");
    // The name the certificate does not carry.
    let wrong_host = format!(
        "host=wrong.example hostaddr=127.0.0.1 port={} dbname=postgres user=relay \
         password={PASSWORD} sslmode=verify-full sslrootcert={ca}",
        env("PG_PORT")
    );
    let error = refused(&wrong_host).await;
    assert!(matches!(error, PgError::TlsVerify { .. }), "{error}");
    assert!(error.to_string().contains("wrong.example"), "{error}");
    // Nothing to verify against.
    let error = refused(&pg_url_at(
        "localhost",
        "relay",
        PASSWORD,
        "sslmode=verify-full",
    ))
    .await;
    assert!(
        matches!(error, PgError::TlsRootCertMissing { .. }),
        "{error}"
    );
    assert!(!error.to_string().contains(PASSWORD));
}

#[tokio::test]
async fn channel_binding_detects_a_tls_man_in_the_middle() {
    let _services = services::shared().await;
    let ca = ThrowawayCa::create();
    let port: u16 = env("PG_PORT").parse().unwrap();
    let mitm = tls_man_in_the_middle(("127.0.0.1".to_owned(), port), &ca).await;
    let through = |binding: &str| {
        format!(
            "host=127.0.0.1 port={mitm} dbname=postgres user=relay password={PASSWORD} \
             sslmode=require {binding}"
        )
    };
    // Without binding the client cannot tell.
    let client = connect(&through("channel_binding=disable")).await;
    client.query_one("SELECT 1", &[]).await.unwrap();
    // With it (required, or by default) the server refuses the binding.
    for binding in ["channel_binding=require", "channel_binding=prefer", ""] {
        let error = refused(&through(binding)).await;
        assert!(
            matches!(error, PgError::ChannelBinding { .. }),
            "{binding}: {error}"
        );
        assert_eq!(error.kind(), ErrorKind::Fatal);
        assert!(error.to_string().contains("terminates TLS"), "{error}");
        assert!(!error.to_string().contains(PASSWORD));
    }
}

/// Values compared with a column whose type the relay does not know go as
/// text parameters of the type the server infers: read back exactly, and
/// refused by the type's own input function when they are not of it.
#[tokio::test]
async fn text_parameters_take_the_inferred_type_and_arrive_intact() {
    let _services = services::shared().await;
    let client = connect(&env("PG_RELAY_URL")).await;
    let texts = [
        "plain",
        "a,b",
        "NULL",
        "{x}",
        "say \"hi\"",
        "back\\slash",
        "it's",
        "",
        " sp ",
    ];
    let row = client
        .query_one(
            "SELECT $1 = ARRAY['plain', 'a,b', 'NULL', '{x}', 'say \"hi\"', 'back\\slash', \
             'it''s', '', ' sp ']::text[], cardinality($1)",
            &[&TextArray(&texts)],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "text[] read back as given");
    assert_eq!(row.get::<_, i32>(1), 9);
    let stmt = client
        .prepare("SELECT x::text FROM unnest($1::bigint[]) AS x")
        .await
        .unwrap();
    let rows = client
        .query(&stmt, &[&TextArray(&["1", "-2", "9223372036854775807"])])
        .await
        .unwrap();
    let got: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, ["1", "-2", "9223372036854775807"]);
    let e = client
        .query(&stmt, &[&TextArray(&["1", "1); DROP TABLE x; --"])])
        .await
        .unwrap_err();
    let error = client.error("reading ids", e);
    assert_eq!(error.sqlstate(), Some("22P02"), "{error}");
    let lsn: String = client
        .query_one("SELECT ($1::pg_lsn + 16)::text", &[&AsText("0/10")])
        .await
        .unwrap()
        .get(0);
    assert_eq!(lsn, "0/20");
}

/// The relay's own ordinary sessions (the relay lock, the slot-lag monitor)
/// send the slot's name as a parameter: no statement text they ran, as
/// `pg_stat_activity` shows it, names the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relays_sessions_send_the_slot_as_a_parameter() {
    let outbox = TestOutbox::create("jsonb").await;
    let relay = Relay::in_process(outbox.settings());
    let statements = async || -> Vec<(String, String)> {
        outbox
            .admin
            .query(
                "SELECT application_name, query FROM pg_stat_activity \
                 WHERE usename = 'relay' AND backend_type = 'client backend'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    wait_until("the monitor's first sample", DEADLINE, || async {
        statements().await.iter().any(|(app, query)| {
            app == "outbox-relay-monitor" && query.contains("pg_replication_slots")
        })
    })
    .await;
    for (app, query) in statements().await {
        assert!(!query.contains(&outbox.slot), "{app}: {query}");
    }
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}
