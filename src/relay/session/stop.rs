//! How a session ends: the graceful stop's drain, the short settle after
//! the stream broke, and the abandon after a failure.

use std::time::Duration;

use tokio::time::Instant;

use super::Session;
use crate::relay::Stopped;
use crate::relay::delivery_tag::DeliveryTag;
use crate::relay::error::SessionError;
use crate::sink::KafkaSink;
use pgoutput::lsn::Lsn;

/// How long a session whose stream broke waits for the acknowledgements of
/// records already sent before it hands over to the next session. Short:
/// reconnecting matters more than saving a few duplicates.
pub(super) const SETTLE_AFTER_STREAM_FAILURE: Duration = Duration::from_secs(5);

/// How long a discarded producer's records in flight get to be answered
/// before they are purged (see [`KafkaSink::abandon`]).
const ABANDON_GRACE: Duration = Duration::from_secs(1);

/// Destroying a producer blocks while librdkafka tears down its threads: do
/// it off the async workers.
async fn drop_sink(sink: KafkaSink<DeliveryTag>) {
    let _ = tokio::task::spawn_blocking(move || sink.abandon(ABANDON_GRACE)).await;
}

impl Session<'_> {
    /// Graceful stop: read nothing more, wait for outstanding reports up to
    /// `deadline` (counted from the stop request), then send the final
    /// status update. Says whether it drained: [`Stopped::Undrained`] when
    /// events were still unacknowledged at the deadline, or the open
    /// transaction's commit never arrived (either is sent again at the next
    /// start).
    pub(super) async fn drain_and_stop(
        mut self,
        deadline: Instant,
    ) -> Result<(Lsn, Stopped), (SessionError, Lsn)> {
        while self.machine.awaiting_broker() {
            // The stream is not read while draining: keep its status updates
            // going, or a drain longer than wal_sender_timeout loses the
            // connection before the final update.
            let report = tokio::select! {
                r = self.reports.recv() => r,
                r = self.http.recv() => Some(r),
                r = super::park_report(&mut self.parking) => {
                    if let Err(e) = self.on_park_report(r) {
                        let confirmed = self.confirmed;
                        return Err((self.abandon(e).await, confirmed));
                    }
                    self.confirm();
                    continue;
                }
                () = tokio::time::sleep_until(self.stream.status_due_at()) => {
                    if let Err(e) = self.stream.send_due_status().await {
                        crate::events::DrainStatusUpdateFailed { error: &e }.emit();
                    }
                    continue;
                }
                () = tokio::time::sleep_until(deadline) => {
                    crate::events::DrainDeadlinePassed { pending: self.machine.pending_events() }.emit();
                    break;
                }
            };
            let Some(report) = report else { break };
            if let Err(e) = self.on_report(report) {
                let confirmed = self.confirmed;
                return Err((self.abandon(e).await, confirmed));
            }
            self.confirm();
        }
        // Decided before exactly-once aborts what it holds of an open
        // transaction: that is not drained either.
        let stopped = self.machine.stop_verdict();
        if let Some(eos) = &mut self.eos {
            // What was handed over whole goes out with its checkpoint.
            if let Err(e) = eos.commit_if_due(&mut self.machine, &self.sink, true).await {
                let confirmed = self.confirmed;
                return Err((self.abandon(e).await, confirmed));
            }
            eos.abort_open(&mut self.machine, &self.sink).await;
            self.confirm();
        }
        if let Err(e) = self.stream.shutdown().await {
            crate::events::FinalStatusUpdateFailed { error: &e }.emit();
        }
        drop_sink(self.sink).await;
        Ok((self.confirmed, stopped))
    }

    /// Takes delivery reports for at most `within`, until nothing is pending,
    /// without reading the (broken) stream. A delivery failure just ends the
    /// wait (the next session replays from the slot); a fatal one is returned.
    pub(super) async fn settle(&mut self, within: Duration) -> Option<SessionError> {
        if self.eos.is_some() {
            // The open transaction is aborted: nothing to save.
            return None;
        }
        let deadline = Instant::now() + within;
        while self.machine.awaiting_broker() {
            let report = tokio::select! {
                r = self.reports.recv() => r,
                r = self.http.recv() => Some(r),
                r = super::park_report(&mut self.parking) => {
                    let handled = self.on_park_report(r);
                    self.confirm();
                    if let Err(e) = handled {
                        return e.is_fatal().then_some(e);
                    }
                    continue;
                }
                () = tokio::time::sleep_until(deadline) => break,
            };
            let Some(report) = report else { break };
            let handled = self.on_report(report);
            self.confirm();
            if let Err(e) = handled {
                return e.is_fatal().then_some(e);
            }
        }
        None
    }

    /// Drops the stream and the producer after a failure. Unacknowledged
    /// records are discarded; the next session replays them from the slot.
    /// Returns the error the session ends with: `error`, or a fatal refusal
    /// found among the last reports.
    pub(super) async fn abandon(self, error: SessionError) -> SessionError {
        let Session {
            mut machine,
            stream,
            sink,
            mut reports,
            eos,
            ..
        } = self;
        drop(stream);
        let error = match eos {
            Some(mut eos) => eos.abandon(&mut machine, &sink, error).await,
            None => error,
        };
        drop_sink(sink).await;
        // The destroyed producer reported everything it held.
        let mut error = error;
        while let Ok(report) = reports.try_recv() {
            if let Some(fatal) = machine.on_leftover(report)
                && !error.is_fatal()
            {
                error = fatal;
            }
        }
        error
    }
}
