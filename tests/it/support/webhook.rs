//! A webhook receiver for the tests, on 127.0.0.1: it verifies every
//! request's signature on the raw body (HMAC-SHA256 computed by OpenSSL,
//! compared in constant time), answers as the test's current [`Mode`] says,
//! and records what it accepted and how many requests for one event id were
//! in flight at once. Plus the delivery table of a test, and the checker of
//! what the receiver accepted against what was committed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::outbox::{Committed, TestOutbox};
use super::random_name;

/// How the receiver answers now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Taken on arrival (recorded as accepted), 204 after `delay`.
    Accept { delay: Duration },
    /// This status for every request.
    Status(u16),
    /// 429 with `Retry-After: secs`.
    TooMany { retry_after_secs: u64 },
    /// Holds the request this long, then answers 503 (never accepted: a
    /// relay that timed out must not count it delivered, and the receiver
    /// never takes it either, so no duplicate comes from it).
    Hang(Duration),
}

/// One accepted request.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub id: String,
    pub aggregate: String,
    pub seq: i64,
    pub headers: HashMap<String, String>,
    pub body: Bytes,
}

#[derive(Default)]
struct State_ {
    mode: Option<Mode>,
    accepted: Vec<Accepted>,
    /// Requests seen, by answer.
    requests: u64,
    bad_signatures: Vec<String>,
    in_flight: HashMap<String, u32>,
    max_in_flight_per_id: u32,
    /// The same by aggregate (`ce-subject`): the relay sends one event of
    /// an aggregate at a time.
    in_flight_by_key: HashMap<String, u32>,
    max_in_flight_per_key: u32,
    /// Every request: event id, when it arrived, the status answered
    /// (0: none, the client hung up or it is still held).
    log: Vec<(String, std::time::Instant, u16)>,
    /// A status for one event, by (aggregate, seq), whatever the mode (a
    /// permanent refusal).
    per_event: HashMap<(String, i64), u16>,
}

/// The receiver. Dropping it stops the server.
pub struct Receiver {
    pub port: u16,
    secrets: Vec<String>,
    state: Arc<Mutex<State_>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Shared {
    /// Any one of them verifies a request.
    secrets: Vec<String>,
    state: Arc<Mutex<State_>>,
}

impl Receiver {
    /// Listens on a free port; accepts requests signed with any of
    /// `secrets`.
    pub async fn start(secrets: &[&str]) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State_ {
            mode: Some(Mode::Accept {
                delay: Duration::ZERO,
            }),
            ..State_::default()
        }));
        let shared = Shared {
            secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            state: Arc::clone(&state),
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(shared);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            port,
            secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            state,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = Some(mode);
    }

    /// Answers `status` to every request for the event `seq` of
    /// `aggregate`.
    pub fn refuse(&self, aggregate: &str, seq: i64, status: u16) {
        self.state
            .lock()
            .unwrap()
            .per_event
            .insert((aggregate.to_owned(), seq), status);
    }

    /// Ends a [`Receiver::refuse`]: the event is answered as the mode says
    /// again (an endpoint fixed before a `dead retry`).
    pub fn forgive(&self, aggregate: &str, seq: i64) {
        self.state
            .lock()
            .unwrap()
            .per_event
            .remove(&(aggregate.to_owned(), seq));
    }

    pub fn accepted(&self) -> Vec<Accepted> {
        self.state.lock().unwrap().accepted.clone()
    }

    pub fn requests(&self) -> u64 {
        self.state.lock().unwrap().requests
    }

    /// Request ids whose signature did not verify.
    pub fn bad_signatures(&self) -> Vec<String> {
        self.state.lock().unwrap().bad_signatures.clone()
    }

    /// Most requests for one event id ever in flight at once.
    pub fn max_in_flight_per_id(&self) -> u32 {
        self.state.lock().unwrap().max_in_flight_per_id
    }

    /// Every request: event id, arrival, status answered.
    pub fn log(&self) -> Vec<(String, std::time::Instant, u16)> {
        self.state.lock().unwrap().log.clone()
    }

    /// Most requests for one aggregate ever in flight at once.
    pub fn max_in_flight_per_key(&self) -> u32 {
        self.state.lock().unwrap().max_in_flight_per_key
    }

    /// Whether every id of `committed` was accepted at least once.
    pub fn has_all(&self, committed: &[Committed]) -> bool {
        let state = self.state.lock().unwrap();
        let ids: std::collections::HashSet<&str> =
            state.accepted.iter().map(|a| a.id.as_str()).collect();
        committed.iter().all(|c| ids.contains(c.id.as_str()))
    }

    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }
}

