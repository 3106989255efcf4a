//! Dead-letter records: a row that cannot become an event, or an event no
//! broker takes, goes to the dead-letter topic with the reason, so the stream
//! goes on ("bad rows don't stop the stream" in docs/design.md). The dead letter is often the only copy of the
//! event left (outbox rows are usually deleted right after the insert), so it
//! keeps everything that can be read of the row.
//!
//! * Value: the row's payload column bytes, unchanged, when the row has one
//!   (empty when the column is NULL, missing or unreadable).
//! * Headers: `dlq_reason` (human text saying what is wrong), `dlq_reason_code`
//!   (a stable label), `lsn` (commit LSN of the row's transaction),
//!   `source_table`, `dlq_original_topic` (the topic the event was meant
//!   for, when the row names a valid one: where `outbox-relay dead retry`
//!   sends it back), then the row's mapped columns that can be read: `id`,
//!   `aggregatetype`, `aggregateid`, `type`, `timestamp` (RFC 3339) and the
//!   configured header columns under their header names.
//!
//! Invariant: the headers alone never make a dead letter too large. Each
//! value is cut to [`MAX_HEADER_VALUE`] bytes (at a UTF-8 boundary when the
//! value is text), the reason to [`MAX_REASON`], and mapped columns stop
//! once they total [`MAX_COLUMN_HEADERS`]; a column whose header name the
//! relay already set is left out rather than sent twice.
//!
//! A dead letter that is itself too large (for the producer's
//! `message.max.bytes` or the dead-letter topic's `max.message.bytes`) is
//! sent again as [`headers_only`]: the same headers without the value, plus
//! `dlq_truncated=true`, `dlq_payload_size` and `dlq_payload_sha256` of the
//! value it dropped. Should even that be refused, [`minimal`] keeps only the
//! headers that locate the row and describe the payload.

use bytes::Bytes;

use crate::envelope::{HeaderName, KafkaRecord, format_time};
use crate::outbox::OutboxRow;
use pgoutput::lsn::Lsn;

/// Longest header value, in bytes.
pub const MAX_HEADER_VALUE: usize = 1024;
/// Longest `dlq_reason`, in bytes.
pub const MAX_REASON: usize = 1024;
/// Most bytes all mapped column headers (names and values) take together.
pub const MAX_COLUMN_HEADERS: usize = 8 * 1024;

/// Header names of the row's role columns (named where the row is read).
pub use crate::outbox::role_headers::{
    AGGREGATE_ID_HEADER, AGGREGATE_TYPE_HEADER, ID_HEADER, TIMESTAMP_HEADER, TYPE_HEADER,
};

/// Why the row was dead-lettered, as text for a person (cut to
/// [`MAX_REASON`]).
pub const REASON_HEADER: &str = "dlq_reason";

/// The stable label of why the row was dead-lettered (also the `reason`
/// label of the dead-letter counter).
pub const REASON_CODE_HEADER: &str = "dlq_reason_code";

/// The commit LSN of the row's transaction.
pub const LSN_HEADER: &str = "lsn";

/// The outbox table the row was read from.
pub const SOURCE_TABLE_HEADER: &str = "source_table";

/// The topic the event was meant for.
pub const ORIGINAL_TOPIC_HEADER: &str = "dlq_original_topic";

/// `true` on a stand-in whose value (the payload) was dropped.
pub const TRUNCATED_HEADER: &str = "dlq_truncated";
/// The size in bytes of the payload a stand-in dropped.
pub const PAYLOAD_SIZE_HEADER: &str = "dlq_payload_size";
/// The SHA-256 (lower-case hex) of the payload a stand-in dropped.
pub const PAYLOAD_SHA256_HEADER: &str = "dlq_payload_sha256";

/// What [`minimal`] keeps.
const MINIMAL_HEADERS: &[&str] = &[
    REASON_CODE_HEADER,
    LSN_HEADER,
    SOURCE_TABLE_HEADER,
    ID_HEADER,
    TRUNCATED_HEADER,
    PAYLOAD_SIZE_HEADER,
    PAYLOAD_SHA256_HEADER,
];

/// Everything known about the row that is being dead-lettered.
#[derive(Debug, Clone)]
pub struct DeadLetter<'a> {
    pub topic: &'a str,
    pub reason: String,
    pub reason_code: &'static str,
    pub key: Bytes,
    pub lsn: Lsn,
    pub source_table: &'a str,
    /// The topic the event was meant for, when the row names a valid one.
    pub original_topic: Option<String>,
    /// The row's payload column bytes (empty when it has none).
    pub value: Bytes,
    /// The row's readable mapped columns as `(header name, value)`, role
    /// columns first ([`row_columns`], or
    /// [`crate::outbox::RowExtractor::salvage`] for a row that could not be
    /// extracted).
    pub columns: Vec<(String, Bytes)>,
}

