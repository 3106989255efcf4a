//! The session machine against a model broker, no Kafka, no PostgreSQL.
//!
//! A model test: committed transactions (outbox events over a few keys,
//! each an inserted row or a transactional outbox message, mixed in one
//! transaction, some too large for the broker, some breaking the contract
//! every event is under (dead letters, never events), some transactions touching
//! only another table; between them, non-transactional outbox messages the
//! machine must refuse and messages of other prefixes it must ignore) are
//! streamed into the machine while a fake producer and broker answer in
//! random orders: acknowledgements per partition in order, transient
//! failures, full queues, "too large" refusals of a record and of its batch
//! mates. A failed session is replayed the way the relay does it: a new
//! machine from the confirmed position, the slot re-sending every
//! transaction after it. After every step:
//! * nothing is confirmed past a transaction with a row not yet acknowledged
//!   (as its event or its dead letter) by the broker;
//! * per key, the first occurrences of events in the broker's log are in
//!   commit order, across rows and messages;
//! * nothing but the committed events (or their dead letters) reaches the
//!   broker: no refused non-transactional message, no other prefix.
//!
//! At the end every row was acknowledged and the last transaction confirmed.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;

use super::pace::{
    BUFFERED_ITEMS_PER_WAKE, NUDGE_AFTER_PAUSE, RATE_PERIOD, READ_WINDOW_MAX, READ_WINDOW_MIN,
    REPORTS_WAIT, read_window,
};
use super::*;
use crate::contracts::{Contracts, Schema};
use crate::envelope::{ContentMode, EnvelopeSettings};
use crate::outbox::ColumnMap;
use crate::outbox::Source;
use crate::parking::{Outcome, Parcel, Place, Request};
use crate::relay::position::Position;
use crate::relay::{SourceSettings, Stopped};
use crate::replication::ReplicationSettings;
use crate::sink::{BrokerFailure, FailureKind, RefusalKind, SinkSettings};
use pgoutput::encode::encode;
use pgoutput::{
    Begin, Column, Commit as CommitMsg, Insert, LogicalMessage, Message, RelationBody, TupleValue,
};

/// The model's clocks at `at`, with a fixed wall time: the machine reads
/// no clock, so a run replays the same for the same seed.
fn clocks(at: std::time::Instant) -> Now {
    Now {
        at,
        wall: chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("in range"),
    }
}

/// The model's position `lsn`, on its one server.
fn model_position(lsn: Lsn) -> Position {
    Position {
        server: crate::replication::ServerIdentity {
            system_id: "7000000000000000001".into(),
            timeline: 1,
        },
        confirmed: lsn,
    }
}

const OUTBOX_OID: u32 = 16_384;
const OTHER_OID: u32 = 20_000;
/// Records with a value larger than this are refused as too large.
const BROKER_LIMIT: usize = 64;
const PARTITIONS: u64 = 3;

fn settings(max_in_flight: usize) -> RelaySettings {
    RelaySettings {
        replication: ReplicationSettings::new(
            crate::pg::Conninfo::parse("host=h user=u").unwrap(),
            "slot",
            "pub",
        ),
        sink: SinkSettings {
            brokers: "b:9092".into(),
            linger_ms: 5,
            message_timeout_ms: 30_000,
            queue_max_messages: 100,
            queue_max_kbytes: None,
            dead_letter_topic: "dlq".into(),
            properties: Vec::new(),
        },
        envelope: EnvelopeSettings {
            source: "/model".into(),
            mode: ContentMode::Binary,
            topic_template: "outbox.event.{aggregatetype}".into(),
        },
        columns: ColumnMap::default(),
        table: ("public".into(), "outbox".into()),
        dlq_topic: "dlq".into(),
        checkpoint_topic: "outbox-relay.checkpoints".into(),
        max_in_flight,
        max_in_flight_bytes: 1 << 40,
        heartbeat_interval: None,
        shutdown_drain: Duration::from_secs(1),
        on_unroutable: OnUnroutable::Stop,
        unhealthy_after: Duration::from_secs(60),
        lock: Default::default(),
        source: SourceSettings {
            kind: Source::Both,
            ..SourceSettings::default()
        },
        otlp: None,
        exactly_once: None,
        webhooks: Default::default(),
        // Every event's `id` member, when it has one, is text: a row whose
        // payload says otherwise (`Row::breaks`) is a dead letter.
        contracts: Contracts::from_parts(vec![(
            None,
            None,
            std::sync::Arc::new(
                Schema::from_value(
                    &serde_json::json!({"properties": {"id": {"type": "string"}}}),
                    "model.json",
                    None,
                )
                .expect("the model's schema compiles"),
            ),
        )]),
        parking: Some(crate::parking::ParkedTable::default()),
    }
}

fn outbox_table() -> OutboxTable {
    OutboxTable {
        schema: "public".into(),
        name: "outbox".into(),
        oid: OUTBOX_OID,
        current_name: "public.outbox".into(),
        members: [OUTBOX_OID].into_iter().collect(),
        publication_has_other_tables: true,
    }
}

/// One committed outbox event.
#[derive(Debug, Clone)]
struct Row {
    id: String,
    key: String,
    too_large: bool,
    /// Its payload is JSON that breaks the model's contract (see
    /// [`settings`]): it must become a dead letter, never an event.
    breaks: bool,
    /// Written with `outbox_emit` (a transactional logical message) rather
    /// than inserted.
    message: bool,
}

/// One committed transaction: its outbox rows (none: it touched another
/// table only) and its LSNs.
#[derive(Debug, Clone)]
struct Txn {
    rows: Vec<Row>,
    final_lsn: Lsn,
    end_lsn: Lsn,
}

fn relation_message(oid: u32, columns: &[&str]) -> Bytes {
    encode(&Message::Relation(RelationBody {
        xid: None,
        relation_id: oid,
        namespace: "public".into(),
        name: if oid == OUTBOX_OID {
            "outbox"
        } else {
            "orders"
        }
        .into(),
        replica_identity: b'd',
        columns: columns
            .iter()
            .map(|name| Column {
                flags: 0,
                name: (*name).into(),
                type_oid: 25,
                type_modifier: -1,
            })
            .collect(),
    }))
}

fn logical_message(transactional: bool, lsn: Lsn, prefix: &str, content: String) -> Bytes {
    encode(&Message::Message(LogicalMessage {
        xid: None,
        transactional,
        lsn,
        prefix: prefix.into(),
        content: Bytes::from(content),
    }))
}

/// The WAL messages of `txn`, as pgoutput sends them, after (`strays`)
/// the non-transactional messages written just before it commits: an
/// outbox one (refused) and a heartbeat.
fn messages(txn: &Txn, xid: u32, strays: bool) -> Vec<Bytes> {
    let text = |s: &str| TupleValue::Text(Bytes::copy_from_slice(s.as_bytes()));
    let stray = |n: u64, prefix: &str| {
        logical_message(
            false,
            Lsn(txn.final_lsn.0 - 0x90 + n),
            prefix,
            format!(
                r#"{{"id":"stray-{xid}","aggregatetype":"order","aggregateid":"k0","type":"T","payload":{{}}}}"#
            ),
        )
    };
    let mut out = if strays {
        vec![stray(0, "outbox"), stray(1, "outbox-relay-heartbeat")]
    } else {
        Vec::new()
    };
    out.push(encode(&Message::Begin(Begin {
        final_lsn: txn.final_lsn,
        commit_time: 0,
        xid,
    })));
    // Every transaction writes a business row beside its outbox rows.
    out.push(encode(&Message::Insert(Insert {
        xid: None,
        relation_id: OTHER_OID,
        tuple: pgoutput::TupleData {
            columns: vec![text("business")],
        },
    })));
    for (i, row) in txn.rows.iter().enumerate() {
        let payload = if row.too_large {
            format!(r#"{{"pad":"{}"}}"#, "x".repeat(BROKER_LIMIT * 2))
        } else if row.breaks {
            r#"{"id":5}"#.to_owned()
        } else {
            format!(r#"{{"id":"{}"}}"#, row.id)
        };
        if row.message {
            let lsn = Lsn(txn.final_lsn.0 - 0x40 + i as u64);
            // Another prefix in the same transaction is someone else's.
            out.push(logical_message(true, lsn, "audit", payload.clone()));
            out.push(logical_message(
                true,
                lsn,
                "outbox",
                format!(
                    r#"{{"id":"{}","aggregatetype":"order","aggregateid":"{}","type":"Placed","payload":{payload}}}"#,
                    row.id, row.key
                ),
            ));
            continue;
        }
        out.push(encode(&Message::Insert(Insert {
            xid: None,
            relation_id: OUTBOX_OID,
            tuple: pgoutput::TupleData {
                columns: vec![
                    text(&row.id),
                    text("order"),
                    text(&row.key),
                    text("Placed"),
                    text(&payload),
                ],
            },
        })));
    }
    out.push(encode(&Message::Commit(CommitMsg {
        flags: 0,
        commit_lsn: txn.final_lsn,
        end_lsn: txn.end_lsn,
        commit_time: 0,
    })));
    out
}

/// A tiny deterministic PRNG, so that proptest's shrinking replays the same
/// schedule for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The fake producer: hands records to per-partition queues, or says its
/// queue is full (on a whim, while it holds records). It never refuses a
/// record as too large itself: the broker's limit is the one that bites here.
struct FakeProducer {
    queues: BTreeMap<(String, u64), VecDeque<(KafkaRecord, DeliveryTag)>>,
    queue_full_percent: u64,
    rng: Rng,
    /// Exactly-once: a Kafka transaction was begun and not yet ended.
    transaction_open: bool,
    /// A transactional producer: a record outside a transaction is an
    /// error (librdkafka's "Erroneous state").
    transactional: bool,
    /// Requests handed to the parking writer, answered in order.
    parks: VecDeque<(Request, ParkTag)>,
}

fn partition(record: &KafkaRecord) -> (String, u64) {
    let hash = record
        .key
        .iter()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(*b)));
    (record.topic.clone(), hash % PARTITIONS)
}

