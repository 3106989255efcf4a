//! `outbox-relay dead list | retry | discard`: the dead letters of both
//! sinks, for a person to look at, send again or drop.
//!
//! Two kinds of dead letter, one list:
//! * Kafka: the records of the dead-letter topic (`kafka.dlq_topic`), read
//!   from the beginning to the end offsets at start ([`kafka`]). `retry`
//!   rebuilds the event from a dead letter and republishes it to its
//!   original topic with its key, headers and event id, then records it as
//!   replayed in the replay table ([`table::REPLAY_TABLE`]) so that a
//!   second `retry` skips it; `discard` records it as discarded so `list`
//!   hides it. The topic itself is never changed.
//! * HTTP routes: the delivery table's DEAD rows ([`table`]). `retry` makes
//!   them PENDING, due now, with no attempts (the relay's retry worker picks
//!   them up); `discard` deletes them.
//!
//! Role: [`gather`] reads both into an [`Inventory`]; [`Inventory::select`]
//! decides which entries the ids or `--all` mean (pure); [`retry`] and
//! [`discard`] act and say what they did per id in an [`Outcome`].
//!
//! Invariants:
//! * An entry's id is the event id (the delivery table's `event_id`, a
//!   Kafka dead letter's `id` header); a Kafka dead letter without a
//!   readable one is called by its location `topic/partition/offset`
//!   ([`kafka::dead_letter_id`]). Copies of one event in the dead-letter
//!   topic (a relay that replayed after a restart writes a dead letter
//!   again) are one entry, acted on together.
//! * The republish happens before the record of it, so a crash in between
//!   republishes the event again on the next `retry`: at least once,
//!   consumers de-duplicate on the event id, which is unchanged.
//! * Nothing is reported done that was not: every id asked for ends as
//!   done, skipped (already replayed or discarded) or a problem, and any
//!   problem makes the command exit 1.

pub mod kafka;
pub mod table;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use chrono::Utc;
use serde::Serialize;

use crate::config::Config;
use crate::deadletter::REASON_CODE_HEADER;
use crate::replication::SqlConnection;

use self::kafka::DlqRecord;
use self::table::TableName;

use super::{AdminTarget, human_duration};

/// Which sink a dead letter belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sink {
    /// A record of the Kafka dead-letter topic.
    Kafka,
    /// A DEAD row of the delivery table (HTTP routes).
    Table,
}

impl Sink {
    fn as_str(self) -> &'static str {
        match self {
            Sink::Kafka => "kafka",
            Sink::Table => "table",
        }
    }
}

/// Where a dead letter stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Waiting for a person.
    Dead,
    /// Republished by `dead retry` (Kafka dead letters only).
    Replayed,
    /// Dropped by `dead discard` (Kafka dead letters only; a discarded row
    /// of the delivery table is deleted).
    Discarded,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Dead => "dead",
            State::Replayed => "replayed",
            State::Discarded => "discarded",
        }
    }
}

/// One dead letter, as `dead list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub id: String,
    pub sink: Sink,
    /// The route (HTTP) or the event's own topic (Kafka); empty when not
    /// known.
    pub route: String,
    pub reason: String,
    pub reason_code: Option<String>,
    /// Delivery attempts (HTTP routes only: Kafka dead letters do not count
    /// them).
    pub attempts: Option<i64>,
    pub max_attempts: Option<i64>,
    /// The endpoint's last HTTP status, if it answered.
    pub last_status: Option<i64>,
    /// Seconds since the row was created / the dead letter was written.
    pub age_seconds: Option<f64>,
    pub state: State,
    /// When it was replayed or discarded.
    pub state_at: Option<String>,
    /// `topic/partition/offset` of the newest copy, or `schema.table#id`.
    pub location: String,
    /// Copies of this event in the dead-letter topic (1 for a table row).
    pub copies: usize,
    pub retryable: bool,
    /// Why `dead retry` cannot send it, when it cannot.
    pub not_retryable: Option<String>,
    #[serde(skip)]
    records: Vec<DlqRecord>,
    /// The records not replayed or discarded yet.
    #[serde(skip)]
    open: Vec<(String, i32, i64)>,
}

