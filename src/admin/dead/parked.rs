//! Parked aggregates in `dead list | retry | discard`: the live heads of
//! the parking table (`postgres.parked_table`, `sql/outbox_parked.sql`),
//! and the release of a head's queue after its dead letter was retried or
//! discarded.
//!
//! A head is named by its dead letter's event id, which is also the id of
//! that dead letter in the dead-letter topic. `retry ID` of a live head
//! first republishes the dead letter as any `retry` does (claimed and
//! recorded in the replay record), then releases the queue; `discard ID`
//! records the dead letter as discarded, then releases the queue. `retry
//! --all` releases every live head whose dead letter it retries (an
//! aggregate is parked because of its dead letter: sending the letter and
//! leaving the aggregate parked helps nobody). `discard` takes ids only.
//!
//! The release ([`release_queue`], SQL in `crate::parking::release`), one
//! transaction per batch of [`Hooks::batch`] rows, holding the HEAD row
//! `FOR UPDATE` throughout: the EVENT rows before the first DEAD row are
//! sent in id order (Kafka: the stored topic, key, headers and value, with
//! the admin's idempotent producer, the batch's acknowledgements awaited
//! before the commit; a webhook sink's: a PENDING row of the delivery
//! table, due now, inserted in the same transaction, so the relay's retry
//! worker sends it behind any PENDING or DEAD row of its aggregate), then
//! deleted; the transaction ends by committing the deletions, by marking
//! the head released when the queue is empty, or by making the DEAD row
//! the head (the release stops there: the aggregate stays parked behind
//! it, and `list` shows the new head).
//!
//! Invariants:
//! * Order: a batch is sent only under the head's lock, and only after the
//!   previous batch's rows were deleted and committed; the relay parks
//!   under the same lock, shared. An event the relay parks during a release
//!   is either in the queue before the release reads it (released in
//!   order) or finds the head released and goes out normally, after
//!   everything released.
//! * A release killed mid-way resumes when the command runs again: the
//!   head's dead letter is recorded as replayed (or discarded) and
//!   skipped, the queue goes on from its first row not deleted. The batch
//!   that was in flight may be sent twice (at least once), never out of
//!   order. With `kafka.delivery = "exactly-once"` the queue's Kafka
//!   records go in Kafka transactions that carry the release's progress
//!   ([`exactly_once`]): a read_committed consumer sees each once, however
//!   the release was interrupted. The head's own dead letter is sent as
//!   `dead retry` sends every dead letter (claimed in PostgreSQL, idempotent
//!   producer): a command killed between the broker's acknowledgement and
//!   the replay record's commit sends it again, in either mode.
//! * A head whose dead letter is recorded as handled but which is still
//!   live is shown as an interrupted release, with the command that
//!   finishes it.
//! * Released heads are kept (a replay of their dead letter must not park
//!   the aggregate again) until the slot's confirmed_flush_lsn is past
//!   their commit; each release deletes those of its config's shard that
//!   are (another shard's slot may not have passed them).

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use super::act::{self, Action, Outcome};
use super::exactly_once;
use super::table::{self, TableName};
use super::{Inventory, Sink, State, kafka, shown_id};
use crate::config::{Config, Delivery};
use crate::parking::release::{self, Kind, LiveHead, Queued};
use crate::parking::store::KAFKA_SINK;
use crate::parking::{ParkedTable, Place};
use crate::pg::PgClient;
use crate::sink::http::WebhookEvent;
use crate::sink::http::store::{self as delivery, DeliveryTable, NewRow};

/// What the relay role needs on the parking table (what init grants and
/// check asks for): the relay reads heads and parks, the `dead` commands
/// release, promote and delete.
pub const PRIVILEGES: [&str; 4] = ["SELECT", "INSERT", "UPDATE", "DELETE"];

/// How long a release waits for the relay to confirm what it would send
/// next.
const UNCONFIRMED_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Rows released per transaction, unless told otherwise.
pub const BATCH: usize = 500;

/// A live head, as `list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Parked {
    #[serde(flatten)]
    pub head: LiveHead,
    /// Its dead letter is recorded as retried or discarded but the queue
    /// was not released to the end: the command that finishes it.
    pub release_interrupted: Option<String>,
}

