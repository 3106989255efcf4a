//! An outbox event written as a transactional logical message instead of a
//! row: `outbox_emit(...)` (`sql/outbox_emit.sql`) calls
//! `pg_logical_emit_message(true, 'outbox', <json>)` in the caller's
//! transaction. Nothing is stored in a table, so nothing bloats and nothing
//! needs cleaning up; the WAL carries the message, and logical decoding
//! hands it over inside its transaction, in WAL order with the transaction's
//! row changes (docs/design.md, "The outbox contract").
//!
//! The content is one JSON object:
//!
//! ```json
//! {"id": "…", "aggregatetype": "order", "aggregateid": "42", "type": "OrderPlaced",
//!  "payload": {…}, "timestamp": "2026-…", "traceparent": "00-…", "tracestate": "…"}
//! ```
//!
//! `id`, `aggregatetype`, `aggregateid`, `type` and `payload` are required;
//! `timestamp`, `traceparent`, `tracestate` and `source` are optional;
//! other members are ignored (room for later versions of the function).
//!
//! Invariants: the payload's bytes are never re-serialized (a zero-copy
//! slice of the message content, like a row's payload column); a message
//! that cannot become an event is a [`RowError`] plus what could be read of
//! it, and the relay dead-letters it with the whole content when the
//! content is not even a JSON object ("bad rows don't stop the stream").

use std::borrow::Cow;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::role_headers as dl;
use super::{OutboxRow, RowError, Salvaged, parse_pg_timestamp};

/// The prefix `outbox_emit` writes unless told otherwise
/// (`postgres.message_prefix`).
pub const DEFAULT_PREFIX: &str = "outbox";

/// The members of the message, as written by `outbox_emit`.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    aggregatetype: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    aggregateid: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    event_type: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    traceparent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tracestate: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    source: Option<Cow<'a, str>>,
}

/// The outbox row a message stands for.
///
/// # Errors
/// The reason to dead-letter it, with what could be read of it: the
/// payload's bytes when it has one (else the whole content), and its role
/// members as dead-letter headers.
pub fn parse(content: &Bytes) -> Result<OutboxRow, Box<(RowError, Salvaged)>> {
    let wire: Wire<'_> = match serde_json::from_slice(content) {
        Ok(wire) => wire,
        Err(e) => {
            let error = RowError::MessageInvalid {
                reason: e.to_string(),
            };
            let salvaged = Salvaged {
                payload: Some(content.clone()),
                columns: Vec::new(),
            };
            return Err(Box::new((error, salvaged)));
        }
    };
    let payload = wire
        .payload
        .filter(|raw| raw.get() != "null")
        .map(|raw| content.slice_ref(raw.get().as_bytes()));
    let required = |value: &Option<Cow<'_, str>>, member: &str, role: &'static str| {
        value
            .as_deref()
            .map(str::to_owned)
            .ok_or_else(|| RowError::Null {
                column: member.to_owned(),
                role,
            })
    };
    let row = (|| {
        let id = required(&wire.id, "id", "id")?;
        let aggregate_type = required(&wire.aggregatetype, "aggregatetype", "aggregate_type")?;
        let aggregate_id = required(&wire.aggregateid, "aggregateid", "aggregate_id")?;
        let event_type = required(&wire.event_type, "type", "event_type")?;
        let payload = payload.clone().ok_or_else(|| RowError::Null {
            column: "payload".to_owned(),
            role: "payload",
        })?;
        Ok(OutboxRow {
            id,
            aggregate_type,
            aggregate_id,
            event_type,
            payload,
            payload_is_jsonb: false,
            timestamp: wire.timestamp.as_deref().and_then(parse_time),
            trace_parent: wire.traceparent.as_deref().map(str::to_owned),
            trace_state: wire.tracestate.as_deref().map(str::to_owned),
            headers: Vec::new(),
            source: wire.source.as_deref().map(str::to_owned),
        })
    })();
    row.map_err(|error| {
        let text = |s: &Cow<'_, str>| Bytes::copy_from_slice(s.as_bytes());
        let mut columns = Vec::new();
        for (header, value) in [
            (dl::ID_HEADER, &wire.id),
            (dl::AGGREGATE_TYPE_HEADER, &wire.aggregatetype),
            (dl::AGGREGATE_ID_HEADER, &wire.aggregateid),
            (dl::TYPE_HEADER, &wire.event_type),
        ] {
            if let Some(value) = value {
                columns.push((header.to_owned(), text(value)));
            }
        }
        let salvaged = Salvaged {
            payload: Some(payload.unwrap_or_else(|| content.clone())),
            columns,
        };
        Box::new((error, salvaged))
    })
}

/// The aggregate id of a message, read without the rest of it (nothing but
/// the id is kept): what decides its shard before it is routed. `None` when
/// the content is not a JSON object with a string `aggregateid` (NULL or
/// absent included): such a message cannot become an event, and shard 0
/// dead-letters it, as the row filter puts a NULL aggregate id there.
pub fn aggregate_id(content: &[u8]) -> Option<Cow<'_, str>> {
    #[derive(Deserialize)]
    struct Key<'a> {
        #[serde(borrow, default)]
        aggregateid: Option<Cow<'a, str>>,
    }
    serde_json::from_slice::<Key<'_>>(content).ok()?.aggregateid
}

