//! The session's parking writer: a task that commits the machine's
//! [`Request`]s to the parking table in batches, in the order they were
//! made, and answers each with a [`Report`] once its transaction committed
//! (or the aggregate was found released). The session feeds the reports
//! to the machine like delivery reports: an event parked is an event
//! handled, so the slot moves past it only once its row is committed.
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

use super::store::{self, ParkedTable};
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
    let mut conn: Option<PgClient> = None;
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
                None => PgClient::connect(&settings.connection).await,
            };
            let error = match result {
                Ok(c) => {
                    match store::write(
                        &c,
                        &settings.table,
                        settings.shard,
                        &settings.sinks,
                        &requests,
                    )
                    .await
                    {
                        Ok(outcomes) => {
                            conn = Some(c);
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
