//! `dead retry` and `dead discard`: acting on what [`super::Inventory::select`]
//! chose, and saying per id what was done.
//!
//! Invariants (see also the parent module):
//! * DEAD rows change in one statement that touches only rows still DEAD
//!   and returns those it changed; an id it did not return is reported,
//!   never counted as done.
//! * A Kafka dead letter is recorded as replayed only after the broker
//!   acknowledged its event, and only its copies that were not recorded
//!   yet are. A DEAD row is recorded after its statement changed it.
//! * Nothing is changed while the replay record is missing or unreadable
//!   (`outbox-relay init` creates it; the commands never do): a retry that
//!   cannot be remembered would be repeated by the next one, and one that
//!   cannot be read may already have been done. (A record refused after the
//!   change, for want of INSERT, is reported as such: the event was sent,
//!   the next retry sends it again.)
//! * A dead letter retry cannot send is refused for its own reason, before
//!   anything else is looked at.
//! * Entries already replayed or discarded (either sink) are skipped and
//!   reported as such, never a failure.

use super::table::{self, TableName};
use super::{Entry, Inventory, Sink, State, kafka, shown_id};
use crate::config::Config;
use crate::pg::SqlConnection;

/// What `retry` or `discard` did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// One line per dead letter acted on or skipped.
    pub done: Vec<String>,
    /// One line per failure.
    pub problems: Vec<String>,
}

/// Sends the selected dead letters again (see the module header).
pub async fn retry(
    config: &Config,
    inventory: &Inventory,
    connection: Option<&mut SqlConnection>,
    ids: &[String],
    route: Option<&str>,
) -> Outcome {
    act(config, inventory, connection, ids, route, Action::Retry).await
}

/// Drops the selected dead letters (see the module header).
pub async fn discard(
    config: &Config,
    inventory: &Inventory,
    connection: Option<&mut SqlConnection>,
    ids: &[String],
) -> Outcome {
    act(config, inventory, connection, ids, None, Action::Discard).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Retry,
    Discard,
}

async fn act(
    config: &Config,
    inventory: &Inventory,
    connection: Option<&mut SqlConnection>,
    ids: &[String],
    route: Option<&str>,
    action: Action,
) -> Outcome {
    let mut outcome = Outcome::default();
    let selection = inventory.select(ids, route);
    for id in &selection.unknown {
        outcome
            .problems
            .push(inventory.unknown_problem(id, &config.kafka.dlq_topic));
    }
    let mut open: Vec<&Entry> = Vec::new();
    for entry in &selection.entries {
        if entry.state == State::Dead {
            open.push(entry);
        } else {
            outcome.done.push(format!(
                "skipped {}: already {} at {}",
                shown_id(&entry.id),
                entry.state.as_str(),
                entry.state_at.as_deref().unwrap_or("?")
            ));
        }
    }
    // What retry cannot send is refused for that reason, whatever else.
    if action == Action::Retry {
        open.retain(|entry| match &entry.not_retryable {
            Some(why) if entry.sink == Sink::Kafka => {
                outcome
                    .problems
                    .push(format!("{} cannot be retried: {why}", shown_id(&entry.id)));
                false
            }
            _ => true,
        });
    }
    if open.is_empty() {
        return outcome;
    }
    let (Some(conn), Some(replay)) = (connection, inventory.replay.as_ref()) else {
        let why = inventory
            .replay_unusable
            .as_deref()
            .unwrap_or("the replay record cannot be used");
        for entry in &open {
            outcome.problems.push(format!(
                "{}: not {}: {why}",
                shown_id(&entry.id),
                action_past(action)
            ));
        }
        return outcome;
    };
    let (rows, letters): (Vec<&Entry>, Vec<&Entry>) =
        open.into_iter().partition(|e| e.sink == Sink::Table);
    if !rows.is_empty() {
        act_on_rows(inventory, conn, replay, &rows, action, &mut outcome).await;
    }
    if !letters.is_empty() {
        act_on_letters(
            config,
            inventory,
            conn,
            replay,
            &letters,
            action,
            &mut outcome,
        )
        .await;
    }
    outcome
}

fn action_past(action: Action) -> &'static str {
    match action {
        Action::Retry => "retried",
        Action::Discard => "discarded",
    }
}

