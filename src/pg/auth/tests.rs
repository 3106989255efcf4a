use bytes::BufMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::*;
use crate::pg::ErrorKind;
use crate::pg::socket::Socket;

fn offered(mechanisms: &[&str]) -> Vec<String> {
    mechanisms.iter().map(|m| (*m).to_owned()).collect()
}

#[test]
fn binding_follows_libpq_channel_binding() {
    use ChannelBinding::{Disable, Prefer, Require};
    let both = offered(&[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]);
    let plain = offered(&[SCRAM_SHA_256]);
    let hash = || Some(Ok(vec![7u8; 32]));
    let no_hash = || Some(Err("no hash for Ed25519".to_owned()));
    let bound = Ok(Binding::EndPoint(vec![7u8; 32]));
    for (mode, offer, end_point, expected) in [
        (Prefer, &both, hash(), bound.clone()),
        (Require, &both, hash(), bound.clone()),
        (Disable, &both, hash(), Ok(Binding::None)),
        (Prefer, &plain, hash(), Ok(Binding::Unrequested)),
        (Prefer, &both, None, Ok(Binding::None)),
        (Prefer, &both, no_hash(), Ok(Binding::None)),
        (Disable, &plain, None, Ok(Binding::None)),
    ] {
        assert_eq!(
            choose_binding(mode, offer, end_point),
            expected,
            "{mode:?} {offer:?}"
        );
    }
    for (offer, end_point, says) in [
        (&both, None, "not encrypted"),
        (&plain, hash(), "not SCRAM-SHA-256-PLUS"),
        (&both, no_hash(), "no hash for Ed25519"),
    ] {
        let why = choose_binding(Require, offer, end_point).unwrap_err();
        assert!(
            why.contains(says) && why.contains("channel_binding"),
            "{why}"
        );
    }
}

#[test]
fn the_first_scram_message_names_the_binding() {
    for (binding, header) in [
        (Binding::EndPoint(vec![1, 2, 3]), "p=tls-server-end-point,,"),
        (Binding::Unrequested, "y,,"),
        (Binding::None, "n,,"),
    ] {
        let mechanism = binding.mechanism();
        let message = binding.scram(b"pw").message().to_vec();
        let message = String::from_utf8(message).unwrap();
        assert!(message.starts_with(header), "{message}");
        assert!(message[header.len()..].starts_with("n=,r="), "{message}");
        assert_eq!(
            mechanism == SCRAM_SHA_256_PLUS,
            header.starts_with("p="),
            "{mechanism}"
        );
    }
}

fn authentication(code: i32, data: &[u8]) -> Vec<u8> {
    let mut body = bytes::BytesMut::new();
    body.put_i32(code);
    body.put_slice(data);
    let mut out = vec![b'R'];
    out.extend(i32::try_from(body.len() + 4).unwrap().to_be_bytes());
    out.extend(&body);
    out
}

/// Runs `startup` for `conninfo` against a fake server that sends
#[test]
fn startup_errors_name_what_to_fix_by_sqlstate() {
    let conninfo = Conninfo::parse("host=h user=relay dbname=app").unwrap();
    let server = |code: &str| ServerError {
        severity: "FATAL".into(),
        code: code.into(),
        message: "m".into(),
        detail: None,
        hint: None,
    };
    let error = |code| startup_error(server(code), &conninfo, "h:5432", SessionKind::Replication);
    for code in ["28P01", "28000"] {
        assert!(
            matches!(error(code), PgError::AuthFailed { ref role, .. } if role == "relay"),
            "{code}"
        );
    }
    assert!(matches!(
        error("42501"),
        PgError::MissingReplicationRole { .. }
    ));
    assert!(matches!(
        error("3D000"),
        PgError::DatabaseMissing { ref database, .. } if database == "app"
    ));
    for code in ["57P03", "53300", "XX000"] {
        assert!(matches!(error(code), PgError::Server { .. }), "{code}");
    }
}

/// `server` once the startup message arrived and hangs up; returns the
/// outcome and everything the client wrote after its startup message.
async fn startup_against(conninfo: &str, server: Vec<u8>) -> (Result<Session, PgError>, Vec<u8>) {
    let conninfo = Conninfo::parse(conninfo).unwrap();
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    let fake = tokio::spawn(async move {
        let len = theirs.read_i32().await.unwrap();
        let mut startup = vec![0u8; usize::try_from(len).unwrap() - 4];
        theirs.read_exact(&mut startup).await.unwrap();
        theirs.write_all(&server).await.unwrap();
        // Then hang up (the client's next read ends) and keep what the
        // client sends until it closes its side.
        theirs.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = theirs.read_to_end(&mut rest).await;
        rest
    });
    let mut socket = FramedSocket::new(Socket::Unix(ours));
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        startup(&mut socket, &conninfo, "test", "fake"),
    )
    .await
    .expect("startup ends once the fake server hangs up");
    drop(socket);
    (outcome, fake.await.unwrap())
}

