//! The webhook (HTTP) sink: events of routes to a `kind = "http"` sink are
//! POSTed, one request per event, in the CloudEvents HTTP binding's binary
//! mode, signed, retried, and kept in order per aggregate.
//!
//! Parts:
//! * [`sign`]: the `X-Outbox-Signature` header; [`status`]: what an answer
//!   means; [`schedule`]: the retry delays with jitter (all pure);
//! * [`client`]: each event one signed POST, on the sink's pool of HTTP/1.1
//!   connections ([`crate::http_client`], TLS through the system OpenSSL);
//! * [`store`]: the SQL of the delivery table; [`table_access`]: the check
//!   at start that it exists and the relay's role may use it;
//! * [`dispatch`]: the session's side: per aggregate one event in flight, in
//!   commit order; a few quick tries in line, then the event moves to the
//!   delivery table, and only then does it count as handled for the ack
//!   tracker (so the slot never waits on a slow endpoint);
//! * [`worker`]: the retry worker, beside the sessions, claiming due rows
//!   with `FOR UPDATE SKIP LOCKED`, and the gauges of stuck deliveries.
//!
//! Invariants: an event counts as handled ("delivered" for the ack tracker)
//! only once a 2xx came back or its row is committed in the delivery table
//! (PENDING or DEAD); while an aggregate has a row that holds it, its later
//! events are queued behind it in the table, never sent ahead of it; the
//! body sent is the payload bytes exactly; secrets never reach a log.
//!
//! Which rows hold their aggregate ([`store::holds`]): a PENDING row always;
//! a DEAD row when its route's `after_dead_letter` is `park` (the default),
//! until `outbox-relay dead retry` makes it PENDING again (then it is sent
//! first, and the rows behind it in order) or `dead discard` deletes it.
//! The setting is the event's route entry's (its own, else its sink's):
//! the session, which knows the route, puts it on the [`WebhookEvent`],
//! and the row records it in its `after_dead_letter` column when it is
//! written. So a row the retry worker marks DEAD later, or one a relay with
//! another config reads, holds as its route said when the event was
//! handed over, and the worker needs no routes to decide.

pub mod client;
pub mod dispatch;
pub mod retry;
pub mod schedule;
pub mod sign;
pub mod status;
pub mod store;
pub mod table_access;
pub mod worker;

use std::time::Duration;

use bytes::Bytes;

use crate::envelope::{CloudEvent, EnvelopeError};
use crate::http_client::url::{HttpUrl, UrlError};
use crate::outbox::OutboxRow;
use crate::routes::AfterDeadLetter;
use schedule::Schedule;

