//! The session machine's parking decisions ("Per-aggregate order" through
//! a failure, docs/design.md): which aggregates are parked, what is parked
//! behind them, and what a report of the parking writer means.
//!
//! * A dead letter whose event's sink (or route) says
//!   `after_dead_letter = "park"` parks its aggregate: a head request goes
//!   to the writer, counted in the dead letter's transaction, and from
//!   then on every later event of the aggregate (by its place in the
//!   stream, so a replay of events before the head still sends them) is
//!   handed to the writer instead of its sink, counted in its transaction
//!   like a record: the transaction is confirmed only once the row is
//!   committed.
//! * The live heads are loaded before the session's first event
//!   ([`SessionMachine::with_parked`]): a restart, a standby taking over
//!   or another shard's relay knows what is parked.
//! * The writer answers each request in the order made: parked, or
//!   released (the operator released the aggregate meanwhile: the event
//!   goes to its sink now, in the order the answers come, which is commit
//!   order). The aggregate is live again once it was found released and
//!   nothing of it waits for the writer; until then its new events go to
//!   the writer too, so none overtakes one handed back.
//! * Exactly-once: a Kafka transaction commits only when nothing waits for
//!   the writer (`commit.rs`), so a checkpoint never covers an event that is
//!   neither in Kafka nor in the parking table.
//!
//! Pure like the rest of the machine: the writer is behind [`Producer::park`].

use std::collections::{HashMap, VecDeque};

use super::*;
use crate::deadletter::{AGGREGATE_TYPE_HEADER, TYPE_HEADER};
use crate::parking::{Aggregate, Head, Outcome, Parcel, Place, Request};
use crate::routes::AfterDeadLetter;

/// What travels with a request to the writer and back.
#[derive(Debug)]
pub struct ParkTag {
    pub tag: DeliveryTag,
    pub aggregate: Aggregate,
    pub place: Place,
}

/// The parked aggregates of a session.
#[derive(Debug, Default)]
pub(super) struct Parked {
    held: HashMap<Aggregate, Held>,
    /// How many held aggregates have each aggregate id: an event whose id
    /// is not here is live, told without building its [`Aggregate`] (the
    /// hot path while anything is parked).
    ids: HashMap<String, u32>,
    /// Requests handed to the writer and not answered yet, and events it
    /// handed back not yet handed to their sink.
    waiting: u64,
    /// Events the writer handed back (their aggregate released), in the
    /// order it did, waiting for the producer.
    handed_back: VecDeque<(Aggregate, Parcel, DeliveryTag)>,
}

#[derive(Debug)]
struct Held {
    /// Events placed after this are parked.
    head: Place,
    /// Requests of this aggregate the writer has not answered.
    waiting: u64,
    /// The writer found the aggregate released.
    released: bool,
}

impl Parked {
    /// The head an event at `place` of `aggregate` waits behind, if any.
    fn holds(&self, aggregate: &Aggregate, place: Place) -> bool {
        self.held
            .get(aggregate)
            .is_some_and(|held| place > held.head)
    }

    fn hold(&mut self, aggregate: Aggregate, held: Held) {
        *self.ids.entry(aggregate.aggregate_id.clone()).or_insert(0) += 1;
        self.held.insert(aggregate, held);
    }

    fn release(&mut self, aggregate: &Aggregate) {
        if self.held.remove(aggregate).is_some()
            && let Some(n) = self.ids.get_mut(&aggregate.aggregate_id)
        {
            *n -= 1;
            if *n == 0 {
                self.ids.remove(&aggregate.aggregate_id);
            }
        }
    }
}

