//! Dead-letter records: a row that cannot become an event goes to the
//! dead-letter topic with the reason, so the stream goes on (invariant 10).
//!
//! Headers: `dlq_reason` (human text saying what is wrong), `dlq_reason_code`
//! (a stable label), `id` (the outbox id, when readable), `lsn` (commit LSN of
//! the row's transaction) and `source_table`. The value is the original row
//! payload when there is one and it fits; for a record the broker refused as
//! too large, the value is empty (the headers say where to find the row).

use bytes::Bytes;

use crate::envelope::KafkaRecord;
use crate::lsn::Lsn;

/// Everything known about the row that is being dead-lettered.
#[derive(Debug, Clone)]
pub struct DeadLetter<'a> {
    pub topic: &'a str,
    pub reason: String,
    pub reason_code: &'static str,
    pub event_id: Option<&'a str>,
    pub key: Bytes,
    pub lsn: Lsn,
    pub source_table: &'a str,
    pub value: Bytes,
}

/// Builds the record written to the dead-letter topic.
pub fn dead_letter_record(dl: DeadLetter<'_>) -> KafkaRecord {
    let mut headers = vec![
        ("dlq_reason".to_string(), Bytes::from(dl.reason)),
        (
            "dlq_reason_code".to_string(),
            Bytes::from_static(dl.reason_code.as_bytes()),
        ),
        ("lsn".to_string(), Bytes::from(dl.lsn.to_string())),
        (
            "source_table".to_string(),
            Bytes::copy_from_slice(dl.source_table.as_bytes()),
        ),
    ];
    if let Some(id) = dl.event_id {
        headers.push(("id".to_string(), Bytes::copy_from_slice(id.as_bytes())));
    }
    KafkaRecord {
        topic: dl.topic.to_string(),
        key: dl.key,
        value: dl.value,
        headers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_carry_reason_id_lsn_and_table() {
        let rec = dead_letter_record(DeadLetter {
            topic: "outbox.dlq",
            reason: "payload is not JSON".into(),
            reason_code: "payload_not_json",
            event_id: Some("e-1"),
            key: Bytes::from_static(b"order-7"),
            lsn: Lsn(0x16_B374_D848),
            source_table: "public.outbox",
            value: Bytes::from_static(b"not json"),
        });
        let get = |k: &str| {
            rec.headers
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("header {k} missing"))
        };
        assert_eq!(rec.topic, "outbox.dlq");
        assert_eq!(
            get("dlq_reason"),
            Bytes::from_static(b"payload is not JSON")
        );
        assert_eq!(
            get("dlq_reason_code"),
            Bytes::from_static(b"payload_not_json")
        );
        assert_eq!(get("id"), Bytes::from_static(b"e-1"));
        assert_eq!(get("lsn"), Bytes::from_static(b"16/B374D848"));
        assert_eq!(get("source_table"), Bytes::from_static(b"public.outbox"));
        assert_eq!(rec.key, Bytes::from_static(b"order-7"));
    }

    #[test]
    fn unreadable_id_is_left_out() {
        let rec = dead_letter_record(DeadLetter {
            topic: "dlq",
            reason: "column \"id\" (id) is NULL".into(),
            reason_code: "null_column",
            event_id: None,
            key: Bytes::new(),
            lsn: Lsn(1),
            source_table: "public.outbox",
            value: Bytes::new(),
        });
        assert!(rec.headers.iter().all(|(k, _)| k != "id"));
    }
}