/// Both sinks' dead letters, and what could not be read.
#[derive(Debug, Default)]
pub struct Inventory {
    pub entries: Vec<Entry>,
    /// Failures: a source that could not be read. Exit 1.
    pub problems: Vec<String>,
    /// Facts worth a line that are not failures (no delivery table).
    pub notes: Vec<String>,
    /// The delivery table, when it exists.
    delivery: Option<TableName>,
    /// Its name whether or not it exists.
    delivery_name: Option<TableName>,
}

/// What `dead` needs besides the config.
#[derive(Debug, Clone)]
pub struct DeadOptions {
    /// How long reading a dead-letter topic may take.
    pub timeout: Duration,
    /// The configured delivery table (`schema.name` or `name`), if any.
    pub delivery_table: Option<String>,
}

/// Builds the entries of one dead-letter topic: one per id, newest copy
/// first in its fields, in topic order of first appearance.
pub fn kafka_entries(
    records: Vec<DlqRecord>,
    replays: &HashMap<(i32, i64), (String, String)>,
    topic_template: &str,
    source: &str,
) -> Vec<Entry> {
    let mut order: Vec<String> = Vec::new();
    let mut by_id: HashMap<String, Vec<DlqRecord>> = HashMap::new();
    for record in records {
        let id = kafka::dead_letter_id(&record);
        if !by_id.contains_key(&id) {
            order.push(id.clone());
        }
        by_id.entry(id).or_default().push(record);
    }
    let now = Utc::now();
    order
        .into_iter()
        .map(|id| {
            let mut records = by_id.remove(&id).unwrap_or_default();
            records.sort_by_key(|r| (r.timestamp, r.partition, r.offset));
            let newest = records.last().cloned().expect("one record per id at least");
            let open: Vec<(String, i32, i64)> = records
                .iter()
                .filter(|r| !replays.contains_key(&(r.partition, r.offset)))
                .map(|r| (r.topic.clone(), r.partition, r.offset))
                .collect();
            let recorded = records
                .iter()
                .rev()
                .find_map(|r| replays.get(&(r.partition, r.offset)));
            let (state, state_at) = match (open.is_empty(), recorded) {
                (true, Some((action, at))) if action == "discarded" => {
                    (State::Discarded, Some(at.clone()))
                }
                (true, Some((_, at))) => (State::Replayed, Some(at.clone())),
                _ => (State::Dead, None),
            };
            let not_retryable = kafka::not_retryable(&newest, topic_template, source);
            Entry {
                id,
                sink: Sink::Kafka,
                route: kafka::original_topic(&newest, topic_template).unwrap_or_default(),
                reason: newest.header_text("dlq_reason").unwrap_or("").to_owned(),
                reason_code: newest.header_text(REASON_CODE_HEADER).map(str::to_owned),
                attempts: None,
                max_attempts: None,
                last_status: None,
                age_seconds: newest
                    .timestamp
                    .map(|t| (now - t).num_milliseconds().max(0) as f64 / 1000.0),
                state,
                state_at,
                location: newest.location(),
                copies: records.len(),
                retryable: not_retryable.is_none(),
                not_retryable,
                records,
                open,
            }
        })
        .collect()
}

/// The entry of one DEAD row of the delivery table.
pub fn table_entry(row: table::DeadRow, table: &TableName) -> Entry {
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
        state: State::Dead,
        state_at: None,
        copies: 1,
        retryable: true,
        not_retryable: None,
        records: Vec::new(),
        open: Vec::new(),
    }
}

/// What the ids (or `--all`) of a `retry` or `discard` select.
#[derive(Debug, Default)]
pub struct Selection<'a> {
    pub entries: Vec<&'a Entry>,
    /// Ids no dead letter has: a problem each.
    pub unknown: Vec<String>,
}