impl Producer for FakeProducer {
    fn send(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
    ) -> Result<(), SendError<DeliveryTag>> {
        assert!(
            self.transaction_open || !self.transactional,
            "a record sent outside a Kafka transaction"
        );
        // librdkafka's queue is full only while it holds records, whose
        // reports then come.
        if self.in_flight() > 0 && self.rng.chance(self.queue_full_percent) {
            return Err(SendError::QueueFull(Box::new((record, tag))));
        }
        self.queues
            .entry(partition(&record))
            .or_default()
            .push_back((record, tag));
        Ok(())
    }

    fn explain(&self, err: DeliveryError) -> DeliveryError {
        err
    }

    fn open_transaction(&mut self) -> Result<(), DeliveryError> {
        assert!(!self.transaction_open, "a Kafka transaction begun twice");
        self.transaction_open = true;
        Ok(())
    }

    fn park(&mut self, request: Request, tag: ParkTag) -> Result<(), Box<(Request, ParkTag)>> {
        self.parks.push_back((request, tag));
        Ok(())
    }
}

/// One row of the model's parking table.
#[derive(Debug, Clone)]
struct ParkedRow {
    place: Place,
    id: String,
    /// A later dead letter: the next head once a release reaches it.
    dead: bool,
    /// Too large for the broker: refused when released, it becomes a dead
    /// letter and the next head.
    too_large: bool,
}

/// The model's parking table, as `parking::store` keeps it: it outlives
/// the sessions, like PostgreSQL.
#[derive(Debug, Default)]
struct ParkStore {
    /// Live heads per key: where the head stands, its id.
    heads: BTreeMap<String, (Place, String)>,
    /// Every HEAD row's place, released or not (a replay finds it).
    head_places: HashSet<Place>,
    /// Each key's queue, in order.
    queues: BTreeMap<String, Vec<ParkedRow>>,
    /// Rows committed here (parked events and dead markers).
    held: HashSet<String>,
}

impl ParkStore {
    /// Commits one request as `store::write` does.
    fn write(&mut self, request: &Request) -> Outcome {
        let key = request.aggregate().aggregate_id.clone();
        match request {
            Request::Head {
                event_id, place, ..
            } => {
                let in_queue = self
                    .queues
                    .get(&key)
                    .is_some_and(|q| q.iter().any(|r| r.place == *place));
                if self.heads.get(&key).is_some_and(|(head, _)| head == place) {
                    return Outcome::Head;
                }
                if self.head_places.contains(place) || in_queue {
                    return Outcome::Parked;
                }
                if let Some((head, head_id)) = self.heads.get(&key).cloned() {
                    let queue = self.queues.entry(key.clone()).or_default();
                    if *place > head {
                        queue.push(ParkedRow {
                            place: *place,
                            id: event_id.clone(),
                            dead: true,
                            too_large: false,
                        });
                    } else {
                        // An earlier dead letter heads the aggregate; the
                        // head it replaces waits in the queue.
                        queue.push(ParkedRow {
                            place: head,
                            id: head_id,
                            dead: true,
                            too_large: false,
                        });
                        self.head_places.insert(*place);
                        self.heads.insert(key.clone(), (*place, event_id.clone()));
                        queue.sort_by_key(|r| r.place);
                        return Outcome::Head;
                    }
                    queue.sort_by_key(|r| r.place);
                    Outcome::Parked
                } else {
                    self.head_places.insert(*place);
                    self.heads.insert(key, (*place, event_id.clone()));
                    Outcome::Head
                }
            }
            Request::Event {
                event_id,
                place,
                parcel,
                ..
            } => {
                if !self.heads.contains_key(&key) {
                    return Outcome::Released(parcel.clone());
                }
                let queue = self.queues.entry(key).or_default();
                if !queue.iter().any(|r| r.place == *place) {
                    let too_large = match parcel {
                        Parcel::Kafka(record) => record.value.len() > BROKER_LIMIT,
                        Parcel::Webhook { .. } => false,
                    };
                    queue.push(ParkedRow {
                        place: *place,
                        id: event_id.clone(),
                        dead: false,
                        too_large,
                    });
                    queue.sort_by_key(|r| r.place);
                }
                self.held.insert(event_id.clone());
                Outcome::Parked
            }
        }
    }

    /// `dead retry` of `key`'s head, as the operator's command does: the
    /// head goes to the broker again (once: a second run finds it sent),
    /// then its queue in order, up to a dead marker or a row too large
    /// (the next head), a row the slot is not confirmed past yet (`below`:
    /// a replay could still park or send it; the command stops and is run
    /// again), or the end (the key is live again). The head only once the
    /// slot is confirmed past it: every earlier event of its key is then
    /// in the broker's log, none still in the relay's producer.
    fn release(&mut self, key: &str, below: Lsn, log: &mut BrokerLog) {
        let Some((place, head)) = self.heads.get(key).cloned() else {
            return;
        };
        if place.commit_lsn >= below {
            return;
        }
        if !log.retried.contains(&head) {
            log.retried(key, &head);
        }
        let queue = self.queues.remove(key).unwrap_or_default();
        let mut rest = queue.into_iter().peekable();
        let mut live = true;
        while let Some(row) = rest.next_if(|row| row.place.commit_lsn < below) {
            if row.too_large {
                // The broker refuses it: the command dead-letters it, and
                // it becomes the next head.
                log.acked.insert(row.id.clone());
                log.delivered.push(row.id.clone());
            }
            if row.dead || row.too_large {
                self.head_places.insert(row.place);
                self.heads.insert(key.to_owned(), (row.place, row.id));
                live = false;
                break;
            }
            log.released(key, &row.id);
        }
        let rest: Vec<ParkedRow> = rest.collect();
        if live && rest.is_empty() {
            self.heads.remove(key);
        }
        if !rest.is_empty() {
            self.queues.insert(key.to_owned(), rest);
        }
    }
}

/// The parking writer answers its oldest request.
fn answer_park(
    machine: &mut SessionMachine<'_>,
    producer: &mut FakeProducer,
    store: &mut ParkStore,
) -> Option<Result<(), SessionError>> {
    let (request, tag) = producer.parks.pop_front()?;
    let outcome = store.write(&request);
    Some(machine.on_park_report(crate::parking::Report { tag, outcome }, producer))
}

impl FakeProducer {
    fn in_flight(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }
}

/// What the broker holds and the checker judges.
#[derive(Default)]
struct BrokerLog {
    /// Rows acknowledged, as event or dead letter.
    acked: HashSet<String>,
    /// Per key, the row ids of acknowledged events in log order.
    events: HashMap<String, Vec<String>>,
    /// Every acknowledged record's row key, events and dead letters.
    delivered: Vec<String>,
    /// Exactly-once: records acknowledged in the open Kafka transaction,
    /// visible (above) only once it commits; `None` at-least-once.
    staged: Option<Vec<DeliveryTag>>,
    /// Heads the operator sent again (`dead retry`), as events.
    retried: HashSet<String>,
}

impl BrokerLog {
    /// A record the broker acknowledged: visible at once, or in exactly-
    /// once mode at its transaction's commit.
    fn ack(&mut self, tag: &DeliveryTag) {
        if let Some(staged) = &mut self.staged {
            staged.push(tag.clone());
            return;
        }
        self.acked.insert(tag.row_key.clone());
        self.delivered.push(tag.row_key.clone());
        if !tag.dead_letter {
            let key = String::from_utf8(tag.key.to_vec()).unwrap();
            self.events
                .entry(key)
                .or_default()
                .push(tag.row_key.clone());
        }
    }

    /// The operator's `dead retry` sent a parked head to its topic (read
    /// committed at once: the command's producer is not the relay's).
    fn retried(&mut self, key: &str, id: &str) {
        // Sent again on purpose: not among the records the relay wrote.
        self.retried.insert(id.to_owned());
        self.acked.insert(id.to_owned());
        self.events
            .entry(key.to_owned())
            .or_default()
            .push(id.to_owned());
    }

    /// A release sent a parked event to its topic.
    fn released(&mut self, key: &str, id: &str) {
        self.acked.insert(id.to_owned());
        self.delivered.push(id.to_owned());
        self.events
            .entry(key.to_owned())
            .or_default()
            .push(id.to_owned());
    }

    /// Exactly-once: the open transaction committed (`true`) or aborted.
    fn end_transaction(&mut self, commit: bool) {
        let Some(staged) = self.staged.take() else {
            return;
        };
        self.staged = Some(Vec::new());
        if commit {
            self.staged = None;
            for tag in &staged {
                self.ack(tag);
            }
            self.staged = Some(Vec::new());
        }
    }
}

fn too_large(tag: &DeliveryTag, record: &KafkaRecord) -> DeliveryReport<DeliveryTag> {
    DeliveryReport {
        tag: tag.clone(),
        result: Err(DeliveryError::Refused(Refused {
            kind: RefusalKind::TooLarge,
            topic: Some(record.topic.clone()),
            dead_letter_topic: tag.dead_letter,
            detail: "Broker: Message size too large".into(),
        })),
    }
}

fn transient(tag: &DeliveryTag) -> DeliveryReport<DeliveryTag> {
    DeliveryReport {
        tag: tag.clone(),
        result: Err(DeliveryError::Failed(BrokerFailure {
            kind: FailureKind::Other,
            detail: "Message production error: NetworkException (Broker: Network exception)".into(),
        })),
    }
}