/// Builds the record written to the dead-letter topic.
pub fn dead_letter_record(dl: DeadLetter<'_>) -> KafkaRecord {
    let mut headers: Vec<(HeaderName, Bytes)> = vec![
        (
            REASON_HEADER.into(),
            bounded(dl.reason.as_bytes(), MAX_REASON),
        ),
        (
            REASON_CODE_HEADER.into(),
            Bytes::from_static(dl.reason_code.as_bytes()),
        ),
        (LSN_HEADER.into(), Bytes::from(dl.lsn.to_string())),
        (
            SOURCE_TABLE_HEADER.into(),
            bounded(dl.source_table.as_bytes(), MAX_HEADER_VALUE),
        ),
    ];
    if let Some(topic) = dl.original_topic {
        // A valid topic name is at most 249 bytes: never cut.
        headers.push((ORIGINAL_TOPIC_HEADER.into(), Bytes::from(topic)));
    }
    let mut budget = MAX_COLUMN_HEADERS;
    for (name, value) in dl.columns {
        let taken = headers.iter().any(|(n, _)| *n == name)
            || [
                TRUNCATED_HEADER,
                PAYLOAD_SIZE_HEADER,
                PAYLOAD_SHA256_HEADER,
                ORIGINAL_TOPIC_HEADER,
            ]
            .contains(&&*name);
        if taken || name.len() > MAX_HEADER_VALUE {
            continue;
        }
        let value = bounded(&value, MAX_HEADER_VALUE);
        let cost = name.len() + value.len();
        if cost > budget {
            break;
        }
        budget -= cost;
        headers.push((name.into(), value));
    }
    KafkaRecord {
        topic: dl.topic.to_string(),
        key: dl.key,
        value: dl.value,
        headers,
    }
}

/// The mapped columns of an extracted row, for its dead letter.
pub fn row_columns(row: &OutboxRow) -> Vec<(String, Bytes)> {
    let text = |s: &str| Bytes::copy_from_slice(s.as_bytes());
    let mut columns = vec![
        (ID_HEADER.to_string(), text(&row.id)),
        (AGGREGATE_TYPE_HEADER.to_string(), text(&row.aggregate_type)),
        (AGGREGATE_ID_HEADER.to_string(), text(&row.aggregate_id)),
        (TYPE_HEADER.to_string(), text(&row.event_type)),
    ];
    if let Some(time) = row.timestamp {
        columns.push((TIMESTAMP_HEADER.to_string(), Bytes::from(format_time(time))));
    }
    columns.extend(row.headers.iter().cloned());
    columns
}

/// The stand-in for a dead letter too large to send: its headers (and a key
/// cut to [`MAX_HEADER_VALUE`]), no value, and what the value was.
pub fn headers_only(record: &KafkaRecord) -> KafkaRecord {
    let mut headers: Vec<(HeaderName, Bytes)> = record
        .headers
        .iter()
        .filter(|(name, _)| {
            ![TRUNCATED_HEADER, PAYLOAD_SIZE_HEADER, PAYLOAD_SHA256_HEADER].contains(&&**name)
        })
        .cloned()
        .collect();
    let (size, sha256) = match (
        header(record, PAYLOAD_SIZE_HEADER),
        header(record, PAYLOAD_SHA256_HEADER),
    ) {
        // Already a stand-in: describe the original value, not the empty one.
        (Some(size), Some(sha)) => (size.clone(), sha.clone()),
        _ => (
            Bytes::from(record.value.len().to_string()),
            Bytes::from(hex::encode(openssl::sha::sha256(&record.value))),
        ),
    };
    headers.push((TRUNCATED_HEADER.into(), Bytes::from_static(b"true")));
    headers.push((PAYLOAD_SIZE_HEADER.into(), size));
    headers.push((PAYLOAD_SHA256_HEADER.into(), sha256));
    KafkaRecord {
        topic: record.topic.clone(),
        key: bounded(&record.key, MAX_HEADER_VALUE),
        value: Bytes::new(),
        headers,
    }
}

/// The last resort when even [`headers_only`] is refused: only what locates
/// the row (`lsn`, `source_table`, `id`) and describes its payload.
pub fn minimal(record: &KafkaRecord) -> KafkaRecord {
    let stand_in = headers_only(record);
    KafkaRecord {
        headers: stand_in
            .headers
            .into_iter()
            .filter(|(name, _)| MINIMAL_HEADERS.contains(&&**name))
            .map(|(name, value)| {
                let value = bounded(&value, 128);
                (name, value)
            })
            .collect(),
        key: Bytes::new(),
        ..stand_in
    }
}

