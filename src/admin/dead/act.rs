//! `dead retry` and `dead discard`: acting on what [`super::Inventory::select`]
//! chose, and saying per id what was done.
//!
//! Invariants (see also the parent module):
//! * DEAD rows change in one statement that touches only rows still DEAD
//!   and returns those it changed, in one transaction with their record:
//!   an id it did not return is reported (skipped when the replay record
//!   says another command acted on it, else a problem), never counted as
//!   done, and a row changed is a row recorded.
//! * A Kafka dead letter is claimed before it is sent: in a transaction
//!   that stays open while the broker takes the event, `retry` takes the
//!   advisory locks of its copies (in one order), reads their records
//!   again, sends what nobody recorded meanwhile, records what the broker
//!   took, and commits. Another command locking the same copy waits, then
//!   reads that record and skips it; if this one died instead, PostgreSQL
//!   ended its session's transaction and locks, and finds no record. So
//!   two commands never both send an event, and a command killed at any
//!   point leaves every event it did not record for the next `retry` (at
//!   least once). `discard` claims the same way, so it never hides what a
//!   `retry` is sending.
//! * Nothing is changed while the replay record is missing or unreadable
//!   (`outbox-relay init` creates it; the commands never do): a retry that
//!   cannot be remembered would be repeated by the next one, and one that
//!   cannot be read may already have been done. A record refused after the
//!   broker took the event (no INSERT), or a commit lost then, is reported
//!   as such: the next retry sends it again.
//! * A dead letter retry cannot send is refused for its own reason, before
//!   anything else is looked at.
//! * Entries already replayed or discarded (either sink) are skipped and
//!   reported as such, never a failure.

use std::collections::HashMap;

use super::table::{self, Place, TableName};
use super::{Entry, Inventory, Sink, State, kafka, shown_id};
use crate::config::Config;
use crate::pg::{PgClient, PgError};

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
    connection: Option<&PgClient>,
    ids: &[String],
    route: Option<&str>,
) -> Outcome {
    act(config, inventory, connection, ids, route, Action::Retry).await
}

/// Drops the selected dead letters (see the module header).
pub async fn discard(
    config: &Config,
    inventory: &Inventory,
    connection: Option<&PgClient>,
    ids: &[String],
) -> Outcome {
    act(config, inventory, connection, ids, None, Action::Discard).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Retry,
    Discard,
}

pub(super) async fn act(
    config: &Config,
    inventory: &Inventory,
    connection: Option<&PgClient>,
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
    conn: &PgClient,
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
            table::retry_sql(delivery),
            "PENDING again, due now, attempts 0",
        ),
        Action::Discard => (table::discard_sql(delivery), "deleted"),
    };
    // The change and its record in one transaction: a row changed is a
    // row recorded, and a second command changing the same row waits for
    // this one's end on the row's lock, then finds it no longer DEAD.
    let changed = match in_transaction(conn, async |conn: &PgClient| {
        let changed = table::change_dead_rows(conn, &sql, &ids).await?;
        let done: Vec<&Entry> = rows
            .iter()
            .copied()
            .filter(|r| changed.contains(&r.id))
            .collect();
        record(conn, replay, &done, action).await?;
        Ok(changed)
    })
    .await
    {
        Ok(changed) => changed,
        Err(e) => {
            for row in rows {
                outcome.problems.push(format!(
                    "{}: not {}, {} unchanged: {e}",
                    shown_id(&row.id),
                    action_past(action),
                    delivery.shown()
                ));
            }
            return;
        }
    };
    let mut unchanged: Vec<&Entry> = Vec::new();
    for row in rows {
        if changed.contains(&row.id) {
            outcome.done.push(format!(
                "{} {}: {} row of route {} {what}",
                action_past(action),
                shown_id(&row.id),
                row.location,
                shown_id(&row.route)
            ));
        } else {
            unchanged.push(row);
        }
    }
    if unchanged.is_empty() {
        return;
    }
    // Not DEAD any more since `gather` read it: another `dead` command
    // (recorded), or a hand.
    let places: Vec<Place> = unchanged.iter().flat_map(|r| r.open.clone()).collect();
    let records = table::recorded(conn, replay, &places)
        .await
        .unwrap_or_default();
    for row in unchanged {
        let record = records.iter().find(|r| {
            row.open
                .contains(&(r.dlq_topic.clone(), r.partition, r.offset))
        });
        match record {
            Some(r) => outcome.done.push(format!(
                "skipped {}: no longer DEAD, {} at {} (by another `dead` command)",
                shown_id(&row.id),
                r.action,
                r.at
            )),
            None => outcome.problems.push(format!(
                "{}: the row of {} is no longer DEAD (changed meanwhile); run `dead \
                 list` again",
                shown_id(&row.id),
                delivery.shown()
            )),
        }
    }
}