/// HMAC-SHA256 by OpenSSL, as lower-case hex.
fn hmac_hex(secret: &[u8], message: &[u8]) -> String {
    let key = openssl::pkey::PKey::hmac(secret).unwrap();
    let mut signer =
        openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), &key).unwrap();
    signer.update(message).unwrap();
    signer
        .sign_to_vec()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `header` (`t=<secs>,v1=<hex>[,v1=<hex>…]`) signs `body` with
/// one of `secrets`: the receiver's recipe in docs/webhooks.md.
pub fn verify(header: &str, body: &[u8], secrets: &[String]) -> bool {
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = Some(v),
            Some(("v1", v)) => signatures.push(v),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    if t.parse::<u64>().is_err() {
        return false;
    }
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(body);
    secrets.iter().any(|secret| {
        let expected = hmac_hex(secret.as_bytes(), &message);
        signatures.iter().any(|sig| {
            sig.len() == expected.len() && openssl::memcmp::eq(sig.as_bytes(), expected.as_bytes())
        })
    })
}

/// Decrements the in-flight count of an id when the request ends, however
/// it ends (also when the client hangs up and the handler is dropped).
struct InFlight {
    state: Arc<Mutex<State_>>,
    id: String,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = state.in_flight.get_mut(&self.id) {
            *n -= 1;
        }
        if let Some(n) = state.in_flight_by_key.get_mut(&self.key) {
            *n -= 1;
        }
    }
}

