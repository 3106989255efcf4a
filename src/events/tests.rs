use std::sync::{Arc, Mutex};

use metrics_exporter_prometheus::PrometheusBuilder;
use pgoutput::lsn::Lsn;
use tracing::Level;

use super::*;
use crate::metrics::{self as m, Health};

/// The names of `const NAME`s (through `event!`) in the module's sources.
fn declared_names() -> Vec<String> {
    let sources = [
        include_str!("kafka.rs"),
        include_str!("notices.rs"),
        include_str!("retry.rs"),
        include_str!("run.rs"),
        include_str!("stream.rs"),
        include_str!("tables.rs"),
    ];
    let mut names = Vec::new();
    for source in sources {
        // `event!(Type, "name", LEVEL, Kind);`, on one line or (as rustfmt
        // leaves a long one) several.
        for (at, _) in source.match_indices("\nevent!(") {
            let call = &source[at..];
            let call = &call[..call.find(");").expect("event! closes")];
            let name = call.split('"').nth(1).expect("a quoted name");
            names.push(name.to_owned());
        }
    }
    names
}

#[test]
fn every_event_type_is_listed_once_with_a_stable_snake_case_name() {
    let declared = declared_names();
    assert!(declared.len() >= 60, "{declared:?}");
    for name in &declared {
        assert_eq!(
            ALL.iter().filter(|info| info.name == name.as_str()).count(),
            1,
            "{name} is declared but not listed exactly once in events::ALL"
        );
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{name}: snake case"
        );
    }
    assert_eq!(ALL.len(), declared.len(), "ALL lists a type twice");
    assert_eq!(named("slot_in_use"), Some(Info::of::<SlotInUse>()));
    assert_eq!(named("no_such_event"), None);
}

/// A writer into a shared buffer, for the text formatter.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn text_log(json: bool, emit: impl FnOnce()) -> String {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let builder = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(Level::DEBUG)
        .with_writer(move || writer.clone());
    if json {
        tracing::subscriber::with_default(builder.json().finish(), emit);
    } else {
        tracing::subscriber::with_default(builder.finish(), emit);
    }
    String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
}

/// The name is what a log search, an alert or a test matches: the text
/// log shows `event=NAME`, the JSON log `"event":"NAME"`, on the line
/// with the event's text and fields, at its level.
#[test]
fn the_line_names_the_event_in_text_and_json_logs() {
    let slot_ahead = || {
        SlotAhead {
            slot: "s",
            confirmed_by_relay: Lsn::from(0x10),
            slot_position: Lsn::from(0x30),
        }
        .emit();
    };
    let text = text_log(false, slot_ahead);
    let line = text.lines().next().expect("one line");
    assert!(line.contains(" WARN "), "{line}");
    assert!(line.contains("event=slot_ahead "), "{line}");
    assert!(line.contains("gap_bytes=32"), "{line}");
    assert!(
        line.contains("the slot is ahead of the position this relay confirmed"),
        "{line}"
    );
    let json = text_log(true, slot_ahead);
    assert!(json.contains(r#""event":"slot_ahead""#), "{json}");
    assert!(json.contains(r#""level":"WARN""#), "{json}");
}

#[test]
fn each_event_is_logged_at_its_own_level() {
    let (recorder, guard) = Recorder::start();
    Streaming {
        slot: "s",
        confirmed: Lsn::from(1),
        parked_aggregates: 0,
    }
    .emit();
    CheckpointAhead {
        commit_lsn: Lsn::from(2),
        missing: 3,
    }
    .emit();
    StillWaitingForSlotReader::emit_alone();
    drop(guard);
    let seen: Vec<(String, Level)> = recorder
        .events()
        .into_iter()
        .map(|e| (e.name, e.level))
        .collect();
    assert_eq!(
        seen,
        [
            ("streaming".to_owned(), Streaming::LEVEL),
            ("checkpoint_ahead".to_owned(), CheckpointAhead::LEVEL),
            (
                "still_waiting_for_slot_reader".to_owned(),
                StillWaitingForSlotReader::LEVEL
            ),
        ]
    );
    assert_eq!(
        (Streaming::LEVEL, CheckpointAhead::LEVEL),
        (Level::INFO, Level::ERROR)
    );
    let ahead = &recorder.named("checkpoint_ahead")[0];
    assert_eq!(ahead.field("missing"), Some("3"));
    assert_eq!(ahead.field("commit_lsn"), Some("0/2"));
}

impl StillWaitingForSlotReader {
    fn emit_alone() {
        Retry::StillWaitingForSlotReader(StillWaitingForSlotReader {
            error: "busy".into(),
            attempt: 2,
        })
        .emit(&Health::default());
    }
}

/// A retry does all it means in one call: the line, the counter under its
/// reason, and /health told (a delivery failure keeps /ready 503 until the
/// next session confirms something).
#[test]
fn a_retry_logs_counts_and_tells_health() {
    let prometheus = PrometheusBuilder::new().build_recorder();
    let handle = prometheus.handle();
    let health = Health::default();
    health.set_streaming(true);
    let (recorder, guard) = Recorder::start();
    let retry = Retry::DeliveryFailed(DeliveryFailed {
        reason: m::reason::MESSAGE_TIMEOUT,
        error: "records timed out".into(),
        confirmed: Lsn::from(0x100),
    });
    metrics::with_local_recorder(&prometheus, || retry.emit(&health));
    drop(guard);
    let line = &recorder.named("delivery_failed")[0];
    assert_eq!(line.level, Level::WARN);
    assert_eq!(line.field("reason"), Some("message_timeout"));
    assert_eq!(line.field("error"), Some("records timed out"));
    assert!(
        line.field("message")
            .is_some_and(|text| text.starts_with("delivery failed; rebuilding the producer")),
        "{line:?}"
    );
    let rendered = handle.render();
    assert!(
        rendered.contains(&format!(
            "{}{{reason=\"message_timeout\"}} 1",
            m::DELIVERY_FAILURES
        )),
        "{rendered}"
    );
    let (_, ready) = health.readiness_with(false);
    assert!(
        ready.contains("producer retrying message_timeout"),
        "{ready}"
    );
    assert_eq!(
        (retry.name(), retry.counter(), retry.health()),
        (
            DeliveryFailed::NAME,
            m::DELIVERY_FAILURES,
            HealthNote::ProducerRetrying
        )
    );
}

/// The relay lock untried means this relay can no longer stand by: /health
/// says it retries, not that it is a standby.
#[test]
fn a_lock_untried_ends_standing_by() {
    let health = Health::default();
    health.set_standby(true);
    Retry::RelayLockUntried(RelayLockUntried {
        error: "connection refused".into(),
        attempt: 1,
    })
    .emit(&health);
    assert!(!health.is_standby());
}
