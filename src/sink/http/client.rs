//! The HTTP/1.1 client of one sink: hyper's connection API over a TCP
//! stream, with TLS through the system OpenSSL (certificate and host name
//! verified against the system trust store), and a small pool of idle
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
            let builder = SslConnector::builder(SslMethod::tls_client())
                .map_err(|e| TransportError(format!("TLS setup: {e}")))?;
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