/// Where a sink POSTs to, parsed from its URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    /// Without brackets for IPv6.
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Endpoint {
    /// Parses `http://host[:port][/path][?query]` or `https://…`.
    ///
    /// # Errors
    /// A sentence saying what is wrong and how to write it.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let url = HttpUrl::parse(url).map_err(|e| match e {
            UrlError::Scheme => "must start with https:// or http://".to_owned(),
            UrlError::Credentials => "must not carry credentials (user:password@); use \
                                      bearer_token or the signing secret instead"
                .to_owned(),
            UrlError::NoHost => "has no host".to_owned(),
            UrlError::Port(_) => "the port must be a number from 1 to 65535".to_owned(),
            UrlError::Whitespace | UrlError::Fragment => {
                "the path must not hold spaces, control characters or a #fragment".to_owned()
            }
            UrlError::Invalid(why) => format!(
                "is not a valid URI ({why}); write it as https://host[:port][/path][?query], \
                 with other characters of the path percent-encoded"
            ),
        })?;
        let endpoint = Endpoint {
            tls: url.tls,
            host: url.host,
            port: url.port.unwrap_or(if url.tls { 443 } else { 80 }),
            path: url.path_and_query,
        };
        endpoint.uri()?;
        Ok(endpoint)
    }

    /// The absolute URI requests go to.
    ///
    /// # Errors
    /// A character HTTP does not carry as it is.
    pub fn uri(&self) -> Result<hyper::Uri, String> {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority(), self.path)
            .parse()
            .map_err(|e| {
                format!("is not a valid URI ({e}); percent-encode such characters of the path")
            })
    }

    /// Whether the host is this machine (`localhost`, 127.0.0.0/8, ::1).
    pub fn is_loopback(&self) -> bool {
        self.host.eq_ignore_ascii_case("localhost")
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// The `Host` header value.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// One HTTP sink, from the validated config.
#[derive(Clone)]
pub struct HttpSinkSettings {
    /// The sink's name: the `route` of its delivery rows, a metric label.
    pub name: String,
    pub endpoint: Endpoint,
    pub secrets: Vec<String>,
    pub bearer_token: Option<String>,
    /// CA certificates trusted besides the system store.
    pub ca_file: Option<std::path::PathBuf>,
    pub timeout: Duration,
    pub schedule: Schedule,
    pub max_concurrency: usize,
    pub retry_poll: Duration,
}

impl std::fmt::Debug for HttpSinkSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSinkSettings")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("secrets", &self.secrets.len())
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "***"))
            .field("ca_file", &self.ca_file)
            .field("timeout", &self.timeout)
            .field("schedule", &self.schedule)
            .field("max_concurrency", &self.max_concurrency)
            .field("retry_poll", &self.retry_poll)
            .finish()
    }
}

/// The relay's webhook side: routes, sinks, and their delivery table.
#[derive(Debug, Clone, Default)]
pub struct Webhooks {
    pub routes: crate::routes::Routes,
    /// Indexed by [`crate::routes::Target::Http`].
    pub sinks: Vec<HttpSinkSettings>,
    pub table: store::DeliveryTable,
}

/// One event as it is POSTed: its headers (lower-case names) and body.
/// What the delivery table stores of it, so a retry sends the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEvent {
    pub id: String,
    /// The aggregate id: events of one key are sent one at a time, in order.
    pub key: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Its route's `after_dead_letter`: whether its row, once DEAD, holds
    /// the aggregate's later events (see the module docs).
    pub after_dead_letter: AfterDeadLetter,
}

impl WebhookEvent {
    /// The CloudEvents HTTP binding, binary mode: `ce-*` headers, the
    /// idempotency key (the event id), the content type, and the payload
    /// bytes unchanged as the body. `dataschema`: the schema the payload
    /// was checked against (`[[contracts]]`), as `ce-dataschema`.
    /// `after_dead_letter` is the default (`park`); the session sets its
    /// route's.
    ///
    /// # Errors
    /// As [`CloudEvent::from_row`]: the row cannot be an event.
    pub fn of_row(
        row: &OutboxRow,
        commit_time: chrono::DateTime<chrono::Utc>,
        default_source: &str,
        dataschema: Option<&str>,
    ) -> Result<WebhookEvent, EnvelopeError> {
        let ce = CloudEvent::from_row(row, commit_time, default_source)?;
        let mut headers = vec![
            ("ce-specversion".to_owned(), ce.specversion.to_owned()),
            ("ce-id".to_owned(), ce.id.clone()),
            ("ce-source".to_owned(), ce.source.clone()),
            ("ce-type".to_owned(), ce.event_type.clone()),
        ];
        if let Some(subject) = &ce.subject {
            headers.push(("ce-subject".to_owned(), subject.clone()));
        }
        headers.push(("ce-time".to_owned(), ce.time.clone()));
        if let Some(schema) = dataschema {
            headers.push(("ce-dataschema".to_owned(), schema.to_owned()));
        }
        if let Some(tp) = &ce.traceparent {
            headers.push(("ce-traceparent".to_owned(), tp.clone()));
        }
        if let Some(ts) = &ce.tracestate {
            headers.push(("ce-tracestate".to_owned(), ts.clone()));
        }
        headers.push(("idempotency-key".to_owned(), ce.id.clone()));
        headers.push(("content-type".to_owned(), ce.datacontenttype.to_owned()));
        // Header values must be visible ASCII for HTTP/1.1; anything else
        // (a type or source with non-ASCII text) is percent-encoded, as the
        // CloudEvents HTTP binding asks.
        for (_, value) in &mut headers {
            if value
                .bytes()
                .any(|b| !(0x20..0x7f).contains(&b) || b == b'%')
            {
                *value = percent_encode(value);
            }
        }
        Ok(WebhookEvent {
            id: ce.id,
            key: row.aggregate_id.clone(),
            headers,
            body: ce.data,
            after_dead_letter: AfterDeadLetter::default(),
        })
    }
}

