use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{SslAcceptor, SslMethod as Method};
use openssl::x509::extension::{BasicConstraints, SubjectAlternativeName};
use openssl::x509::{X509, X509NameBuilder};

use super::test_server::TestServer;
use super::*;

fn client(ca_file: Option<&Path>, timeout_ms: u64) -> HttpClient {
    HttpClient::new(&HttpClientSettings {
        ca_file,
        timeout: Duration::from_millis(timeout_ms),
        max_idle: 4,
    })
    .unwrap()
}

fn post(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("authorization", "Bearer secret-token")
        .body(Full::new(Bytes::from_static(b"{\"secret\":1}")))
        .unwrap()
}

#[tokio::test]
async fn sequential_requests_share_one_connection() {
    let server = TestServer::start("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let client = client(None, 2_000);
    let url = format!("http://127.0.0.1:{}/a?b=1", server.port);
    for _ in 0..5 {
        assert_eq!(client.send(post(&url)).await.unwrap().status, 200);
    }
    assert_eq!(server.accepted(), 1, "five requests on one connection");
    let seen = server.wait_for(5).await;
    assert!(
        seen[4].head.starts_with("POST /a?b=1 HTTP/1.1\r\n"),
        "{seen:?}"
    );
    assert_eq!(seen[4].body, b"{\"secret\":1}");
}

#[tokio::test]
async fn a_closed_or_overlong_answer_costs_its_connection() {
    let server =
        TestServer::start("HTTP/1.1 503 Busy\r\nConnection: close\r\nRetry-After: 3\r\n\r\n").await;
    let client = client(None, 2_000);
    let url = format!("http://127.0.0.1:{}/", server.port);
    for _ in 0..2 {
        let answer = client.send(post(&url)).await.unwrap();
        assert_eq!(answer.status, 503);
        assert_eq!(answer.headers["retry-after"], "3");
    }
    assert_eq!(server.accepted(), 2);

    // An answer far longer than the limit: the status counts, the rest is
    // not read and its connection is not reused.
    let long: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{}",
            16 * MAX_ANSWER_BODY,
            "x".repeat(16 * MAX_ANSWER_BODY)
        )
        .into_boxed_str(),
    );
    let server = TestServer::start(long).await;
    let url = format!("http://127.0.0.1:{}/", server.port);
    for _ in 0..2 {
        assert_eq!(client.send(post(&url)).await.unwrap().status, 200);
    }
    assert_eq!(server.accepted(), 2);
}

#[tokio::test]
async fn the_timeout_runs_to_the_end_of_the_answer_and_errors_name_no_secret() {
    // The head comes, the body never does.
    let server = TestServer::start("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n").await;
    let started = std::time::Instant::now();
    let url = format!("http://127.0.0.1:{}/", server.port);
    let err = client(None, 300).send(post(&url)).await.unwrap_err();
    assert_eq!(err.0, "no answer within 300 ms");
    assert!(started.elapsed() < Duration::from_secs(5));

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{closed}/");
    let err = client(None, 2_000).send(post(&url)).await.unwrap_err();
    assert!(
        err.0
            .starts_with(&format!("cannot connect to 127.0.0.1:{closed}: ")),
        "{err}"
    );
    assert!(!err.0.contains("secret"), "{err}");
}

/// A throwaway CA and a server certificate it signed for `localhost` and
/// ::1 (not 127.0.0.1), with the CA's PEM in a file.
struct Pki {
    ca_file: std::path::PathBuf,
    acceptor: SslAcceptor,
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ca_file);
    }
}

