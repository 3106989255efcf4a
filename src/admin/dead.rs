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
//! Role: [`run`] is the command; [`gather`] reads both sinks into an
//! [`Inventory`]; [`Inventory::select`] decides which entries the ids or
//! `--all` mean (pure); [`retry`] and [`discard`] (in `act`) act and say
//! what they did per id in an [`Outcome`]; `render` shows a list.
//!
//! Invariants:
//! * An entry's id is the event id (the delivery table's `event_id`, a
//!   Kafka dead letter's `id` header); a Kafka dead letter without a
//!   readable one is called by its location `topic/partition/offset`
//!   ([`kafka::dead_letter_id`]). Copies of one event in the dead-letter
//!   topic (a relay that replayed after a restart writes a dead letter
//!   again) are one entry, acted on together.
//! * A Kafka dead letter is sent once by concurrent commands, at least once
//!   across crashes. `retry` claims it before sending: in a PostgreSQL
//!   transaction it takes an advisory lock per copy (transaction-scoped,
//!   in one order), reads the copies' records again, sends those nobody
//!   recorded, records what the broker took and commits; the transaction
//!   stays open while the broker takes the events. A second `retry` (or a
//!   `discard`) locking the same copy waits, then finds the record and
//!   skips it. A `retry` killed before its commit leaves no record and no
//!   lock (PostgreSQL ends a dead session's transaction), so the next one
//!   sends the event: perhaps again, which consumers de-duplicate on the
//!   unchanged event id. Locks rather than claiming by inserting the
//!   record first: what the broker refused is then simply not recorded
//!   (no claim to give back, no DELETE on the record), and PostgreSQL,
//!   which holds the record already, is the only arbiter: no lease to
//!   expire while a slow broker is still taking an event.
//! * A DEAD row cannot be made PENDING twice by two commands: its change
//!   touches only rows still DEAD, under the row's lock, so the second
//!   finds it PENDING and skips it. (Made PENDING again after it died
//!   again is a new retry, wanted.)
//! * `list` and `retry --all` take this relay's dead letters only: a
//!   dead-letter topic may be shared by relays of other outbox tables or
//!   message prefixes, and each letter's `source_table` header says whose
//!   it is ([`own_sources`]). Others' are left out (a note says how many;
//!   an id naming one is refused, naming its source); letters without the
//!   header (not written by a relay) only with `--unattributed`, or by id.
//! * Nothing is reported done that was not: every id asked for ends as
//!   done, skipped (already replayed or discarded) or a problem, and any
//!   problem makes the command exit 1.

mod act;
pub mod exactly_once;
pub mod kafka;
pub mod parked;
mod render;
mod rows;
pub mod table;

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use serde::Serialize;

use crate::config::Config;
use crate::deadletter::{REASON_CODE_HEADER, REASON_HEADER, SOURCE_TABLE_HEADER};
use crate::pg::PgClient;

use self::kafka::DlqRecord;
use self::table::TableName;

use super::AdminTarget;

pub use act::{Outcome, discard, retry};
pub use render::{ListDocument, render_json, render_text};
pub use rows::{table_entries, table_entry};

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
    /// Where a Kafka dead letter came from: its `source_table` header (the
    /// outbox table `schema.name`, or `message:<prefix>`); `None` for a
    /// table row and for a dead letter without the header.
    pub source: Option<String>,
    pub retryable: bool,
    /// Why `dead retry` cannot send it, when it cannot.
    pub not_retryable: Option<String>,
    #[serde(skip)]
    records: Vec<DlqRecord>,
    /// The records not replayed or discarded yet.
    #[serde(skip)]
    open: Vec<(String, i32, i64)>,
    /// A Kafka dead letter none of whose copies says where it came from:
    /// `list` and `retry --all` take it only when asked (`--unattributed`).
    #[serde(skip)]
    unattributed: bool,
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
    /// The replay record, when it exists and could be read.
    replay: Option<TableName>,
    /// Why `retry` and `discard` cannot record anything, when they cannot.
    replay_unusable: Option<String>,
    /// The `[[contracts]]`, registry ones fetched once here: what `list`
    /// judged retryable and what `retry` checks and encodes by.
    contracts: crate::contracts::Contracts,
    /// Whether `list` and `retry --all` take the unattributed dead letters.
    unattributed: bool,
    /// The live heads of the parking table ([`parked`]).
    pub parked: Vec<parked::Parked>,
    /// The parking table, when it exists.
    parked_table: Option<crate::parking::ParkedTable>,
    /// The dead letters of other sources on the dead-letter topic, left
    /// out: (id, location, source), so an id naming one is told apart from
    /// an id nothing has.
    foreign: Vec<(String, String, String)>,
}

