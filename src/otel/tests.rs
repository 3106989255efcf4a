use super::*;
use crate::http_client::test_server::TestServer;

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

fn record() -> KafkaRecord {
    KafkaRecord {
        topic: "outbox.event.order".into(),
        key: Bytes::from_static(b"42"),
        value: Bytes::from_static(b"{}"),
        headers: Vec::new(),
    }
}

#[test]
fn endpoints_get_the_traces_path_unless_they_name_one() {
    let e = Endpoint::parse("http://127.0.0.1:4318").unwrap();
    assert_eq!(
        (e.host.as_str(), e.port, e.path.as_str()),
        ("127.0.0.1", 4318, "/v1/traces")
    );
    let e = Endpoint::parse("http://collector/").unwrap();
    assert_eq!((e.port, e.path.as_str()), (80, "/v1/traces"));
    let e = Endpoint::parse("http://[::1]:4318/custom/traces").unwrap();
    assert_eq!(
        (e.host.as_str(), e.port, e.path.as_str()),
        ("::1", 4318, "/custom/traces")
    );
    // An IPv6 address without a port takes http's port.
    let e = Endpoint::parse("http://[::1]").unwrap();
    assert_eq!(
        (e.host.as_str(), e.port, e.path.as_str()),
        ("::1", 80, "/v1/traces")
    );
    for bad in [
        "https://c:4318",
        "c:4318",
        "http://",
        "http://:4318",
        "http://c:0",
        "http://c:http",
        "http://u:p@c:4318",
        "http://c:4318/a b",
        "http://c:4318/a<b",
        // A fragment is never sent: the spans would go to another path
        // than the one written.
        "http://c:4318/v1/traces#x",
        "http://c:99999",
    ] {
        assert!(Endpoint::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_produce_span_is_a_child_of_the_rows_context_and_goes_in_the_header() {
    let (tx, mut rx) = mpsc::channel(4);
    let tracer = Tracer { finished: tx };
    let parent = TraceContext {
        traceparent: PARENT.into(),
        tracestate: Some("congo=t61rcWkgMzE".into()),
    };
    let mut rec = record();
    let span = tracer.start(&parent, &mut rec, "e-1").unwrap();
    let header = |name: &str| {
        rec.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8(v.to_vec()).unwrap())
    };
    let own = header(TRACEPARENT_HEADER).unwrap();
    assert_eq!(own, span.context.traceparent());
    assert!(
        own.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
        "{own}"
    );
    assert!(own.ends_with("-01"), "{own}");
    assert_ne!(own, PARENT, "a span of its own, not the row's");
    assert_eq!(hex::encode(span.parent_span_id), "b7ad6b7169203331");
    assert_eq!(
        header(TRACESTATE_HEADER).as_deref(),
        Some("congo=t61rcWkgMzE")
    );
    tracer.end(*span, None);
    let finished = rx.try_recv().unwrap();
    let doc: serde_json::Value =
        serde_json::from_slice(&otlp_json("relay-x", &[finished])).unwrap();
    let span = &doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    assert_eq!(span["traceId"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(span["parentSpanId"], "b7ad6b7169203331");
    assert_eq!(span["spanId"].as_str().unwrap(), &own[36..52]);
    assert_eq!(span["kind"], 4);
    assert_eq!(span["status"]["code"], 1);
    assert_eq!(
        doc["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
        "relay-x"
    );
}

#[test]
fn an_unsampled_parent_gets_a_child_id_but_no_export() {
    let (tx, mut rx) = mpsc::channel(4);
    let tracer = Tracer { finished: tx };
    let parent = TraceContext {
        traceparent: PARENT.replace("-01", "-00"),
        tracestate: None,
    };
    let mut rec = record();
    let span = tracer.start(&parent, &mut rec, "e-1").unwrap();
    assert!(span.context.traceparent().ends_with("-00"));
    assert_eq!(rec.headers.len(), 1, "no tracestate header without one");
    tracer.end(*span, None);
    assert!(rx.try_recv().is_err());
}

#[test]
fn a_full_queue_drops_spans_instead_of_waiting() {
    let (tx, _rx) = mpsc::channel(1);
    let tracer = Tracer { finished: tx };
    let parent = TraceContext {
        traceparent: PARENT.into(),
        tracestate: None,
    };
    for _ in 0..3 {
        let span = tracer.start(&parent, &mut record(), "e").unwrap();
        tracer.end(*span, Some("refused".into()));
    }
}

#[tokio::test]
async fn the_exporter_posts_each_batch_on_one_kept_connection() {
    let server = TestServer::start("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").await;
    let (tracer, task) = spawn_exporter(OtlpSettings {
        endpoint: Endpoint::parse(&format!("http://127.0.0.1:{}", server.port)).unwrap(),
        service_name: "relay-x".into(),
    });
    let parent = TraceContext {
        traceparent: PARENT.into(),
        tracestate: None,
    };
    // One span per batch: the second ends only once the first batch is in.
    for n in 1..=2 {
        let span = tracer
            .start(&parent, &mut record(), &format!("e-{n}"))
            .unwrap();
        tracer.end(*span, None);
        server.wait_for(n).await;
    }
    drop(tracer);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the exporter ends with its last tracer")
        .unwrap();
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    for (request, id) in seen.iter().zip(["e-1", "e-2"]) {
        let head = request.head.to_ascii_lowercase();
        assert!(head.starts_with("post /v1/traces http/1.1\r\n"), "{head}");
        assert!(
            head.contains("\r\ncontent-type: application/json\r\n"),
            "{head}"
        );
        let doc: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let spans = &doc["resourceSpans"][0]["scopeSpans"][0]["spans"];
        assert_eq!(spans.as_array().unwrap().len(), 1);
        assert_eq!(spans[0]["traceId"], "0af7651916cd43dd8448eb211c80319c");
        assert!(
            spans[0]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["key"] == "cloudevents.event_id" && a["value"]["stringValue"] == id),
            "{doc}"
        );
    }
    assert_eq!(
        server.accepted(),
        1,
        "the second batch reused the connection"
    );
}
