//! The HTTP/1.1 client of one sink: hyper's connection API over a TCP
//! stream, with TLS through the system OpenSSL (certificate and host name
//! verified against the system trust store, plus the sink's `ca_file`),
//! and a small pool of idle
//! connections so consecutive events reuse them.
//!
//! One request per event, bounded by the sink's timeout from connect to
//! the end of the answer; the answer's body is read (up to a limit) and
//! dropped, so the connection can serve the next request. Nothing here
//! retries: the caller decides with [`super::status::classify`].

use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use openssl::ssl::{SslConnector, SslMethod};
use tokio::net::TcpStream;

use super::{Endpoint, HttpSinkSettings, WebhookEvent, sign};

/// Most bytes of an answer's body read before the connection is dropped
/// instead of reused.
const MAX_ANSWER_BODY: usize = 64 * 1024;
/// Idle connections kept per sink.
const MAX_IDLE: usize = 32;

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// `Retry-After` in seconds, when the receiver sent one.
    pub retry_after: Option<Duration>,
}

/// Why no answer came: connect, TLS, I/O or timeout. Never holds a secret
/// or the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// The client of one sink.
pub struct Client {
    endpoint: Endpoint,
    secrets: Vec<String>,
    bearer: Option<String>,
    timeout: Duration,
    tls: Option<SslConnector>,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl Client {
    /// # Errors
    /// OpenSSL could not set up a TLS client (no usable library).
    pub fn new(settings: &HttpSinkSettings) -> Result<Client, TransportError> {
        let tls = if settings.endpoint.tls {
            let mut builder = SslConnector::builder(SslMethod::tls_client())
                .map_err(|e| TransportError(format!("TLS setup: {e}")))?;
            if let Some(ca_file) = &settings.ca_file {
                builder.set_ca_file(ca_file).map_err(|e| {
                    TransportError(format!(
                        "cannot read ca_file {}: {e} (a PEM file of CA certificates)",
                        ca_file.display()
                    ))
                })?;
            }
            Some(builder.build())
        } else {
            None
        };
        Ok(Client {
            endpoint: settings.endpoint.clone(),
            secrets: settings.secrets.clone(),
            bearer: settings.bearer_token.clone(),
            timeout: settings.timeout,
            tls,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// POSTs `event`, signed now.
    ///
    /// # Errors
    /// No answer within the timeout, or the connection failed.
    pub async fn post(&self, event: &WebhookEvent) -> Result<Answer, TransportError> {
        match tokio::time::timeout(self.timeout, self.post_untimed(event)).await {
            Ok(answer) => answer,
            Err(_) => Err(TransportError(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    async fn post_untimed(&self, event: &WebhookEvent) -> Result<Answer, TransportError> {
        let mut sender = match self.take_idle() {
            Some(sender) => sender,
            None => self.connect().await?,
        };
        let mut request = hyper::Request::post(self.endpoint.path.as_str())
            .header(hyper::header::HOST, self.endpoint.authority())
            .header(hyper::header::USER_AGENT, "outbox-relay");
        for (name, value) in &event.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if !self.secrets.is_empty() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            request = request.header(
                sign::SIGNATURE_HEADER,
                sign::header_value(&self.secrets, now, &event.body),
            );
        }
        if let Some(token) = &self.bearer {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(event.body.clone()))
            .map_err(|e| TransportError(format!("cannot build the request: {e}")))?;
        sender
            .ready()
            .await
            .map_err(|e| TransportError(format!("connection lost: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| TransportError(format!("request failed: {e}")))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(super::status::retry_after);
        let keep = !response
            .headers()
            .get(hyper::header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        // Read the answer to its end, so the connection can be reused.
        let read = Limited::new(response.into_body(), MAX_ANSWER_BODY)
            .collect()
            .await;
        if read.is_ok() && keep {
            self.put_idle(sender);
        }
        Ok(Answer {
            status,
            retry_after,
        })
    }

    fn take_idle(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() && sender.is_ready() {
                return Some(sender);
            }
        }
        None
    }

    fn put_idle(&self, sender: SendRequest<Full<Bytes>>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(sender);
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, TransportError> {
        let target = format!("{}:{}", self.endpoint.authority_host(), self.endpoint.port);
        let tcp = TcpStream::connect(&target)
            .await
            .map_err(|e| TransportError(format!("cannot connect to {target}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => handshake(tcp).await,
            Some(connector) => {
                let ssl = connector
                    .configure()
                    .and_then(|c| c.into_ssl(&self.endpoint.host))
                    .map_err(|e| TransportError(format!("TLS setup for {target}: {e}")))?;
                let mut stream = tokio_openssl::SslStream::new(ssl, tcp)
                    .map_err(|e| TransportError(format!("TLS setup for {target}: {e}")))?;
                Pin::new(&mut stream)
                    .connect()
                    .await
                    .map_err(|e| TransportError(format!("TLS handshake with {target}: {e}")))?;
                handshake(stream).await
            }
        }
    }
}

async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>, TransportError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| TransportError(format!("HTTP handshake: {e}")))?;
    // Drives the connection until it closes; ends with the last sender.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

impl Endpoint {
    /// The host as `connect` takes it (IPv6 in brackets).
    fn authority_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::super::schedule::Schedule;
    use super::*;

    /// A server that answers every request on a connection with `answer`,
    /// counting connections and keeping the raw requests.
    async fn server(answer: &'static str) -> (u16, Arc<AtomicUsize>, Arc<Mutex<Vec<Vec<u8>>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (Arc::clone(&accepted), Arc::clone(&requests));
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        // One request per read is enough for these small ones.
                        let n = match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        seen.lock().unwrap().push(buf[..n].to_vec());
                        if answer.is_empty() {
                            continue; // never answers
                        }
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, accepted, requests)
    }

    fn client(port: u16, timeout_ms: u64) -> Client {
        Client::new(&HttpSinkSettings {
            name: "t".into(),
            endpoint: Endpoint::parse(&format!("http://127.0.0.1:{port}/in?x=1")).unwrap(),
            secrets: vec!["k1".into()],
            bearer_token: Some("tok".into()),
            ca_file: None,
            timeout: Duration::from_millis(timeout_ms),
            schedule: Schedule {
                inline: 1,
                delays: vec![Duration::from_secs(1)],
            },
            max_concurrency: 1,
            retry_poll: Duration::from_secs(1),
        })
        .unwrap()
    }

    fn event() -> WebhookEvent {
        WebhookEvent {
            id: "e1".into(),
            key: "k".into(),
            headers: vec![
                ("ce-id".into(), "e1".into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: Bytes::from_static(b"{\"a\":1}"),
        }
    }

    #[tokio::test]
    async fn reuses_its_connection_and_sends_what_it_signs() {
        let (port, accepted, requests) =
            server("HTTP/1.1 204 No Content\r\nRetry-After: 7\r\n\r\n").await;
        let client = client(port, 2_000);
        for _ in 0..3 {
            let answer = client.post(&event()).await.unwrap();
            assert_eq!(answer.status, 204);
            assert_eq!(answer.retry_after, Some(Duration::from_secs(7)));
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for three requests"
        );
        let raw = String::from_utf8(requests.lock().unwrap()[0].clone()).unwrap();
        let lower = raw.to_ascii_lowercase();
        assert!(raw.starts_with("POST /in?x=1 HTTP/1.1\r\n"), "{raw}");
        assert!(lower.contains("\r\nce-id: e1\r\n"), "{raw}");
        assert!(lower.contains("\r\nauthorization: bearer tok\r\n"), "{raw}");
        assert!(
            raw.ends_with("\r\n\r\n{\"a\":1}"),
            "the body exactly: {raw}"
        );
        let signature = lower
            .lines()
            .find_map(|l| l.strip_prefix("x-outbox-signature: "))
            .unwrap();
        let (t, v1) = signature.split_once(",v1=").unwrap();
        let t: u64 = t.strip_prefix("t=").unwrap().parse().unwrap();
        assert_eq!(v1, sign::v1(b"k1", t, b"{\"a\":1}"));
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_is_not_reused() {
        let (port, accepted, _) =
            server("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").await;
        let client = client(port, 2_000);
        for _ in 0..2 {
            assert_eq!(client.post(&event()).await.unwrap().status, 200);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn no_answer_is_a_timeout_and_no_listener_a_transport_error() {
        let (port, _, _) = server("").await;
        let started = std::time::Instant::now();
        let err = client(port, 300).post(&event()).await.unwrap_err();
        assert!(err.0.contains("300 ms"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let err = client(closed, 2_000).post(&event()).await.unwrap_err();
        assert!(err.0.contains("cannot connect"), "{err}");
    }
}