fn pki() -> Pki {
    let key = || -> PKey<Private> {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
    };
    let cert = |cn: &str, key: &PKey<Private>, issuer: Option<(&X509, &PKey<Private>)>| {
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", cn).unwrap();
        let name = name.build();
        let mut b = X509::builder().unwrap();
        b.set_version(2).unwrap();
        let serial = BigNum::from_u32(rand::random::<u32>() >> 1).unwrap();
        b.set_serial_number(&serial.to_asn1_integer().unwrap())
            .unwrap();
        b.set_subject_name(&name).unwrap();
        b.set_issuer_name(issuer.map_or(&*name, |(c, _)| c.subject_name()))
            .unwrap();
        b.set_pubkey(key).unwrap();
        b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        if issuer.is_none() {
            b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                .unwrap();
        } else {
            let san = SubjectAlternativeName::new()
                .dns("localhost")
                .ip("::1")
                .build(&b.x509v3_context(issuer.map(|(c, _)| &**c), None))
                .unwrap();
            b.append_extension(san).unwrap();
        }
        b.sign(issuer.map_or(key, |(_, k)| k), MessageDigest::sha256())
            .unwrap();
        b.build()
    };
    let (ca_key, server_key) = (key(), key());
    let ca = cert("throwaway-ca", &ca_key, None);
    let server = cert("localhost", &server_key, Some((&ca, &ca_key)));
    let ca_file =
        std::env::temp_dir().join(format!("http-client-ca-{}.pem", rand::random::<u64>()));
    std::fs::write(&ca_file, ca.to_pem().unwrap()).unwrap();
    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(Method::tls_server()).unwrap();
    acceptor.set_private_key(&server_key).unwrap();
    acceptor.set_certificate(&server).unwrap();
    Pki {
        ca_file,
        acceptor: acceptor.build(),
    }
}

#[tokio::test]
async fn https_verifies_the_certificate_against_ca_file_and_the_host() {
    let pki = pki();
    let answer = "HTTP/1.1 204 No Content\r\n\r\n";
    let v4 = TestServer::listen("127.0.0.1:0", answer, Some(pki.acceptor.clone())).await;
    let v6 = TestServer::listen("[::1]:0", answer, Some(pki.acceptor.clone())).await;
    let trusting = client(Some(&pki.ca_file), 5_000);

    // Without the CA: not trusted.
    let url = format!("https://localhost:{}/hook", v4.port);
    let err = client(None, 5_000).send(post(&url)).await.unwrap_err();
    assert!(
        err.0
            .starts_with(&format!("TLS handshake with localhost:{}: ", v4.port)),
        "{err}"
    );
    assert!(err.0.contains("certificate verify failed"), "{err}");

    // With it: the name and the IPv6 address the certificate names pass,
    // twice on one connection.
    for _ in 0..2 {
        assert_eq!(trusting.send(post(&url)).await.unwrap().status, 204);
    }
    assert_eq!(
        v4.accepted(),
        2,
        "the refused handshake, then one connection"
    );
    let url6 = format!("https://[::1]:{}/hook", v6.port);
    assert_eq!(trusting.send(post(&url6)).await.unwrap().status, 204);

    // An address the certificate does not name fails.
    let url = format!("https://127.0.0.1:{}/hook", v4.port);
    let err = trusting.send(post(&url)).await.unwrap_err();
    assert!(err.0.starts_with("TLS handshake with 127.0.0.1:"), "{err}");

    // A ca_file that is not there.
    let missing = pki.ca_file.with_extension("missing");
    let err = HttpClient::new(&HttpClientSettings {
        ca_file: Some(&missing),
        timeout: Duration::from_secs(1),
        max_idle: 1,
    })
    .unwrap_err();
    assert!(err.0.starts_with("cannot read ca_file "), "{err}");
}

#[tokio::test]
async fn fetch_keeps_the_body_up_to_its_limit() {
    let server =
        TestServer::start("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"id\": 42}\n").await;
    let client = client(None, 2_000);
    let url = format!("http://127.0.0.1:{}/schemas/ids/42", server.port);
    let get = || Request::get(&url).body(Full::default()).unwrap();
    for _ in 0..2 {
        let (answer, body) = client.fetch(get(), 11).await.unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(&body[..], b"{\"id\": 42}\n");
    }
    assert_eq!(
        server.accepted(),
        1,
        "a body read to its end frees the connection"
    );

    let err = client.fetch(get(), 10).await.unwrap_err();
    assert_eq!(
        err.0,
        format!(
            "the answer of 127.0.0.1:{} is longer than 10 bytes",
            server.port
        )
    );
}