/// What `dead` needs besides the config.
#[derive(Debug, Clone)]
pub struct DeadOptions {
    /// How long reading a dead-letter topic may take.
    pub timeout: Duration,
    /// The configured delivery table (`schema.name` or `name`), if any.
    pub delivery_table: Option<String>,
    /// Also the Kafka dead letters that do not say where they came from
    /// (no `source_table` header), in `list` and `retry --all`.
    pub unattributed: bool,
}

/// Where a Kafka dead letter came from, against this relay's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// This relay's outbox table or message prefix.
    Own,
    /// No `source_table` header (written by hand, or by something other
    /// than the relay).
    Unattributed,
    /// Another relay's (another outbox table or message prefix): its
    /// `source_table`.
    Other(String),
}

/// The `source_table` values the relay of `config` writes on its dead
/// letters: the outbox table `schema.name` when it reads the table, and
/// `message:<prefix>` when it reads outbox messages.
pub fn own_sources(config: &Config) -> Vec<String> {
    let postgres = &config.postgres;
    let mut sources = Vec::new();
    if postgres.source.table() {
        let (schema, name) = postgres.table_parts();
        sources.push(format!("{schema}.{name}"));
    }
    if postgres.source.messages() {
        sources.push(format!("message:{}", postgres.message_prefix));
    }
    sources
}

/// Where `record` came from, given this relay's [`own_sources`].
pub fn origin(record: &DlqRecord, own: &[String]) -> Origin {
    match record.header(SOURCE_TABLE_HEADER) {
        None => Origin::Unattributed,
        Some(v) if v.is_empty() => Origin::Unattributed,
        Some(v) => {
            let source = String::from_utf8_lossy(v);
            if own.iter().any(|o| *o == source) {
                Origin::Own
            } else {
                Origin::Other(source.into_owned())
            }
        }
    }
}

/// The config's `[[contracts]]`, those of the schema registry fetched: what
/// a retried event is checked against (and encoded by), as the relay would.
///
/// # Errors
/// Why they cannot be had, as text.
async fn contracts(config: &Config) -> Result<crate::contracts::Contracts, String> {
    let contracts = config
        .contracts()
        .map_err(|e| format!("cannot read [[contracts]]: {e}"))?;
    contracts
        .resolve()
        .await
        .map_err(|e| format!("cannot fetch the schemas of [[contracts]]: {e}"))
}