/// The broker answers for the head of one partition's queue: the report to
/// feed, and, for a refusal of a batch, the reports of its batch mates.
fn answer(
    producer: &mut FakeProducer,
    log: &mut BrokerLog,
    faults: bool,
) -> Option<Vec<DeliveryReport<DeliveryTag>>> {
    let keys: Vec<(String, u64)> = producer
        .queues
        .iter()
        .filter(|(_, q)| !q.is_empty())
        .map(|(k, _)| k.clone())
        .collect();
    if keys.is_empty() {
        return None;
    }
    let pick = keys[producer.rng.below(keys.len() as u64) as usize].clone();
    let queue = producer.queues.get_mut(&pick)?;
    let (record, tag) = queue.pop_front()?;
    if record.value.len() > BROKER_LIMIT {
        // Refused with its batch: the next record of the partition may go
        // down with it.
        let mut reports = vec![too_large(&tag, &record)];
        if producer.rng.chance(50)
            && let Some((mate, mate_tag)) = producer.queues.get_mut(&pick)?.pop_front()
        {
            reports.push(too_large(&mate_tag, &mate));
        }
        return Some(reports);
    }
    if faults && producer.rng.chance(3) {
        return Some(vec![transient(&tag)]);
    }
    log.ack(&tag);
    Some(vec![DeliveryReport {
        tag,
        result: Ok(()),
    }])
}

/// Whether the session could read a message now.
fn read_possible(machine: &SessionMachine<'_>, wal: &VecDeque<Bytes>, stopping: bool) -> bool {
    !stopping && machine.can_read() && !wal.is_empty()
}

/// Checks the two safety properties against the log.
fn check(
    txns: &[Txn],
    confirmed: Lsn,
    log: &BrokerLog,
    store: &ParkStore,
) -> Result<(), TestCaseError> {
    for txn in txns.iter().filter(|t| t.end_lsn <= confirmed) {
        for row in &txn.rows {
            prop_assert!(
                log.acked.contains(&row.id) || store.held.contains(&row.id),
                "confirmed {confirmed} past row {} of the transaction ending at {}, never acknowledged",
                row.id,
                txn.end_lsn
            );
        }
    }
    let order: HashMap<&str, usize> = txns
        .iter()
        .flat_map(|t| &t.rows)
        .enumerate()
        .map(|(i, r)| (r.id.as_str(), i))
        .collect();
    for id in &log.delivered {
        prop_assert!(
            order.contains_key(id.as_str()),
            "{id} reached the broker but is no committed event"
        );
    }
    // A row too large for the broker is found refused only after later
    // events of its key may have been acknowledged: they stay delivered
    // ahead of it (its retry, after a release, comes later). That is the
    // one way an event overtakes a dead letter under parking, and the
    // check leaves those rows out; every other dead letter is decided
    // before anything after it is sent.
    let refused: HashSet<&str> = txns
        .iter()
        .flat_map(|t| &t.rows)
        .filter(|r| r.too_large)
        .map(|r| r.id.as_str())
        .collect();
    for (key, ids) in &log.events {
        let mut seen = HashSet::new();
        let firsts: Vec<usize> = ids
            .iter()
            .filter(|id| !refused.contains(id.as_str()))
            .filter(|id| seen.insert(id.as_str()))
            .map(|id| order[id.as_str()])
            .collect();
        prop_assert!(
            firsts.windows(2).all(|w| w[0] < w[1]),
            "key {key}: events first arrived out of commit order: {ids:?}"
        );
    }
    Ok(())
}

fn txns_strategy() -> impl Strategy<Value = Vec<Txn>> {
    // (rows per transaction, key of each, too large?, a message?, breaks
    // the contract?)
    prop::collection::vec(
        prop::collection::vec(
            (
                0u8..4,
                prop::bool::weighted(0.08),
                prop::bool::ANY,
                prop::bool::weighted(0.08),
            ),
            0..4,
        ),
        1..25,
    )
    .prop_map(|specs| {
        let mut lsn = 0x1000u64;
        let mut n = 0;
        specs
            .into_iter()
            .map(|rows| {
                lsn += 0x100;
                let rows = rows
                    .into_iter()
                    .map(|(key, too_large, message, breaks)| {
                        n += 1;
                        Row {
                            id: format!("r{n}"),
                            key: format!("k{key}"),
                            too_large,
                            breaks,
                            message,
                        }
                    })
                    .collect();
                Txn {
                    rows,
                    final_lsn: Lsn(lsn),
                    end_lsn: Lsn(lsn + 0x10),
                }
            })
            .collect()
    })
}

/// What a model run combines: the delivery mode, cleanup, graceful stops.
#[derive(Debug, Clone, Copy, Default)]
struct Mode {
    /// `kafka.delivery = "exactly-once"`: records are visible only once
    /// the Kafka transaction holding them commits, when the machine says a
    /// commit is due; a failed session aborts it.
    exactly_once: bool,
    /// `postgres.cleanup = "delete-after-ack"`: what the machine hands out
    /// for deletion is checked against what the broker holds.
    cleanup: bool,
    /// Sessions end by graceful stops (asked at random steps), besides
    /// failures.
    stops: bool,
}

/// Bounds small enough for the model's few events to reach them.
fn model_bounds() -> crate::relay::exactly_once::checkpoint::Bounds {
    crate::relay::exactly_once::checkpoint::Bounds {
        max_events: 3,
        max_bytes: 1 << 20,
        // A step is a millisecond of the model's clock: a Kafka transaction
        // often outlives a PostgreSQL one, and splits inside it.
        max_open: Duration::from_millis(4),
        quiet_after: Duration::from_millis(1),
        split_after: Duration::from_millis(6),
    }
}

/// Exactly-once: the commit the machine asks for at `now`, carried out as
/// `commit_transaction` does: every record in flight is answered first
/// (their reports reach the machine only after the commit, as they wait in
/// the channel), and a transaction that met a failure aborts instead.
/// The checkpoints it commits are the model's checkpoint topic
/// (`committed`, the last one where the next session starts).
/// Returns the error that ends the session, if the commit failed.
fn commit_if_due(
    machine: &mut SessionMachine<'_>,
    producer: &mut FakeProducer,
    log: &mut BrokerLog,
    (now, force): (std::time::Instant, bool),
    committed: &mut Vec<CommitPlan>,
) -> Result<(), SessionError> {
    let Some(plan) = machine.commit_due(now, force) else {
        return Ok(());
    };
    // The commit flushes: every record in flight is answered, in
    // partition order; any failure makes the transaction abortable.
    let mut late = Vec::new();
    let mut failed = false;
    while let Some(reports) = answer(producer, log, false) {
        failed |= reports.iter().any(|r| r.result.is_err());
        late.extend(reports);
    }
    producer.transaction_open = false;
    if failed {
        // The session ends; its reports are leftovers, whose refusals the
        // machine notes for the replay (as the relay's abandon does).
        for report in late {
            assert!(machine.on_leftover(report).is_none(), "no fatal refusal");
        }
        // Left open, as the relay leaves it for its abandon, which ends it.
        log.end_transaction(false);
        return Err(SessionError::Transaction(
            crate::sink::TxnFailure::Abortable("a record of the transaction failed".into()),
        ));
    }
    log.end_transaction(true);
    machine.commit_done(plan.lsn, now);
    committed.push(plan);
    for report in late {
        machine.on_report(report, producer)?;
    }
    Ok(())
}

/// Streams `txns` through sessions of the machine until every row is
/// acknowledged, injecting faults during the first steps, in `mode`.
fn run_model(txns: &[Txn], seed: u64, max_in_flight: usize) -> Result<(), TestCaseError> {
    run_model_in(Mode::default(), txns, seed, max_in_flight)
}