/// How a release goes: its batch size, and for tests a stop and a pause.
#[derive(Debug, Clone)]
pub struct Hooks {
    /// Rows read, sent and deleted per transaction.
    pub batch: usize,
    /// Stop (as if killed) before this many batches were committed.
    pub stop_after: Option<usize>,
    /// Tell `locked` once the head is locked in each batch, then wait for
    /// a permit of `resume`.
    pub pause: Option<Pause>,
    /// The batch of this index (from 0) is sent and its rows deleted, then
    /// rolled back instead of committed: the command dying between the
    /// broker's acknowledgement and PostgreSQL's commit.
    pub lose_commit_of: Option<usize>,
    /// How long to wait for the relay to confirm what would be sent next.
    pub unconfirmed_wait: std::time::Duration,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            batch: BATCH,
            stop_after: None,
            pause: None,
            lose_commit_of: None,
            unconfirmed_wait: UNCONFIRMED_WAIT,
        }
    }
}

/// See [`Hooks::pause`].
#[derive(Debug, Clone)]
pub struct Pause {
    pub locked: tokio::sync::mpsc::UnboundedSender<()>,
    pub resume: Arc<tokio::sync::Semaphore>,
}

/// The parking table of `config`.
pub fn parked_table(config: &Config) -> ParkedTable {
    let (schema, name) = config.postgres.parked_table_parts();
    ParkedTable { schema, name }
}

fn shown(table: &ParkedTable) -> String {
    format!("{}.{}", table.schema, table.name)
}

/// Reads the live heads into `inventory` (a missing table is a note: no
/// aggregate can be parked without it).
pub(super) async fn read(conn: &PgClient, config: &Config, inventory: &mut Inventory) {
    let parked = parked_table(config);
    let name = TableName {
        schema: parked.schema.clone(),
        name: parked.name.clone(),
    };
    match table::exists(conn, &name).await {
        Ok(true) => match release::live_heads(conn, &parked).await {
            Ok(heads) => {
                inventory.parked = heads
                    .into_iter()
                    .map(|head| Parked {
                        head,
                        release_interrupted: None,
                    })
                    .collect();
                inventory.parked_table = Some(parked);
            }
            Err(e) => inventory.problems.push(format!(
                "cannot read the parking table {}: {e}",
                shown(&parked)
            )),
        },
        Ok(false) => inventory.notes.push(format!(
            "the parking table {} does not exist, so no aggregate is parked (`outbox-relay \
             init` creates it)",
            shown(&parked)
        )),
        Err(e) => inventory.problems.push(format!(
            "cannot look the parking table {} up: {e}",
            shown(&parked)
        )),
    }
}

/// Marks the heads whose dead letter is recorded as handled: their
/// release was interrupted.
pub(super) fn mark_interrupted(inventory: &mut Inventory) {
    for parked in &mut inventory.parked {
        let state = inventory
            .entries
            .iter()
            .find(|e| e.sink == Sink::Kafka && e.id == parked.head.event_id)
            .map(|e| e.state);
        let command = match state {
            Some(State::Replayed) => "retry",
            Some(State::Discarded) => "discard",
            _ => continue,
        };
        parked.release_interrupted = Some(format!(
            "release interrupted: run `dead {command} {}` again",
            parked.head.event_id
        ));
    }
}

/// The heads `list` shows: all, or those whose dead letter is on `route`.
pub(super) fn listed<'a>(inventory: &'a Inventory, route: Option<&str>) -> Vec<&'a Parked> {
    inventory
        .parked
        .iter()
        .filter(|p| {
            route.is_none_or(|r| {
                inventory
                    .entries
                    .iter()
                    .any(|e| e.id == p.head.event_id && e.route == r)
            })
        })
        .collect()
}