fn percent_encode(value: &str) -> String {
    use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
    const SET: &AsciiSet = &CONTROLS.add(b'%').add(b'"');
    utf8_percent_encode(value, SET).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("https://billing.example/hooks/outbox").unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.path.as_str()),
            (true, "billing.example", 443, "/hooks/outbox")
        );
        let e = Endpoint::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!((e.port, e.path.as_str()), (8080, "/"));
        assert!(e.is_loopback());
        assert_eq!(e.authority(), "127.0.0.1:8080");
        let e = Endpoint::parse("http://[::1]:9/x?y=1").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("::1", 9, "/x?y=1")
        );
        assert!(e.is_loopback());
        assert_eq!(e.authority(), "[::1]:9");
        assert!(
            !Endpoint::parse("http://hooks.example")
                .unwrap()
                .is_loopback()
        );
        for bad in [
            "ftp://x",
            "billing.example",
            "http://",
            "http://u:p@host/",
            "http://host:0/",
            "http://host:99999/",
            "http://host/a b",
            "http://host/a<b",
            // What follows an IPv6 address's bracket is a port or nothing.
            "http://[::1]x/",
            "http://[::1]:9x/",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn binary_mode_headers_and_exact_body() {
        let payload = Bytes::from_static(br#"{"amount": 1.10, "note":"\u00e9"}"#);
        let row = OutboxRow {
            id: "e-1".into(),
            aggregate_type: "payment".into(),
            aggregate_id: "p-9".into(),
            event_type: "payment.captured".into(),
            payload: payload.clone(),
            payload_is_jsonb: false,
            timestamp: None,
            trace_parent: None,
            trace_state: None,
            headers: Vec::new(),
            source: None,
        };
        let time = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let event = WebhookEvent::of_row(&row, time, "/svc", None).unwrap();
        assert_eq!(event.body, payload);
        let h = |name: &str| {
            event
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(h("ce-id"), Some("e-1"));
        assert_eq!(h("idempotency-key"), Some("e-1"));
        assert_eq!(h("ce-type"), Some("payment.captured"));
        assert_eq!(h("ce-source"), Some("/svc"));
        assert_eq!(h("ce-subject"), Some("p-9"));
        assert_eq!(h("ce-specversion"), Some("1.0"));
        assert_eq!(h("ce-time"), Some("2023-11-14T22:13:20.000000Z"));
        assert_eq!(h("content-type"), Some("application/json"));
        assert_eq!(h("ce-dataschema"), None, "unchecked: no dataschema");
        let checked = WebhookEvent::of_row(&row, time, "/svc", Some("urn:payment:v3")).unwrap();
        assert!(
            checked
                .headers
                .contains(&("ce-dataschema".to_owned(), "urn:payment:v3".to_owned()))
        );
        assert_eq!(checked.body, payload);
        let mut odd = row.clone();
        odd.event_type = "paiement.capturé".into();
        let event = WebhookEvent::of_row(&odd, time, "/svc", None).unwrap();
        assert!(
            event
                .headers
                .iter()
                .all(|(_, v)| v.bytes().all(|b| (0x20..0x7f).contains(&b)))
        );
    }
}
