//! The tag every record travels with to the producer and back in its
//! delivery report: which transaction it counts in, which row it stands
//! for, whether it is a dead letter.

use bytes::Bytes;

use crate::ack::TxnId;
use crate::otel::ProduceSpan;
use pgoutput::lsn::Lsn;

/// What the relay needs to know about a record when its delivery report
/// comes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryTag {
    /// The transaction it counts in.
    pub txn: TxnId,
    /// The row it stands for: the outbox id, or, for a row whose id cannot
    /// be read, a key made from the commit, key and payload
    /// (`refusals::anonymous_row_key`). The `refusals::Refusals` are keyed by it.
    pub row_key: String,
    /// Commit LSN of the row's transaction.
    pub lsn: Lsn,
    /// The record's Kafka key (the aggregate id).
    pub key: Bytes,
    /// A dead letter, not the event itself.
    pub dead_letter: bool,
    /// The record's produce span, when tracing is on and the row carries a
    /// trace context; ended with the record's delivery report.
    pub span: Option<Box<ProduceSpan>>,
    /// The bytes its record holds in the ack tracker's count of bytes in
    /// flight: 0 until the session machine hands it over, then its size
    /// (its stand-in's, when one replaces it), given back with its
    /// acknowledgement.
    pub held_bytes: u64,
}

/// Where an event came from, for its dead letter's `source_table`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A row inserted into the outbox table.
    Table,
    /// An outbox logical message.
    Message,
}