impl SessionMachine<'_> {
    /// The aggregates parked when the session starts (the parking table's
    /// live heads).
    #[must_use]
    pub fn with_parked(mut self, heads: Vec<Head>) -> Self {
        for head in heads {
            self.parked.hold(
                head.aggregate,
                Held {
                    head: head.place,
                    waiting: 0,
                    released: false,
                },
            );
        }
        self
    }

    /// Requests waiting for the parking writer.
    pub fn parks_waiting(&self) -> u64 {
        self.parked.waiting
    }

    /// Aggregates this session holds as parked.
    pub fn parked_aggregates(&self) -> usize {
        self.parked.held.len()
    }

    /// The place in the stream of the event being decided: its transaction
    /// and its position among the transaction's outbox events.
    pub(super) fn place(&self, lsn: Lsn) -> Place {
        Place {
            commit_lsn: lsn,
            position: self.txn_events.saturating_sub(1),
        }
    }

    /// Whether `row`'s event waits behind a parked head.
    pub(super) fn parked_behind(&self, row: &crate::outbox::OutboxRow, lsn: Lsn) -> bool {
        self.parked.ids.contains_key(row.aggregate_id.as_str())
            && self.parked.holds(
                &Aggregate::new(row.aggregate_type.as_str(), row.aggregate_id.as_str()),
                self.place(lsn),
            )
    }

    /// Parks `row`'s event (built as `parcel`) behind its aggregate's head.
    pub(super) fn park_event(
        &mut self,
        row: &crate::outbox::OutboxRow,
        parcel: Parcel,
        mut tag: DeliveryTag,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        let aggregate = Aggregate::new(row.aggregate_type.as_str(), row.aggregate_id.as_str());
        let place = self.place(tag.lsn);
        self.tracker.add_event(tag.txn)?;
        // Held until the writer answers: in its channel, or handed back.
        self.hold(&mut tag, parcel.size());
        let request = Request::Event {
            aggregate: aggregate.clone(),
            event_id: row.id.clone(),
            place,
            parcel,
        };
        self.hand_to_writer(request, tag, aggregate, place, producer)
    }

    /// Whether a dead letter parks its aggregate (its sink or route says
    /// `park`), and which, with the reason: read from the dead letter
    /// itself (its key and role headers), so every way to a dead letter
    /// parks alike; one whose aggregate cannot be read parks nothing.
    pub(super) fn dead_letter_parks(
        &self,
        record: &KafkaRecord,
        tag: &DeliveryTag,
    ) -> Option<(Aggregate, String)> {
        let header = |name: &str| {
            record
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| std::str::from_utf8(v).ok())
        };
        let aggregate_type = header(AGGREGATE_TYPE_HEADER)?;
        let aggregate_id = std::str::from_utf8(&tag.key).ok()?;
        let event_type = header(TYPE_HEADER).unwrap_or_default();
        let routes = &self.settings.webhooks.routes;
        if routes.after_dead_letter(aggregate_type, event_type) == AfterDeadLetter::Skip {
            return None;
        }
        let reason = header(crate::deadletter::REASON_HEADER)
            .unwrap_or_default()
            .to_owned();
        Some((Aggregate::new(aggregate_type, aggregate_id), reason))
    }

    /// Parks `aggregate` behind the dead letter of the row `tag` stands
    /// for (handed over just before), or, when it is parked already, puts
    /// the dead letter in its queue (the writer makes it the next head).
    /// Until the writer answers, the aggregate is held from the earlier of
    /// the two: events after either wait for the writer, which knows which
    /// head is live ([`Outcome::Head`]).
    pub(super) fn park_head(
        &mut self,
        (aggregate, reason): (Aggregate, String),
        tag: &DeliveryTag,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        let place = self.place(tag.lsn);
        match self.parked.held.get_mut(&aggregate) {
            // Found released: a new head (its older events still handed
            // back come before it in commit order).
            Some(held) if held.released && place > held.head => {
                held.head = place;
                held.released = false;
            }
            // A replay dead-letters an event before the head an earlier
            // session parked behind (the broker refused it only after that
            // head was decided): the earliest dead letter heads the
            // aggregate, and what follows it is parked (the writer demotes
            // the later head to a dead letter in the queue).
            Some(held) if place < held.head => {
                held.head = place;
                held.released = false;
            }
            // Parked already (a later dead letter, or the head itself
            // replayed).
            Some(_) => {}
            None => {
                self.parked.hold(
                    aggregate.clone(),
                    Held {
                        head: place,
                        waiting: 0,
                        released: false,
                    },
                );
            }
        }
        let head_tag = DeliveryTag {
            txn: tag.txn,
            row_key: tag.row_key.clone(),
            lsn: tag.lsn,
            key: tag.key.clone(),
            dead_letter: true,
            span: None,
            held_bytes: 0,
        };
        self.tracker.add_event(tag.txn)?;
        let request = Request::Head {
            aggregate: aggregate.clone(),
            event_id: tag.row_key.clone(),
            reason,
            place,
        };
        self.hand_to_writer(request, head_tag, aggregate, place, producer)
    }

    fn hand_to_writer(
        &mut self,
        request: Request,
        tag: DeliveryTag,
        aggregate: Aggregate,
        place: Place,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        if let Some(held) = self.parked.held.get_mut(&aggregate) {
            held.waiting += 1;
        }
        self.parked.waiting += 1;
        producer
            .park(
                request,
                ParkTag {
                    tag,
                    aggregate,
                    place,
                },
            )
            .map_err(|_| {
                let error = DeliveryError::ProducerFatal(
                    "an aggregate is parked but this session has no parking writer".into(),
                );
                SessionError::Delivery {
                    reason: failure_reason(&error),
                    error,
                }
            })
    }

    /// The parking writer's answer for one request.
    ///
    /// # Errors
    /// A record handed back and refused by the producer ends the session
    /// (a replay), as a delivery would.
    pub fn on_park_report(
        &mut self,
        report: crate::parking::Report<ParkTag>,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        let ParkTag {
            mut tag,
            aggregate,
            place,
        } = report.tag;
        match report.outcome {
            Outcome::Parked | Outcome::Head => {
                if report.outcome == Outcome::Head
                    && let Some(held) = self.parked.held.get_mut(&aggregate)
                {
                    // The aggregate waits behind this dead letter now,
                    // whatever the writer answered for events before it.
                    held.head = place;
                    held.released = false;
                }
                self.answered(&aggregate);
                if tag.span.is_some() {
                    self.end_span(&mut tag, None);
                }
                self.acknowledged(&tag)?;
                self.forget_confirmed_refusals();
                // A suspect may have waited for this one to be answered.
                self.send_handed_back(producer)?;
                self.send_isolated_when_alone(producer)
            }
            Outcome::Released(parcel) => {
                if let Some(held) = self.parked.held.get_mut(&aggregate)
                    && place > held.head
                {
                    held.released = true;
                }
                // Still counted as waiting until it is handed over, so no
                // new event of the aggregate overtakes it.
                self.parked.handed_back.push_back((aggregate, parcel, tag));
                self.send_handed_back(producer)?;
                self.send_isolated_when_alone(producer)
            }
        }
    }

    /// One request of `aggregate` answered (or its event handed over): the
    /// aggregate is live again once found released with none waiting.
    fn answered(&mut self, aggregate: &Aggregate) {
        self.parked.waiting = self.parked.waiting.saturating_sub(1);
        let live = match self.parked.held.get_mut(aggregate) {
            Some(held) => {
                held.waiting = held.waiting.saturating_sub(1);
                held.released && held.waiting == 0
            }
            None => false,
        };
        if live {
            self.parked.release(aggregate);
        }
    }

    /// Hands the events the writer handed back to their sinks, in the
    /// order they came back, while nothing is held back by a full queue
    /// and no suspect is out alone (one still waiting to go alone waits
    /// for these too: they count as in flight).
    pub(super) fn send_handed_back(&mut self, producer: &mut impl Producer) -> SessionResult<()> {
        while matches!(self.outgoing, Outgoing::Clear)
            && !matches!(self.isolation, Isolation::Sent { .. })
            && let Some((aggregate, parcel, tag)) = self.parked.handed_back.pop_front()
        {
            self.answered(&aggregate);
            match parcel {
                Parcel::Kafka(record) => {
                    if let Some((refused, tag)) = self.send_counted(record, tag, producer)? {
                        return Err(self.replay_for(&tag, refused, true));
                    }
                }
                Parcel::Webhook { sink, event } => {
                    super::webhook::hand_to_webhook(producer, sink, event, tag)?;
                }
            }
        }
        Ok(())
    }

    fn forget_confirmed_refusals(&mut self) {
        forget_confirmed(self.refusals, self.confirmable());
    }
}
