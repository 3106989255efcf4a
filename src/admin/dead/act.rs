//! `dead retry` and `dead discard`: acting on what [`super::Inventory::select`]
//! chose, and saying per id what was done.
//!
//! Invariants (see also the parent module):
//! * DEAD rows change in one statement that touches only rows still DEAD
//!   and returns those it changed; an id it did not return is reported,
//!   never counted as done.
//! * A Kafka dead letter is recorded as replayed only after the broker
//!   acknowledged its event, and only its copies that were not recorded
//!   yet are.
//! * Nothing is republished while the replay record is missing and cannot
//!   be created: a retry that cannot be remembered would be repeated by
//!   the next one. (A record refused after the republish, for want of
//!   INSERT, is reported as such: the event was sent, the next retry sends
//!   it again.)

use super::table::{self, TableName};
use super::{Entry, Inventory, Sink, State, kafka, shown_id};
use crate::config::Config;
use crate::replication::SqlConnection;

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
    mut connection: Option<&mut SqlConnection>,
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
    let (rows, letters): (Vec<&Entry>, Vec<&Entry>) = selection
        .entries
        .iter()
        .partition(|e| e.sink == Sink::Table);
    if !rows.is_empty() {
        act_on_rows(
            inventory,
            connection.as_deref_mut(),
            &rows,
            action,
            &mut outcome,
        )
        .await;
    }
    let mut kafka_letters = Vec::new();
    for entry in letters {
        if entry.state != State::Dead {
            outcome.done.push(format!(
                "skipped {}: already {} at {}",
                shown_id(&entry.id),
                entry.state.as_str(),
                entry.state_at.as_deref().unwrap_or("?")
            ));
        } else {
            kafka_letters.push(entry);
        }
    }
    if !kafka_letters.is_empty() {
        let (schema, _) = config.postgres.table_parts();
        let replay = table::replay_table(&schema);
        match connection {
            None => {
                for entry in &kafka_letters {
                    outcome.problems.push(format!(
                        "{}: not {}: PostgreSQL, where that is recorded, cannot be reached",
                        shown_id(&entry.id),
                        action_past(action)
                    ));
                }
            }
            Some(conn) => {
                act_on_letters(config, conn, &replay, &kafka_letters, action, &mut outcome).await;
            }
        }
    }
    outcome
}

fn action_past(action: Action) -> &'static str {
    match action {
        Action::Retry => "republished",
        Action::Discard => "discarded",
    }
}

async fn act_on_rows(
    inventory: &Inventory,
    connection: Option<&mut SqlConnection>,
    rows: &[&Entry],
    action: Action,
    outcome: &mut Outcome,
) {
    let (Some(conn), Some(delivery)) = (connection, inventory.delivery.as_ref()) else {
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
    match table::returning(conn, &sql, "changing DEAD rows of the delivery table").await {
        Ok(changed) => {
            for row in rows {
                if changed.contains(&row.id) {
                    outcome.done.push(format!(
                        "{} {}: {} row of route {} {what}",
                        match action {
                            Action::Retry => "retried",
                            Action::Discard => "discarded",
                        },
                        shown_id(&row.id),
                        row.location,
                        shown_id(&row.route)
                    ));
                } else {
                    outcome.problems.push(format!(
                        "{}: the row of {} is no longer DEAD (changed meanwhile); run `dead \
                         list` again",
                        shown_id(&row.id),
                        delivery.shown()
                    ));
                }
            }
        }
        Err(e) => {
            for row in rows {
                outcome.problems.push(format!(
                    "{}: {} unchanged: {e}",
                    shown_id(&row.id),
                    delivery.shown()
                ));
            }
        }
    }
}

async fn act_on_letters(
    config: &Config,
    conn: &mut SqlConnection,
    replay: &TableName,
    letters: &[&Entry],
    action: Action,
    outcome: &mut Outcome,
) {
    // Created only when missing: CREATE TABLE IF NOT EXISTS needs CREATE on
    // the schema even when the table exists, and a role that may only
    // insert into a table made by its owner must still get through.
    let ready = match table::exists(conn, replay).await {
        Ok(true) => Ok(()),
        Ok(false) => conn
            .query(
                &table::create_replay_sql(replay),
                "creating the replay record",
            )
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = ready {
        for entry in letters {
            outcome.problems.push(format!(
                "{}: not {}: the replay record {} is missing and cannot be created, so it \
                 could not be recorded; run the command once as a role that may create tables \
                 in that schema (--admin-url), or create the table as docs/dead-letters.md \
                 shows and grant SELECT, INSERT on it: {e}",
                shown_id(&entry.id),
                action_past(action),
                replay.shown()
            ));
        }
        return;
    }
    let mut to_record: Vec<&Entry> = Vec::new();
    match action {
        Action::Discard => to_record.extend(letters),
        Action::Retry => {
            let mut sendable = Vec::new();
            let mut records = Vec::new();
            for entry in letters {
                let newest = entry.records.last().expect("a Kafka entry has a record");
                match kafka::republished(newest, &config.kafka.topic, &config.cloudevents.source) {
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
    if to_record.is_empty() {
        return;
    }
    let name = match action {
        Action::Retry => "replayed",
        Action::Discard => "discarded",
    };
    let rows: Vec<(String, i32, i64, String)> = to_record
        .iter()
        .flat_map(|e| {
            e.open
                .iter()
                .map(|(t, p, o)| (t.clone(), *p, *o, e.id.clone()))
        })
        .collect();
    match conn
        .query(
            &table::record_sql(replay, name, &rows),
            "recording dead letters",
        )
        .await
    {
        Ok(_) => {
            if action == Action::Discard {
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
        Err(e) => {
            for entry in &to_record {
                outcome.problems.push(format!(
                    "{}: {} but not recorded in {}, so `dead list` still shows it and a \
                     `dead retry` would send it again: {e}",
                    shown_id(&entry.id),
                    action_past(action),
                    replay.shown()
                ));
            }
        }
    }
}