fn run_model_in(
    mode: Mode,
    txns: &[Txn],
    seed: u64,
    max_in_flight: usize,
) -> Result<(), TestCaseError> {
    let mut settings = settings(max_in_flight);
    // The byte bound: below any record (one at a time), a few records, or
    // none that binds.
    settings.max_in_flight_bytes = [1, 700, 2_000, 1 << 40][(seed % 4) as usize];
    if mode.cleanup {
        settings.source.cleanup = Cleanup::DeleteAfterAck;
    }
    let mut refusals = Refusals::new();
    let mut log = BrokerLog {
        staged: mode.exactly_once.then(Vec::new),
        ..BrokerLog::default()
    };
    let mut confirmed = Lsn(0x1000);
    // The position carried from one session to the next, as the outer
    // loop keeps it (`round.rs`); none before the first.
    let mut carried: Option<Position> = None;
    let mut rng = Rng(seed | 1);
    let fault_steps = 400;
    let mut steps = 0usize;
    // The model's clock: a millisecond per step.
    let start = std::time::Instant::now();
    let mut deleted: HashSet<String> = HashSet::new();
    // Exactly-once: the last committed checkpoint, where a session starts
    // (skipping the part of a transaction it says is in Kafka already).
    let mut checkpoints: Vec<CommitPlan> = Vec::new();
    // The parking table, and the heads live at each session's start.
    let mut store = ParkStore::default();
    for _session in 0..200 {
        let mut producer = FakeProducer {
            queues: BTreeMap::new(),
            queue_full_percent: if steps < fault_steps { 5 } else { 0 },
            rng: Rng(rng.next() | 1),
            transaction_open: false,
            transactional: mode.exactly_once,
            parks: VecDeque::new(),
        };
        // Where the session starts, as the outer loop decides it: the
        // last committed checkpoint (exactly-once) merged with the carried
        // position, then resumed against the slot (at the confirmed
        // position) on the same server.
        let checkpoint = checkpoints.last().filter(|_| mode.exactly_once);
        if let Some(at) = checkpoint {
            prop_assert!(at.lsn >= confirmed, "the checkpoint is behind the slot");
        }
        let carry = merge_checkpoint(
            carried.take(),
            checkpoint.map(|at| model_position(at.lsn)),
            checkpoint.and_then(|at| at.partial),
        );
        prop_assert_eq!(
            carry.none_found,
            carry.carried.is_none(),
            "\"no checkpoint found\" is said exactly when the session starts from the slot"
        );
        let (start_at, _) = crate::relay::position::resume(
            carry.carried.as_ref(),
            &model_position(confirmed).server,
            confirmed,
            Lsn(u64::MAX),
        );
        prop_assert_eq!(
            start_at,
            checkpoint.map_or(confirmed, |at| at.lsn),
            "the session starts at the last checkpoint, or where the slot was confirmed"
        );
        confirmed = start_at;
        let resume = partial_at(carry.partial, start_at);
        prop_assert_eq!(
            resume,
            checkpoint.and_then(|at| at.partial),
            "a checkpoint's part of a transaction is skipped by the session starting at it"
        );
        let heads = store
            .heads
            .iter()
            .map(|(key, (place, id))| crate::parking::Head {
                aggregate: crate::parking::Aggregate::new("order", key.as_str()),
                event_id: id.clone(),
                place: *place,
            })
            .collect();
        let began = clocks(start + Duration::from_millis(steps as u64));
        let mut machine = SessionMachine::new(
            &settings,
            Some(outbox_table()),
            confirmed,
            &mut refusals,
            began,
        )
        .with_parked(heads);
        if mode.exactly_once {
            machine = machine.exactly_once(resume, model_bounds());
        }
        // The slot re-sends every transaction after the confirmed position,
        // relations described first.
        let mut wal: VecDeque<Bytes> = VecDeque::from(vec![
            relation_message(
                OUTBOX_OID,
                &["id", "aggregatetype", "aggregateid", "type", "payload"],
            ),
            relation_message(OTHER_OID, &["id"]),
        ]);
        for (xid, txn) in txns.iter().enumerate() {
            if txn.end_lsn > confirmed {
                wal.extend(messages(txn, xid as u32 + 1, true));
            }
        }
        let ended = loop {
            steps += 1;
            prop_assert!(steps < 200_000, "the model made no progress");
            let now = start + Duration::from_millis(steps as u64);
            machine.set_time(clocks(now));
            let faults = steps < fault_steps;
            if mode.stops && machine.stop_deadline().is_none() && rng.chance(2) {
                machine.stop_requested(now + Duration::from_secs(3600));
            }
            let stopping = machine.stop_reached().is_some();
            let read = !stopping
                && machine.can_read()
                && !wal.is_empty()
                && (rng.chance(50) || producer.in_flight() == 0);
            // Now and then the operator releases a parked key (`dead
            // retry`), while the session goes on.
            // The command releases a head only once the slot is confirmed
            // past it: every earlier event of its aggregate is then in the
            // broker's log (read_committed), none still in the relay's
            // producer to be overtaken by the released ones.
            if rng.chance(2)
                && let Some(key) = store.heads.keys().nth(rng.below(4) as usize).cloned()
            {
                store.release(&key, machine.confirmable(), &mut log);
            }
            let outcome = if !producer.parks.is_empty()
                && (rng.chance(40) || !read_possible(&machine, &wal, stopping))
            {
                answer_park(&mut machine, &mut producer, &mut store).unwrap_or(Ok(()))
            } else if read {
                let data = wal.pop_front().unwrap();
                let outcome = machine.on_wal(data, &mut producer);
                // Now and then the session finds nothing more read: a
                // quiet stream (exactly-once: a commit a step later, at a
                // PostgreSQL transaction boundary, if one is open).
                if rng.chance(30) {
                    machine.stream_quiet(now);
                }
                match outcome {
                    Ok(Step::LookUp(relation)) => {
                        prop_assert_eq!(relation.oid, OTHER_OID);
                        machine.relation_classified(&relation, RelationClass::Other);
                        Ok(())
                    }
                    Ok(Step::Continue) => Ok(()),
                    Err(e) => Err(e),
                }
            } else if let Some(reports) = answer(&mut producer, &mut log, faults && !stopping) {
                let mut outcome = Ok(());
                for report in reports {
                    outcome = machine.on_report(report, &mut producer);
                    if outcome.is_err() {
                        break;
                    }
                }
                outcome
            } else if wal.is_empty() || stopping {
                // Everything read (or the stop reached) and answered: the
                // session ends as a graceful stop does, exactly-once
                // committing what was handed over whole.
                if mode.exactly_once
                    && let Err(e) = commit_if_due(
                        &mut machine,
                        &mut producer,
                        &mut log,
                        (now, true),
                        &mut checkpoints,
                    )
                {
                    break Some(e);
                }
                break None;
            } else {
                // Nothing in flight and reading paused: only a full queue's
                // retry can be waiting, and it waits for a report that
                // never comes. That would be a stuck session.
                prop_assert!(producer.parks.is_empty(), "parks left unanswered");
                prop_assert!(
                    machine.can_read(),
                    "stuck: reading paused with nothing in flight: pending {} parks waiting {} outgoing {:?} isolation {:?}",
                    machine.pending_events(),
                    machine.parks_waiting(),
                    machine.outgoing,
                    machine.isolation
                );
                Ok(())
            };
            if machine.nudge_due() {
                // A nudge only hurries the producer; exactly-once commits
                // instead.
                prop_assert!(!mode.exactly_once, "exactly-once nudged the producer");
            }
            let outcome = match outcome {
                Ok(()) if mode.exactly_once => commit_if_due(
                    &mut machine,
                    &mut producer,
                    &mut log,
                    (now, false),
                    &mut checkpoints,
                ),
                other => other,
            };
            check(txns, machine.confirmable(), &log, &store)?;
            // Every record's bytes are given back with its report: none
            // left counted once nothing is pending.
            prop_assert!(
                machine.pending_events() > 0 || machine.pending_bytes() == 0,
                "{} bytes in flight with no event pending",
                machine.pending_bytes()
            );
            if mode.exactly_once {
                prop_assert!(
                    machine.confirmable() <= machine.confirmed(),
                    "exactly-once confirmable {} past the acknowledged {}",
                    machine.confirmable(),
                    machine.confirmed()
                );
            }
            if let Some(deletable) = machine.take_deletable() {
                check_deletable(txns, &deletable, machine.confirmable(), (&log, &store))?;
                deleted.extend(deletable.ids);
            }
            if let Err(e) = outcome {
                break Some(e);
            }
        };
        confirmed = confirmed.max(machine.confirmable());
        carried = Some(model_position(confirmed));
        // What the last turn (a final commit) made deletable.
        if let Some(deletable) = machine.take_deletable() {
            check_deletable(txns, &deletable, machine.confirmable(), (&log, &store))?;
            deleted.extend(deletable.ids);
        }
        match ended {
            None if machine.stop_deadline().is_some() && !wal.is_empty() => {
                // A graceful stop: everything handed over was answered,
                // and nothing half received is confirmed. The next session
                // starts at the confirmed position.
                prop_assert!(!machine.awaiting_broker());
                prop_assert!(!machine.delivering(), "stopped mid-transaction");
                prop_assert_eq!(machine.stop_verdict(), Stopped::Drained);
            }
            None => {
                // Everything read and answered.
                prop_assert!(!machine.awaiting_broker());
                prop_assert_eq!(machine.stop_verdict(), Stopped::Drained);
                prop_assert!(producer.parks.is_empty(), "parks left unanswered");
                // The operator releases what is still parked: every key's
                // events then arrive, in commit order (checked below).
                while let Some(key) = store.heads.keys().next().cloned() {
                    store.release(&key, Lsn(u64::MAX), &mut log);
                }
                check(txns, confirmed, &log, &store)?;
                let last = txns.last().map_or(Lsn(0x1000), |t| t.end_lsn);
                prop_assert_eq!(confirmed, last, "the last transaction is confirmed");
                for row in txns.iter().flat_map(|t| &t.rows) {
                    prop_assert!(log.acked.contains(&row.id), "row {} lost", row.id);
                    prop_assert!(
                        log.retried.contains(&row.id)
                            || !(row.breaks
                                && log.events.values().flatten().any(|id| id == &row.id)),
                        "row {} broke its contract but was sent as an event",
                        row.id
                    );
                }
                if mode.exactly_once {
                    let mut seen = HashSet::new();
                    for id in &log.delivered {
                        prop_assert!(
                            seen.insert(id.as_str()),
                            "exactly-once: {id} is in the log twice: {:?}",
                            log.delivered
                        );
                    }
                }
                if mode.cleanup {
                    // A row a session skipped as written before (a partial
                    // checkpoint of its transaction) stays: the earlier
                    // session decided its fate, the later one cannot know
                    // whether its dead letter kept the payload.
                    let split: HashSet<Lsn> = checkpoints
                        .iter()
                        .filter_map(|c| c.partial.map(|p| p.commit_lsn))
                        .collect();
                    for (txn, row) in txns.iter().flat_map(|t| t.rows.iter().map(move |r| (t, r))) {
                        prop_assert!(
                            row.message
                                || row.too_large
                                || split.contains(&txn.final_lsn)
                                || deleted.contains(&row.id),
                            "row {} was delivered whole but never handed out for deletion",
                            row.id
                        );
                    }
                }
                return Ok(());
            }
            Some(e) => {
                prop_assert!(
                    !e.is_fatal(),
                    "only transient failures and too-large refusals are injected: {e}"
                );
                // The parking writer is aborted with the session: a batch
                // may have committed without its reports reaching the
                // machine; the rest is replayed.
                let committed = rng.below(producer.parks.len() as u64 + 1) as usize;
                for (request, _) in producer.parks.drain(..).take(committed) {
                    store.write(&request);
                }
                // The relay abandons the producer: its records are purged,
                // its open transaction aborted.
                for (_, tag) in producer.queues.values_mut().flat_map(|q| q.drain(..)) {
                    let purged = transient(&tag);
                    prop_assert!(machine.on_leftover(purged).is_none());
                }
                log.end_transaction(false);
                machine.transaction_ended();
            }
        }
    }
    Err(TestCaseError::fail("more than 200 sessions"))
}

