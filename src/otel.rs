//! OpenTelemetry for the relay's produce step: a span per event whose row
//! carries a trace context, child of that context, exported over OTLP/HTTP
//! (JSON encoding) to a collector (`[tracing] otlp_endpoint`).
//!
//! Role: [`Tracer::start`] gives a record its produce span and writes the
//! span's own context into the record's W3C `traceparent` header (and the
//! row's `tracestate` into `tracestate`), so a consumer's span continues
//! from the relay's, which continues from the service that wrote the row.
//! [`Tracer::end`] hands the finished span to the exporter task
//! ([`spawn_exporter`]), which posts batches to `<endpoint>/v1/traces`
//! with the relay's HTTP client ([`crate::http_client`], its connection
//! kept between batches).
//!
//! Why not the OpenTelemetry SDK: the relay makes one kind of span, with
//! one propagator and one exporter. The SDK with its OTLP exporter brings
//! an HTTP client stack of its own, protobuf code generation types and a
//! runtime integration, a large share of the relay's compile time on a
//! small machine, for what is here a few hundred lines on top of what the
//! relay already links (tokio, hyper, serde_json, rand). OTLP/HTTP with
//! JSON is part of the OTLP specification and every collector accepts it.
//!
//! Invariants:
//! * Without an endpoint there is no [`Tracer`]: no span is created, no
//!   header added, no task runs.
//! * The stream never waits for tracing: finished spans go through a
//!   bounded channel, and when it is full the span is dropped and counted
//!   (`outbox_relay_trace_spans_dropped_total`), as is a batch the collector
//!   does not take.
//! * The relay only continues traces, it does not start them: an event
//!   whose row has no (valid) traceparent gets no span. Sampling follows
//!   the parent: a span whose parent is not sampled gets its own id (so the
//!   `traceparent` header stays a true child) and is never exported.
//! * The row's own context reaches the event unchanged in the CloudEvents
//!   `traceparent`/`tracestate` attributes whether or not this runs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::envelope::{KafkaRecord, TraceContext};
use crate::http_client::url::{HttpUrl, UrlError};
use crate::http_client::{HttpClient, HttpClientSettings, TransportError};
use crate::metrics as m;

/// Kafka header that carries the produce span's W3C context.
pub const TRACEPARENT_HEADER: &str = "traceparent";
/// Kafka header that carries the row's `tracestate`, unchanged.
pub const TRACESTATE_HEADER: &str = "tracestate";

/// Finished spans waiting for the exporter, at most.
const QUEUE: usize = 4096;
/// Spans per OTLP request, at most.
const BATCH: usize = 512;
/// A finished span waits at most this long before it is exported.
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// One OTLP request (connect, send, answer) takes at most this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where spans go, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    pub endpoint: Endpoint,
    /// `service.name` of the spans' resource.
    pub service_name: String,
}

/// An OTLP/HTTP endpoint: `http://host[:port][/path]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// `/v1/traces` unless the URL names a path.
    pub path: String,
}

impl Endpoint {
    /// Parses `url`. The base URL of a collector gets OTLP's traces path
    /// (`/v1/traces`), as `OTEL_EXPORTER_OTLP_ENDPOINT` does; a URL with a
    /// path is taken as the traces URL itself.
    ///
    /// # Errors
    /// Why the URL is refused (for the config error).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        const FORM: &str = "must be an http:// URL of an OTLP/HTTP receiver, e.g. \
                            http://127.0.0.1:4318";
        let url = HttpUrl::parse(url).map_err(|e| match e {
            UrlError::Scheme => FORM.to_owned(),
            UrlError::Credentials | UrlError::NoHost => {
                "must name a host (and no credentials): http://host:port".to_owned()
            }
            UrlError::Port(port) => format!("the port {port:?} is not a number from 1 to 65535"),
            UrlError::Whitespace | UrlError::Fragment => {
                "must be http://host[:port][/path]".to_owned()
            }
            UrlError::Invalid(why) => format!(
                "is not a valid URI ({why}); write it as http://host[:port][/path], with other \
                 characters of the path percent-encoded"
            ),
        })?;
        if url.tls {
            return Err(
                "https is not supported: export to a collector beside the relay over \
                        plain http (http://127.0.0.1:4318), and let it forward over TLS"
                    .to_owned(),
            );
        }
        let path = if url.path_and_query == "/" {
            "/v1/traces".to_owned()
        } else {
            url.path_and_query
        };
        let endpoint = Endpoint {
            host: url.host,
            port: url.port.unwrap_or(80),
            path,
        };
        endpoint.uri()?;
        Ok(endpoint)
    }

    /// The URL spans are posted to.
    ///
    /// # Errors
    /// A character HTTP does not carry as it is.
    pub fn uri(&self) -> Result<hyper::Uri, String> {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("http://{host}:{}{}", self.port, self.path)
            .parse()
            .map_err(|e| {
                format!("is not a valid URI ({e}); percent-encode such characters of the path")
            })
    }
}