impl Inventory {
    /// The entries `list` shows: those still dead (all with `all`), on
    /// `route` when given.
    pub fn listed(&self, all: bool, route: Option<&str>) -> Vec<&Entry> {
        self.entries
            .iter()
            .filter(|e| all || e.state == State::Dead)
            .filter(|e| route.is_none_or(|r| e.route == r))
            .collect()
    }

    /// The entries `ids` name (an id, or a Kafka copy's location), or with
    /// no ids every entry still dead on `route`. An id can name one entry
    /// in each sink: both are selected.
    pub fn select(&self, ids: &[String], route: Option<&str>) -> Selection<'_> {
        if ids.is_empty() {
            return Selection {
                entries: self.listed(false, route),
                unknown: Vec::new(),
            };
        }
        let mut selection = Selection::default();
        for id in ids {
            let at = kafka::parse_location(id);
            let matches: Vec<&Entry> = self
                .entries
                .iter()
                .filter(|e| {
                    e.id == *id
                        || at.as_ref().is_some_and(|(t, p, o)| {
                            e.records
                                .iter()
                                .any(|r| r.topic == *t && r.partition == *p && r.offset == *o)
                        })
                })
                .collect();
            if matches.is_empty() {
                selection.unknown.push(id.clone());
            }
            for entry in matches {
                if !selection.entries.iter().any(|e| std::ptr::eq(*e, entry)) {
                    selection.entries.push(entry);
                }
            }
        }
        selection
    }

    /// Why an id is unknown, with where it was looked for.
    fn unknown_problem(&self, id: &str, dlq_topic: &str) -> String {
        let table = match (&self.delivery, &self.delivery_name) {
            (Some(t), _) => format!("nor a DEAD row of {}", t.shown()),
            (None, Some(t)) => format!(
                "and the delivery table {} does not exist (run `outbox-relay init` if HTTP \
                 routes are in use)",
                t.shown()
            ),
            (None, None) => "and the delivery table could not be read".to_owned(),
        };
        format!(
            "no dead letter has id {}: it is not an event id or location in the dead-letter \
             topic {dlq_topic:?}, {table}; `outbox-relay dead list --all` shows the ids",
            shown_id(id)
        )
    }
}

/// An id as it appears in messages: quoted, control characters escaped.
fn shown_id(id: &str) -> String {
    format!("{id:?}")
}

/// Reads every dead letter: the delivery table's DEAD rows and the
/// dead-letter topic, with the replay record. What cannot be read is a
/// problem in the inventory, not an error: the rest is still shown.
pub async fn gather(
    target: &AdminTarget,
    config: &Config,
    options: &DeadOptions,
) -> (Inventory, Option<SqlConnection>) {
    let mut inventory = Inventory::default();
    let (schema, _) = config.postgres.table_parts();
    let delivery = table::delivery_table(&schema, options.delivery_table.as_deref());
    let replay = table::replay_table(&schema);
    inventory.delivery_name = Some(delivery.clone());
    let mut replays: HashMap<(i32, i64), (String, String)> = HashMap::new();
    let mut connection = match target.connect().await {
        Ok(c) => Some(c),
        Err(e) => {
            inventory.problems.push(format!(
                "cannot connect to PostgreSQL, so neither the delivery table nor the replay \
                 record can be read: {e}"
            ));
            None
        }
    };
    if let Some(conn) = connection.as_mut() {
        match table::exists(conn, &delivery).await {
            Ok(true) => match table::dead_rows(conn, &delivery).await {
                Ok(rows) => {
                    inventory.delivery = Some(delivery.clone());
                    inventory
                        .entries
                        .extend(rows.into_iter().map(|r| table_entry(r, &delivery)));
                }
                Err(e) => inventory.problems.push(format!(
                    "cannot read the delivery table {}: {e}",
                    delivery.shown()
                )),
            },
            Ok(false) => inventory.notes.push(format!(
                "the delivery table {} does not exist, so there are no HTTP dead letters \
                 (`outbox-relay init` creates it when HTTP routes are in use)",
                delivery.shown()
            )),
            Err(e) => inventory.problems.push(format!(
                "cannot look the delivery table {} up: {e}",
                delivery.shown()
            )),
        }
        match table::exists(conn, &replay).await {
            Ok(true) => match table::replays(conn, &replay, &config.kafka.dlq_topic).await {
                Ok(rows) => {
                    for r in rows {
                        replays.insert((r.partition, r.offset), (r.action, r.at));
                    }
                }
                Err(e) => inventory.problems.push(format!(
                    "cannot read the replay record {}: {e}",
                    replay.shown()
                )),
            },
            // Nothing was ever replayed or discarded.
            Ok(false) => {}
            Err(e) => inventory.problems.push(format!(
                "cannot look the replay record {} up: {e}",
                replay.shown()
            )),
        }
    }
    match kafka::read_topic(&config.kafka, &config.kafka.dlq_topic, options.timeout).await {
        Ok(records) => inventory.entries.extend(kafka_entries(
            records,
            &replays,
            &config.kafka.topic,
            &config.cloudevents.source,
        )),
        Err(e) => inventory.problems.push(e.to_string()),
    }
    (inventory, connection)
}

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

