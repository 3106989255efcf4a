//! The entries of the delivery table (HTTP routes): its DEAD rows, and the
//! rows the replay record says were retried or discarded (`dead list --all`
//! shows them with that state, `retry` and `discard` skip them).
//!
//! Invariants:
//! * A row that is DEAD now is dead, whatever its record says: a retried
//!   row that failed again is a dead letter again.
//! * A discarded row is deleted, so all that is left of it is its record:
//!   its id, when and that it was discarded; its route and reason are gone.

use std::collections::HashMap;

use super::table::{self, DeadRow, Replay, TableName};
use super::{Entry, Sink, State};

/// The state a record's action stands for.
fn recorded_state(action: &str) -> State {
    if action == "discarded" {
        State::Discarded
    } else {
        State::Replayed
    }
}

/// The entry of one row of the delivery table, DEAD unless `record` says
/// otherwise.
pub fn table_entry(row: DeadRow, table: &TableName, record: Option<&Replay>) -> Entry {
    let (state, state_at) = match record {
        Some(r) if row.status != "DEAD" => (recorded_state(&r.action), Some(r.at.clone())),
        _ => (State::Dead, None),
    };
    Entry {
        location: format!("{}#{}", table.shown(), row.id),
        id: row.event_id,
        sink: Sink::Table,
        route: row.route,
        reason: row.last_error,
        reason_code: None,
        attempts: Some(row.attempts),
        max_attempts: Some(row.max_attempts),
        last_status: row.last_status,
        age_seconds: Some(row.age_seconds),
        state,
        state_at,
        copies: 1,
        retryable: true,
        not_retryable: None,
        source: None,
        unattributed: false,
        records: Vec::new(),
        open: vec![(table.shown(), table::ROW_PARTITION, row.id)],
    }
}

/// The entry of a row the replay record names that is gone (discarded).
fn gone_entry(row_id: i64, record: &Replay, table: &TableName) -> Entry {
    Entry {
        location: format!("{}#{row_id}", table.shown()),
        id: record.event_id.clone(),
        sink: Sink::Table,
        route: String::new(),
        reason: String::new(),
        reason_code: None,
        attempts: None,
        max_attempts: None,
        last_status: None,
        age_seconds: None,
        state: recorded_state(&record.action),
        state_at: Some(record.at.clone()),
        copies: 1,
        retryable: false,
        not_retryable: Some("the row is no longer in the delivery table".to_owned()),
        source: None,
        unattributed: false,
        records: Vec::new(),
        open: Vec::new(),
    }
}

/// Every entry of the delivery table: `rows` (its DEAD rows and those the
/// record names), and the recorded rows that are gone.
pub fn table_entries(
    rows: Vec<DeadRow>,
    records: &HashMap<i64, Replay>,
    table: &TableName,
) -> Vec<Entry> {
    let present: std::collections::HashSet<i64> = rows.iter().map(|r| r.id).collect();
    let mut entries: Vec<Entry> = rows
        .into_iter()
        .map(|row| {
            let record = records.get(&row.id);
            table_entry(row, table, record)
        })
        .collect();
    let mut gone: Vec<(&i64, &Replay)> = records
        .iter()
        .filter(|(id, _)| !present.contains(id))
        .collect();
    gone.sort_by_key(|(id, _)| **id);
    entries.extend(gone.into_iter().map(|(id, r)| gone_entry(*id, r, table)));
    entries
}