/// Runs `body` in a transaction: committed when it succeeds, rolled back
/// when it fails (its error returned).
async fn in_transaction<T>(
    conn: &PgClient,
    body: impl AsyncFnOnce(&PgClient) -> Result<T, PgError>,
) -> Result<T, PgError> {
    begin(conn).await?;
    match body(conn).await {
        Ok(value) => {
            commit(conn).await?;
            Ok(value)
        }
        Err(e) => {
            rollback(conn).await;
            Err(e)
        }
    }
}

/// Ends the transaction, undoing it. A failure here is the connection's
/// end, which undoes it too.
async fn rollback(conn: &PgClient) {
    let _ = conn.batch_execute("ROLLBACK").await;
}

/// Starts a transaction.
async fn begin(conn: &PgClient) -> Result<(), PgError> {
    conn.batch_execute("BEGIN")
        .await
        .map_err(|e| PgError::client(conn.target(), "starting a transaction", e))
}

/// Commits the transaction.
async fn commit(conn: &PgClient) -> Result<(), PgError> {
    conn.batch_execute("COMMIT")
        .await
        .map_err(|e| PgError::client(conn.target(), "committing", e))
}

/// Records `entries` in the replay record: their open copies (a Kafka
/// dead letter keeps its first record), or their row (its latest action).
async fn record(
    conn: &PgClient,
    replay: &TableName,
    entries: &[&Entry],
    action: Action,
) -> Result<(), PgError> {
    let rows = letters_of(entries);
    if rows.is_empty() {
        return Ok(());
    }
    table::record(conn, replay, record_action(action), &rows).await
}

/// The replay record's name of `action`.
fn record_action(action: Action) -> &'static str {
    match action {
        Action::Retry => "replayed",
        Action::Discard => "discarded",
    }
}

/// The open copies (or row) of `entries`, as the replay record keys them,
/// with their event id.
fn letters_of(entries: &[&Entry]) -> Vec<(String, i32, i64, String)> {
    entries
        .iter()
        .flat_map(|e| {
            e.open
                .iter()
                .map(|(t, p, o)| (t.clone(), *p, *o, e.id.clone()))
        })
        .collect()
}

/// What a claim found: the entries this command may act on, and a line
/// for each entry another command acted on meanwhile.
struct Claim<'e> {
    mine: Vec<&'e Entry>,
    elsewhere: Vec<String>,
}

/// Claims `entries` inside the caller's transaction: takes their copies'
/// locks ([`table::lock`]; waiting while another command holds one),
/// then reads their records as they stand now. An entry none of whose
/// open copies was recorded meanwhile is this command's until the
/// transaction ends; one that was (by a command that held the locks
/// before) is skipped, saying so.
async fn claim<'e>(
    conn: &PgClient,
    replay: &TableName,
    entries: &[&'e Entry],
) -> Result<Claim<'e>, PgError> {
    let places: Vec<Place> = entries.iter().flat_map(|e| e.open.clone()).collect();
    table::lock(conn, &places).await?;
    let records: HashMap<Place, table::Replay> = table::recorded(conn, replay, &places)
        .await?
        .into_iter()
        .map(|r| ((r.dlq_topic.clone(), r.partition, r.offset), r))
        .collect();
    let mut claim = Claim {
        mine: Vec::new(),
        elsewhere: Vec::new(),
    };
    for entry in entries {
        match entry.open.iter().find_map(|p| records.get(p)) {
            None => claim.mine.push(*entry),
            Some(r) => claim.elsewhere.push(format!(
                "skipped {}: {} by another `dead` command meanwhile (at {})",
                shown_id(&entry.id),
                r.action,
                r.at
            )),
        }
    }
    Ok(claim)
}

async fn act_on_letters(
    config: &Config,
    inventory: &Inventory,
    conn: &PgClient,
    replay: &TableName,
    letters: &[&Entry],
    action: Action,
    outcome: &mut Outcome,
) {
    match action {
        Action::Discard => discard_letters(conn, replay, letters, outcome).await,
        Action::Retry => retry_letters(config, inventory, conn, replay, letters, outcome).await,
    }
}

