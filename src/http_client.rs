//! The relay's one HTTP/1.1 client: the webhook sinks POST events with it,
//! the OTLP exporter its span batches, and the schema registry client asks
//! for schemas. hyper-util's pooled client over
//! hyper-openssl's connector: TLS through the system OpenSSL, the
//! certificate and host name verified against the system trust store plus
//! an optional `ca_file`, as for PostgreSQL. [`url`] reads the endpoints'
//! URLs (webhook sinks, the OTLP collector) with hyper's own `Uri`.
//!
//! Invariants:
//! * One request is bounded by the client's timeout from connect to the
//!   end of the answer; at most [`MAX_ANSWER_BODY`] bytes of an answer's
//!   body are read, then dropped ([`HttpClient::fetch`] keeps the body, up
//!   to the caller's limit).
//! * A connection whose answer was read to its end goes back to the pool
//!   and serves the next request; idle ones close after [`IDLE_TIMEOUT`].
//!   One the server closes (`Connection: close`), or whose answer is not
//!   read to its end (longer than the limit), is not reused.
//! * Nothing here retries an answered request: the caller decides. (hyper
//!   sends a request again on a new connection only when a pooled one
//!   turned out closed before any of the request was written.)
//! * Errors name the host and port and why, never a header or the body.

use std::error::Error as StdError;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::{HeaderMap, Request, Uri};
use hyper_openssl::client::legacy::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use openssl::ssl::{SslConnector, SslMethod};

/// Most bytes of an answer's body read; the rest of a longer one is not
/// read, and its connection is closed instead of returned to the pool.
pub const MAX_ANSWER_BODY: usize = 64 * 1024;

/// How long an idle connection is kept: below the 5 s keep-alive of
/// Node.js servers, the shortest common one, so a request seldom meets a
/// connection the server is closing.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Why a body could not be read to its end.
type BodyError = Box<dyn StdError + Send + Sync>;

/// Why no answer came: connect, TLS, I/O or timeout. Never holds a secret
/// or the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// How a client is set up.
#[derive(Debug, Clone, Copy)]
pub struct HttpClientSettings<'a> {
    /// CA certificates (PEM) trusted for https besides the system store.
    pub ca_file: Option<&'a Path>,
    /// From connect to the end of the answer, per request.
    pub timeout: Duration,
    /// Idle connections kept per host and port.
    pub max_idle: usize,
}

/// What came back: the status and the headers (the body is read and
/// dropped).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
}

/// A pool of HTTP/1.1 connections, http and https; cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// # Errors
    /// OpenSSL could not set up a TLS client, or `ca_file` cannot be read.
    pub fn new(settings: &HttpClientSettings<'_>) -> Result<HttpClient, TransportError> {
        let setup = |e: openssl::error::ErrorStack| TransportError(format!("TLS setup: {e}"));
        let mut tls = SslConnector::builder(SslMethod::tls_client()).map_err(setup)?;
        if let Some(ca_file) = settings.ca_file {
            tls.set_ca_file(ca_file).map_err(|e| {
                TransportError(format!(
                    "cannot read ca_file {}: {e} (a PEM file of CA certificates)",
                    ca_file.display()
                ))
            })?;
        }
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let mut connector = HttpsConnector::with_connector(tcp, tls).map_err(setup)?;
        connector.set_callback(|config, uri| {
            // The connector names the peer by the URI's host, which keeps an
            // IPv6 address in brackets: verify the address itself (and send
            // no SNI, as for any address).
            if let Some(ip) = uri
                .host()
                .and_then(|h| h.strip_prefix('[')?.strip_suffix(']'))
                .and_then(|h| h.parse::<IpAddr>().ok())
            {
                config.set_use_server_name_indication(false);
                config.set_verify_hostname(false);
                config.param_mut().set_ip(ip)?;
            }
            Ok(())
        });
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(settings.max_idle)
            .build(connector);
        Ok(HttpClient {
            client,
            timeout: settings.timeout,
        })
    }

    /// Sends `request` (an absolute URI) and reads the answer.
    ///
    /// # Errors
    /// No answer within the timeout, or the connection failed.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Result<Answer, TransportError> {
        let (answer, _) = self.timed(request, MAX_ANSWER_BODY).await?;
        Ok(answer)
    }

    /// Like [`HttpClient::send`], and keeps the answer's body, of at most
    /// `max_body` bytes (the limit replaces [`MAX_ANSWER_BODY`]).
    ///
    /// # Errors
    /// As [`HttpClient::send`]; or the body was longer than `max_body`, or
    /// broke off.
    pub async fn fetch(
        &self,
        request: Request<Full<Bytes>>,
        max_body: usize,
    ) -> Result<(Answer, Bytes), TransportError> {
        let target = target(request.uri());
        match self.timed(request, max_body).await? {
            (answer, Ok(body)) => Ok((answer, body)),
            (_, Err(e)) if e.is::<LengthLimitError>() => Err(TransportError(format!(
                "the answer of {target} is longer than {max_body} bytes"
            ))),
            (_, Err(e)) => Err(TransportError(format!(
                "the answer of {target} broke off: {e}"
            ))),
        }
    }

    async fn timed(
        &self,
        request: Request<Full<Bytes>>,
        max_body: usize,
    ) -> Result<(Answer, Result<Bytes, BodyError>), TransportError> {
        let target = target(request.uri());
        match tokio::time::timeout(self.timeout, self.exchange(request, &target, max_body)).await {
            Ok(answer) => answer,
            Err(_) => Err(TransportError(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    async fn exchange(
        &self,
        request: Request<Full<Bytes>>,
        target: &str,
        max_body: usize,
    ) -> Result<(Answer, Result<Bytes, BodyError>), TransportError> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| describe(&e, target))?;
        let (head, body) = response.into_parts();
        // Read the answer to its end, so the connection can be reused; a
        // longer one (or a broken one) is dropped with its connection.
        let body = Limited::new(body, max_body)
            .collect()
            .await
            .map(http_body_util::Collected::to_bytes);
        Ok((
            Answer {
                status: head.status.as_u16(),
                headers: head.headers,
            },
            body,
        ))
    }
}

/// `host:port` of `uri` (an IPv6 address in brackets).
fn target(uri: &Uri) -> String {
    let default = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    format!(
        "{}:{}",
        uri.host().unwrap_or_default(),
        uri.port_u16().unwrap_or(default)
    )
}

/// The error's text: what failed with `target`, then its causes.
fn describe(error: &hyper_util::client::legacy::Error, target: &str) -> TransportError {
    let mut detail = String::new();
    let mut tls = false;
    let mut cause = error.source();
    while let Some(e) = cause {
        tls |= e.is::<openssl::ssl::Error>() || e.is::<openssl::error::ErrorStack>();
        let text = e.to_string();
        if !detail.contains(&text) {
            if !detail.is_empty() {
                detail.push_str(": ");
            }
            detail.push_str(&text);
        }
        cause = e.source();
    }
    if detail.is_empty() {
        detail = error.to_string();
    }
    TransportError(if !error.is_connect() {
        format!("request failed: {detail}")
    } else if tls {
        format!("TLS handshake with {target}: {detail}")
    } else {
        format!("cannot connect to {target}: {detail}")
    })
}

pub mod url;

#[cfg(test)]
pub mod test_server;
#[cfg(test)]
mod tests;
