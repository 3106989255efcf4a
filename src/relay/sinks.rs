//! The session's two sinks behind the machine's one [`Producer`]: Kafka for
//! every record, and the webhook dispatch for events that `[[routes]]` send
//! to an HTTP sink. Both answer with the same delivery reports, so the ack
//! tracker, the confirmation rule and per-key order are the same for both.

use super::machine::Producer;
use super::tag::DeliveryTag;
use crate::envelope::KafkaRecord;
use crate::sink::http::WebhookEvent;
use crate::sink::http::dispatch::Dispatch;
use crate::sink::{DeliveryError, KafkaSink, SendError};

/// Borrowed for one call into the machine.
pub(super) struct Sinks<'a> {
    pub(super) kafka: &'a mut KafkaSink<DeliveryTag>,
    pub(super) http: &'a mut Dispatch<DeliveryTag>,
}

impl Producer for Sinks<'_> {
    fn send(
        &mut self,
        record: KafkaRecord,
        tag: DeliveryTag,
    ) -> Result<(), SendError<DeliveryTag>> {
        self.kafka.send(record, tag)
    }

    fn explain(&self, err: DeliveryError) -> DeliveryError {
        self.kafka.explain(err)
    }

    fn send_webhook(
        &mut self,
        sink: usize,
        event: WebhookEvent,
        tag: DeliveryTag,
    ) -> Result<(), Box<(WebhookEvent, DeliveryTag)>> {
        self.http.send(sink, event, tag)
    }
}
