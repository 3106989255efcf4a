//! The session's parking writer: a task that commits the machine's
//! [`Request`]s to the parking table in batches, in the order they were
//! made, and answers each with a [`Report`] once its transaction committed
//! (or the aggregate was found released). The session feeds the reports
//! to the machine like delivery reports: an event parked is an event
//! handled, so the slot moves past it only once its row is committed.
//!
//! Batches follow the arrival rate: a request that finds the writer idle
//! since at least [`WriterSettings::pace`] is written at once; while
//! requests keep coming, a batch starts no sooner than `pace` after the
//! one before, so that a stream of parked events (a busy aggregate parked
//! during a backlog drain) costs one transaction per `pace`, not one per
//! event. What waits is the slot's confirmation of these events, never
//! another aggregate's delivery (exactly-once: its Kafka transaction's
//! commit, which the session's pace bounds).
//!
//! A failure (PostgreSQL away, the table dropped, a privilege revoked)
//! drops the connection and tries the same batch again, backing off (100
//! ms to 5 s), counted in `outbox_relay_reconnects_total{reason=
//! "parked_table"}` and logged once per incident: nothing behind the
//! batch is reported, so nothing is confirmed past it meanwhile. The task
//! is aborted with its session; what it did not report is replayed.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::store::{self, ParkedTable, Prepared};
use super::{Report, Request};
use crate::backoff::{Backoff, Incident};
use crate::events;
use crate::pg::{ConnectSettings, PgClient};

/// Requests committed in one transaction, at most.
const BATCH: usize = 512;

/// Where a session's writer writes.
#[derive(Debug, Clone)]
pub struct WriterSettings {
    pub connection: ConnectSettings,
    pub table: ParkedTable,
    /// This relay's shard (part of each row's place in the stream).
    pub shard: u32,
    /// The webhook sink names, by index (a parked webhook event's `sink`).
    pub sinks: Vec<String>,
    /// The least time from one batch's start to the next's while requests
    /// keep coming (see the module's header).
    pub pace: Duration,
}

/// When the batch of a request that arrived at `now` starts: at once if the
/// last batch started `pace` ago or more (or none did), else `pace` after it.
fn batch_start(last: Option<Instant>, now: Instant, pace: Duration) -> Instant {
    match last {
        Some(last) if now < last + pace => last + pace,
        _ => now,
    }
}

/// The session's handle: requests in, reports out. Dropping it stops the
/// task.
pub struct Writer<T> {
    requests: mpsc::UnboundedSender<(Request, T)>,
    reports: mpsc::UnboundedReceiver<Report<T>>,
    task: JoinHandle<()>,
}

impl<T: Send + 'static> Writer<T> {
    pub fn spawn(settings: WriterSettings) -> Writer<T> {
        let (requests, inbox) = mpsc::unbounded_channel();
        let (outbox, reports) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(settings, inbox, outbox));
        Writer {
            requests,
            reports,
            task,
        }
    }

    /// Queues a request; its report comes back through [`Writer::recv`].
    pub fn send(&self, request: Request, tag: T) {
        // The task ends only with the session, which owns this handle.
        let _ = self.requests.send((request, tag));
    }

    /// The next report; pending for ever while none is due.
    pub async fn recv(&mut self) -> Report<T> {
        match self.reports.recv().await {
            Some(report) => report,
            None => std::future::pending().await,
        }
    }
}

impl<T> Drop for Writer<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run<T>(
    settings: WriterSettings,
    mut inbox: mpsc::UnboundedReceiver<(Request, T)>,
    outbox: mpsc::UnboundedSender<Report<T>>,
) {
    let mut conn: Option<(PgClient, Prepared)> = None;
    let mut last_start: Option<Instant> = None;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5), 3);
    let mut incident = Incident::default();
    // A batch's requests and tags apart: the requests go to every try of
    // the batch, the tags back with the answers.
    let mut requests: Vec<Request> = Vec::with_capacity(BATCH);
    let mut tags: Vec<T> = Vec::with_capacity(BATCH);
    loop {
        let Some((request, tag)) = inbox.recv().await else {
            return;
        };
        requests.push(request);
        tags.push(tag);
        // Under a steady stream of requests, gather those of one pace.
        let start = batch_start(last_start, Instant::now(), settings.pace);
        tokio::time::sleep_until(start).await;
        last_start = Some(start);
        while requests.len() < BATCH {
            match inbox.try_recv() {
                Ok((request, tag)) => {
                    requests.push(request);
                    tags.push(tag);
                }
                Err(_) => break,
            }
        }
        let outcomes = loop {
            let result = match conn.take() {
                Some(c) => Ok(c),
                None => connect(&settings).await,
            };
            let error = match result {
                Ok((c, prepared)) => {
                    match store::write(&c, &prepared, settings.shard, &settings.sinks, &requests)
                        .await
                    {
                        Ok(outcomes) => {
                            conn = Some((c, prepared));
                            break outcomes;
                        }
                        // A connection that failed a statement is not reused.
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            };
            events::ParkingTableUnwritable::count();
            if let Some(still) = incident.failed(Instant::now()) {
                events::ParkingTableUnwritable {
                    table: &settings.table.quoted(),
                    error: &error,
                    still,
                }
                .emit();
            }
            tokio::time::sleep(backoff.next_delay()).await;
        };
        backoff.reset();
        if let Some(end) = incident.recovered(Instant::now()) {
            events::ParkingTableWorks {
                table: &settings.table.quoted(),
                end,
            }
            .emit();
        }
        requests.clear();
        for (tag, outcome) in tags.drain(..).zip(outcomes) {
            if outbox.send(Report { tag, outcome }).is_err() {
                return;
            }
        }
    }
}

/// A connection with the writer's statements prepared on it.
async fn connect(settings: &WriterSettings) -> Result<(PgClient, Prepared), crate::pg::PgError> {
    let client = PgClient::connect(&settings.connection).await?;
    let prepared = Prepared::new(&client, &settings.table).await?;
    Ok((client, prepared))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_after_a_quiet_pace_is_written_at_once() {
        let pace = Duration::from_millis(50);
        let now = Instant::now();
        assert_eq!(batch_start(None, now, pace), now);
        assert_eq!(batch_start(Some(now - pace), now, pace), now);
        assert_eq!(
            batch_start(Some(now - Duration::from_secs(3)), now, pace),
            now
        );
    }

    #[test]
    fn requests_that_keep_coming_wait_for_the_pace_since_the_last_batch() {
        let pace = Duration::from_millis(50);
        let now = Instant::now();
        let last = now - Duration::from_millis(20);
        assert_eq!(batch_start(Some(last), now, pace), last + pace);
        assert_eq!(batch_start(Some(now), now, pace), now + pace);
        // No pace: never a wait.
        assert_eq!(batch_start(Some(now), now, Duration::ZERO), now);
    }
}
