//! What the session hands to the machine (stream messages, delivery
//! reports) and what it takes back to the stream (the confirmable
//! position), the deleter (rows to delete) and the log (the machine's
//! notices, `notices.rs`), with the metrics on the way.

use super::errands::seconds_since;
use super::{Session, SessionResult};
use crate::metrics as m;
use crate::relay::delivery_tag::DeliveryTag;
use crate::relay::exactly_once::Transactional;
use crate::relay::machine::{ParkTag, Step};
use crate::relay::producer::Sinks;
use crate::replication::{RelationClass, StreamItem, classify};
use crate::sink::DeliveryReport;

impl Session<'_> {
    /// Feeds one delivery report to the machine, after taking what the
    /// metrics and the progress line need from it: the commit-to-ack
    /// latency of an event (dead letters are not the events anyone waits
    /// for).
    pub(super) fn on_report(&mut self, report: DeliveryReport<DeliveryTag>) -> SessionResult<()> {
        if report.result.is_ok() {
            self.progress.acknowledged(report.tag.dead_letter);
            if !report.tag.dead_letter
                && let Some(committed) = self.machine.commit_time(report.tag.txn)
            {
                self.hot.commit_to_ack.record(seconds_since(committed));
            }
        }
        // Exactly-once is refused together with webhook routes (config
        // validation), so a transactional session has no HTTP sink.
        match &self.eos {
            Some(_) => self.machine.on_report(
                report,
                &mut Transactional {
                    sink: &mut self.sink,
                    parking: self.parking.as_ref(),
                },
            ),
            None => self.machine.on_report(
                report,
                &mut Sinks {
                    kafka: &mut self.sink,
                    http: &mut self.http,
                    parking: self.parking.as_ref(),
                },
            ),
        }
    }

    /// Feeds one answer of the parking writer to the machine.
    pub(super) fn on_park_report(
        &mut self,
        report: crate::parking::Report<ParkTag>,
    ) -> SessionResult<()> {
        match &self.eos {
            Some(_) => self.machine.on_park_report(
                report,
                &mut Transactional {
                    sink: &mut self.sink,
                    parking: self.parking.as_ref(),
                },
            ),
            None => self.machine.on_park_report(
                report,
                &mut Sinks {
                    kafka: &mut self.sink,
                    http: &mut self.http,
                    parking: self.parking.as_ref(),
                },
            ),
        }
    }

    /// Once per [`OBSERVE_EVERY`]: the age of the oldest unacknowledged
    /// event, which grows while the broker does not answer, and the
    /// progress line when one is due.
    pub(super) fn observe(&mut self) {
        let oldest = self
            .machine
            .oldest_unacked_commit_time()
            .map_or(0.0, seconds_since);
        metrics::gauge!(m::OLDEST_UNACKED_AGE).set(oldest);
        if let Some(summary) = self.progress.due(
            std::time::Instant::now(),
            self.machine.pending_events(),
            self.confirmed,
        ) {
            summary.log();
        }
    }

    pub(super) async fn on_item(&mut self, item: StreamItem) -> SessionResult<()> {
        match item {
            StreamItem::XLogData { wal_end, data, .. } => {
                self.hot.bytes_received.increment(data.len() as u64);
                self.hot.received_lsn.set(wal_end.as_u64() as f64);
                let step = match &self.eos {
                    Some(_) => self.machine.on_wal(
                        data,
                        &mut Transactional {
                            sink: &mut self.sink,
                            parking: self.parking.as_ref(),
                        },
                    ),
                    None => self.machine.on_wal(
                        data,
                        &mut Sinks {
                            kafka: &mut self.sink,
                            http: &mut self.http,
                            parking: self.parking.as_ref(),
                        },
                    ),
                };
                // What the machine noted is said (and counted) even when
                // the message ended the session.
                self.log_notices();
                self.count();
                if let Step::LookUp(relation) = step? {
                    let class = match self.look_up(relation.oid).await? {
                        Some(lookup) => classify(lookup),
                        None => RelationClass::Other,
                    };
                    self.machine.relation_classified(&relation, class);
                    self.log_notices();
                    self.count();
                }
            }
            StreamItem::Keepalive { wal_end } => {
                // Caught up counts as progress for /health.
                if self.machine.on_keepalive(wal_end) {
                    self.health.progress();
                }
            }
        }
        Ok(())
    }

    /// Passes the machine's acknowledged prefix to the stream; the stream
    /// reports it with its next status update.
    pub(super) fn confirm(&mut self) {
        // Exactly-once: acknowledged is not enough, the transaction holding
        // the records must have committed (the machine knows which).
        let confirmed = self.machine.confirmable();
        if confirmed > self.confirmed {
            self.confirmed = confirmed;
            self.stream.confirm(confirmed);
            self.hot.confirmed_lsn.set(confirmed.as_u64() as f64);
            self.health.progress();
        }
        if let Some(deleter) = &mut self.deleter {
            deleter.hand_over(self.machine.take_deletable());
        }
    }
}