/// The startup message `startup_as` sends for `kind`, and its outcome
/// when the server answers `server` and hangs up.
async fn startup_message_for(
    kind: SessionKind,
    server: Vec<u8>,
) -> (Result<Session, PgError>, Vec<u8>) {
    let conninfo = Conninfo::parse("host=/nonexistent user=u dbname=app").unwrap();
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    let fake = tokio::spawn(async move {
        let len = theirs.read_i32().await.unwrap();
        let mut startup = vec![0u8; usize::try_from(len).unwrap() - 4];
        theirs.read_exact(&mut startup).await.unwrap();
        theirs.write_all(&server).await.unwrap();
        theirs.shutdown().await.unwrap();
        startup
    });
    let mut socket = FramedSocket::new(Socket::Unix(ours));
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        startup_as(&mut socket, &conninfo, "test", "fake", kind),
    )
    .await
    .expect("startup ends once the fake server hangs up");
    drop(socket);
    (outcome, fake.await.unwrap())
}

/// The startup parameters as `name=value` strings.
fn startup_parameters(message: &[u8]) -> Vec<String> {
    // Protocol version (4 bytes), then NUL-terminated name/value pairs.
    let fields: Vec<&[u8]> = message[4..].split(|b| *b == 0).collect();
    fields
        .chunks(2)
        .filter(|pair| pair.len() == 2 && !pair[0].is_empty())
        .map(|pair| {
            format!(
                "{}={}",
                String::from_utf8_lossy(pair[0]),
                String::from_utf8_lossy(pair[1])
            )
        })
        .collect()
}

fn error_response(code: &str, message: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (field, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code),
        (b'M', message),
    ] {
        body.push(field);
        body.extend(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = vec![b'E'];
    out.extend(i32::try_from(body.len() + 4).unwrap().to_be_bytes());
    out.extend(body);
    out
}

#[tokio::test]
async fn only_a_replication_session_asks_for_a_walsender() {
    let trust = authentication(0, b"");
    let (_, replication) = startup_message_for(SessionKind::Replication, trust.clone()).await;
    let replication = startup_parameters(&replication);
    assert!(
        replication.contains(&"replication=database".to_owned()),
        "{replication:?}"
    );
    let (_, normal) = startup_message_for(SessionKind::Normal, trust).await;
    let normal = startup_parameters(&normal);
    assert!(
        normal.iter().all(|p| !p.starts_with("replication=")),
        "{normal:?}"
    );
    for expected in ["user=u", "database=app", "client_encoding=UTF8"] {
        assert!(normal.contains(&expected.to_owned()), "{normal:?}");
    }
}

#[tokio::test]
async fn insufficient_privilege_names_the_replication_attribute_only_for_a_walsender() {
    let refused = error_response("42501", "permission denied for database app");
    let (outcome, _) = startup_message_for(SessionKind::Replication, refused.clone()).await;
    assert!(
        matches!(outcome, Err(PgError::MissingReplicationRole { .. })),
        "{outcome:?}"
    );
    let (outcome, _) = startup_message_for(SessionKind::Normal, refused).await;
    let err = outcome.unwrap_err();
    assert!(matches!(err, PgError::Server { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("permission denied for database app"),
        "{err}"
    );
    assert!(!err.to_string().contains("REPLICATION"), "{err}");
}

#[tokio::test]
async fn require_without_tls_sends_nothing_and_says_how_to_fix() {
    let sasl = authentication(10, b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
    let md5 = authentication(5, &[1, 2, 3, 4]);
    let cleartext = authentication(3, b"");
    let trust = authentication(0, b"");
    for (server, says) in [
        (sasl, "not encrypted"),
        (md5, "md5"),
        (cleartext, "cleartext"),
        (trust, "without SCRAM"),
    ] {
        let (outcome, sent) = startup_against(
            "host=/nonexistent user=u password=Pw9x channel_binding=require",
            server,
        )
        .await;
        let err = outcome.unwrap_err();
        assert!(matches!(err, PgError::ChannelBinding { .. }), "{err}");
        assert_eq!(err.kind(), ErrorKind::Fatal);
        let text = err.to_string();
        assert!(
            text.contains(says) && text.contains("channel_binding"),
            "{text}"
        );
        assert!(
            sent.is_empty(),
            "nothing after the startup message: {sent:?}"
        );
    }
}

#[tokio::test]
async fn prefer_without_tls_uses_plain_scram_without_binding() {
    let sasl = authentication(10, b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
    let (outcome, sent) = startup_against("host=/nonexistent user=u password=Pw9x", sasl).await;
    // The fake server hangs up after the mechanisms.
    assert!(outcome.is_err());
    assert_eq!(sent.first(), Some(&b'p'), "SASLInitialResponse: {sent:?}");
    let body = &sent[5..];
    let mechanism_end = body.iter().position(|b| *b == 0).unwrap();
    assert_eq!(&body[..mechanism_end], SCRAM_SHA_256.as_bytes());
    let first_message = &body[mechanism_end + 1 + 4..];
    assert!(first_message.starts_with(b"n,,n=,r="), "{first_message:?}");
}