/// `retry` or `discard` with parked heads among what is asked: the other
/// dead letters as always, then per head its dead letter and its queue.
pub(super) async fn act(
    config: &Config,
    inventory: &Inventory,
    connection: Option<&PgClient>,
    ids: &[String],
    route: Option<&str>,
    action: Action,
    hooks: &Hooks,
) -> Outcome {
    let heads: Vec<&Parked> = if ids.is_empty() {
        listed(inventory, route)
    } else {
        inventory
            .parked
            .iter()
            .filter(|p| ids.contains(&p.head.event_id))
            .collect()
    };
    let is_head = |id: &str| heads.iter().any(|p| p.head.event_id == id);
    let mut outcome = Outcome::default();
    if ids.is_empty() {
        // --all: every listed dead letter but the heads', by id.
        let others: Vec<String> = inventory
            .listed(false, route)
            .into_iter()
            .filter(|e| !is_head(&e.id))
            .map(|e| e.id.clone())
            .collect();
        if !others.is_empty() {
            let mut deduped: Vec<String> = Vec::with_capacity(others.len());
            for id in others {
                if !deduped.contains(&id) {
                    deduped.push(id);
                }
            }
            outcome = act::act(config, inventory, connection, &deduped, None, action).await;
        }
    } else {
        let others: Vec<String> = ids.iter().filter(|id| !is_head(id)).cloned().collect();
        if !others.is_empty() {
            outcome = act::act(config, inventory, connection, &others, route, action).await;
        }
    }
    for parked in heads {
        let head = &parked.head;
        let has_letter = inventory
            .entries
            .iter()
            .any(|e| e.sink == Sink::Kafka && e.id == head.event_id);
        if has_letter {
            let letter = act::act(
                config,
                inventory,
                connection,
                std::slice::from_ref(&head.event_id),
                None,
                action,
            )
            .await;
            let failed = !letter.problems.is_empty();
            outcome.done.extend(letter.done);
            outcome.problems.extend(letter.problems);
            if failed {
                outcome.problems.push(format!(
                    "{}: its parked queue ({} waiting) is not released, as its dead letter was \
                     not {}; once the cause is fixed run the command again, or `outbox-relay \
                     dead discard {}` releases the queue without the dead letter",
                    shown_id(&head.event_id),
                    head.waiting,
                    past(action),
                    head.event_id
                ));
                continue;
            }
        } else if action == Action::Retry {
            outcome.problems.push(format!(
                "{}: the dead letter the aggregate {}/{} is parked behind is not in the \
                 dead-letter topic {:?} (expired?), so it cannot be retried; `outbox-relay dead \
                 discard {}` releases the queue without it",
                shown_id(&head.event_id),
                head.aggregatetype,
                head.aggregateid,
                config.kafka.dlq_topic,
                head.event_id
            ));
            continue;
        }
        let (Some(conn), Some(table)) = (connection, inventory.parked_table.as_ref()) else {
            outcome.problems.push(format!(
                "{}: its parked queue cannot be released: PostgreSQL cannot be reached",
                shown_id(&head.event_id)
            ));
            continue;
        };
        release_queue(config, conn, table, head, hooks, &mut outcome).await;
        let stream = (config.postgres.shard, config.postgres.slot.as_str());
        match release::forget_tombstones(conn, table, stream).await {
            Ok(_) => {}
            Err(e) => outcome.problems.push(format!(
                "released heads of {} whose commit the slot {:?} confirmed could not be deleted \
                 (they are harmless; the next release tries again): {e}",
                shown(table),
                config.postgres.slot
            )),
        }
    }
    outcome
}

fn past(action: Action) -> &'static str {
    match action {
        Action::Retry => "republished",
        Action::Discard => "discarded",
    }
}

