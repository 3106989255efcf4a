//! `outbox-relay schema check`: payloads checked against an event type's
//! contract on a developer's machine or in a service's CI, the check the
//! relay makes before it sends (`contracts.rs`), without PostgreSQL or
//! Kafka.
//!
//! Pure: the caller reads the files; [`check`] decides and [`Report`]
//! renders.

use std::fmt;

use crate::contracts::{Contracts, Schema, Violation};

/// What one payload file came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It satisfies the schema.
    Satisfies,
    /// It breaks it, first here.
    Breaks(Violation),
    /// It cannot be read.
    Unreadable(String),
}

/// The verdicts of one `schema check`, against one schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The schema's name and `dataschema`.
    pub schema: String,
    pub dataschema: String,
    /// Each file as named, and its verdict.
    pub files: Vec<(String, Verdict)>,
}

impl Report {
    /// Every payload satisfies the schema.
    pub fn passed(&self) -> bool {
        self.files.iter().all(|(_, v)| *v == Verdict::Satisfies)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (file, verdict) in &self.files {
            match verdict {
                Verdict::Satisfies => writeln!(
                    f,
                    "ok    {file}: satisfies {} (dataschema {})",
                    self.schema, self.dataschema
                )?,
                Verdict::Breaks(violation) => writeln!(f, "FAIL  {file}: {violation}")?,
                Verdict::Unreadable(why) => writeln!(f, "FAIL  {file}: {why}")?,
            }
        }
        Ok(())
    }
}

/// The schema the relay checks an event of `aggregate_type` and
/// `event_type` against.
///
/// # Errors
/// No contract covers the event type: the relay would send it unchecked;
/// the text says so and how to add one.
pub fn contract_for<'c>(
    contracts: &'c Contracts,
    aggregate_type: &str,
    event_type: &str,
) -> Result<&'c Schema, String> {
    contracts.find(aggregate_type, event_type).ok_or_else(|| {
        format!(
            "no [[contracts]] entry covers aggregatetype {aggregate_type:?} and type \
             {event_type:?}: the relay sends such events unchecked (add a contract, or pass \
             --aggregatetype if the contracts name one)"
        )
    })
}

/// Checks each payload (file name, its bytes or why it cannot be read)
/// against `schema`.
pub fn check(schema: &Schema, payloads: Vec<(String, Result<Vec<u8>, String>)>) -> Report {
    let files = payloads
        .into_iter()
        .map(|(file, bytes)| {
            let verdict = match bytes {
                Ok(bytes) => match schema.check(&bytes) {
                    Ok(()) => Verdict::Satisfies,
                    Err(violation) => Verdict::Breaks(violation),
                },
                Err(why) => Verdict::Unreadable(why),
            };
            (file, verdict)
        })
        .collect();
    Report {
        schema: schema.name().to_owned(),
        dataschema: schema.dataschema().to_owned(),
        files,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn contracts() -> Contracts {
        let schema = Schema::from_value(
            &serde_json::json!({"type": "object", "required": ["amount"]}),
            "order.json",
            Some("urn:order:v1"),
        )
        .unwrap();
        Contracts::from_parts(vec![(
            Some("order".into()),
            Some("order.placed".into()),
            Arc::new(schema),
        )])
    }

    #[test]
    fn each_payload_gets_its_verdict_and_one_failure_fails_the_check() {
        let contracts = contracts();
        let schema = contract_for(&contracts, "order", "order.placed").unwrap();
        let report = check(
            schema,
            vec![
                ("good.json".into(), Ok(br#"{"amount": 1}"#.to_vec())),
                ("bad.json".into(), Ok(br#"{}"#.to_vec())),
                (
                    "gone.json".into(),
                    Err("cannot read gone.json: no such file".into()),
                ),
            ],
        );
        assert!(!report.passed());
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "ok    good.json: satisfies order.json (dataschema urn:order:v1)"
        );
        assert!(
            lines[1].starts_with("FAIL  bad.json: payload breaks contract order.json: at /:"),
            "{text}"
        );
        assert_eq!(
            lines[2],
            "FAIL  gone.json: cannot read gone.json: no such file"
        );

        let good = check(
            schema,
            vec![("good.json".into(), Ok(br#"{"amount": 1}"#.to_vec()))],
        );
        assert!(good.passed());
    }

    #[test]
    fn an_event_type_without_a_contract_is_named_as_unchecked() {
        let contracts = contracts();
        let why = contract_for(&contracts, "", "order.placed").unwrap_err();
        assert!(
            why.contains("unchecked") && why.contains("--aggregatetype"),
            "{why}"
        );
    }
}
