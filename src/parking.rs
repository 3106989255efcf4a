//! Parking: the later events of an aggregate whose event was
//! dead-lettered, held in commit order until the dead letter is retried or
//! discarded ("Per-aggregate order" through a failure, docs/design.md).
//!
//! Role: the types the session machine decides with ([`Aggregate`],
//! [`Parcel`], [`Request`]), the parking table's SQL ([`store`],
//! `sql/outbox_parked.sql`) and the session's writer task ([`writer`]),
//! which commits each request to the table and reports back like a
//! broker: only then does the ack tracker count the event handled.
//!
//! Invariants:
//! * An event is parked only behind a live head of its aggregate, under
//!   the head row's shared lock; a release holds the same row exclusively,
//!   so the writer either parks an event before the release reads its
//!   queue, or finds the head released and hands the event back
//!   ([`Outcome::Released`]) to be delivered now, after everything the
//!   release sent.
//! * Requests of one session are committed in the order they were made,
//!   so an aggregate's parked events keep commit order.
//! * A row is keyed by where its event stands in the stream (shard,
//!   commit LSN, position in the transaction): a replay after a crash
//!   finds it instead of parking it twice.

pub mod gauges;
pub mod release;
pub mod store;
pub mod writer;

use crate::envelope::KafkaRecord;
use crate::sink::http::WebhookEvent;
use pgoutput::lsn::Lsn;

pub use store::ParkedTable;

use crate::pg::{ConnectSettings, PgClient, PgError};

/// Why the parked aggregates could not be read at a session's start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "the parking table {table} does not exist: an aggregate whose event is dead-lettered \
         parks its later events there (after_dead_letter = \"park\", the default), and without \
         it the relay could not keep their order. Create it with `{} --admin-url <a table \
         owner's or superuser's postgres URL> --grant` (it creates the table from \
         sql/outbox_parked.sql and grants the relay's role its privileges), then start the \
         relay again; or set after_dead_letter = \"skip\" on [kafka] and every webhook sink \
         to let an aggregate's events overtake its dead letters",
        crate::invocation::command("init")
    )]
    Missing { table: String },
    #[error(
        "the relay's role may not use the parking table {table} ({source}): it needs SELECT, \
         INSERT, UPDATE and DELETE on it. Grant them with `{} --admin-url <a table owner's or \
         superuser's postgres URL> --grant`, or: GRANT SELECT, INSERT, UPDATE, DELETE ON {table} \
         TO <the relay's role>;",
        crate::invocation::command("init")
    )]
    NotPermitted { table: String, source: PgError },
    #[error("cannot read the parked aggregates from {table}: {source}")]
    Unavailable { table: String, source: PgError },
}

impl LoadError {
    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> crate::error::Cause {
        match self {
            LoadError::Missing { .. } | LoadError::NotPermitted { .. } => {
                crate::error::Cause::ParkingTableUnusable
            }
            LoadError::Unavailable { source, .. } => source.cause(),
        }
    }
}

/// The live heads at a session's start: what is parked before the first
/// event is decided.
///
/// # Errors
/// [`LoadError::Missing`] when the table does not exist (fatal: `init`
/// makes it); otherwise the connection's, to be retried.
pub async fn load(
    connection: &ConnectSettings,
    table: &ParkedTable,
) -> Result<Vec<Head>, LoadError> {
    let unavailable = |source: PgError| {
        if source.sqlstate() == Some("42P01") {
            LoadError::Missing {
                table: table.quoted(),
            }
        } else if source.sqlstate() == Some("42501") {
            LoadError::NotPermitted {
                table: table.quoted(),
                source,
            }
        } else {
            LoadError::Unavailable {
                table: table.quoted(),
                source,
            }
        }
    };
    let client = PgClient::connect(connection).await.map_err(unavailable)?;
    store::heads(&client, table).await.map_err(unavailable)
}

/// An aggregate: events with the same `(aggregatetype, aggregateid)` keep
/// their commit order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Aggregate {
    pub aggregate_type: String,
    pub aggregate_id: String,
}

impl Aggregate {
    pub fn new(aggregate_type: impl Into<String>, aggregate_id: impl Into<String>) -> Self {
        Aggregate {
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
        }
    }
}

/// Where an event stands in the stream: its transaction's commit LSN and
/// its place among the transaction's outbox events (of this shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub commit_lsn: Lsn,
    pub position: u64,
}

/// What a parked event would have been sent as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parcel {
    /// The Kafka record, exactly as built (topic, key, headers, value).
    Kafka(KafkaRecord),
    /// An event of a route to the webhook sink at this index.
    Webhook { sink: usize, event: WebhookEvent },
}

impl Parcel {
    /// Bytes held: what the table stores of it.
    pub fn size(&self) -> usize {
        match self {
            Parcel::Kafka(record) => record.size(),
            Parcel::Webhook { event, .. } => {
                event.body.len()
                    + event
                        .headers
                        .iter()
                        .map(|(n, v)| n.len() + v.len())
                        .sum::<usize>()
            }
        }
    }
}

/// What the writer is asked to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// An event was dead-lettered: its aggregate parks behind it (or, when
    /// the aggregate is parked already, it waits in the queue as the next
    /// head).
    Head {
        aggregate: Aggregate,
        event_id: String,
        reason: String,
        place: Place,
    },
    /// An event of a parked aggregate.
    Event {
        aggregate: Aggregate,
        event_id: String,
        place: Place,
        parcel: Parcel,
    },
}

impl Request {
    pub fn aggregate(&self) -> &Aggregate {
        match self {
            Request::Head { aggregate, .. } | Request::Event { aggregate, .. } => aggregate,
        }
    }
}

/// How the writer answered a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Committed to the table (or found there: a replay).
    Parked,
    /// A dead letter that now heads its aggregate: it was live, or came
    /// before the head that was (the writer made that one a dead letter in
    /// the queue).
    Head,
    /// The aggregate's head was released: the event goes out now.
    Released(Parcel),
}

/// The answer for one request, with the tag it was made with.
#[derive(Debug)]
pub struct Report<T> {
    pub tag: T,
    pub outcome: Outcome,
}

/// A live head at session start: the aggregate parks every event after
/// `place`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub aggregate: Aggregate,
    pub event_id: String,
    pub place: Place,
}
