//! The registry client against a server that answers as a registry would
//! (one fixed answer per server): what it asks, what it makes of answers,
//! what it caches, and which errors may be retried.

use std::time::Duration;

use super::client::*;
use super::error::RegistryError;
use crate::http_client::test_server::TestServer;

/// A whole HTTP answer with a JSON body.
fn answer(status: &str, body: &str) -> &'static str {
    Box::leak(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_boxed_str(),
    )
}

fn settings(port: u16) -> RegistrySettings {
    RegistrySettings {
        url: format!("http://127.0.0.1:{port}/apis/ccompat/v7/"),
        timeout: Duration::from_millis(2_000),
        ca_file: None,
        credentials: None,
    }
}

fn client(server: &TestServer) -> RegistryClient {
    RegistryClient::new(&settings(server.port)).unwrap()
}

const AVRO: &str = r#"{\"type\":\"record\",\"name\":\"R\",\"fields\":[]}"#;

#[tokio::test]
async fn latest_is_asked_every_time_and_fills_the_caches() {
    let body = format!(
        r#"{{"subject":"orders/eu-value","version":3,"id":17,"schema":"{AVRO}","references":[]}}"#
    );
    let server = TestServer::start(answer("200 OK", &body)).await;
    let client = client(&server);
    let found = client.latest("orders/eu-value").await.unwrap();
    assert_eq!(
        (found.subject.as_str(), found.version, found.id),
        ("orders/eu-value", 3, 17)
    );
    assert_eq!(
        found.schema.schema_type,
        SchemaType::Avro,
        "no schemaType is Avro"
    );
    assert_eq!(
        found.schema.text,
        r#"{"type":"record","name":"R","fields":[]}"#
    );
    client.latest("orders/eu-value").await.unwrap();
    let seen = server.wait_for(2).await;
    assert_eq!(server.requests().len(), 2, "latest is not cached");
    assert!(
        seen[0].head.starts_with(
            "GET /apis/ccompat/v7/subjects/orders%2Feu-value/versions/latest HTTP/1.1\r\n"
        ),
        "{}",
        seen[0].head
    );
    assert!(
        seen[0]
            .head
            .to_ascii_lowercase()
            .contains("\r\naccept: application/vnd.schemaregistry.v1+json, application/json"),
        "{}",
        seen[0].head
    );
    assert!(!seen[0].head.to_ascii_lowercase().contains("authorization"));

    // What latest found serves the pinned version and the id.
    let pinned = client.version("orders/eu-value", 3).await.unwrap();
    assert_eq!(pinned, found);
    let by_id = client.schema(17).await.unwrap();
    assert!(std::sync::Arc::ptr_eq(&by_id, &found.schema));
    assert_eq!(server.requests().len(), 2, "served from the caches");
}