/// `json_build_object` writes a timestamptz as ISO 8601 with a `T`;
/// a hand-written message may use PostgreSQL's text output.
fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| parse_pg_timestamp(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn a_message_from_outbox_emit_becomes_its_row_payload_bytes_unchanged() {
        let content = bytes(
            r#"{"id" : "e-1", "aggregatetype" : "order", "aggregateid" : "42", "type" : "Placed", "payload" : {"total": 12.50, "n": [1,2]}, "timestamp" : "2026-04-01T10:00:00.5+02:00", "traceparent" : "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate" : "congo=t61rcWkgMzE", "extra": 1}"#,
        );
        let row = parse(&content).unwrap();
        assert_eq!(row.id, "e-1");
        assert_eq!(row.aggregate_type, "order");
        assert_eq!(row.aggregate_id, "42");
        assert_eq!(row.event_type, "Placed");
        assert_eq!(row.payload.as_ref(), br#"{"total": 12.50, "n": [1,2]}"#);
        assert_eq!(
            row.timestamp.unwrap().to_rfc3339(),
            "2026-04-01T08:00:00.500+00:00"
        );
        assert_eq!(
            row.trace_parent.as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert_eq!(row.trace_state.as_deref(), Some("congo=t61rcWkgMzE"));
        assert_eq!(row.source, None);
        assert!(row.headers.is_empty());
    }

    #[test]
    fn the_aggregate_id_is_read_alone_and_unescaped() {
        let id = |content: &str| aggregate_id(content.as_bytes()).map(Cow::into_owned);
        assert_eq!(
            id(r#"{"id":"e-1","payload":{"aggregateid":"inner"},"aggregateid":"k\\1"}"#),
            Some("k\\1".to_owned())
        );
        assert_eq!(
            id(r#"{"aggregateid":"agg-\u00e9"}"#),
            Some("agg-é".to_owned())
        );
        // No string aggregate id: shard 0's, to be dead-lettered there.
        for content in [
            r#"{"id":"e-1","payload":{}}"#,
            r#"{"aggregateid":null}"#,
            r#"{"aggregateid":42}"#,
            r#"{"aggregateid":"a","aggregateid":"b"}"#,
            r#"{"aggregateid":"a""#,
            "not json",
            "",
        ] {
            assert_eq!(id(content), None, "{content:?}");
        }
    }

    #[test]
    fn escaped_strings_are_unescaped() {
        let content = bytes(
            r#"{"id":"e\u0031","aggregatetype":"or\"der","aggregateid":"k\\1","type":"T","payload":"x"}"#,
        );
        let row = parse(&content).unwrap();
        assert_eq!(
            (row.id.as_str(), row.aggregate_type.as_str()),
            ("e1", "or\"der")
        );
        assert_eq!(row.aggregate_id, "k\\1");
        assert_eq!(row.payload.as_ref(), br#""x""#);
    }

    #[test]
    fn content_that_is_not_an_outbox_object_is_dead_lettered_whole() {
        for content in [
            "not json",
            "",
            "[1,2]",
            r#"{"id": 5}"#,
            "{\"id\":\"a\"",
            "\u{1F600}",
        ] {
            let content = bytes(content);
            let (error, salvaged) = *parse(&content).unwrap_err();
            assert_eq!(error.reason_code(), "message_invalid", "{content:?}");
            assert_eq!(salvaged.payload.as_ref(), Some(&content));
        }
        let invalid_utf8 = Bytes::from_static(b"{\"id\":\"\xff\"}");
        let (error, salvaged) = *parse(&invalid_utf8).unwrap_err();
        assert_eq!(error.reason_code(), "message_invalid");
        assert_eq!(salvaged.payload, Some(invalid_utf8));
    }

    #[test]
    fn a_missing_member_names_it_and_keeps_what_is_there() {
        let content =
            bytes(r#"{"id":"e-1","aggregatetype":"order","type":"Placed","payload":{"a":1}}"#);
        let (error, salvaged) = *parse(&content).unwrap_err();
        assert_eq!(error.reason_code(), "null_key");
        assert!(error.to_string().contains("aggregateid"), "{error}");
        assert_eq!(salvaged.payload.as_deref(), Some(&br#"{"a":1}"#[..]));
        let names: Vec<&str> = salvaged.columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["id", "aggregatetype", "type"]);
        // No payload (or a JSON null): the whole content is the value.
        for content in [
            r#"{"id":"e-1","aggregatetype":"o","aggregateid":"1","type":"T"}"#,
            r#"{"id":"e-1","aggregatetype":"o","aggregateid":"1","type":"T","payload":null}"#,
        ] {
            let content = bytes(content);
            let (error, salvaged) = *parse(&content).unwrap_err();
            assert_eq!(error.reason_code(), "null_column", "{content:?}");
            assert_eq!(salvaged.payload, Some(content));
        }
    }
}