/// Records the letters as discarded, those claimed (see [`claim`]).
async fn discard_letters(
    conn: &PgClient,
    replay: &TableName,
    letters: &[&Entry],
    outcome: &mut Outcome,
) {
    let claimed = in_transaction(conn, async |conn: &PgClient| {
        let claim = claim(conn, replay, letters).await?;
        record(conn, replay, &claim.mine, Action::Discard).await?;
        Ok(claim)
    })
    .await;
    match claimed {
        Ok(claim) => {
            for entry in claim.mine {
                outcome.done.push(format!(
                    "discarded {}: {} ({} cop{}) recorded in {}",
                    shown_id(&entry.id),
                    entry.location,
                    entry.open.len(),
                    if entry.open.len() == 1 { "y" } else { "ies" },
                    replay.shown()
                ));
            }
            outcome.done.extend(claim.elsewhere);
        }
        Err(e) => {
            for entry in letters {
                outcome.problems.push(format!(
                    "{}: not discarded: it could not be recorded in {}: {e}",
                    shown_id(&entry.id),
                    replay.shown()
                ));
            }
        }
    }
}

/// Republishes the letters: claimed in a transaction held open while the
/// broker takes them, those it took recorded, then committed (see the
/// parent module).
async fn retry_letters(
    config: &Config,
    inventory: &Inventory,
    conn: &PgClient,
    replay: &TableName,
    letters: &[&Entry],
    outcome: &mut Outcome,
) {
    // Checked against the contracts `gather` fetched (today's: fixing the
    // schema is how a contract violation is retried).
    let rebuild = kafka::Rebuild::new(config, &inventory.contracts);
    let mut ready: Vec<&Entry> = Vec::new();
    let mut records: HashMap<String, kafka::Republished> = HashMap::new();
    for entry in letters {
        let newest = entry.records.last().expect("a Kafka entry has a record");
        match kafka::republished(newest, rebuild) {
            Ok(record) => {
                ready.push(*entry);
                records.insert(entry.id.clone(), record);
            }
            Err(why) => outcome
                .problems
                .push(format!("{} cannot be retried: {why}", shown_id(&entry.id))),
        }
    }
    if ready.is_empty() {
        return;
    }
    let not_sent = |outcome: &mut Outcome, entries: &[&Entry], why: &str| {
        for entry in entries {
            outcome
                .problems
                .push(format!("{}: not republished: {why}", shown_id(&entry.id)));
        }
    };
    if let Err(e) = begin(conn).await {
        not_sent(outcome, &ready, &e.to_string());
        return;
    }
    let claim = match claim(conn, replay, &ready).await {
        Ok(claim) => claim,
        Err(e) => {
            rollback(conn).await;
            let why = format!("it could not be claimed in {}: {e}", replay.shown());
            not_sent(outcome, &ready, &why);
            return;
        }
    };
    outcome.done.extend(claim.elsewhere);
    if claim.mine.is_empty() {
        rollback(conn).await;
        return;
    }
    let sending: Vec<kafka::Republished> =
        claim.mine.iter().map(|e| records[&e.id].clone()).collect();
    let results = match kafka::publish(&config.kafka, &sending).await {
        Ok(results) => results,
        Err(e) => {
            rollback(conn).await;
            not_sent(outcome, &claim.mine, &e);
            return;
        }
    };
    // What the broker refused stays unrecorded: the next retry takes it.
    let mut sent: Vec<(&Entry, &kafka::Republished)> = Vec::new();
    for ((entry, record), result) in claim.mine.iter().zip(&sending).zip(results) {
        match result {
            Ok(()) => sent.push((entry, record)),
            Err(e) => outcome.problems.push(format!(
                "{}: not republished to topic {}: {e}",
                shown_id(&entry.id),
                record.topic
            )),
        }
    }
    let entries: Vec<&Entry> = sent.iter().map(|(e, _)| *e).collect();
    let ended = async {
        record(conn, replay, &entries, Action::Retry).await?;
        commit(conn).await
    }
    .await;
    if let Err(e) = ended {
        rollback(conn).await;
        for entry in &entries {
            outcome.problems.push(format!(
                "{}: republished but not recorded in {}, so `dead list` may show it as dead \
                 again and a `dead retry` would send it again: {e}",
                shown_id(&entry.id),
                replay.shown()
            ));
        }
        return;
    }
    for (entry, record) in sent {
        outcome.done.push(format!(
            "republished {}: {} to topic {}",
            shown_id(&entry.id),
            entry.location,
            record.topic
        ));
    }
}
