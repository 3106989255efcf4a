//! The webhook client of one sink: one signed POST per event through the
//! relay's HTTP client ([`crate::http_client`]: a pool of HTTP/1.1
//! connections reused between events, TLS through the system OpenSSL with
//! the certificate and host name verified against the system trust store
//! plus the sink's `ca_file`).
//!
//! One request per event, bounded by the sink's timeout from connect to
//! the end of the answer. Nothing here retries: the caller decides with
//! [`super::status::classify`].

use std::time::Duration;

use http_body_util::Full;
use hyper::Uri;

use super::{HttpSinkSettings, WebhookEvent, sign};
use crate::http_client::{HttpClient, HttpClientSettings};

pub use crate::http_client::TransportError;

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// `Retry-After` in seconds, when the receiver sent one.
    pub retry_after: Option<Duration>,
}

/// The client of one sink.
pub struct Client {
    uri: Uri,
    host: String,
    secrets: Vec<String>,
    bearer: Option<String>,
    http: HttpClient,
}

impl Client {
    /// # Errors
    /// OpenSSL could not set up a TLS client, or the sink's `ca_file`
    /// cannot be read.
    pub fn new(settings: &HttpSinkSettings) -> Result<Client, TransportError> {
        let endpoint = &settings.endpoint;
        let http = HttpClient::new(&HttpClientSettings {
            ca_file: settings.ca_file.as_deref().filter(|_| endpoint.tls),
            timeout: settings.timeout,
            // As many as may be in flight at once.
            max_idle: settings.max_concurrency,
        })?;
        Ok(Client {
            uri: endpoint.uri().map_err(TransportError)?,
            host: endpoint.authority(),
            secrets: settings.secrets.clone(),
            bearer: settings.bearer_token.clone(),
            http,
        })
    }

    /// POSTs `event`, signed now.
    ///
    /// # Errors
    /// No answer within the timeout, or the connection failed.
    pub async fn post(&self, event: &WebhookEvent) -> Result<Answer, TransportError> {
        let mut request = hyper::Request::post(self.uri.clone())
            .header(hyper::header::HOST, self.host.as_str())
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
        let answer = self.http.send(request).await?;
        let retry_after = answer
            .headers
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(super::status::retry_after);
        Ok(Answer {
            status: answer.status,
            retry_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::Endpoint;
    use super::super::schedule::Schedule;
    use super::*;
    use crate::http_client::test_server::TestServer;

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
            after_dead_letter: crate::routes::AfterDeadLetter::Park,
        }
    }

    #[tokio::test]
    async fn reuses_its_connection_and_sends_what_it_signs() {
        let server = TestServer::start("HTTP/1.1 204 No Content\r\nRetry-After: 7\r\n\r\n").await;
        let client = client(server.port, 2_000);
        for _ in 0..3 {
            let answer = client.post(&event()).await.unwrap();
            assert_eq!(answer.status, 204);
            assert_eq!(answer.retry_after, Some(Duration::from_secs(7)));
        }
        assert_eq!(server.accepted(), 1, "one connection for three events");
        let seen = server.wait_for(3).await;
        assert!(seen.iter().all(|s| s.connection == 1));
        let raw = &seen[0].head;
        let lower = raw.to_ascii_lowercase();
        assert!(raw.starts_with("POST /in?x=1 HTTP/1.1\r\n"), "{raw}");
        assert!(
            lower.contains(&format!("\r\nhost: 127.0.0.1:{}\r\n", server.port)),
            "{raw}"
        );
        assert!(lower.contains("\r\nce-id: e1\r\n"), "{raw}");
        assert!(lower.contains("\r\nauthorization: bearer tok\r\n"), "{raw}");
        assert_eq!(seen[0].body, b"{\"a\":1}", "the body exactly");
        let signature = lower
            .lines()
            .find_map(|l| l.strip_prefix("x-outbox-signature: "))
            .unwrap();
        let (t, v1) = signature.split_once(",v1=").unwrap();
        let t: u64 = t.strip_prefix("t=").unwrap().parse().unwrap();
        assert_eq!(v1, sign::v1(b"k1", t, b"{\"a\":1}"));
    }

    #[tokio::test]
    async fn the_body_keeps_the_payloads_numbers_as_written() {
        let payload: &'static [u8] =
            br#"{"a": 99999999999999999.99, "b": 1e400, "c": -0, "d": 18446744073709551617, "e": 1.0}"#;
        let row = crate::outbox::OutboxRow {
            id: "e1".into(),
            aggregate_type: "order".into(),
            aggregate_id: "o-1".into(),
            event_type: "placed".into(),
            payload: Bytes::from_static(payload),
            payload_is_jsonb: true,
            timestamp: None,
            trace_parent: None,
            trace_state: None,
            headers: Vec::new(),
            source: None,
        };
        let event = WebhookEvent::of_row(&row, chrono::Utc::now(), "/s", None).unwrap();
        let server = TestServer::start("HTTP/1.1 204 No Content\r\n\r\n").await;
        assert_eq!(
            client(server.port, 2_000)
                .post(&event)
                .await
                .unwrap()
                .status,
            204
        );
        assert_eq!(server.wait_for(1).await[0].body, payload);
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_is_not_reused() {
        let server =
            TestServer::start("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                .await;
        let client = client(server.port, 2_000);
        for _ in 0..2 {
            assert_eq!(client.post(&event()).await.unwrap().status, 200);
        }
        assert_eq!(server.accepted(), 2);
    }

    #[tokio::test]
    async fn no_answer_is_a_timeout_and_no_listener_a_transport_error() {
        let server = TestServer::start("").await;
        let started = std::time::Instant::now();
        let err = client(server.port, 300).post(&event()).await.unwrap_err();
        assert!(err.0.contains("300 ms"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let err = client(closed, 2_000).post(&event()).await.unwrap_err();
        assert!(err.0.contains("cannot connect"), "{err}");
        assert!(!err.0.contains("tok") && !err.0.contains("k1"), "{err}");
    }
}