/// Builds the entries of one dead-letter topic: one per id, newest copy
/// first in its fields, in topic order of first appearance.
pub fn kafka_entries(
    records: Vec<DlqRecord>,
    replays: &HashMap<(i32, i64), (String, String)>,
    rebuild: kafka::Rebuild<'_>,
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
            let not_retryable = kafka::not_retryable(&newest, rebuild);
            let source = records
                .iter()
                .rev()
                .find_map(|r| r.header_text(SOURCE_TABLE_HEADER).filter(|s| !s.is_empty()))
                .map(str::to_owned);
            Entry {
                id,
                sink: Sink::Kafka,
                route: kafka::original_topic(&newest, rebuild.topic_template).unwrap_or_default(),
                reason: newest.header_text(REASON_HEADER).unwrap_or("").to_owned(),
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
                unattributed: source.is_none(),
                source,
                records,
                open,
            }
        })
        .collect()
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
    /// `route` when given, unattributed ones only when asked for.
    pub fn listed(&self, all: bool, route: Option<&str>) -> Vec<&Entry> {
        self.entries
            .iter()
            .filter(|e| self.unattributed || !e.unattributed)
            .filter(|e| all || e.state == State::Dead)
            .filter(|e| route.is_none_or(|r| e.route == r))
            .collect()
    }

    /// The entries `ids` name (an id, or a Kafka copy's location), or with
    /// no ids every entry [`Inventory::listed`] shows still dead on
    /// `route`. An id can name one entry in each sink: both are selected.
    /// An unattributed dead letter named by its id is selected: the
    /// operator chose it.
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
        if let Some((_, _, source)) = self
            .foreign
            .iter()
            .find(|(other, location, _)| other == id || location == id)
        {
            return format!(
                "{} is a dead letter of another source ({}) on the dead-letter topic \
                 {dlq_topic:?}, not of this relay's: run `outbox-relay dead` with the config \
                 of the relay that reads {}",
                shown_id(id),
                shown_id(source),
                shown_id(source)
            );
        }
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
) -> (Inventory, Option<PgClient>) {
    let mut inventory = Inventory {
        unattributed: options.unattributed,
        ..Inventory::default()
    };
    let (schema, _) = config.postgres.table_parts();
    let delivery = table::delivery_table(&schema, options.delivery_table.as_deref());
    inventory.delivery_name = Some(delivery.clone());
    let mut replays: HashMap<(i32, i64), (String, String)> = HashMap::new();
    let connection = match target.client().await {
        Ok(c) => Some(c),
        Err(e) => {
            inventory.problems.push(format!(
                "cannot connect to PostgreSQL, so neither the delivery table nor the replay \
                 record can be read: {e}"
            ));
            inventory.replay_unusable = Some("PostgreSQL cannot be reached".to_owned());
            None
        }
    };
    if let Some(conn) = connection.as_ref() {
        let rows = read_replay_record(conn, config, &delivery, &mut inventory).await;
        // The records of delivery-table rows, by row id.
        let mut row_records = HashMap::new();
        for r in rows {
            if r.partition == table::ROW_PARTITION && r.dlq_topic == delivery.shown() {
                row_records.insert(r.offset, r);
            } else {
                replays.insert((r.partition, r.offset), (r.action, r.at));
            }
        }
        parked::read(conn, config, &mut inventory).await;
        let also: Vec<i64> = row_records.keys().copied().collect();
        match table::exists(conn, &delivery).await {
            Ok(true) => match table::dead_rows(conn, &delivery, &also).await {
                Ok(rows) => {
                    inventory.delivery = Some(delivery.clone());
                    inventory
                        .entries
                        .extend(rows::table_entries(rows, &row_records, &delivery));
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
    }
    let contracts = match contracts(config).await {
        Ok(contracts) => contracts,
        Err(e) => {
            inventory.problems.push(e);
            return (inventory, connection);
        }
    };
    match kafka::read_topic(&config.kafka, &config.kafka.dlq_topic, options.timeout).await {
        Ok(records) => {
            let records = scoped(records, config, &mut inventory);
            inventory.entries.extend(kafka_entries(
                records,
                &replays,
                kafka::Rebuild::new(config, &contracts),
            ));
            let unattributed = inventory.entries.iter().filter(|e| e.unattributed).count();
            if unattributed > 0 && !options.unattributed {
                inventory.notes.push(format!(
                    "{unattributed} dead letter(s) on {:?} do not say where they came from (no \
                     source_table header: not written by a relay) and are left out of `list` \
                     and `retry --all`: `--unattributed` takes them too, an id names one",
                    config.kafka.dlq_topic
                ));
            }
        }
        Err(e) => inventory.problems.push(e.to_string()),
    }
    parked::mark_interrupted(&mut inventory);
    inventory.contracts = contracts;
    (inventory, connection)
}

/// This relay's dead letters of `records` (and those that do not say
/// where they came from); the others are left out, kept in
/// `inventory.foreign` with a note saying how many and whose.
fn scoped(records: Vec<DlqRecord>, config: &Config, inventory: &mut Inventory) -> Vec<DlqRecord> {
    let own = own_sources(config);
    let mut kept = Vec::with_capacity(records.len());
    let mut others: Vec<String> = Vec::new();
    for record in records {
        match origin(&record, &own) {
            Origin::Own | Origin::Unattributed => kept.push(record),
            Origin::Other(source) => {
                if !others.contains(&source) {
                    others.push(source.clone());
                }
                inventory
                    .foreign
                    .push((kafka::dead_letter_id(&record), record.location(), source));
            }
        }
    }
    if !inventory.foreign.is_empty() {
        let shown: Vec<String> = others.iter().map(|s| shown_id(s)).collect();
        inventory.notes.push(format!(
            "{} dead letter(s) on {:?} came from other sources ({}) and are left out: this \
             relay's are those of {}; the other relays' configs act on theirs",
            inventory.foreign.len(),
            config.kafka.dlq_topic,
            shown.join(", "),
            own.iter()
                .map(|s| shown_id(s))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    kept
}

/// The replay record's rows, and whether `retry` and `discard` may use it
/// (`inventory.replay`, else why not in `inventory.replay_unusable`). A
/// missing record is a note (init was not run): there is nothing in it.
async fn read_replay_record(
    conn: &PgClient,
    config: &Config,
    delivery: &TableName,
    inventory: &mut Inventory,
) -> Vec<table::Replay> {
    let (schema, _) = config.postgres.table_parts();
    let replay = table::replay_table(&schema);
    let grant = format!(
        "`outbox-relay init --admin-url <owner's URL> --grant <relay role>`, or as its owner: \
         GRANT {} ON {} TO <relay role>",
        table::REPLAY_PRIVILEGES.join(", "),
        replay.sql()
    );
    match table::exists(conn, &replay).await {
        Ok(true) => match table::replays(conn, &replay, &config.kafka.dlq_topic, delivery).await {
            Ok(rows) => {
                inventory.replay = Some(replay);
                return rows;
            }
            Err(e) => {
                inventory.problems.push(format!(
                    "cannot read the replay record {}, so what was retried or discarded \
                     cannot be told apart from what was not: {e}; fix: {grant}",
                    replay.shown()
                ));
                inventory.replay_unusable = Some(format!(
                    "the replay record {} cannot be read ({e}); fix: {grant}",
                    replay.shown()
                ));
            }
        },
        Ok(false) => {
            let why = format!(
                "the replay record {} does not exist: run `outbox-relay init` (as a role that \
                 may create tables in schema {schema}, with --admin-url and --grant), which \
                 creates it",
                replay.shown()
            );
            inventory.notes.push(why.clone());
            inventory.replay_unusable = Some(why);
        }
        Err(e) => {
            inventory.problems.push(format!(
                "cannot look the replay record {} up: {e}",
                replay.shown()
            ));
            inventory.replay_unusable = Some(format!("it could not be looked up: {e}"));
        }
    }
    Vec::new()
}

/// What a person asked `dead` to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `dead list`: with `all`, also what was replayed or discarded.
    List {
        all: bool,
        route: Option<String>,
        json: bool,
    },
    /// `dead retry`: these ids, or with none every dead letter (on `route`).
    Retry {
        ids: Vec<String>,
        route: Option<String>,
    },
    /// `dead discard`: these ids.
    Discard { ids: Vec<String> },
}

impl Request {
    /// The subcommand's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Request::List { .. } => "list",
            Request::Retry { .. } => "retry",
            Request::Discard { .. } => "discard",
        }
    }
}

/// Runs one `dead` command: what it shows or did on `out`, each failure on
/// `err` (`outbox-relay dead <name>: ...`). True when nothing failed.
pub async fn run(
    target: &AdminTarget,
    config: &Config,
    options: &DeadOptions,
    request: Request,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> bool {
    let hooks = parked::Hooks::default();
    run_with(target, config, options, request, &hooks, out, err).await
}

/// [`run`], releasing parked queues as `hooks` say (tests stop or pause a
/// release with them).
pub async fn run_with(
    target: &AdminTarget,
    config: &Config,
    options: &DeadOptions,
    request: Request,
    hooks: &parked::Hooks,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> bool {
    let name = request.name();
    let (inventory, connection) = gather(target, config, options).await;
    for problem in &inventory.problems {
        let _ = writeln!(err, "outbox-relay dead {name}: {problem}");
    }
    let mut passed = inventory.problems.is_empty();
    let outcome = match request {
        Request::List { all, route, json } => {
            let entries = inventory.listed(all, route.as_deref());
            let heads = parked::listed(&inventory, route.as_deref());
            if json {
                let _ = writeln!(out, "{}", render_json(entries, heads, &inventory));
            } else {
                for note in &inventory.notes {
                    let _ = writeln!(err, "outbox-relay dead {name}: note: {note}");
                }
                let _ = write!(out, "{}", render_text(&entries, all));
                let _ = write!(out, "{}", render::parked_text(&heads));
            }
            None
        }
        Request::Retry { ids, route } => Some(
            parked::act(
                config,
                &inventory,
                connection.as_ref(),
                &ids,
                route.as_deref(),
                act::Action::Retry,
                hooks,
            )
            .await,
        ),
        Request::Discard { ids } => Some(
            parked::act(
                config,
                &inventory,
                connection.as_ref(),
                &ids,
                None,
                act::Action::Discard,
                hooks,
            )
            .await,
        ),
    };
    if let Some(outcome) = outcome {
        for line in &outcome.done {
            let _ = writeln!(out, "{line}");
        }
        for problem in &outcome.problems {
            let _ = writeln!(err, "outbox-relay dead {name}: {problem}");
        }
        let _ = writeln!(
            out,
            "{} done, {} failed",
            outcome.done.len(),
            outcome.problems.len()
        );
        passed &= outcome.problems.is_empty();
    }
    // The session ends as the client is dropped.
    drop(connection);
    passed
}

#[cfg(test)]
mod tests;