/// The next smaller stand-in for a dead letter refused as too large:
/// [`headers_only`] for a whole one, [`minimal`] for a headers-only one,
/// `None` for a minimal one (nothing smaller is worth sending).
pub fn smaller(record: &KafkaRecord) -> Option<KafkaRecord> {
    if header(record, TRUNCATED_HEADER).is_none() {
        Some(headers_only(record))
    } else if header(record, REASON_HEADER).is_some() {
        Some(minimal(record))
    } else {
        None
    }
}

fn header<'r>(record: &'r KafkaRecord, name: &str) -> Option<&'r Bytes> {
    record
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// `value` cut to at most `max` bytes; valid UTF-8 stays valid UTF-8.
fn bounded(value: &[u8], max: usize) -> Bytes {
    if value.len() <= max {
        return Bytes::copy_from_slice(value);
    }
    let mut end = max;
    if std::str::from_utf8(value).is_ok() {
        while !is_char_boundary(value, end) {
            end -= 1;
        }
    }
    Bytes::copy_from_slice(&value[..end])
}

/// Whether `at` starts a UTF-8 sequence in valid UTF-8 `text` (or is its end).
fn is_char_boundary(text: &[u8], at: usize) -> bool {
    at >= text.len() || (text[at] as i8) >= -0x40
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn get(rec: &KafkaRecord, k: &str) -> Bytes {
        header(rec, k)
            .cloned()
            .unwrap_or_else(|| panic!("header {k} missing"))
    }

    fn sample(value: &'static [u8], columns: Vec<(String, Bytes)>) -> KafkaRecord {
        dead_letter_record(DeadLetter {
            topic: "outbox.dlq",
            reason: "payload is not JSON".into(),
            reason_code: "payload_not_json",
            key: Bytes::from_static(b"order-7"),
            lsn: Lsn(0x16_B374_D848),
            source_table: "public.outbox",
            original_topic: None,
            value: Bytes::from_static(value),
            columns,
        })
    }

    #[test]
    fn headers_carry_reason_lsn_table_and_the_columns_value_the_payload() {
        let rec = sample(
            b"not json",
            vec![
                ("id".into(), Bytes::from_static(b"e-1")),
                ("aggregatetype".into(), Bytes::from_static(b"order")),
                ("tenant".into(), Bytes::from_static(b"acme")),
            ],
        );
        assert_eq!(rec.topic, "outbox.dlq");
        assert_eq!(
            get(&rec, "dlq_reason"),
            Bytes::from_static(b"payload is not JSON")
        );
        assert_eq!(
            get(&rec, "dlq_reason_code"),
            Bytes::from_static(b"payload_not_json")
        );
        assert_eq!(get(&rec, "id"), Bytes::from_static(b"e-1"));
        assert_eq!(get(&rec, "aggregatetype"), Bytes::from_static(b"order"));
        assert_eq!(get(&rec, "tenant"), Bytes::from_static(b"acme"));
        assert_eq!(get(&rec, "lsn"), Bytes::from_static(b"16/B374D848"));
        assert_eq!(
            get(&rec, "source_table"),
            Bytes::from_static(b"public.outbox")
        );
        assert_eq!(rec.key, Bytes::from_static(b"order-7"));
        assert_eq!(rec.value, Bytes::from_static(b"not json"));
    }

    #[test]
    fn a_dead_letter_keeps_the_payloads_numbers_as_written() {
        let payload: &'static [u8] =
            br#"{"a": 99999999999999999.99, "b": 1e400, "c": -0, "d": 18446744073709551617, "e": 1.0}"#;
        // What a contract violation carries: the payload the check refused.
        let schema = crate::contracts::Schema::from_value(
            &serde_json::json!({"properties": {"e": {"type": "string"}}}),
            "s.json",
            None,
        )
        .unwrap();
        let violation = schema.check(payload).unwrap_err();
        let rec = dead_letter_record(DeadLetter {
            reason: violation.to_string(),
            reason_code: crate::contracts::CONTRACT_VIOLATION,
            ..sample_letter(payload)
        });
        assert_eq!(rec.value.as_ref(), payload);
    }

    fn sample_letter(value: &'static [u8]) -> DeadLetter<'static> {
        DeadLetter {
            topic: "outbox.dlq",
            reason: String::new(),
            reason_code: "payload_not_json",
            key: Bytes::from_static(b"order-7"),
            lsn: Lsn(0x16_B374_D848),
            source_table: "public.outbox",
            original_topic: None,
            value: Bytes::from_static(value),
            columns: Vec::new(),
        }
    }

    #[test]
    fn a_column_cannot_shadow_a_relay_header() {
        let rec = sample(
            b"{}",
            vec![
                ("lsn".into(), Bytes::from_static(b"forged")),
                ("dlq_truncated".into(), Bytes::from_static(b"forged")),
                ("id".into(), Bytes::from_static(b"e-1")),
                ("id".into(), Bytes::from_static(b"e-2")),
            ],
        );
        let count = |k: &str| rec.headers.iter().filter(|(n, _)| n == k).count();
        assert_eq!(count("lsn"), 1);
        assert_eq!(get(&rec, "lsn"), Bytes::from_static(b"16/B374D848"));
        assert_eq!(count("dlq_truncated"), 0);
        assert_eq!(count("id"), 1);
        assert_eq!(get(&rec, "id"), Bytes::from_static(b"e-1"));
    }

    #[test]
    fn headers_only_drops_the_value_and_describes_it() {
        let payload = br#"{"blob":"xxxxxxxxxx"}"#;
        let rec = sample(payload, vec![("id".into(), Bytes::from_static(b"e-1"))]);
        let cut = headers_only(&rec);
        assert!(cut.value.is_empty());
        assert_eq!(get(&cut, "dlq_truncated"), Bytes::from_static(b"true"));
        assert_eq!(
            get(&cut, "dlq_payload_size"),
            Bytes::from(payload.len().to_string())
        );
        // sha256 of the payload, computed independently of the code under test.
        let expected = openssl::sha::sha256(payload)
            .iter()
            .fold(String::new(), |s, b| s + &format!("{b:02x}"));
        assert_eq!(
            get(&cut, "dlq_payload_sha256"),
            Bytes::from(expected.clone())
        );
        assert_eq!(get(&cut, "id"), Bytes::from_static(b"e-1"));
        assert_eq!(get(&cut, "dlq_reason_code"), get(&rec, "dlq_reason_code"));
        assert_eq!(cut.key, rec.key);
        // Cutting a stand-in again still describes the original payload.
        let again = headers_only(&cut);
        assert_eq!(get(&again, "dlq_payload_sha256"), Bytes::from(expected));
        assert_eq!(again.headers.len(), cut.headers.len());
        assert_eq!(smaller(&rec), Some(cut.clone()));
        let min = smaller(&cut).expect("a minimal stand-in");
        assert_eq!(min, minimal(&cut));
        assert_eq!(smaller(&min), None);
        assert_eq!(
            get(&min, "dlq_payload_size"),
            Bytes::from(payload.len().to_string())
        );
        assert!(header(&min, "dlq_reason").is_none());
        assert!(min.key.is_empty() && min.value.is_empty());
    }

    #[test]
    fn long_values_are_cut_at_a_character_boundary() {
        // 3-byte characters: MAX_HEADER_VALUE is not a multiple of 3.
        let long = "€".repeat(MAX_HEADER_VALUE);
        let rec = sample(b"{}", vec![("note".into(), Bytes::from(long))]);
        let note = get(&rec, "note");
        assert!(note.len() <= MAX_HEADER_VALUE && note.len() > MAX_HEADER_VALUE - 3);
        assert!(std::str::from_utf8(&note).is_ok());
        // Bytes that are not UTF-8 are cut at the limit exactly.
        let raw = vec![0xffu8; MAX_HEADER_VALUE * 2];
        let rec = sample(b"{}", vec![("raw".into(), Bytes::from(raw))]);
        assert_eq!(get(&rec, "raw").len(), MAX_HEADER_VALUE);
    }

    proptest! {
        /// Whatever the row holds, the headers of a dead letter and of its
        /// stand-ins stay within a fixed bound.
        #[test]
        fn headers_are_bounded(
            reason in ".{0,3000}",
            columns in proptest::collection::vec(("[a-z_]{1,20}", proptest::collection::vec(any::<u8>(), 0..3000)), 0..40),
            key in proptest::collection::vec(any::<u8>(), 0..5000),
        ) {
            let rec = dead_letter_record(DeadLetter {
                topic: "dlq",
                reason,
                reason_code: "null_key",
                key: Bytes::from(key),
                lsn: Lsn(7),
                source_table: "public.outbox",
                original_topic: Some("t".repeat(249)),
                value: Bytes::from_static(b"{}"),
                columns: columns.into_iter().map(|(n, v)| (n, Bytes::from(v))).collect(),
            });
            let size = |r: &KafkaRecord| r.headers.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>();
            let bound = MAX_REASON + MAX_COLUMN_HEADERS + 2 * MAX_HEADER_VALUE + 256;
            prop_assert!(size(&rec) <= bound, "{} > {bound}", size(&rec));
            let cut = headers_only(&rec);
            prop_assert!(size(&cut) + cut.key.len() <= bound + MAX_HEADER_VALUE + 128);
            let min = minimal(&rec);
            prop_assert!(size(&min) + min.key.len() <= 1024);
        }
    }
}