/// The ids of a W3C trace context (`traceparent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl SpanContext {
    /// Parses a `traceparent` already validated by
    /// [`crate::envelope::is_traceparent`] (or any version-00 form).
    pub fn parse(traceparent: &str) -> Option<SpanContext> {
        let mut parts = traceparent.split('-');
        let _version = parts.next()?;
        let trace_id = hex_array::<16>(parts.next()?)?;
        let span_id = hex_array::<8>(parts.next()?)?;
        let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
        Some(SpanContext {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The version-00 `traceparent` of this context.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            u8::from(self.sampled)
        )
    }
}

/// A produce span, from the hand-off to the producer to the broker's
/// answer. Travels with its record's delivery tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceSpan {
    /// Its own context: the row's trace, a new span id.
    pub context: SpanContext,
    pub parent_span_id: [u8; 8],
    pub tracestate: Option<String>,
    pub start_unix_nanos: u64,
    pub topic: String,
    pub key: Bytes,
    pub event_id: String,
}

/// A finished span, as the exporter receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Finished {
    span: ProduceSpan,
    end_unix_nanos: u64,
    /// `None`: delivered; else why not.
    error: Option<String>,
}

/// Starts and ends produce spans; cheap to clone.
#[derive(Debug, Clone)]
pub struct Tracer {
    finished: mpsc::Sender<Finished>,
}

impl Tracer {
    /// Gives `record` its produce span when `parent` is a valid trace
    /// context: writes the span's `traceparent` (and the parent's
    /// `tracestate`) into the record's headers and returns the span.
    pub fn start(
        &self,
        parent: &TraceContext,
        record: &mut KafkaRecord,
        event_id: &str,
    ) -> Option<Box<ProduceSpan>> {
        let parent_context = SpanContext::parse(&parent.traceparent)?;
        let context = SpanContext {
            span_id: new_span_id(),
            ..parent_context
        };
        record.headers.push((
            TRACEPARENT_HEADER.into(),
            Bytes::from(context.traceparent()),
        ));
        if let Some(state) = &parent.tracestate {
            record.headers.push((
                TRACESTATE_HEADER.into(),
                Bytes::copy_from_slice(state.as_bytes()),
            ));
        }
        Some(Box::new(ProduceSpan {
            context,
            parent_span_id: parent_context.span_id,
            tracestate: parent.tracestate.clone(),
            start_unix_nanos: unix_nanos(SystemTime::now()),
            topic: record.topic.clone(),
            key: record.key.clone(),
            event_id: event_id.to_owned(),
        }))
    }

    /// Ends `span` (`error`: why the record did not get through) and hands
    /// it to the exporter, never waiting: a full queue drops it.
    pub fn end(&self, span: ProduceSpan, error: Option<String>) {
        if !span.context.sampled {
            return;
        }
        let finished = Finished {
            span,
            end_unix_nanos: unix_nanos(SystemTime::now()),
            error,
        };
        if self.finished.try_send(finished).is_err() {
            metrics::counter!(m::TRACE_SPANS_DROPPED).increment(1);
        }
    }
}

/// Starts the exporter task. It ends, after exporting what it holds, once
/// every [`Tracer`] clone is dropped.
pub fn spawn_exporter(settings: OtlpSettings) -> (Tracer, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(QUEUE);
    // A client that cannot be set up (no usable OpenSSL) fails every export
    // as an unreachable collector does: counted, warned about once.
    let client = HttpClient::new(&HttpClientSettings {
        ca_file: None,
        timeout: REQUEST_TIMEOUT,
        // One batch at a time.
        max_idle: 1,
    });
    let task = tokio::spawn(export_loop(settings, client, rx));
    (Tracer { finished: tx }, task)
}

