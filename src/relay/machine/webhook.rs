//! The session machine's hand-off of events routed to a webhook sink
//! (`[[routes]]`): the event goes to its HTTP sink instead of Kafka, counted
//! in its transaction like any record, so the ack tracker's rule holds for
//! both sinks alike: a transaction is confirmed only once every one of its
//! events is acknowledged by the broker or handled by its webhook sink
//! (delivered, or durably moved to the delivery table).
//!
//! Its bytes (body and headers) count in flight like a record's until its
//! report: the byte bound holds for both sinks alike.
//!
//! Order per aggregate is the sink's to keep (one event in flight per
//! aggregate, handed over in commit order, which is the order they arrive
//! here).

use super::*;
use crate::sink::http::WebhookEvent;

impl SessionMachine<'_> {
    /// The webhook sink index of an event, when a route sends it to one.
    pub(super) fn webhook_of(&self, row: &crate::outbox::OutboxRow) -> Option<usize> {
        match self
            .settings
            .webhooks
            .routes
            .target(&row.aggregate_type, &row.event_type)
        {
            crate::routes::Target::Http(sink) => Some(sink),
            crate::routes::Target::Kafka => None,
        }
    }

    /// The request an event of a webhook route is POSTed as.
    pub(super) fn webhook_event(
        &self,
        row: &crate::outbox::OutboxRow,
    ) -> Result<WebhookEvent, crate::envelope::EnvelopeError> {
        let time = match self.txn {
            TxnState::Delivering(commit) => commit.time,
            _ => self.wall_now(),
        };
        let dataschema = self.router.dataschema(row);
        let mut event =
            WebhookEvent::of_row(row, time, &self.settings.envelope.source, dataschema)?;
        // Its route's: whether its row, once DEAD, holds the aggregate.
        event.after_dead_letter =
            (self.settings.webhooks.routes).after_dead_letter(&row.aggregate_type, &row.event_type);
        Ok(event)
    }

    /// Hands an event to webhook sink `sink`. A row that cannot be an
    /// event goes to the dead-letter topic, as it would on the Kafka path.
    pub(super) fn deliver_webhook(
        &mut self,
        sink: usize,
        row: &crate::outbox::OutboxRow,
        origin: super::super::delivery_tag::Origin,
        mut tag: DeliveryTag,
        producer: &mut impl Producer,
    ) -> SessionResult<()> {
        match self.webhook_event(row) {
            Ok(event) => {
                self.tracker.add_event(tag.txn)?;
                self.hold(&mut tag, webhook_size(&event));
                hand_to_webhook(producer, sink, event, tag)
            }
            Err(e) => {
                let (record, tag) =
                    self.router
                        .dead_letter(row, origin, e.to_string(), e.reason_code(), tag);
                self.send_dead_letter(record, tag, false, producer)
            }
        }
    }
}

/// The bytes a webhook event holds in flight: its body and headers, as
/// the parking table counts them.
fn webhook_size(event: &WebhookEvent) -> usize {
    let headers: usize = event.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
    event.body.len() + headers
}

/// Hands a counted event to webhook sink `sink`; a producer without webhook
/// sinks ends the session (the config routes events to one it does not
/// have: a bug, never an event dropped).
pub(super) fn hand_to_webhook(
    producer: &mut impl Producer,
    sink: usize,
    event: WebhookEvent,
    tag: DeliveryTag,
) -> SessionResult<()> {
    producer.send_webhook(sink, event, tag).map_err(|_| {
        let error = DeliveryError::ProducerFatal(
            "an event is routed to a webhook sink but this session has none".into(),
        );
        SessionError::Delivery {
            reason: failure_reason(&error),
            error,
        }
    })
}
