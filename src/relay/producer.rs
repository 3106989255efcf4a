//! The session's two sinks behind the machine's one [`Producer`]: Kafka for
//! every record, and the webhook dispatch for events that `[[routes]]` send
//! to an HTTP sink. Both answer with the same delivery reports, so the ack
//! tracker, the confirmation rule and per-key order are the same for both.

use super::delivery_tag::DeliveryTag;
use super::machine::{ParkTag, Producer};
use crate::envelope::KafkaRecord;
use crate::parking::Request;
use crate::parking::writer::Writer;
use crate::sink::http::WebhookEvent;
use crate::sink::http::dispatch::Dispatch;
use crate::sink::{DeliveryError, KafkaSink, SendError};

/// Borrowed for one call into the machine.
pub(super) struct Sinks<'a> {
    pub(super) kafka: &'a mut KafkaSink<DeliveryTag>,
    pub(super) http: &'a mut Dispatch<DeliveryTag>,
    /// The parking writer, when anything parks after a dead letter.
    pub(super) parking: Option<&'a Writer<ParkTag>>,
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

    fn park(&mut self, request: Request, tag: ParkTag) -> Result<(), Box<(Request, ParkTag)>> {
        park_with(self.parking, request, tag)
    }
}

/// Hands a request to the session's parking writer, or back without one.
pub(super) fn park_with(
    writer: Option<&Writer<ParkTag>>,
    request: Request,
    tag: ParkTag,
) -> Result<(), Box<(Request, ParkTag)>> {
    match writer {
        Some(writer) => {
            writer.send(request, tag);
            Ok(())
        }
        None => Err(Box::new((request, tag))),
    }
}