async fn export_loop(
    settings: OtlpSettings,
    client: Result<HttpClient, TransportError>,
    mut rx: mpsc::Receiver<Finished>,
) {
    let mut batch: Vec<Finished> = Vec::with_capacity(BATCH);
    let mut failing = false;
    loop {
        match rx.recv().await {
            Some(span) => batch.push(span),
            None => return,
        }
        // Gather more, for at most FLUSH_EVERY.
        let deadline = tokio::time::sleep(FLUSH_EVERY);
        tokio::pin!(deadline);
        let mut closed = false;
        while batch.len() < BATCH {
            tokio::select! {
                span = rx.recv() => match span {
                    Some(span) => batch.push(span),
                    None => {
                        closed = true;
                        break;
                    }
                },
                () = &mut deadline => break,
            }
        }
        {
            let count = batch.len() as u64;
            let body = otlp_json(&settings.service_name, &batch);
            batch.clear();
            let sent = match &client {
                Ok(client) => post(client, &settings.endpoint, body).await,
                Err(e) => Err(ExportError::Transport(e.clone())),
            };
            match sent {
                Ok(()) => {
                    metrics::counter!(m::TRACE_SPANS_EXPORTED).increment(count);
                    if failing {
                        crate::events::OtlpAnswers.emit();
                        failing = false;
                    }
                }
                Err(e) => {
                    metrics::counter!(m::TRACE_SPANS_DROPPED).increment(count);
                    // Once per outage, not once per batch.
                    if !failing {
                        let endpoint = format!(
                            "http://{}:{}{}",
                            settings.endpoint.host, settings.endpoint.port, settings.endpoint.path
                        );
                        crate::events::OtlpUnreachable {
                            endpoint: &endpoint,
                            error: &e,
                        }
                        .emit();
                        failing = true;
                    }
                }
            }
        }
        if closed {
            return;
        }
    }
}

/// The OTLP/HTTP JSON document for `spans` (ids in hex, 64-bit integers as
/// decimal strings, as the OTLP JSON mapping has them).
fn otlp_json(service_name: &str, spans: &[Finished]) -> Vec<u8> {
    let string = |key: &str, value: &str| json!({"key": key, "value": {"stringValue": value}});
    let spans: Vec<serde_json::Value> = spans
        .iter()
        .map(|f| {
            let s = &f.span;
            let mut attributes = vec![
                string("messaging.system", "kafka"),
                string("messaging.operation.type", "publish"),
                string("messaging.operation.name", "send"),
                string("messaging.destination.name", &s.topic),
                string("messaging.message.id", &s.event_id),
                string("cloudevents.event_id", &s.event_id),
            ];
            if let Ok(key) = std::str::from_utf8(&s.key) {
                attributes.push(string("messaging.kafka.message.key", key));
            }
            let status = match &f.error {
                None => json!({"code": 1}),
                Some(message) => json!({"code": 2, "message": message}),
            };
            let mut span = json!({
                "traceId": hex::encode(s.context.trace_id),
                "spanId": hex::encode(s.context.span_id),
                "parentSpanId": hex::encode(s.parent_span_id),
                "name": format!("publish {}", s.topic),
                "kind": 4,
                "startTimeUnixNano": s.start_unix_nanos.to_string(),
                "endTimeUnixNano": f.end_unix_nanos.max(s.start_unix_nanos).to_string(),
                "attributes": attributes,
                "status": status,
            });
            if let Some(state) = &s.tracestate {
                span["traceState"] = json!(state);
            }
            span
        })
        .collect();
    let doc = json!({
        "resourceSpans": [{
            "resource": {"attributes": [string("service.name", service_name)]},
            "scopeSpans": [{
                "scope": {"name": "outbox-relay", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans,
            }],
        }],
    });
    serde_json::to_vec(&doc).unwrap_or_default()
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
enum ExportError {
    #[error("{0}")]
    Transport(#[from] TransportError),
    #[error("the collector answered {0}")]
    Status(u16),
}

/// One OTLP/HTTP POST of a JSON document.
async fn post(client: &HttpClient, endpoint: &Endpoint, body: Vec<u8>) -> Result<(), ExportError> {
    let uri = endpoint.uri().map_err(TransportError)?;
    let request = hyper::Request::post(uri)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::USER_AGENT, "outbox-relay")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| TransportError(format!("cannot build the request: {e}")))?;
    let answer = client.send(request).await?;
    if (200..300).contains(&answer.status) {
        Ok(())
    } else {
        Err(ExportError::Status(answer.status))
    }
}

fn new_span_id() -> [u8; 8] {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn hex_array<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests;
