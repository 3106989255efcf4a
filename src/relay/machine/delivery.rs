//! The session machine's hand-off to the broker and what comes back: a
//! row's record or dead letter handed to the [`Producer`] (whole, alone as
//! a suspect, or as a smaller stand-in, as its [`RowFate`] says), the
//! delivery reports, and the refusals that end a session for a replay (or
//! for good). The decisions about the stream itself stay in `machine.rs`.
//!
//! Invariants (those of the machine): the ack tracker confirms only whole
//! transactions whose every record was acknowledged ("Confirm only what the
//! broker holds" in docs/design.md); a suspect is sent alone, with nothing
//! else in flight, so nothing of its key overtakes it ("Per-aggregate
//! order"); a refused row's fate only moves forward until its transaction
//! is confirmed (`refusals.rs`).
//!
//! [`RowFate`]: super::super::refusals::RowFate

use super::*;
use crate::parking::Parcel;

impl SessionMachine<'_> {
    /// Hands what a row or message became to the producer, counted in its
    /// transaction.
    pub(super) fn deliver(
        &mut self,
        routed: Routed,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        match routed {
            Routed::DeadLetter { record, tag } => {
                self.send_dead_letter(record, tag, false, producer)
            }
            Routed::Event {
                mut record,
                mut tag,
                row,
                origin,
                suspect,
            } => {
                if row.trace_parent.is_some() || row.trace_state.is_some() {
                    let trace = TraceContext::of_row(&row);
                    if let Some(part) = TraceContext::dropped(&row, trace.as_ref()) {
                        self.trace_context_dropped(part, &row.id);
                    }
                    if let (Some(tracer), Some(parent)) = (&self.tracer, &trace) {
                        tag.span = tracer.start(parent, &mut record, &row.id);
                    }
                }
                if self.parked_behind(&row, tag.lsn) {
                    // Its aggregate waits behind a dead letter: held in
                    // the parking table, as it would have been sent.
                    let parcel = match self.webhook_of(&row) {
                        None => Parcel::Kafka(record),
                        Some(sink) => match self.webhook_event(&row) {
                            Ok(event) => Parcel::Webhook { sink, event },
                            Err(e) => {
                                let (record, tag) = self.router.dead_letter(
                                    &row,
                                    origin,
                                    e.to_string(),
                                    e.reason_code(),
                                    tag,
                                );
                                return self.send_dead_letter(record, tag, false, producer);
                            }
                        },
                    };
                    return self.park_event(&row, parcel, tag, producer);
                }
                if let Some(sink) = self.webhook_of(&row) {
                    return self.deliver_webhook(sink, &row, origin, tag, producer);
                }
                if suspect {
                    self.isolation = Isolation::Waiting {
                        record,
                        tag,
                        counted: false,
                    };
                    return self.send_isolated_when_alone(producer);
                }
                self.tracker.add_event(tag.txn)?;
                match self.send_counted(record, tag, producer)? {
                    None => Ok(()),
                    // Refused before it left (larger than message.max.bytes,
                    // or its topic is known not to exist): its dead letter
                    // takes its place in the transaction.
                    Some((refused, mut tag)) => {
                        self.end_span(&mut tag, Some(refused.reason()));
                        let (record, tag) = self.router.dead_letter(
                            &row,
                            origin,
                            refused.reason(),
                            refused.kind.reason_code(),
                            tag,
                        );
                        self.send_dead_letter(record, tag, true, producer)
                    }
                }
            }
        }
    }

    /// Sends a dead letter (see [`Self::send_dead_letter_record`]), then
    /// parks its aggregate when its sink says so (`parking.rs`).
    pub(super) fn send_dead_letter(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
        counted: bool,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        let parks = self.dead_letter_parks(&record, &tag);
        let head = parks.is_some().then(|| DeliveryTag {
            span: None,
            ..tag.clone()
        });
        self.send_dead_letter_record(record, tag, counted, producer)?;
        match (parks, head) {
            (Some(parks), Some(head)) => self.park_head(parks, &head, producer),
            _ => Ok(()),
        }
    }

    /// Sends a dead letter as its row's fate says: whole, alone, or as a
    /// stand-in without its payload. `counted`: it replaces an event already
    /// counted in its transaction.
    fn send_dead_letter_record(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
        counted: bool,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        let fate = if self.refusals.is_empty() {
            DeadLetterFate::Send
        } else {
            self.refusals
                .get(&tag.row_key)
                .map_or(DeadLetterFate::Send, |f| f.dead_letter)
        };
        let record = match fate {
            DeadLetterFate::Send => record,
            DeadLetterFate::Truncate => {
                self.keep_row(&tag);
                deadletter::headers_only(&record)
            }
            DeadLetterFate::Minimal => {
                self.keep_row(&tag);
                deadletter::minimal(&record)
            }
            DeadLetterFate::Suspect => {
                self.isolation = Isolation::Waiting {
                    record,
                    tag,
                    counted,
                };
                return self.send_isolated_when_alone(producer);
            }
        };
        if !counted {
            self.tracker.add_event(tag.txn)?;
        }
        match self.send_counted(record, tag, producer)? {
            None => Ok(()),
            Some((refused, tag)) => Err(self.replay_for(&tag, refused, true)),
        }
    }

    /// Hands a record already counted in its transaction to the producer.
    /// A dead letter refused on the spot as too large goes again as its
    /// smaller stand-in; an event refused on the spot comes back to the
    /// caller (which knows its row); a fatal refusal ends the session.
    pub(super) fn send_counted(
        &mut self,
        record: KafkaRecord,
        mut tag: DeliveryTag,
        producer: &mut impl Producer,
    ) -> SessionResult<Option<(Refused, DeliveryTag)>> {
        // Exactly-once: the record counts toward the open Kafka
        // transaction's bounds, and the first one opens it.
        if self.record_in_transaction(record.size(), self.now())
            && let Err(err) = producer.open_transaction()
        {
            return Err(self.delivery_failed(err, producer));
        }
        self.hold(&mut tag, record.size());
        match producer.send(record, tag) {
            Ok(()) => {
                self.pace.unnudged += 1;
                self.pace.last_sent = Some(self.now());
                Ok(None)
            }
            Err(SendError::QueueFull(held)) => {
                self.outgoing = Outgoing::QueueFull(held);
                Ok(None)
            }
            Err(SendError::Refused(refused, sent)) => {
                let (record, tag) = *sent;
                if let Some(fatal) = fatal_refusal(self.settings.on_unroutable, &tag, &refused) {
                    return Err(fatal);
                }
                if !tag.dead_letter {
                    return Ok(Some((refused, tag)));
                }
                // Larger than message.max.bytes: the payload cannot go.
                match deadletter::smaller(&record) {
                    Some(smaller) => {
                        self.keep_row(&tag);
                        self.send_counted(smaller, tag, producer)
                    }
                    None => Err(SessionError::Refused(refused)),
                }
            }
            Err(SendError::Failed(err)) => {
                Err(self.delivery_failed(DeliveryError::Failed(err), producer))
            }
        }
    }

    /// A row whose dead letter goes without its payload stays in the
    /// outbox table (cleanup on): the table then holds the only copy.
    fn keep_row(&mut self, tag: &DeliveryTag) {
        if let Some(cleanup) = &mut self.cleanup {
            cleanup.keep(tag.lsn, &tag.row_key);
        }
    }

    /// Sends the suspect once nothing else is in flight.
    pub(super) fn send_isolated_when_alone(
        &mut self,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        let Isolation::Waiting { counted, .. } = &self.isolation else {
            return Ok(());
        };
        let others = self
            .tracker
            .pending_events()
            .saturating_sub(u64::from(*counted));
        if others > 0 || !matches!(self.outgoing, Outgoing::Clear) {
            return Ok(());
        }
        let Isolation::Waiting {
            record,
            tag,
            counted,
        } = std::mem::replace(&mut self.isolation, Isolation::None)
        else {
            return Ok(());
        };
        self.isolation = Isolation::Sent {
            row_key: tag.row_key.clone(),
            dead_letter: tag.dead_letter,
        };
        if !counted {
            self.tracker.add_event(tag.txn)?;
        }
        match self.send_counted(record, tag, producer)? {
            None => Ok(()),
            Some((refused, tag)) => Err(self.replay_for(&tag, refused, true)),
        }
    }

    /// Whether `tag` is the suspect that was sent alone.
    pub(super) fn is_isolated(&self, tag: &DeliveryTag) -> bool {
        matches!(&self.isolation, Isolation::Sent { row_key, dead_letter }
            if *row_key == tag.row_key && *dead_letter == tag.dead_letter)
    }

    /// The broker's answer for one record.
    ///
    /// # Errors
    /// A refusal or failure ends the session (a replay, or fatal); see
    /// `refusals.rs`.
    pub fn on_report(
        &mut self,
        mut report: DeliveryReport<DeliveryTag>,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        if report.tag.span.is_some() {
            let error = report.result.as_ref().err().map(ToString::to_string);
            self.end_span(&mut report.tag, error);
        }
        match report.result {
            Ok(()) => {
                if self.is_isolated(&report.tag) {
                    // An isolated suspect that went through after all.
                    note_innocent(self.refusals, &report.tag);
                    self.isolation = Isolation::None;
                }
                // Published and dead-lettered records are counted by the
                // producer, which sees their topic, size and reason.
                self.acknowledged(&report.tag)?;
                forget_confirmed(self.refusals, self.confirmable());
            }
            Err(DeliveryError::Refused(refused)) => {
                let alone = self.is_isolated(&report.tag);
                return Err(self.replay_for(&report.tag, refused, alone));
            }
            Err(err) => return Err(self.delivery_failed(err, producer)),
        }
        if let Outgoing::QueueFull(held) = std::mem::replace(&mut self.outgoing, Outgoing::Clear) {
            let (record, tag) = *held;
            if let Some((refused, tag)) = self.send_counted(record, tag, producer)? {
                return Err(self.replay_for(&tag, refused, true));
            }
        }
        self.send_handed_back(producer)?;
        self.send_isolated_when_alone(producer)
    }

    /// A report that arrived after the session ended (the producer being
    /// dropped reports everything it held). A refusal among them is noted
    /// for the replay (librdkafka may report a fatal error's consequences
    /// before its cause); returns it when it is fatal.
    pub fn on_leftover(&mut self, mut report: DeliveryReport<DeliveryTag>) -> Option<SessionError> {
        if report.tag.span.is_some() {
            let error = match &report.result {
                Ok(()) => None,
                Err(e) => Some(e.to_string()),
            };
            self.end_span(&mut report.tag, error);
        }
        let Err(DeliveryError::Refused(refused)) = report.result else {
            return None;
        };
        let alone = self.is_isolated(&report.tag);
        note_refusal(
            self.refusals,
            self.settings.on_unroutable,
            &report.tag,
            &refused,
            alone,
        )
    }

    /// Notes a refusal for the replay and returns the error that ends the
    /// session: a replay, or the fatal error.
    pub(super) fn replay_for(
        &mut self,
        tag: &DeliveryTag,
        refused: Refused,
        alone: bool,
    ) -> SessionError {
        if let Some(fatal) = note_refusal(
            self.refusals,
            self.settings.on_unroutable,
            tag,
            &refused,
            alone,
        ) {
            return fatal;
        }
        let error = DeliveryError::Refused(refused);
        SessionError::Delivery {
            reason: failure_reason(&error),
            error,
        }
    }

    /// The session error for a failed delivery: a replay, unless the
    /// producer's fatal error is a refusal that retrying cannot cure.
    pub(super) fn delivery_failed(
        &self,
        err: DeliveryError,
        producer: &impl Producer,
    ) -> SessionError {
        match producer.explain(err) {
            DeliveryError::Refused(refused)
                if refused.kind.class() == RefusalClass::Unauthorized =>
            {
                SessionError::Refused(refused)
            }
            error => SessionError::Delivery {
                reason: failure_reason(&error),
                error,
            },
        }
    }

    /// The unroutable-record policy in force.
    pub fn on_unroutable(&self) -> OnUnroutable {
        self.settings.on_unroutable
    }
}