#[tokio::test]
async fn a_pinned_version_and_an_id_are_fetched_once() {
    let body = r#"{"subject":"s","version":2,"id":5,"schemaType":"JSON","schema":"{}","references":[{"name":"common.json","subject":"common","version":1}]}"#;
    let server = TestServer::start(answer("200 OK", body)).await;
    let client = client(&server);
    for _ in 0..3 {
        let found = client.version("s", 2).await.unwrap();
        assert_eq!(found.schema.schema_type, SchemaType::Json);
        assert_eq!(
            found.schema.references,
            [SchemaReference {
                name: "common.json".into(),
                subject: "common".into(),
                version: 1
            }]
        );
    }
    let seen = server.wait_for(1).await;
    assert!(
        seen[0]
            .head
            .starts_with("GET /apis/ccompat/v7/subjects/s/versions/2 ")
    );
    assert_eq!(server.requests().len(), 1);

    let server = TestServer::start(answer(
        "200 OK",
        r#"{"schema":"syntax = \"proto3\"; message M {}","schemaType":"PROTOBUF"}"#,
    ))
    .await;
    let client = self::client(&server);
    for _ in 0..3 {
        let schema = client.schema(9).await.unwrap();
        assert_eq!(schema.schema_type, SchemaType::Protobuf);
        assert!(schema.references.is_empty());
    }
    let seen = server.wait_for(1).await;
    assert!(
        seen[0]
            .head
            .starts_with("GET /apis/ccompat/v7/schemas/ids/9 ")
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_version_other_than_the_one_asked_is_refused() {
    let body = format!(r#"{{"subject":"s","version":4,"id":5,"schema":"{AVRO}"}}"#);
    let server = TestServer::start(answer("200 OK", &body)).await;
    let err = client(&server).version("s", 2).await.unwrap_err();
    assert!(matches!(err, RegistryError::BadAnswer { .. }), "{err:?}");
}

#[tokio::test]
async fn error_answers_become_typed_errors_that_say_whether_to_retry() {
    let secret_message = r#"Schema {\"type\":\"SECRET\"} is invalid"#;
    type IsExpected = Box<dyn Fn(&RegistryError) -> bool>;
    let cases: Vec<(&str, String, IsExpected, bool)> = vec![
        (
            "404 Not Found",
            r#"{"error_code":40401,"message":"Subject 's' not found."}"#.into(),
            Box::new(
                |e| matches!(e, RegistryError::SubjectNotFound { subject, .. } if subject == "s"),
            ),
            false,
        ),
        (
            "404 Not Found",
            r#"{"error_code":40402,"message":"Version 7 not found."}"#.into(),
            Box::new(|e| matches!(e, RegistryError::VersionNotFound { version: 7, .. })),
            false,
        ),
        (
            "401 Unauthorized",
            r#"{"error_code":401,"message":"Unauthorized"}"#.into(),
            Box::new(|e| matches!(e, RegistryError::Unauthorized { status: 401, .. })),
            false,
        ),
        (
            "404 Not Found",
            "<html>no such page</html>".into(),
            Box::new(|e| matches!(e, RegistryError::BadAnswer { .. })),
            false,
        ),
        (
            "422 Unprocessable Entity",
            format!(r#"{{"error_code":42201,"message":"{secret_message}"}}"#),
            Box::new(|e| {
                matches!(
                    e,
                    RegistryError::Failed {
                        status: 422,
                        error_code: Some(42201),
                        ..
                    }
                )
            }),
            false,
        ),
        (
            "500 Internal Server Error",
            format!(r#"{{"error_code":50001,"message":"{secret_message}"}}"#),
            Box::new(|e| matches!(e, RegistryError::Failed { status: 500, .. })),
            true,
        ),
        (
            "429 Too Many Requests",
            String::new(),
            Box::new(|e| {
                matches!(
                    e,
                    RegistryError::Failed {
                        status: 429,
                        error_code: None,
                        ..
                    }
                )
            }),
            true,
        ),
        (
            "200 OK",
            r#"{"subject":"s","version":7,"id":1,"schema":"SECRET","schemaType":"XSD"}"#.into(),
            Box::new(
                |e| matches!(e, RegistryError::UnknownSchemaType { schema_type, .. } if schema_type == "XSD"),
            ),
            false,
        ),
        (
            "200 OK",
            r#"{"SECRET": true}"#.into(),
            Box::new(|e| matches!(e, RegistryError::BadAnswer { .. })),
            false,
        ),
    ];
    for (status, body, is_expected, retryable) in cases {
        // A registry: its /schemas/types answers, whatever else does.
        let server =
            Routed::start(vec![types_route(), ("/", answer(status, &body).to_owned())]).await;
        let err = RegistryClient::new(&settings(server.port))
            .unwrap()
            .version("s", 7)
            .await
            .unwrap_err();
        assert!(is_expected(&err), "{status} {body}: {err:?}");
        assert_eq!(err.is_retryable(), retryable, "{err:?}");
        let text = err.to_string();
        assert!(!text.contains("SECRET"), "{text}");
        assert!(
            text.contains(&format!("127.0.0.1:{}", server.port)),
            "{text}"
        );
    }

    let server = Routed::start(vec![
        types_route(),
        (
            "/",
            answer(
                "404 Not Found",
                r#"{"error_code":40403,"message":"Schema 3 not found"}"#,
            )
            .to_owned(),
        ),
    ])
    .await;
    let err = RegistryClient::new(&settings(server.port))
        .unwrap()
        .schema(3)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::SchemaNotFound { id: 3, .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_registry_unreachable_or_silent_is_retryable() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let client = RegistryClient::new(&settings(closed)).unwrap();
    let err = client.latest("s").await.unwrap_err();
    assert!(matches!(err, RegistryError::Unreachable { .. }), "{err:?}");
    assert!(err.is_retryable());

    let silent = TestServer::start("").await;
    let mut slow = settings(silent.port);
    slow.timeout = Duration::from_millis(200);
    let err = RegistryClient::new(&slow)
        .unwrap()
        .schema(1)
        .await
        .unwrap_err();
    assert!(
        err.to_string().ends_with("no answer within 200 ms"),
        "{err}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn register_posts_the_schema_with_its_type_and_credentials() {
    let server = TestServer::start(answer("200 OK", r#"{"id":21}"#)).await;
    let mut with_credentials = settings(server.port);
    with_credentials.credentials = Some(Credentials {
        user: "key".into(),
        password: "p4ss".into(),
    });
    assert!(!format!("{with_credentials:?}").contains("p4ss"));
    let client = RegistryClient::new(&with_credentials).unwrap();
    let json = Schema {
        schema_type: SchemaType::Json,
        text: r#"{"type":"object"}"#.into(),
        references: vec![],
    };
    assert!(
        !format!("{json:?}").contains("object"),
        "Debug hides the text"
    );
    assert_eq!(client.register("a b", &json).await.unwrap(), 21);
    let avro = Schema {
        schema_type: SchemaType::Avro,
        text: "\"string\"".into(),
        references: vec![],
    };
    assert_eq!(client.register("a b", &avro).await.unwrap(), 21);
    let seen = server.wait_for(2).await;
    let head = seen[0].head.to_ascii_lowercase();
    assert!(
        head.starts_with("post /apis/ccompat/v7/subjects/a%20b/versions http/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\ncontent-type: application/vnd.schemaregistry.v1+json"));
    // base64("key:p4ss")
    assert!(
        head.contains("\r\nauthorization: basic a2v5ona0c3m="),
        "{head}"
    );
    let body = |i: usize| serde_json::from_slice::<serde_json::Value>(&seen[i].body).unwrap();
    assert_eq!(
        body(0),
        serde_json::json!({"schema": "{\"type\":\"object\"}", "schemaType": "JSON"})
    );
    assert_eq!(body(1), serde_json::json!({"schema": "\"string\""}));
}

#[test]
fn urls_that_cannot_be_a_registrys_root_are_refused() {
    for (url, why) in [
        ("http://user:secret@registry:8081", "credentials go in"),
        ("ftp://registry", "an http:// or https:// URL"),
        ("registry:8081", "an http:// or https:// URL"),
        ("http://registry/api?x=1", "no query or fragment"),
    ] {
        let err = RegistryClient::new(&RegistrySettings {
            url: url.into(),
            ..settings(1)
        })
        .unwrap_err();
        assert!(matches!(err, RegistryError::Setup { .. }), "{url}: {err:?}");
        assert!(err.to_string().contains(why), "{url}: {err}");
        assert!(!err.to_string().contains("secret"), "{err}");
        assert!(!err.is_retryable());
    }
    let client = RegistryClient::new(&settings(1)).unwrap();
    assert_eq!(client.url(), "http://127.0.0.1:1/apis/ccompat/v7");
}

#[test]
fn subjects_are_one_path_segment() {
    assert_eq!(encode("orders-value"), "orders-value");
    assert_eq!(encode("com.acme.Order_v1~x"), "com.acme.Order_v1~x");
    assert_eq!(encode("a/b c?d#e%"), "a%2Fb%20c%3Fd%23e%25");
    assert_eq!(encode(":.ctx:s"), "%3A.ctx%3As");
    assert_eq!(encode("é"), "%C3%A9");
}

/// A fake registry that answers by path, for what one fixed answer cannot
/// show: the client's second look when a lookup answers 404. Each request
/// gets the answer of the first route its path contains; none: `404` with
/// a server's (not a registry's) error code, as a wrong path gets.
pub(crate) struct Routed {
    pub port: u16,
    paths: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Routed {
    pub(crate) async fn start(routes: Vec<(&'static str, String)>) -> Routed {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let paths = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&paths);
        let routes = std::sync::Arc::new(routes);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (seen, routes) = (std::sync::Arc::clone(&seen), std::sync::Arc::clone(&routes));
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (name, value) = l.split_once(':')?;
                                name.eq_ignore_ascii_case("content-length")
                                    .then(|| value.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        while buf.len() < end + 4 + length {
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..end + 4 + length);
                        let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
                        let found = routes.iter().find(|(part, _)| path.contains(part));
                        let reply = found.map_or_else(
                            || {
                                answer(
                                    "404 Not Found",
                                    r#"{"error_code":404,"message":"HTTP 404 Not Found"}"#,
                                )
                            },
                            |(_, reply)| Box::leak(reply.clone().into_boxed_str()),
                        );
                        seen.lock().unwrap().push(path);
                        if socket.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Routed { port, paths }
    }

    /// The paths asked so far, in order.
    pub(crate) fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }

    /// The registry's API root on this fake.
    pub(crate) fn url(&self, root: &str) -> String {
        format!("http://127.0.0.1:{}{root}", self.port)
    }
}

/// What a registry answers to `GET /schemas/types`.
pub(crate) fn types_route() -> (&'static str, String) {
    (
        "/apis/ccompat/v7/schemas/types",
        answer("200 OK", r#"["JSON","PROTOBUF","AVRO"]"#).to_owned(),
    )
}

#[tokio::test]
async fn a_url_whose_path_is_no_registrys_root_says_so_and_names_the_path() {
    let body = format!(r#"{{"subject":"s","version":1,"id":5,"schema":"{AVRO}"}}"#);
    // A registry at /apis/ccompat/v7; the URL names v6, where everything
    // is 404, some of it with a registry-like code.
    let server = Routed::start(vec![
        types_route(),
        (
            "/apis/ccompat/v7/subjects/s/",
            answer("200 OK", &body).to_owned(),
        ),
        (
            "/apis/ccompat/v6/subjects/",
            answer(
                "404 Not Found",
                r#"{"error_code":40401,"message":"Subject 's' not found."}"#,
            )
            .to_owned(),
        ),
    ])
    .await;
    let client = |root: &str| {
        RegistryClient::new(&RegistrySettings {
            url: server.url(root),
            ..settings(server.port)
        })
        .unwrap()
    };
    assert_eq!(client("/apis/ccompat/v7").latest("s").await.unwrap().id, 5);
    for root in ["/apis/ccompat/v6", "/wiki"] {
        let err = client(root).latest("s").await.unwrap_err();
        assert!(
            matches!(err, RegistryError::NotARegistry { .. }),
            "{root}: {err:?}"
        );
        assert!(!err.is_retryable());
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "registry.url {} does not look like a schema registry: its path {root} is not \
                 the root of a Confluent-compatible registry API (GET {root}/schemas/types \
                 answered HTTP 404); set registry.url to that root",
                server.url(root)
            )),
            "{text}"
        );
    }
    assert!(
        server
            .paths()
            .contains(&"/apis/ccompat/v6/config".to_owned()),
        "an older registry without /schemas/types is asked for its /config: {:?}",
        server.paths()
    );

    // On a registry, a missing subject is a missing subject.
    let err = client("/apis/ccompat/v7").latest("gone").await.unwrap_err();
    assert!(
        matches!(err, RegistryError::Failed { status: 404, .. }),
        "{err:?}"
    );
    let server = Routed::start(vec![
        types_route(),
        (
            "/subjects/gone/",
            answer(
                "404 Not Found",
                r#"{"error_code":40401,"message":"Subject 'gone' not found."}"#,
            )
            .to_owned(),
        ),
    ])
    .await;
    let err = RegistryClient::new(&settings(server.port))
        .unwrap()
        .latest("gone")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::SubjectNotFound { subject, .. } if subject == "gone"),
        "{err:?}"
    );
}