async fn hook(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let id = headers
        .get("ce-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let arrived = std::time::Instant::now();
    let at = {
        let mut state = shared.state.lock().unwrap();
        state.log.push((id, arrived, 0));
        state.log.len() - 1
    };
    let response = answer(&shared, &headers, body).await;
    shared.state.lock().unwrap().log[at].2 = response.status().as_u16();
    response
}

async fn answer(shared: &Shared, headers: &HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let id = header("ce-id");
    let signature = header("x-outbox-signature");
    let _guard = {
        let mut state = shared.state.lock().unwrap();
        state.requests += 1;
        let n = state.in_flight.entry(id.clone()).or_insert(0);
        *n += 1;
        let now = *n;
        state.max_in_flight_per_id = state.max_in_flight_per_id.max(now);
        let key = header("ce-subject");
        let n = state.in_flight_by_key.entry(key.clone()).or_insert(0);
        *n += 1;
        let now = *n;
        state.max_in_flight_per_key = state.max_in_flight_per_key.max(now);
        InFlight {
            state: Arc::clone(&shared.state),
            id: id.clone(),
            key,
        }
    };
    if !verify(&signature, &body, &shared.secrets) {
        shared.state.lock().unwrap().bad_signatures.push(id);
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let data: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let seq = data["seq"].as_i64().unwrap_or(-1);
    let (mode, refused) = {
        let state = shared.state.lock().unwrap();
        (
            state.mode.unwrap(),
            state.per_event.get(&(header("ce-subject"), seq)).copied(),
        )
    };
    if let Some(status) = refused {
        return StatusCode::from_u16(status).unwrap().into_response();
    }
    match mode {
        Mode::Accept { delay } => {
            // Taken on arrival, answered after `delay`: like a receiver
            // that commits, then answers. A relay that gives up on the
            // answer (a timeout, a stop) and sends again makes a duplicate
            // the checker sees.
            let accepted = Accepted {
                id,
                aggregate: header("ce-subject"),
                seq,
                headers: headers
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_owned(),
                            v.to_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect(),
                body,
            };
            shared.state.lock().unwrap().accepted.push(accepted);
            tokio::time::sleep(delay).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Mode::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        Mode::TooMany { retry_after_secs } => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", retry_after_secs.to_string())],
        )
            .into_response(),
        Mode::Hang(d) => {
            tokio::time::sleep(d).await;
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

/// The verdict on what the receiver accepted: every committed event at
/// least once, the first acceptances of each aggregate in commit (`seq`)
/// order, and how many duplicates. `allowed_dead`: ids the test made
/// permanently refused (not expected to arrive).
pub fn check_webhook_delivery(
    case: &str,
    committed: &[Committed],
    accepted: &[Accepted],
    allowed_dead: &[String],
) -> usize {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut last_seq: HashMap<&str, i64> = HashMap::new();
    for a in accepted {
        let count = seen.entry(a.id.as_str()).or_insert(0);
        *count += 1;
        if *count > 1 {
            continue;
        }
        let last = last_seq.entry(a.aggregate.as_str()).or_insert(0);
        assert!(
            a.seq > *last,
            "{case}: aggregate {} got seq {} after seq {}: per-aggregate order broken",
            a.aggregate,
            a.seq,
            last
        );
        *last = a.seq;
    }
    let missing: Vec<&Committed> = committed
        .iter()
        .filter(|c| !seen.contains_key(c.id.as_str()) && !allowed_dead.contains(&c.id))
        .collect();
    assert!(
        missing.is_empty(),
        "{case}: {} committed events never accepted, first {:?}",
        missing.len(),
        missing.first().map(|c| (&c.id, &c.aggregate, c.seq))
    );
    let duplicates = seen.values().map(|n| n - 1).sum();
    eprintln!(
        "summary: case={case} committed={} accepted={} duplicates={duplicates}",
        committed.len(),
        accepted.len()
    );
    duplicates
}

/// A delivery table of its own for one test, created from
/// `sql/outbox_delivery.sql`, writable by the relay role.
pub async fn create_delivery_table(outbox: &TestOutbox) -> String {
    let name = random_name("delivery");
    let sql = include_str!("../../../sql/outbox_delivery.sql").replace("outbox_delivery", &name);
    outbox
        .admin
        .batch_execute(&sql)
        .await
        .expect("create delivery table");
    outbox
        .admin
        .batch_execute(&format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON public.{name} TO relay"
        ))
        .await
        .unwrap();
    name
}

/// Rows of `table` by status.
pub async fn delivery_counts(outbox: &TestOutbox, table: &str) -> HashMap<String, i64> {
    outbox
        .admin
        .query(
            &format!("SELECT status, count(*) FROM public.{table} GROUP BY status"),
            &[],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The `[[routes]]` and `[sinks.hooks]` TOML sending aggregate type `order`
/// to `url`, with a short retry schedule.
/// (The delivery table is a `[postgres]` key: set it on the settings, or
/// with `OUTBOX_RELAY__POSTGRES__DELIVERY_TABLE` for a relay process.)
pub fn webhook_toml(url: &str, secrets: &[String], extra_sink_keys: &str) -> String {
    webhook_route_toml("ord*", url, secrets, extra_sink_keys)
}

/// [`webhook_toml`] for the aggregate types `pattern` matches.
pub fn webhook_route_toml(
    pattern: &str,
    url: &str,
    secrets: &[String],
    extra_sink_keys: &str,
) -> String {
    let secrets: Vec<String> = secrets.iter().map(|s| format!("{s:?}")).collect();
    format!(
        r#"
[[routes]]
aggregatetype = "{pattern}"
sink = "hooks"

[sinks.hooks]
kind = "http"
url = "{url}"
secrets = [{secrets}]
retry_schedule_secs = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
inline_attempts = 2
timeout_ms = 2000
retry_poll_ms = 100
{extra_sink_keys}
"#,
        secrets = secrets.join(", "),
    )
}

/// A TLS front for a receiver: terminates TLS with `ca`'s `localhost`
/// certificate and relays the bytes to the plain `port`. Returns the port
/// clients connect to with https.
pub async fn tls_front(port: u16, ca: &super::tls::ThrowawayCa) -> u16 {
    use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
    use std::pin::Pin;

    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).unwrap();
    acceptor
        .set_certificate_chain_file(&ca.server_cert)
        .unwrap();
    acceptor
        .set_private_key_file(&ca.server_key, SslFiletype::PEM)
        .unwrap();
    let acceptor = acceptor.build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let relay = async {
                    let ssl = openssl::ssl::Ssl::new(acceptor.context())?;
                    let mut client = tokio_openssl::SslStream::new(ssl, client)?;
                    Pin::new(&mut client)
                        .accept()
                        .await
                        .map_err(std::io::Error::other)?;
                    let mut server = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
                    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                };
                let _ = relay.await;
            });
        }
    });
    front
}
