//! Trace context end to end against real PostgreSQL and Kafka: a trace a
//! writing service started (in a table row or an `outbox_emit` message)
//! reaches the Kafka consumer as the same trace, in the CloudEvents
//! distributed-tracing extension unchanged and, with OTLP export on, in the
//! `traceparent` header of the relay's produce span, which an OTLP/HTTP
//! collector (a fake one in this process) receives as the row's child.

use std::collections::HashMap;
use std::time::Duration;

use outbox_relay::otel::{Endpoint, OtlpSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::support::messages::install_outbox_emit;
use crate::support::*;

/// An OTLP/HTTP receiver: answers 200 to every POST and hands over each
/// request's JSON body.
async fn fake_collector() -> (String, mpsc::UnboundedReceiver<serde_json::Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                let body = loop {
                    let n = socket.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "request cut short");
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    assert!(head.starts_with("post /v1/traces "), "{head}");
                    assert!(head.contains("content-type: application/json"), "{head}");
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .expect("content-length")
                        .trim()
                        .parse()
                        .unwrap();
                    if buf.len() >= end + 4 + length {
                        break buf[end + 4..end + 4 + length].to_vec();
                    }
                };
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tx.send(serde_json::from_slice(&body).expect("OTLP JSON"));
            });
        }
    });
    (url, rx)
}

/// A new W3C context: (traceparent, trace id, span id).
fn new_trace() -> (String, String, String) {
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let span_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    (format!("00-{trace_id}-{span_id}-01"), trace_id, span_id)
}

// A current-thread runtime: the log capture sees everything the relay logs.
#[tokio::test]
async fn a_trace_started_by_the_writer_arrives_at_the_consumer_as_the_same_trace() {
    let (logs, _guard) = LogCapture::start();
    let outbox = TestOutbox::create("jsonb").await;
    install_outbox_emit(&outbox.admin).await;
    outbox
        .admin
        .batch_execute(&format!(
            "ALTER TABLE public.{} ADD COLUMN tracestate text",
            outbox.table
        ))
        .await
        .unwrap();
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 3).await;
    let (collector, mut spans) = fake_collector().await;
    let prefix = outbox.message_prefix();
    let mut settings =
        outbox.settings_with_postgres(&[("source", "both"), ("message_prefix", &prefix)]);
    settings.otlp = Some(OtlpSettings {
        endpoint: Endpoint::parse(&collector).unwrap(),
        service_name: "relay-under-test".into(),
    });
    let relay = Relay::in_process(settings);

    // The writing service: one traced row, one traced message, one row
    // whose traceparent is malformed, one row without any.
    let (row_tp, row_trace, row_span) = new_trace();
    let (msg_tp, msg_trace, msg_span) = new_trace();
    let state = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
    let ids: Vec<String> = (0..4).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let mut writer = outbox.writer().await;
    let tx = writer.transaction().await.unwrap();
    let insert = format!(
        "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, tracingspancontext, tracestate)
         VALUES ($1::text::uuid, 'order', 'agg-1', 'OrderPlaced', '{{}}', $2, $3)",
        outbox.table
    );
    tx.execute(&insert, &[&ids[0], &row_tp, &state])
        .await
        .unwrap();
    let msg_id: String = tx
        .query_one(
            "SELECT outbox_emit('order', 'agg-1', 'OrderPlaced', '{}', $1, $2, $3)::text",
            &[&msg_tp, &state, &outbox.message_prefix()],
        )
        .await
        .unwrap()
        .get(0);
    let bad = "00-NOT-A-TRACE-01";
    tx.execute(&insert, &[&ids[1], &bad, &None::<String>])
        .await
        .unwrap();
    tx.execute(&insert, &[&ids[2], &None::<String>, &None::<String>])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let received = consume(&topic, DEADLINE, |r| r.len() >= 4).await;
    assert_eq!(received.len(), 4, "every event, the badly traced one too");
    let by_id: HashMap<&str, &Received> = received
        .iter()
        .map(|r| (r.header("ce_id").unwrap(), r))
        .collect();
    // The relay's produce span: same trace, its own span id, the relay's
    // context in the `traceparent` header.
    let mut relay_spans = HashMap::new();
    for (id, tp, trace, span) in [
        (ids[0].as_str(), &row_tp, &row_trace, &row_span),
        (msg_id.as_str(), &msg_tp, &msg_trace, &msg_span),
    ] {
        let r = by_id[id];
        assert_eq!(r.header("ce_traceparent"), Some(tp.as_str()), "unchanged");
        assert_eq!(r.header("ce_tracestate"), Some(state), "unchanged");
        let header = r.header("traceparent").expect("the produce span's context");
        let parts: Vec<&str> = header.split('-').collect();
        assert_eq!(parts.len(), 4, "{header}");
        assert_eq!(
            parts[1],
            trace.as_str(),
            "the consumer sees the writer's trace"
        );
        assert_ne!(parts[2], span.as_str(), "a span of the relay's own");
        assert_eq!(parts[3], "01");
        assert_eq!(r.header("tracestate"), Some(state));
        relay_spans.insert(trace.clone(), (parts[2].to_owned(), span.clone()));
    }
    for id in &ids[1..3] {
        let r = by_id[id.as_str()];
        for name in [
            "ce_traceparent",
            "ce_tracestate",
            "traceparent",
            "tracestate",
        ] {
            assert_eq!(
                r.header(name),
                None,
                "{name} on an event without a valid trace"
            );
        }
    }
    let warned = logs.lines_with("is not valid W3C Trace Context");
    assert_eq!(warned.len(), 1, "one warning; log:\n{}", logs.text());
    assert!(warned[0].contains(ids[1].as_str()), "{}", warned[0]);
    assert!(
        !warned[0].contains("NOT-A-TRACE"),
        "the value is not logged"
    );

    // The collector receives both produce spans as children of the writer's.
    let mut exported = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while exported.len() < 2 {
        let doc = tokio::time::timeout_at(deadline, spans.recv())
            .await
            .expect("the produce spans reach the collector within 30 s")
            .unwrap();
        let resource = &doc["resourceSpans"][0];
        assert_eq!(
            resource["resource"]["attributes"][0]["value"]["stringValue"],
            "relay-under-test"
        );
        for span in resource["scopeSpans"][0]["spans"].as_array().unwrap() {
            exported.insert(span["traceId"].as_str().unwrap().to_owned(), span.clone());
        }
    }
    for (trace, (own, parent)) in &relay_spans {
        let span = &exported[trace];
        assert_eq!(span["spanId"].as_str(), Some(own.as_str()));
        assert_eq!(span["parentSpanId"].as_str(), Some(parent.as_str()));
        assert_eq!(
            span["name"].as_str(),
            Some(format!("publish {topic}").as_str())
        );
        assert_eq!(span["status"]["code"], 1, "delivered");
    }
    relay.stop().await.expect("graceful stop");
    outbox.drop_all().await;
}