/// Cleanup: what the machine hands out for deletion is at or below the
/// confirmable position, and is a row whose event is in the broker's
/// (visible) log whole: a row too large for the broker has only a
/// truncated dead letter there, so the table must keep it; a message has
/// no row.
fn check_deletable(
    txns: &[Txn],
    deletable: &crate::cleanup::Deletable,
    confirmable: Lsn,
    (log, store): (&BrokerLog, &ParkStore),
) -> Result<(), TestCaseError> {
    prop_assert!(deletable.xids.is_empty(), "the model holds few ids");
    for id in &deletable.ids {
        let (txn, row) = txns
            .iter()
            .find_map(|t| t.rows.iter().find(|r| &r.id == id).map(|r| (t, r)))
            .ok_or_else(|| TestCaseError::fail(format!("{id} deleted but no row")))?;
        prop_assert!(!row.message, "{id} is a message, not a row");
        prop_assert!(
            txn.end_lsn <= confirmable,
            "{id} deleted above the confirmable position {confirmable}"
        );
        // Parked, the parking table holds it whole.
        let parked = store.held.contains(id);
        prop_assert!(
            !row.too_large || parked,
            "{id} deleted though its dead letter lost its payload"
        );
        prop_assert!(
            log.acked.contains(id) || parked,
            "{id} deleted before the broker or the parking table holds it"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_interleavings_never_confirm_past_an_unacked_event_nor_reorder_a_key(
        txns in txns_strategy(),
        seed in any::<u64>(),
        max_in_flight in 1usize..6,
    ) {
        run_model(&txns, seed, max_in_flight)?;
    }

    /// Every combination of delivery mode, cleanup and graceful stops,
    /// over the same random transactions (rows and messages, both
    /// sources) and faults.
    #[test]
    fn every_mode_with_cleanup_and_stops_keeps_the_promise(
        txns in txns_strategy(),
        seed in any::<u64>(),
        max_in_flight in 1usize..6,
        exactly_once in any::<bool>(),
        cleanup in any::<bool>(),
        stops in any::<bool>(),
    ) {
        let mode = Mode { exactly_once, cleanup, stops };
        run_model_in(mode, &txns, seed, max_in_flight)?;
    }
}

#[test]
fn transactions_without_outbox_rows_behind_a_blocked_event_take_constant_space() {
    let settings = settings(10);
    let mut refusals = Refusals::new();
    let mut machine = SessionMachine::new(
        &settings,
        Some(outbox_table()),
        Lsn(0x10),
        &mut refusals,
        clocks(std::time::Instant::now()),
    );
    let mut producer = FakeProducer {
        queues: BTreeMap::new(),
        queue_full_percent: 0,
        transaction_open: false,
        transactional: false,
        rng: Rng(1),
        parks: VecDeque::new(),
    };
    let feed = |machine: &mut SessionMachine<'_>, producer: &mut FakeProducer, data: Bytes| {
        if let Step::LookUp(relation) = machine.on_wal(data, producer).unwrap() {
            machine.relation_classified(&relation, RelationClass::Other);
        }
    };
    feed(
        &mut machine,
        &mut producer,
        relation_message(
            OUTBOX_OID,
            &["id", "aggregatetype", "aggregateid", "type", "payload"],
        ),
    );
    feed(
        &mut machine,
        &mut producer,
        relation_message(OTHER_OID, &["id"]),
    );
    let mut lsn = 0x100;
    let head = Txn {
        rows: vec![Row {
            id: "head".into(),
            key: "k".into(),
            too_large: false,
            breaks: false,
            message: false,
        }],
        final_lsn: Lsn(lsn),
        end_lsn: Lsn(lsn + 8),
    };
    for data in messages(&head, 1, false) {
        feed(&mut machine, &mut producer, data);
    }
    for xid in 2..20_002u32 {
        lsn += 0x20;
        let empty = Txn {
            rows: Vec::new(),
            final_lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 8),
        };
        for data in messages(&empty, xid, false) {
            feed(&mut machine, &mut producer, data);
        }
        assert!(
            machine.queued_transactions() <= 2,
            "the tracker grew to {} entries",
            machine.queued_transactions()
        );
    }
    assert_eq!(
        machine.confirmed(),
        Lsn(0x10),
        "the head is not acknowledged yet"
    );
    let mut log = BrokerLog::default();
    for report in answer(&mut producer, &mut log, false).unwrap() {
        machine.on_report(report, &mut producer).unwrap();
    }
    assert_eq!(machine.confirmed(), Lsn(lsn + 8));
}

/// A producer that takes webhook events too, keeping them for the test.
struct WebhookProducer {
    kafka: FakeProducer,
    webhooks: Vec<(usize, crate::sink::http::WebhookEvent, DeliveryTag)>,
}

impl Producer for WebhookProducer {
    fn send(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
    ) -> Result<(), SendError<DeliveryTag>> {
        self.kafka.send(record, tag)
    }

    fn explain(&self, err: DeliveryError) -> DeliveryError {
        err
    }

    fn send_webhook(
        &mut self,
        sink: usize,
        event: crate::sink::http::WebhookEvent,
        tag: DeliveryTag,
    ) -> Result<(), Box<(crate::sink::http::WebhookEvent, DeliveryTag)>> {
        self.webhooks.push((sink, event, tag));
        Ok(())
    }
}