/// Sends and deletes `head`'s queue batch by batch (see the module
/// header), until it is empty (the head released) or reaches a DEAD row
/// (the new head). What happened goes to `outcome`.
pub async fn release_queue(
    config: &Config,
    conn: &PgClient,
    table: &ParkedTable,
    head: &LiveHead,
    hooks: &Hooks,
    outcome: &mut Outcome,
) {
    let id = shown_id(&head.event_id);
    let aggregate = head.aggregate();
    let mut sent = 0usize;
    let mut batches = 0usize;
    let mut exactly_once = None;
    let mut waiting_since: Option<std::time::Instant> = None;
    if config.kafka.delivery == Delivery::ExactlyOnce {
        match exactly_once::Sender::open(config, table, head.row).await {
            Ok(opened) => exactly_once = Some(opened),
            Err(why) => {
                outcome.problems.push(format!(
                    "{id}: its parked queue is not released (kafka.delivery = \"exactly-once\" \
                     releases through a Kafka transaction): {why}"
                ));
                return;
            }
        }
    }
    loop {
        if hooks.stop_after.is_some_and(|n| batches >= n) {
            outcome.problems.push(format!(
                "{id}: release stopped after {batches} batch(es), {sent} event(s) sent: run the \
                 command again to go on"
            ));
            return;
        }
        let at = (batches, exactly_once.as_mut());
        match batch(config, conn, table, head, &aggregate, hooks, at).await {
            Err(why) => {
                let _ = conn.batch_execute("ROLLBACK").await;
                outcome.problems.push(format!(
                    "{id}: release stopped after {sent} event(s) sent: {why}; the rest stays \
                     parked in order: run the command again to go on"
                ));
                return;
            }
            Ok(Step::Gone) => {
                outcome.done.push(format!(
                    "{id}: no longer a live head (released, or moved on, by another command \
                     meanwhile){}",
                    if sent > 0 {
                        format!("; {sent} event(s) sent before")
                    } else {
                        String::new()
                    }
                ));
                return;
            }
            Ok(Step::More(n)) => {
                sent += n;
                batches += 1;
            }
            Ok(Step::Unconfirmed(n)) => {
                sent += n;
                let waited = waiting_since.get_or_insert_with(std::time::Instant::now);
                if waited.elapsed() > hooks.unconfirmed_wait {
                    outcome.problems.push(format!(
                        "{id}: release stopped after {sent} event(s) sent: the slot {:?} is not \
                         confirmed past the rest after {} s (is the relay running?); the rest \
                         stays parked in order: run the command again to go on",
                        config.postgres.slot,
                        hooks.unconfirmed_wait.as_secs()
                    ));
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
            Ok(Step::Released(n)) => {
                sent += n;
                outcome.done.push(format!(
                    "released {id}: {sent} parked event(s) of aggregate {}/{} sent in order; the \
                     aggregate is live again",
                    shown_id(&head.aggregatetype),
                    shown_id(&head.aggregateid)
                ));
                return;
            }
            Ok(Step::NewHead(n, row)) => {
                sent += n;
                outcome.done.push(format!(
                    "released {id} up to the next dead letter: {sent} parked event(s) of \
                     aggregate {}/{} sent in order; the aggregate stays parked behind {} \
                     ({}): `outbox-relay dead retry {}` or `dead discard {}` releases the rest",
                    shown_id(&head.aggregatetype),
                    shown_id(&head.aggregateid),
                    shown_id(&row.event_id),
                    row.reason,
                    row.event_id,
                    row.event_id
                ));
                return;
            }
        }
    }
}

/// How one batch's transaction ended.
enum Step {
    /// The head was not live any more: nothing done.
    Gone,
    /// This many sent and deleted; more may follow.
    More(usize),
    /// This many sent; the queue is empty and the head released.
    Released(usize),
    /// This many sent; this DEAD row is the head now.
    NewHead(usize, Queued),
    /// This many sent; the rest (or the head itself) is not confirmed by
    /// the relay yet: wait and go on.
    Unconfirmed(usize),
}

/// One batch in one transaction; on an error the caller rolls back.
async fn batch(
    config: &Config,
    conn: &PgClient,
    table: &ParkedTable,
    head: &LiveHead,
    aggregate: &crate::parking::Aggregate,
    hooks: &Hooks,
    (index, exactly_once): (usize, Option<&mut (exactly_once::Sender, Option<Place>)>),
) -> Result<Step, String> {
    let pg = |e: crate::pg::PgError| e.to_string();
    let statement = |action| move |e| pg(crate::pg::PgError::client(conn.target(), action, e));
    conn.batch_execute("BEGIN")
        .await
        .map_err(statement("starting a transaction"))?;
    let Some(locked) = release::lock_head(conn, table, head.row, &head.event_id)
        .await
        .map_err(pg)?
    else {
        let _ = conn.batch_execute("ROLLBACK").await;
        return Ok(Step::Gone);
    };
    if locked.shard != config.postgres.shard {
        let _ = conn.batch_execute("ROLLBACK").await;
        return Err(format!(
            "it is parked by shard {}'s relay: run the command with that shard's config (its \
             slot says what that relay confirmed)",
            locked.shard
        ));
    }
    // Only what the relay confirmed: until then its events before the head
    // may still be in its producer (a release would overtake them), and a
    // replay could park a queued event again.
    let confirmed = release::slot_confirmed(conn, &config.postgres.slot)
        .await
        .map_err(pg)?
        .unwrap_or_default();
    if locked.commit_lsn >= confirmed {
        let _ = conn.batch_execute("ROLLBACK").await;
        return Ok(Step::Unconfirmed(0));
    }
    if let Some(pause) = &hooks.pause {
        let _ = pause.locked.send(());
        if let Ok(permit) = pause.resume.acquire().await {
            permit.forget();
        }
    }
    let rows = release::next_batch(conn, table, aggregate, hooks.batch.max(1))
        .await
        .map_err(pg)?;
    let cut = rows.iter().position(|r| r.kind == Kind::Dead);
    let unconfirmed = rows.iter().position(|r| r.place.commit_lsn >= confirmed);
    let (cut, waits) = match (cut, unconfirmed) {
        (Some(dead), Some(wait)) if wait <= dead => (Some(wait), true),
        (None, Some(wait)) => (Some(wait), true),
        (dead, _) => (dead, false),
    };
    let events = &rows[..cut.unwrap_or(rows.len())];
    send(config, conn, events, exactly_once).await?;
    let ids: Vec<i64> = events.iter().map(|r| r.id).collect();
    release::delete(conn, table, &ids).await.map_err(pg)?;
    let step = match cut {
        Some(_) if waits => Step::Unconfirmed(events.len()),
        Some(i) => {
            release::promote(conn, table, head.row, rows[i].id)
                .await
                .map_err(pg)?;
            Step::NewHead(events.len(), rows[i].clone())
        }
        // Short: nothing can join the queue while the head is locked.
        None if rows.len() < hooks.batch.max(1) => {
            release::release(conn, table, head.row).await.map_err(pg)?;
            Step::Released(events.len())
        }
        None => Step::More(events.len()),
    };
    if hooks.lose_commit_of == Some(index) {
        return Err("the batch's commit was lost (as if the command died before it)".into());
    }
    conn.batch_execute("COMMIT").await.map_err(|e| {
        let e = crate::pg::PgError::client(conn.target(), "committing", e);
        format!(
            "the last batch was sent but its rows could not be deleted ({e}): a new run \
             sends them again"
        )
    })?;
    Ok(step)
}

/// Sends `events` in order: webhook ones become PENDING rows of the
/// delivery table (in the caller's transaction), Kafka ones go to the
/// broker, all acknowledged before this returns. In exactly-once mode the
/// Kafka ones go in one transaction with the progress, and those the
/// progress says are committed already are not sent again.
async fn send(
    config: &Config,
    conn: &PgClient,
    events: &[Queued],
    exactly_once: Option<&mut (exactly_once::Sender, Option<Place>)>,
) -> Result<(), String> {
    let committed = exactly_once.as_ref().and_then(|(_, progress)| *progress);
    let mut records: Vec<(String, kafka::Republished)> = Vec::new();
    let mut through = committed;
    for event in events {
        if event.sink == KAFKA_SINK {
            if committed.is_some_and(|c| event.place <= c) {
                continue;
            }
            through = Some(event.place);
            let Some(topic) = event.topic.clone() else {
                return Err(format!(
                    "event {} has no topic in the parking table",
                    shown_id(&event.event_id)
                ));
            };
            records.push((
                event.event_id.clone(),
                kafka::Republished {
                    topic,
                    key: event.key.clone().map(Bytes::from),
                    value: Some(Bytes::from(event.body.clone())),
                    headers: event
                        .headers
                        .iter()
                        .map(|(n, v)| (n.clone(), Bytes::from(v.clone())))
                        .collect(),
                },
            ));
        } else {
            to_delivery_table(config, conn, event).await?;
        }
    }
    if records.is_empty() {
        return Ok(());
    }
    let sending: Vec<kafka::Republished> = records.iter().map(|(_, r)| r.clone()).collect();
    if let (Some((sender, progress)), Some(through)) = (exactly_once, through) {
        sender.send(&sending, through).await?;
        *progress = Some(through);
        return Ok(());
    }
    let results = kafka::publish(&config.kafka, &sending).await?;
    for ((event_id, record), result) in records.iter().zip(results) {
        if let Err(e) = result {
            return Err(format!(
                "event {} was not taken by topic {:?}: {e}",
                shown_id(event_id),
                record.topic
            ));
        }
    }
    Ok(())
}

/// A parked webhook event as a PENDING row of the delivery table, due now.
async fn to_delivery_table(config: &Config, conn: &PgClient, event: &Queued) -> Result<(), String> {
    let sinks = config.http_sinks().map_err(|e| e.to_string())?;
    let Some(sink) = sinks.iter().find(|s| s.name == event.sink) else {
        return Err(format!(
            "event {} is for the webhook sink {:?}, which the config does not have: add \
             [sinks.{}] back",
            shown_id(&event.event_id),
            event.sink,
            event.sink
        ));
    };
    let (schema, name) = config.postgres.delivery_table_parts();
    let webhook = WebhookEvent {
        id: event.event_id.clone(),
        key: String::from_utf8_lossy(event.key.as_deref().unwrap_or_default()).into_owned(),
        headers: event
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), String::from_utf8_lossy(v).into_owned()))
            .collect(),
        body: Bytes::from(event.body.clone()),
        // The sink's: whether the row, should it die, holds its aggregate.
        after_dead_letter: config
            .sinks
            .get(&event.sink)
            .map(|s| s.after_dead_letter)
            .unwrap_or_default(),
    };
    let row = NewRow {
        route: &sink.name,
        event: &webhook,
        status: delivery::PENDING,
        attempts: 0,
        max_attempts: sink.schedule.max_attempts_queued(),
        delay: std::time::Duration::ZERO,
        last_status: None,
        last_error: None,
    };
    delivery::insert_in(
        &**conn,
        conn.target(),
        &DeliveryTable { schema, name },
        &row,
    )
    .await
    .map_err(|e| format!("event {}: {e}", shown_id(&event.event_id)))
}