/// The `--json` document of `dead list`.
#[derive(Debug, Serialize)]
pub struct ListDocument<'a> {
    pub dead_letters: Vec<&'a Entry>,
    pub problems: &'a [String],
    pub notes: &'a [String],
}

/// `dead list --json`: one document (shape in docs/dead-letters.md).
pub fn render_json(entries: Vec<&Entry>, inventory: &Inventory) -> String {
    let document = ListDocument {
        dead_letters: entries,
        problems: &inventory.problems,
        notes: &inventory.notes,
    };
    serde_json::to_string_pretty(&document).unwrap_or_else(|e| format!("{{\"error\":{e:?}}}"))
}

/// Longest reason in the text table; `--json` has it whole.
const REASON_WIDTH: usize = 60;

/// A cell of the text table: control characters escaped (ids, routes and
/// reasons come from rows and endpoints), cut to `max` characters.
fn cell(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if out.chars().count() > max {
        out = out.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
    }
    out
}

/// `dead list`: one table of every entry given, a count, and a line for
/// each dead letter `retry` would refuse, saying why.
pub fn render_text(entries: &[&Entry], with_state: bool) -> String {
    let mut header = vec!["ID", "SINK", "ROUTE/TOPIC", "REASON", "ATTEMPTS", "AGE"];
    if with_state {
        header.push("STATE");
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for e in entries {
        let reason = match (&e.reason_code, e.reason.is_empty()) {
            (Some(code), false) => format!("{code}: {}", e.reason),
            (Some(code), true) => code.clone(),
            (None, _) => e.reason.clone(),
        };
        let attempts = match (e.attempts, e.max_attempts) {
            (Some(a), Some(m)) => format!("{a}/{m}"),
            (Some(a), None) => a.to_string(),
            _ => "-".to_owned(),
        };
        let mut row = vec![
            cell(&e.id, usize::MAX),
            e.sink.as_str().to_owned(),
            cell(if e.route.is_empty() { "?" } else { &e.route }, usize::MAX),
            cell(&reason, REASON_WIDTH),
            attempts,
            e.age_seconds.map_or("-".to_owned(), human_duration),
        ];
        if with_state {
            row.push(e.state.as_str().to_owned());
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, value) in row.iter().enumerate() {
            if i + 1 == columns {
                line.push_str(value);
            } else {
                let pad = widths[i] - value.chars().count();
                let _ = write!(line, "{value}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let counts = entries.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.sink.as_str()).or_insert(0) += 1;
        m
    });
    let _ = writeln!(
        out,
        "{} dead letter{} ({})",
        entries.len(),
        if entries.len() == 1 { "" } else { "s" },
        if counts.is_empty() {
            "none".to_owned()
        } else {
            counts
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    for e in entries {
        if let (State::Dead, Some(why)) = (e.state, &e.not_retryable) {
            let _ = writeln!(
                out,
                "cannot retry {}: {}",
                shown_id(&e.id),
                cell(why, usize::MAX)
            );
        }
    }
    out
}

#[cfg(test)]
#[path = "dead/tests.rs"]
mod tests;