async fn act_on_rows(
    inventory: &Inventory,
    conn: &mut SqlConnection,
    replay: &TableName,
    rows: &[&Entry],
    action: Action,
    outcome: &mut Outcome,
) {
    let Some(delivery) = inventory.delivery.as_ref() else {
        for row in rows {
            outcome.problems.push(format!(
                "{}: the delivery table cannot be reached",
                shown_id(&row.id)
            ));
        }
        return;
    };
    let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    let (sql, what) = match action {
        Action::Retry => (
            table::retry_sql(delivery, &ids),
            "PENDING again, due now, attempts 0",
        ),
        Action::Discard => (table::discard_sql(delivery, &ids), "deleted"),
    };
    let changed =
        match table::returning(conn, &sql, "changing DEAD rows of the delivery table").await {
            Ok(changed) => changed,
            Err(e) => {
                for row in rows {
                    outcome.problems.push(format!(
                        "{}: {} unchanged: {e}",
                        shown_id(&row.id),
                        delivery.shown()
                    ));
                }
                return;
            }
        };
    let mut done: Vec<&Entry> = Vec::new();
    for row in rows {
        if changed.contains(&row.id) {
            outcome.done.push(format!(
                "{} {}: {} row of route {} {what}",
                action_past(action),
                shown_id(&row.id),
                row.location,
                shown_id(&row.route)
            ));
            done.push(row);
        } else {
            outcome.problems.push(format!(
                "{}: the row of {} is no longer DEAD (changed meanwhile); run `dead \
                 list` again",
                shown_id(&row.id),
                delivery.shown()
            ));
        }
    }
    record(conn, replay, &done, action, outcome).await;
}

/// Records `entries` (their open copies, or their row) in the replay
/// record; a failure is a problem per entry, which was acted on but will
/// not be known to have been.
async fn record(
    conn: &mut SqlConnection,
    replay: &TableName,
    entries: &[&Entry],
    action: Action,
    outcome: &mut Outcome,
) -> bool {
    let name = match action {
        Action::Retry => "replayed",
        Action::Discard => "discarded",
    };
    let rows: Vec<(String, i32, i64, String)> = entries
        .iter()
        .flat_map(|e| {
            e.open
                .iter()
                .map(|(t, p, o)| (t.clone(), *p, *o, e.id.clone()))
        })
        .collect();
    if rows.is_empty() {
        return true;
    }
    match conn
        .query(
            &table::record_sql(replay, name, &rows),
            "recording dead letters",
        )
        .await
    {
        Ok(_) => true,
        Err(e) => {
            for entry in entries {
                outcome.problems.push(format!(
                    "{}: {} but not recorded in {}, so `dead list` may show it as dead again \
                     and a `dead retry` would act on it again: {e}",
                    shown_id(&entry.id),
                    action_past(action),
                    replay.shown()
                ));
            }
            false
        }
    }
}

async fn act_on_letters(
    config: &Config,
    inventory: &Inventory,
    conn: &mut SqlConnection,
    replay: &TableName,
    letters: &[&Entry],
    action: Action,
    outcome: &mut Outcome,
) {
    let mut to_record: Vec<&Entry> = Vec::new();
    match action {
        Action::Discard => to_record.extend(letters),
        Action::Retry => {
            let mut sendable = Vec::new();
            let mut records = Vec::new();
            // Checked against the contracts `gather` fetched (today's: fixing
            // the schema is how a contract violation is retried).
            let rebuild = kafka::Rebuild::new(config, &inventory.contracts);
            for entry in letters {
                let newest = entry.records.last().expect("a Kafka entry has a record");
                match kafka::republished(newest, rebuild) {
                    Ok(record) => {
                        sendable.push(*entry);
                        records.push(record);
                    }
                    Err(why) => outcome
                        .problems
                        .push(format!("{} cannot be retried: {why}", shown_id(&entry.id))),
                }
            }
            if records.is_empty() {
                // Nothing to send.
            } else {
                match kafka::publish(&config.kafka, &records).await {
                    Err(e) => {
                        for entry in &sendable {
                            outcome
                                .problems
                                .push(format!("{}: not republished: {e}", shown_id(&entry.id)));
                        }
                    }
                    Ok(results) => {
                        for ((entry, record), result) in sendable.iter().zip(&records).zip(results)
                        {
                            match result {
                                Ok(()) => {
                                    outcome.done.push(format!(
                                        "republished {}: {} to topic {}",
                                        shown_id(&entry.id),
                                        entry.location,
                                        record.topic
                                    ));
                                    to_record.push(entry);
                                }
                                Err(e) => outcome.problems.push(format!(
                                    "{}: not republished to topic {}: {e}",
                                    shown_id(&entry.id),
                                    record.topic
                                )),
                            }
                        }
                    }
                }
            }
        }
    }
    if record(conn, replay, &to_record, action, outcome).await && action == Action::Discard {
        for entry in &to_record {
            outcome.done.push(format!(
                "discarded {}: {} ({} cop{}) recorded in {}",
                shown_id(&entry.id),
                entry.location,
                entry.open.len(),
                if entry.open.len() == 1 { "y" } else { "ies" },
                replay.shown()
            ));
        }
    }
}