/// Events a route sends to a webhook sink go there, not to Kafka, in
/// commit order, and count in their transaction like records: it is
/// confirmed only once every one of them is reported handled.
#[test]
fn routed_events_go_to_their_webhook_sink_and_hold_their_transaction() {
    let mut settings = settings(10);
    settings.webhooks.routes = crate::routes::Routes::from_parts(
        vec![(Some("ord*".into()), Some("Placed".into()), 0)],
        vec!["hooks".into()],
    );
    let mut refusals = Refusals::new();
    let mut machine = SessionMachine::new(
        &settings,
        Some(outbox_table()),
        Lsn(0x10),
        &mut refusals,
        clocks(std::time::Instant::now()),
    );
    let mut producer = WebhookProducer {
        kafka: FakeProducer {
            queues: BTreeMap::new(),
            queue_full_percent: 0,
            transaction_open: false,
            transactional: false,
            rng: Rng(1),
            parks: VecDeque::new(),
        },
        webhooks: Vec::new(),
    };
    for data in [
        relation_message(
            OUTBOX_OID,
            &["id", "aggregatetype", "aggregateid", "type", "payload"],
        ),
        relation_message(OTHER_OID, &["id"]),
    ] {
        if let Step::LookUp(relation) = machine.on_wal(data, &mut producer).unwrap() {
            machine.relation_classified(&relation, RelationClass::Other);
        }
    }
    let row = |id: &str, key: &str| Row {
        id: id.into(),
        key: key.into(),
        too_large: false,
        breaks: false,
        message: false,
    };
    let txn = Txn {
        rows: vec![row("a1", "k1"), row("b1", "k2"), row("a2", "k1")],
        final_lsn: Lsn(0x100),
        end_lsn: Lsn(0x108),
    };
    for data in messages(&txn, 1, false) {
        machine.on_wal(data, &mut producer).unwrap();
    }
    assert_eq!(producer.kafka.in_flight(), 0, "nothing went to Kafka");
    let ids: Vec<&str> = producer
        .webhooks
        .iter()
        .map(|(_, e, _)| e.id.as_str())
        .collect();
    assert_eq!(ids, ["a1", "b1", "a2"], "handed over in commit order");
    assert!(producer.webhooks.iter().all(|(sink, e, _)| *sink == 0
        && e.body.as_ref() == format!(r#"{{"id":"{}"}}"#, e.id).as_bytes()));
    let reports: Vec<DeliveryReport<DeliveryTag>> = producer
        .webhooks
        .drain(..)
        .map(|(_, _, tag)| DeliveryReport {
            tag,
            result: Ok(()),
        })
        .collect();
    let last = reports.len() - 1;
    for (i, report) in reports.into_iter().enumerate() {
        assert_eq!(machine.confirmed(), Lsn(0x10), "not before every event");
        machine.on_report(report, &mut producer).unwrap();
        if i == last {
            assert_eq!(machine.confirmed(), Lsn(0x108));
        }
    }
}

/// A machine on the model's outbox, its relations described, fed `txns`,
/// with a producer that never refuses a hand-over.
fn fed_machine<'a>(
    settings: &'a RelaySettings,
    refusals: &'a mut Refusals,
    resume: Option<Option<crate::relay::exactly_once::checkpoint::Partial>>,
    txns: &[Txn],
) -> (SessionMachine<'a>, FakeProducer) {
    let mut machine = SessionMachine::new(
        settings,
        Some(outbox_table()),
        Lsn(0x10),
        refusals,
        clocks(std::time::Instant::now()),
    );
    if let Some(partial) = resume {
        machine = machine.exactly_once(partial, model_bounds());
    }
    let mut producer = FakeProducer {
        queues: BTreeMap::new(),
        queue_full_percent: 0,
        transaction_open: false,
        transactional: false,
        rng: Rng(7),
        parks: VecDeque::new(),
    };
    let mut feed = |data: Bytes| {
        if let Step::LookUp(relation) = machine.on_wal(data, &mut producer).unwrap() {
            let class = if relation.oid == OUTBOX_OID {
                RelationClass::Outbox
            } else {
                RelationClass::Other
            };
            machine.relation_classified(&relation, class);
        }
    };
    feed(relation_message(
        OUTBOX_OID,
        &["id", "aggregatetype", "aggregateid", "type", "payload"],
    ));
    feed(relation_message(OTHER_OID, &["id"]));
    for (xid, txn) in txns.iter().enumerate() {
        for data in messages(txn, xid as u32 + 1, false) {
            feed(data);
        }
    }
    (machine, producer)
}

/// Feeds `wal` to `machine` message by message while it may read, and
/// answers one partition's head (no faults) while it may not, until every
/// message was read and answered; calls `watch` after each step with the
/// records the producer holds.
fn drain_paced(
    machine: &mut SessionMachine<'_>,
    producer: &mut FakeProducer,
    log: &mut BrokerLog,
    mut wal: VecDeque<Bytes>,
    mut watch: impl FnMut(&SessionMachine<'_>, &FakeProducer),
) {
    loop {
        if machine.can_read()
            && let Some(data) = wal.pop_front()
        {
            if let Step::LookUp(relation) = machine.on_wal(data, producer).unwrap() {
                machine.relation_classified(&relation, RelationClass::Other);
            }
        } else if let Some(reports) = answer(producer, log, false) {
            for report in reports {
                machine.on_report(report, producer).unwrap();
            }
        } else {
            assert!(
                wal.is_empty(),
                "stuck: reading paused with nothing in flight"
            );
            return;
        }
        watch(machine, producer);
    }
}

/// Reading pauses once the records handed over and not yet acknowledged
/// reach `max_in_flight_bytes`, far below `max_in_flight` events, and
/// resumes as their reports free the bytes: the bound holds through the
/// drain (overshot by the one record that reached it, at most), and every
/// event is delivered in order.
#[test]
fn reading_pauses_at_the_byte_bound_and_resumes_as_reports_free_it() {
    let mut settings = settings(10_000);
    settings.max_in_flight_bytes = 2_000;
    let mut refusals = Refusals::new();
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    let ids: Vec<String> = (0..40).map(|i| format!("row-{i:02}")).collect();
    let txn = Txn {
        rows: ids
            .iter()
            .map(|id| Row {
                id: id.clone(),
                key: "k".into(),
                too_large: false,
                breaks: false,
                message: false,
            })
            .collect(),
        final_lsn: Lsn(0x100),
        end_lsn: Lsn(0x108),
    };
    let mut log = BrokerLog::default();
    let mut record_size = 0u64;
    let mut peak = 0u64;
    let mut pauses = 0;
    let mut was_paused = false;
    drain_paced(
        &mut machine,
        &mut producer,
        &mut log,
        messages(&txn, 1, false).into(),
        |machine, producer| {
            let held: u64 = producer
                .queues
                .values()
                .flatten()
                .map(|(record, _)| record.size() as u64)
                .sum();
            assert_eq!(
                machine.pending_bytes(),
                held,
                "the bytes of the records held"
            );
            if let Some((record, _)) = producer.queues.values().flatten().next() {
                record_size = record_size.max(record.size() as u64);
            }
            peak = peak.max(held);
            let paused = !machine.can_read();
            if paused && !was_paused {
                pauses += 1;
                assert!(
                    machine.pending_bytes() >= settings.max_in_flight_bytes,
                    "paused at {} bytes, below the bound",
                    machine.pending_bytes()
                );
                assert!(machine.pending_events() < 10_000, "not the event bound");
            }
            was_paused = paused;
        },
    );
    assert!(
        record_size > 0 && record_size < 1_000,
        "records of {record_size} bytes"
    );
    assert!(pauses >= 2, "reading paused at the bound: {pauses} times");
    assert!(
        peak < settings.max_in_flight_bytes + record_size,
        "peak {peak} bytes in flight, bound {} and records of {record_size}",
        settings.max_in_flight_bytes
    );
    assert_eq!(machine.pending_bytes(), 0);
    assert!(machine.can_read());
    assert_eq!(log.delivered, ids, "every event once, in order");
    assert_eq!(machine.confirmed(), Lsn(0x108));
}

/// A bound smaller than any record lets one record go at a time, never
/// none: each one alone in flight, all delivered in order.
#[test]
fn a_record_larger_than_the_byte_bound_still_goes_alone() {
    let mut settings = settings(10_000);
    settings.max_in_flight_bytes = 1;
    let mut refusals = Refusals::new();
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    let txns = [
        table_rows(&["a", "b", "c"], 0x100),
        table_rows(&["d"], 0x200),
    ];
    let mut wal = VecDeque::new();
    for (xid, txn) in txns.iter().enumerate() {
        wal.extend(messages(txn, xid as u32 + 1, false));
    }
    let mut log = BrokerLog::default();
    let mut most = 0;
    drain_paced(
        &mut machine,
        &mut producer,
        &mut log,
        wal,
        |machine, producer| {
            most = most.max(producer.in_flight());
            if producer.in_flight() > 0 {
                assert!(!machine.can_read(), "reading goes on past the bound");
            }
        },
    );
    assert_eq!(most, 1, "one record at a time");
    assert_eq!(log.delivered, ["a", "b", "c", "d"]);
    assert_eq!(machine.pending_bytes(), 0);
    assert_eq!(machine.confirmed(), Lsn(0x208));
}

fn table_rows(ids: &[&str], final_lsn: u64) -> Txn {
    Txn {
        rows: ids
            .iter()
            .map(|id| Row {
                id: (*id).into(),
                key: format!("k-{id}"),
                too_large: false,
                breaks: false,
                message: false,
            })
            .collect(),
        final_lsn: Lsn(final_lsn),
        end_lsn: Lsn(final_lsn + 8),
    }
}

/// Exactly-once: every record acknowledged is not yet confirmable, nor are
/// its rows deletable, nor its refusal notes forgotten: the Kafka
/// transaction holding them has not committed. At the commit, all three.
/// (At-least-once, the acknowledgement is enough: the same feed shows it.)
#[test]
fn exactly_once_confirms_deletes_and_forgets_only_at_the_committed_checkpoint() {
    let mut settings = settings(10);
    settings.source.cleanup = Cleanup::DeleteAfterAck;
    let txn = table_rows(&["a", "b"], 0x100);
    for exactly_once in [false, true] {
        let mut refusals = Refusals::new();
        refusals.insert(
            "a".into(),
            crate::relay::refusals::RowFate {
                commit: Lsn(0x100),
                ..Default::default()
            },
        );
        let resume = exactly_once.then_some(None);
        let (mut machine, mut producer) =
            fed_machine(&settings, &mut refusals, resume, std::slice::from_ref(&txn));
        let mut log = BrokerLog::default();
        while let Some(reports) = answer(&mut producer, &mut log, false) {
            for report in reports {
                machine.on_report(report, &mut producer).unwrap();
            }
        }
        assert_eq!(machine.confirmed(), txn.end_lsn, "acknowledged");
        if exactly_once {
            assert_eq!(machine.confirmable(), Lsn(0x10));
            assert_eq!(machine.take_deletable(), None);
            machine.commit_done(txn.end_lsn, std::time::Instant::now());
        }
        assert_eq!(machine.confirmable(), txn.end_lsn);
        let mut ids = machine
            .take_deletable()
            .expect("the rows, once confirmable")
            .ids;
        ids.sort_unstable();
        assert_eq!(ids, ["a", "b"]);
        drop(machine);
        assert!(refusals.is_empty(), "the note goes once confirmable");
    }
}

/// Exactly-once, resuming at a checkpoint inside a transaction: the events
/// it says are in Kafka are skipped, the rest handed over, and a commit
/// inside the transaction then counts them all.
#[test]
fn a_resumed_transaction_skips_exactly_the_events_already_in_kafka() {
    let settings = settings(10);
    let txn = table_rows(&["first", "second", "third"], 0x100);
    let mut refusals = Refusals::new();
    let partial = crate::relay::exactly_once::checkpoint::Partial {
        commit_lsn: txn.final_lsn,
        events: 2,
    };
    let (mut machine, mut producer) =
        fed_machine(&settings, &mut refusals, Some(Some(partial)), &[]);
    let mut stream = messages(&txn, 1, false);
    let commit = stream.pop().expect("the Commit");
    for data in stream {
        machine.on_wal(data, &mut producer).unwrap();
    }
    let sent: Vec<String> = producer
        .queues
        .values()
        .flatten()
        .map(|(_, tag)| tag.row_key.clone())
        .collect();
    assert_eq!(sent, ["third"], "the first two are in Kafka already");
    assert_eq!(
        machine.split_point(),
        Some(Some(crate::relay::exactly_once::checkpoint::Partial {
            commit_lsn: txn.final_lsn,
            events: 3
        }))
    );
    machine.on_wal(commit, &mut producer).unwrap();
    assert_eq!(machine.split_point(), Some(None), "between transactions");
}

/// Exactly-once, resuming inside a transaction that goes by `xmin` (a row
/// of it has an id that cannot be read): the rows the checkpoint says are
/// in Kafka are left in the table (their dead letters were the earlier
/// session's), so the delete by `xmin` spares them by their ids.
#[test]
fn a_resumed_transaction_deleted_by_xmin_spares_the_rows_left() {
    let mut settings = settings(10);
    settings.source.cleanup = Cleanup::DeleteAfterAck;
    let txn = table_rows(&["written-1", "written-2", "new"], 0x100);
    let mut refusals = Refusals::new();
    let partial = crate::relay::exactly_once::checkpoint::Partial {
        commit_lsn: txn.final_lsn,
        events: 2,
    };
    let (mut machine, mut producer) =
        fed_machine(&settings, &mut refusals, Some(Some(partial)), &[]);
    let mut stream = messages(&txn, 1, false);
    let commit = stream.pop().expect("the Commit");
    // A row whose id is null: the transaction is deleted by `xmin`.
    let text = |s: &str| TupleValue::Text(Bytes::copy_from_slice(s.as_bytes()));
    stream.push(encode(&Message::Insert(Insert {
        xid: None,
        relation_id: OUTBOX_OID,
        tuple: pgoutput::TupleData {
            columns: vec![
                TupleValue::Null,
                text("order"),
                text("k-null"),
                text("Placed"),
                text("{}"),
            ],
        },
    })));
    stream.push(commit);
    for data in stream {
        machine.on_wal(data, &mut producer).unwrap();
    }
    let mut log = BrokerLog::default();
    while let Some(reports) = answer(&mut producer, &mut log, false) {
        for report in reports {
            machine.on_report(report, &mut producer).unwrap();
        }
    }
    machine.commit_done(txn.end_lsn, std::time::Instant::now());
    let deletable = machine.take_deletable().expect("the transaction's rows");
    assert_eq!(deletable.ids, ["new"]);
    assert_eq!(deletable.xids, [1]);
    let mut spared = deletable.keep.clone();
    spared.sort_unstable();
    assert_eq!(spared, ["written-1", "written-2"], "{deletable:?}");
}

/// A stop asked mid-transaction reads on to its Commit: the stream may end
/// only once nothing is half received (the events sent become
/// confirmable); asked between transactions, it ends at once. Either way
/// one message per wake-up from then on, so nothing past the Commit is read.
#[test]
fn a_stop_mid_transaction_waits_for_its_commit_and_reads_one_message_at_a_time() {
    let settings = settings(10);
    let mut refusals = Refusals::new();
    let txn = table_rows(&["a", "b"], 0x100);
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    assert_eq!(machine.messages_per_wake(), BUFFERED_ITEMS_PER_WAKE);
    let mut stream = messages(&txn, 1, false);
    let commit = stream.pop().expect("the Commit");
    for data in stream {
        machine.on_wal(data, &mut producer).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    assert_eq!(machine.stop_requested(deadline), None, "mid-transaction");
    assert_eq!(machine.stop_deadline(), Some(deadline));
    assert_eq!(machine.stop_reached(), None);
    assert_eq!(machine.messages_per_wake(), 1, "stopping: one at a time");
    machine.on_wal(commit, &mut producer).unwrap();
    assert_eq!(machine.stop_reached(), Some(deadline), "at its Commit");

    let (mut idle, _) = fed_machine(&settings, &mut refusals, None, &[]);
    assert_eq!(
        idle.stop_requested(deadline),
        Some(deadline),
        "between transactions"
    );
}

/// A graceful stop's verdict: undrained while events wait for the broker
/// or a transaction is half received (its events are sent again at the
/// next start), drained once its Commit arrived and every event was
/// acknowledged.
#[test]
fn a_stop_is_drained_only_with_nothing_unacknowledged_and_nothing_half_received() {
    let settings = settings(10);
    let mut refusals = Refusals::new();
    let txn = table_rows(&["a", "b"], 0x100);
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    assert_eq!(machine.stop_verdict(), Stopped::Drained, "nothing sent");
    let mut stream = messages(&txn, 1, false);
    let commit = stream.pop().expect("the Commit");
    for data in stream {
        machine.on_wal(data, &mut producer).unwrap();
    }
    machine.stop_requested(std::time::Instant::now() + Duration::from_secs(5));
    assert_eq!(
        machine.stop_verdict(),
        Stopped::Undrained { pending: 2 },
        "two events wait for the broker"
    );
    let tags: Vec<DeliveryTag> = producer
        .queues
        .values_mut()
        .flat_map(|q| q.drain(..))
        .map(|(_, tag)| tag)
        .collect();
    for tag in tags {
        let report = DeliveryReport {
            tag,
            result: Ok(()),
        };
        machine.on_report(report, &mut producer).unwrap();
    }
    assert_eq!(
        machine.stop_verdict(),
        Stopped::Undrained { pending: 0 },
        "acknowledged, but the transaction's Commit has not arrived"
    );
    machine.on_wal(commit, &mut producer).unwrap();
    assert_eq!(machine.stop_verdict(), Stopped::Drained);
}

/// Exactly-once takes one message and one report per wake-up, so a
/// commit due is never delayed behind a burst; at-least-once takes what
/// is buffered.
#[test]
fn exactly_once_takes_one_item_per_wake_up() {
    let settings = settings(10);
    let mut refusals = Refusals::new();
    let (alo, _) = fed_machine(&settings, &mut refusals, None, &[]);
    assert_eq!(alo.reports_per_wake(), BUFFERED_ITEMS_PER_WAKE);
    drop(alo);
    let (eos, _) = fed_machine(&settings, &mut refusals, Some(None), &[]);
    assert_eq!(eos.reports_per_wake(), 1);
    assert_eq!(eos.messages_per_wake(), 1);
}

/// Feeds the whole of `txn` (transaction id `xid`) to `machine`.
fn feed(machine: &mut SessionMachine<'_>, producer: &mut FakeProducer, txn: Txn, xid: u32) {
    for data in messages(&txn, xid, false) {
        machine.on_wal(data, producer).unwrap();
    }
}

/// At-least-once, a quiet stream nudges the producer when WAL arrived
/// after a pause ([`NUDGE_AFTER_PAUSE`]) since the last nudge, records went
/// to it since, and no older one still waits for the broker (nothing is
/// queueing, nothing more is coming to batch them with), once for those
/// records; not for WAL that came without a pause, nor while older records
/// wait (events arrive faster than the broker answers: the linger batches
/// them). Exactly-once never nudges: it commits.
#[test]
fn a_quiet_stream_nudges_the_producer_after_a_pause_when_nothing_older_waits() {
    let settings = settings(100);
    let mut refusals = Refusals::new();
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    let t0 = machine.now();
    let after_pause = t0 + NUDGE_AFTER_PAUSE;
    machine.stream_quiet(t0);
    assert!(!machine.nudge_due(), "nothing sent");
    machine.set_time(clocks(after_pause));
    feed(
        &mut machine,
        &mut producer,
        table_rows(&["a1", "a2", "a3"], 0x100),
        1,
    );
    assert!(!machine.nudge_due(), "not read to the end yet");
    machine.stream_quiet(after_pause);
    assert!(machine.nudge_due(), "after a pause, nothing older waits");
    assert!(!machine.nudge_due(), "already nudged for them");
    // b comes without a pause: the linger batches it.
    feed(&mut machine, &mut producer, table_rows(&["b"], 0x200), 2);
    machine.stream_quiet(after_pause);
    assert!(!machine.nudge_due(), "no pause before it");
    // c after a pause, while the first transaction still waits.
    machine.set_time(clocks(after_pause + NUDGE_AFTER_PAUSE));
    feed(&mut machine, &mut producer, table_rows(&["c"], 0x300), 3);
    machine.stream_quiet(after_pause + NUDGE_AFTER_PAUSE);
    assert!(!machine.nudge_due(), "older records wait: queueing");
    let mut log = BrokerLog::default();
    while let Some(reports) = answer(&mut producer, &mut log, false) {
        for report in reports {
            machine.on_report(report, &mut producer).unwrap();
        }
    }
    assert!(machine.nudge_due(), "b and c were never nudged for");
    drop(machine);
    let (mut eos, mut producer) = fed_machine(&settings, &mut refusals, Some(None), &[]);
    eos.stream_quiet(t0);
    eos.set_time(clocks(after_pause));
    feed(&mut eos, &mut producer, table_rows(&["d"], 0x400), 4);
    eos.stream_quiet(after_pause);
    assert!(!eos.nudge_due(), "exactly-once commits instead");
}

/// One single-row transaction per read, `gap` apart from `from` on, `n`
/// of them, each read to the end of the stream (as the session reads a
/// stream that keeps up): returns the time of the last read.
fn read_one_by_one(
    machine: &mut SessionMachine<'_>,
    producer: &mut FakeProducer,
    from: std::time::Instant,
    gap: Duration,
    n: u32,
    first_xid: u32,
) -> std::time::Instant {
    let mut at = from;
    for i in 0..n {
        at = from + gap * i;
        machine.set_time(clocks(at));
        let xid = first_xid + i;
        let txn = table_rows(&[&format!("r{xid}")], 0x1000 + u64::from(xid) * 0x100);
        for data in messages(&txn, xid, false) {
            machine.on_wal(data, producer).unwrap();
        }
        machine.stream_quiet(at);
    }
    at
}

/// At-least-once, once WAL arrives faster than `BUSY_MESSAGES` per
/// [`RATE_PERIOD`] (here 2,500 transactions a second, of 4 messages each
/// with their business row), a stream read to its end is left unread until
/// a window after the last read began (at this rate [`READ_WINDOW_MAX`]),
/// and each read is sent at once (a nudge per read, whether or not older
/// records still wait); before the rate is known, and once the window has
/// passed, nothing is held.
#[test]
fn a_busy_stream_is_read_once_per_window_and_each_read_is_sent_at_once() {
    let settings = settings(100_000);
    let mut refusals = Refusals::new();
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    let t0 = machine.now();
    let gap = Duration::from_micros(400);
    // The first period: the rate is not known yet, every read is taken
    // at once and batched by the linger (no pause, nothing nudged).
    let mut at = t0;
    for i in 0..23 {
        at = read_one_by_one(&mut machine, &mut producer, t0 + gap * i, gap, 1, 10 + i);
        assert_eq!(
            machine.read_hold(),
            None,
            "read {i}: the rate is not known yet"
        );
    }
    assert!(
        !machine.nudge_due(),
        "no pause, not busy: the linger batches"
    );
    // Past the first period (23 transactions, 4 messages each, in 9 ms:
    // busy from the first message after it).
    let last_read = read_one_by_one(
        &mut machine,
        &mut producer,
        at + RATE_PERIOD / 5,
        gap,
        5,
        100,
    );
    assert_eq!(
        machine.read_hold(),
        Some(last_read + READ_WINDOW_MAX),
        "busy at 2,500/s: left unread until the longest window after the last read began"
    );
    assert!(
        machine.nudge_due(),
        "busy: each read is a batch, sent at once"
    );
    assert!(!machine.nudge_due(), "already nudged for it");
    machine.set_time(clocks(last_read + READ_WINDOW_MAX));
    assert_eq!(machine.read_hold(), None, "the window has passed");
    // A read that is not to the end (a drain) is never held.
    let txn = table_rows(&["drain"], 0x9_0000);
    for data in messages(&txn, 900, false) {
        machine.on_wal(data, &mut producer).unwrap();
    }
    assert_eq!(machine.read_hold(), None, "not read to the end: read on");
    // A stop under way is never held.
    machine.stream_quiet(last_read + READ_WINDOW_MAX);
    assert!(machine.read_hold().is_some());
    machine.stop_requested(last_read + Duration::from_secs(30));
    assert_eq!(machine.read_hold(), None, "a stop reads on to its end");
}

/// The read window follows the arrival rate: about `READ_BATCH_MESSAGES`
/// messages' worth, within [`READ_WINDOW_MIN`]..=[`READ_WINDOW_MAX`]. A
/// busy stream at 10,000 transactions a second (4 messages each) is held
/// half as long as one at 2,500 (above), and one slowing down gets the
/// longer window from its next whole period.
#[test]
fn a_busy_streams_read_window_follows_its_rate() {
    let ms = Duration::from_millis(1);
    assert_eq!(read_window(75), 2 * ms, "2,500/s: the longest");
    assert_eq!(read_window(150), 2 * ms, "5,000/s: 30 messages take 2 ms");
    assert_eq!(read_window(200), Duration::from_micros(1_500));
    assert_eq!(read_window(300), ms, "10,000/s: 30 messages take 1 ms");
    assert_eq!(read_window(749), ms, "faster still: the shortest");
    assert_eq!(read_window(0), 2 * ms);
    let settings = settings(100_000);
    let mut refusals = Refusals::new();
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    let t0 = machine.now();
    // 10,000 transactions a second: 400 messages in the first period.
    let fast = Duration::from_micros(100);
    let last_read = read_one_by_one(&mut machine, &mut producer, t0, fast, 110, 10);
    assert_eq!(
        machine.read_hold(),
        Some(last_read + READ_WINDOW_MIN),
        "10,000/s: the shortest window"
    );
    // Then 2,000 a second, two whole periods and into the next.
    let slow = Duration::from_micros(500);
    let last_read = read_one_by_one(&mut machine, &mut producer, last_read + slow, slow, 45, 200);
    assert_eq!(
        machine.read_hold(),
        Some(last_read + READ_WINDOW_MAX),
        "2,000/s (80 messages a period, still busy): the longest window"
    );
}

/// At 1,000 single-row transactions a second (30 messages a period, under
/// `BUSY_MESSAGES`) nothing is ever held: each event is read as it
/// arrives and, after its pause, sent at once. A busy stream that pauses
/// is not busy any more at its next read; a backlog drained faster than
/// `DRAIN_MESSAGES` a period is not held either. Exactly-once never is.
#[test]
fn a_slow_stream_a_paused_one_and_exactly_once_are_never_held() {
    let settings = settings(100_000);
    let mut refusals = Refusals::new();
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    let t0 = machine.now();
    let ms = Duration::from_millis(1);
    for i in 0..100 {
        read_one_by_one(&mut machine, &mut producer, t0 + ms * i, ms, 1, 10 + i);
        assert_eq!(machine.read_hold(), None, "read {i} at 1,000/s");
    }
    // Busy at 5,000/s for 20 ms, then a pause of a second.
    let gap = Duration::from_micros(200);
    let busy_from = t0 + ms * 100;
    let at = read_one_by_one(&mut machine, &mut producer, busy_from, gap, 100, 1_000);
    assert!(machine.read_hold().is_some(), "busy");
    let after_pause = at + Duration::from_secs(1);
    read_one_by_one(&mut machine, &mut producer, after_pause, gap, 1, 2_000);
    assert_eq!(machine.read_hold(), None, "the pause ended the busy period");
    // A backlog drained at 40,000 transactions a second, read to its end
    // now and then: the linger batches it, nothing is held.
    let drain_from = after_pause + Duration::from_secs(1);
    let fast = Duration::from_micros(25);
    for i in 0..40 {
        read_one_by_one(
            &mut machine,
            &mut producer,
            drain_from + fast * 20 * i,
            fast,
            20,
            3_000 + i * 20,
        );
        assert_eq!(machine.read_hold(), None, "drain read {i}");
    }
    drop(machine);
    let (mut eos, mut producer) = fed_machine(&settings, &mut refusals, Some(None), &[]);
    let t0 = eos.now();
    read_one_by_one(&mut eos, &mut producer, t0, gap, 60, 10);
    assert_eq!(
        eos.read_hold(),
        None,
        "exactly-once commits by its own bounds"
    );
}

/// The heartbeat is due once no outbox row or message arrived for a whole
/// interval, and not while the last one is still being written.
#[test]
fn a_heartbeat_is_due_after_an_idle_interval_and_not_while_one_runs() {
    let settings = settings(10);
    let mut refusals = Refusals::new();
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    let every = Duration::from_secs(10);
    let t0 = machine.now();
    assert!(!machine.heartbeat_due(t0 + Duration::from_secs(5), every, false));
    assert!(machine.heartbeat_due(t0 + every, every, false), "idle");
    assert!(
        !machine.heartbeat_due(t0 + every, every, true),
        "one running"
    );
    for data in messages(&table_rows(&["a"], 0x100), 1, false) {
        machine.on_wal(data, &mut producer).unwrap();
    }
    let t1 = t0 + Duration::from_secs(12);
    assert!(!machine.heartbeat_due(t1, every, false), "a row arrived");
    assert!(!machine.heartbeat_due(t1 + Duration::from_secs(9), every, false));
    assert!(machine.heartbeat_due(t1 + every, every, false));
}

/// Rows inserted into the outbox table while `postgres.source = "messages"`
/// are published all the same, and the machine says so once per session:
/// not by logging (it does no I/O) but as a notice the shell takes and
/// logs. Every row after the first adds no notice; a new session (a new
/// machine) says it again.
#[test]
fn rows_in_messages_mode_are_a_notice_returned_once_per_session() {
    let mut settings = settings(10);
    settings.source.kind = Source::Messages;
    let first = table_rows(&["a", "b"], 0x100);
    let second = table_rows(&["c"], 0x200);
    let said = vec![Notice::RowsInMessagesMode {
        table: "public.outbox".into(),
    }];

    let mut refusals = Refusals::new();
    let (mut machine, mut producer) =
        fed_machine(&settings, &mut refusals, None, std::slice::from_ref(&first));
    assert_eq!(machine.take_notices(), said, "said at the first row");
    assert_eq!(machine.take_notices(), [], "taken, so said once");
    for data in messages(&second, 2, false) {
        machine.on_wal(data, &mut producer).unwrap();
    }
    assert_eq!(machine.take_notices(), [], "not again in the same session");
    let sent: Vec<String> = producer
        .queues
        .values()
        .flatten()
        .map(|(_, tag)| tag.row_key.clone())
        .collect();
    assert_eq!(sent.len(), 3, "every row published, not skipped: {sent:?}");
    drop(machine);

    let mut refusals = Refusals::new();
    let (mut machine, _) = fed_machine(&settings, &mut refusals, None, &[second]);
    assert_eq!(machine.take_notices(), said, "a new session says it again");
}

/// At-least-once, the report of the one event waiting for the broker may
/// wait for the session's next turn for [`REPORTS_WAIT`] after it went to
/// the producer; never with none in flight or more than one (a failure's
/// purge of the records behind it must not wait), nor past the wait, nor
/// with reading held back (the window full: only reports free it), nor
/// during a stop (its drain waits for them), nor exactly-once (a commit
/// waits for them).
#[test]
fn a_report_waits_for_the_next_turn_only_for_the_one_event_in_flight() {
    let settings = settings(10);
    let mut refusals = Refusals::new();
    let (mut machine, mut producer) = fed_machine(&settings, &mut refusals, None, &[]);
    let t0 = machine.now();
    assert_eq!(machine.reports_wait_until(), None, "nothing sent");
    feed(&mut machine, &mut producer, table_rows(&["a"], 0x100), 1);
    assert_eq!(
        machine.reports_wait_until(),
        Some(t0 + REPORTS_WAIT),
        "a sent at t0, waiting for the broker"
    );
    let later = t0 + REPORTS_WAIT / 2;
    machine.set_time(clocks(later));
    assert_eq!(machine.reports_wait_until(), Some(t0 + REPORTS_WAIT));
    machine.set_time(clocks(t0 + REPORTS_WAIT));
    assert_eq!(machine.reports_wait_until(), None, "the wait is over");
    machine.set_time(clocks(later));
    feed(&mut machine, &mut producer, table_rows(&["b"], 0x200), 2);
    assert_eq!(machine.pending_events(), 2);
    assert_eq!(
        machine.reports_wait_until(),
        None,
        "b is behind a: a's failure must purge it at once"
    );
    let mut log = BrokerLog::default();
    while let Some(reports) = answer(&mut producer, &mut log, false) {
        for report in reports {
            machine.on_report(report, &mut producer).unwrap();
        }
    }
    assert_eq!(machine.reports_wait_until(), None, "nothing in flight");
    feed(&mut machine, &mut producer, table_rows(&["c"], 0x300), 3);
    assert_eq!(
        machine.reports_wait_until(),
        Some(later + REPORTS_WAIT),
        "c sent at the time last told"
    );
    machine.stop_requested(later + Duration::from_secs(5));
    assert_eq!(machine.reports_wait_until(), None, "a stop drains");
    drop(machine);
    let one = self::settings(1);
    let (mut full, mut producer) = fed_machine(&one, &mut refusals, None, &[]);
    feed(&mut full, &mut producer, table_rows(&["d"], 0x400), 4);
    assert!(!full.can_read(), "one in flight fills a window of one");
    assert_eq!(
        full.reports_wait_until(),
        None,
        "only reports free the window"
    );
    drop(full);
    let (mut eos, mut producer) = fed_machine(&settings, &mut refusals, Some(None), &[]);
    feed(&mut eos, &mut producer, table_rows(&["e"], 0x500), 5);
    assert_eq!(eos.pending_events(), 1);
    assert_eq!(
        eos.reports_wait_until(),
        None,
        "exactly-once commits wait for reports"
    );
}
