//! Exactly-once delivery, the pure part: the checkpoint record, the rule
//! that skips what a committed checkpoint covers, and the bounds of one
//! Kafka transaction.
//!
//! With `kafka.delivery = "exactly-once"` the relay writes its events in
//! Kafka transactions, and each transaction also writes a checkpoint
//! record to the compacted checkpoint topic: the slot, the end LSN of the
//! last PostgreSQL transaction the Kafka transaction holds, and the server
//! (system identifier and timeline) the LSN belongs to. Events and
//! checkpoint commit together or not at all, so the last committed
//! checkpoint says exactly which PostgreSQL transactions are in Kafka
//! (docs/exactly-once.md).
//!
//! Invariants:
//! * a Kafka transaction holds whole PostgreSQL transactions only: the
//!   [`Batch`] is only ever due between two of them (the session asks it
//!   only there);
//! * a PostgreSQL transaction is skipped exactly when its end LSN is at or
//!   below the checkpoint ([`already_committed`]);
//! * a checkpoint of another server is never used, nor one above the
//!   server's WAL position ([`usable`]).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::replication::ServerIdentity;
use pgoutput::lsn::Lsn;

/// Version of the checkpoint record's layout; a record of another version
/// is not guessed at. Version 2 adds the part of a PostgreSQL transaction
/// already in Kafka ([`Partial`]); a checkpoint without one is still
/// written as version 1, which relays before version 2 read.
const VERSION: u32 = 1;
const VERSION_PARTIAL: u32 = 2;

/// The largest checkpoint record the relay reads: a real one is a few
/// hundred bytes; anything far larger is not one.
const MAX_RECORD_BYTES: usize = 64 * 1024;

/// What one committed Kafka transaction says about the slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The replication slot the position is in.
    pub slot: String,
    /// End LSN of the last PostgreSQL transaction committed to Kafka (or a
    /// position the stream reported with nothing open below it).
    pub lsn: Lsn,
    /// The server whose WAL `lsn` is a position in.
    pub server: ServerIdentity,
    /// The first events of the PostgreSQL transaction after `lsn`, when a
    /// Kafka transaction had to commit inside it.
    pub partial: Option<Partial>,
}

/// The part of one PostgreSQL transaction that committed Kafka
/// transactions hold: its first `events` outbox events (each as its event
/// or its dead letter), in stream order. A PostgreSQL transaction that
/// takes longer to stream than the broker lets a Kafka transaction stay
/// open (`transaction.timeout.ms`) is split this way instead of being
/// aborted by the coordinator at every attempt. The server sends a
/// transaction's changes in the same order every time, so the next session
/// skips exactly these events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partial {
    /// The transaction's commit LSN (its Begin's `final_lsn`).
    pub commit_lsn: Lsn,
    /// How many of its outbox events are in Kafka.
    pub events: u64,
}

/// The record's value, as JSON: readable with any console consumer.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    version: u32,
    slot: String,
    /// `X/Y`, as PostgreSQL writes LSNs.
    lsn: String,
    system_id: String,
    timeline: u32,
    /// Version 2: [`Partial::commit_lsn`], `X/Y`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    partial_commit_lsn: Option<String>,
    /// Version 2: [`Partial::events`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    partial_events: Option<u64>,
}

/// A checkpoint record the relay cannot read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    #[error("the checkpoint record is {0} bytes, more than any checkpoint")]
    TooLarge(usize),
    #[error("the checkpoint record is not a checkpoint: {0}")]
    Malformed(String),
    #[error(
        "the checkpoint record has version {0}; this relay reads versions {VERSION} and \
         {VERSION_PARTIAL}"
    )]
    Version(u32),
}

impl Checkpoint {
    /// The record's value.
    pub fn encode(&self) -> Vec<u8> {
        let wire = Wire {
            version: if self.partial.is_some() {
                VERSION_PARTIAL
            } else {
                VERSION
            },
            slot: self.slot.clone(),
            lsn: self.lsn.to_string(),
            system_id: self.server.system_id.clone(),
            timeline: self.server.timeline,
            partial_commit_lsn: self.partial.map(|p| p.commit_lsn.to_string()),
            partial_events: self.partial.map(|p| p.events),
        };
        // A struct of strings and integers always serializes.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads a record's value; anything but a checkpoint this relay wrote
    /// is an error, never a guess.
    pub fn decode(value: &[u8]) -> Result<Self, CheckpointError> {
        if value.len() > MAX_RECORD_BYTES {
            return Err(CheckpointError::TooLarge(value.len()));
        }
        let wire: Wire =
            serde_json::from_slice(value).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
        let partial = match (wire.version, wire.partial_commit_lsn, wire.partial_events) {
            (VERSION, None, None) => None,
            (VERSION_PARTIAL, Some(commit_lsn), Some(events)) if events > 0 => Some(Partial {
                commit_lsn: commit_lsn
                    .parse::<Lsn>()
                    .map_err(|e| CheckpointError::Malformed(e.to_string()))?,
                events,
            }),
            (VERSION | VERSION_PARTIAL, _, _) => {
                return Err(CheckpointError::Malformed(
                    "the partial transaction's fields do not match the version".into(),
                ));
            }
            (other, _, _) => return Err(CheckpointError::Version(other)),
        };
        let lsn = wire
            .lsn
            .parse::<Lsn>()
            .map_err(|e| CheckpointError::Malformed(e.to_string()))?;
        if partial.is_some_and(|p| p.commit_lsn < lsn) {
            return Err(CheckpointError::Malformed(
                "the partial transaction commits before the checkpoint's position".into(),
            ));
        }
        if wire.slot.is_empty() || wire.system_id.is_empty() {
            return Err(CheckpointError::Malformed(
                "empty slot or system identifier".into(),
            ));
        }
        Ok(Checkpoint {
            slot: wire.slot,
            lsn,
            server: ServerIdentity {
                system_id: wire.system_id,
                timeline: wire.timeline,
            },
            partial,
        })
    }
}

/// Whether the PostgreSQL transaction whose commit record starts at
/// `final_lsn` is already in Kafka under a checkpoint at `checkpoint`.
///
/// The rule is "its end LSN is at or below the checkpoint"; at its Begin
/// only the commit's start (`final_lsn`) is known. A checkpoint is the end
/// LSN of a transaction (or a position with nothing open below it), and
/// commit records do not overlap, so for any transaction
/// `end <= checkpoint` exactly when `final_lsn < checkpoint` (the property
/// test below checks this against the end LSN).
pub fn already_committed(final_lsn: Lsn, checkpoint: Lsn) -> bool {
    final_lsn < checkpoint
}

/// What the relay does with the checkpoint it read at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// None for this relay (a first start, or the topic was deleted): the
    /// slot's position is all there is.
    Nothing,
    /// Use it: resume from its LSN (it is the carried position).
    Use(Lsn),
    /// It belongs to another cluster (another system identifier): its LSN
    /// means nothing here.
    OtherSystem { found: ServerIdentity },
    /// It names another slot (two relays configured with one
    /// transactional id).
    OtherSlot { found: String },
    /// Its LSN is above the server's WAL position: the server does not have
    /// the WAL the checkpoint says was delivered (its data directory was
    /// restored from a backup or snapshot, keeping system identifier and
    /// timeline). Used, it would skip every new transaction up to it.
    AheadOfServer { found: Lsn, server_wal: Lsn },
}

/// Judges the checkpoint read for `slot` on `server`, whose WAL is at
/// `server_wal` (flushed, at connect). Another timeline of the same system
/// is *used*: the position module then reports the server change and takes
/// the slot's own position.
pub fn usable(
    checkpoint: Option<&Checkpoint>,
    slot: &str,
    server: &ServerIdentity,
    server_wal: Lsn,
) -> Found {
    match checkpoint {
        None => Found::Nothing,
        Some(c) if c.server.system_id != server.system_id => Found::OtherSystem {
            found: c.server.clone(),
        },
        Some(c) if c.slot != slot => Found::OtherSlot {
            found: c.slot.clone(),
        },
        // Every checkpoint is a position the server streamed, and a
        // walsender streams only flushed WAL: on the server that wrote it,
        // it is at or below the flush position forever after.
        Some(c) if c.lsn > server_wal => Found::AheadOfServer {
            found: c.lsn,
            server_wal,
        },
        Some(c) => Found::Use(c.lsn),
    }
}

/// When a Kafka transaction is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_events: u64,
    pub max_bytes: u64,
    pub max_open: Duration,
    /// Quiet this long, the stream has nothing more to batch: the open
    /// transaction commits at the next boundary (`kafka.transaction_quiet_ms`).
    pub quiet_after: Duration,
    /// Open this long, a transaction commits inside a PostgreSQL
    /// transaction too: half of `transaction.timeout.ms`, so a long one
    /// is never aborted by the broker.
    pub split_after: Duration,
}

/// The open Kafka transaction's size and age, for [`Bounds`].
#[derive(Debug, Clone)]
pub struct Batch {
    bounds: Bounds,
    opened: Option<Instant>,
    events: u64,
    bytes: u64,
}

impl Batch {
    pub fn new(bounds: Bounds) -> Self {
        Batch {
            bounds,
            opened: None,
            events: 0,
            bytes: 0,
        }
    }

    /// A record of `bytes` went into the transaction (opening it).
    pub fn record(&mut self, bytes: usize, now: Instant) {
        self.opened.get_or_insert(now);
        self.events += 1;
        self.bytes = self.bytes.saturating_add(bytes as u64);
    }

    /// How long a quiet stream waits before the open transaction commits.
    pub fn quiet_after(&self) -> Duration {
        self.bounds.quiet_after
    }

    /// When the open transaction's first record went in.
    pub fn opened_at(&self) -> Option<Instant> {
        self.opened
    }

    /// Whether a transaction is open.
    pub fn open(&self) -> bool {
        self.opened.is_some()
    }

    /// Whether the open transaction should be committed now, at a
    /// PostgreSQL transaction boundary: it reached a bound.
    pub fn due(&self, now: Instant) -> bool {
        self.opened.is_some_and(|opened| {
            self.events >= self.bounds.max_events
                || self.bytes >= self.bounds.max_bytes
                || now.saturating_duration_since(opened) >= self.bounds.max_open
        })
    }

    /// When the open transaction reaches its time bound.
    pub fn deadline(&self) -> Option<Instant> {
        self.opened.map(|opened| opened + self.bounds.max_open)
    }

    /// When the open transaction must commit even inside a PostgreSQL
    /// transaction, with a [`Partial`] checkpoint: before the broker aborts
    /// it for outliving `transaction.timeout.ms`.
    pub fn split_at(&self) -> Option<Instant> {
        self.opened.map(|opened| opened + self.bounds.split_after)
    }

    /// Whether the open transaction must commit inside a PostgreSQL
    /// transaction now ([`Batch::split_at`] passed).
    pub fn split_due(&self, now: Instant) -> bool {
        self.split_at().is_some_and(|at| now >= at)
    }

    /// The transaction was committed or aborted: the next record opens a
    /// new one.
    pub fn reset(&mut self) {
        self.opened = None;
        self.events = 0;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn server(system: &str, timeline: u32) -> ServerIdentity {
        ServerIdentity {
            system_id: system.into(),
            timeline,
        }
    }

    fn checkpoint(lsn: u64) -> Checkpoint {
        Checkpoint {
            slot: "orders_slot".into(),
            lsn: Lsn(lsn),
            server: server("7301234567890123456", 1),
            partial: None,
        }
    }

    #[test]
    fn a_checkpoint_reads_back_and_is_plain_json() {
        let c = checkpoint(0x16_B374_D848);
        let bytes = c.encode();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.contains("\"16/B374D848\""), "{text}");
        assert_eq!(Checkpoint::decode(&bytes), Ok(c));
    }

    #[test]
    fn anything_but_a_checkpoint_is_refused() {
        let good = String::from_utf8(checkpoint(42).encode()).unwrap();
        let cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"null".to_vec(),
            b"{}".to_vec(),
            b"\xff\xfe".to_vec(),
            good.replace("\"version\":1", "\"version\":2").into_bytes(),
            good.replace("0/2A", "0-2A").into_bytes(),
            good.replace("0/2A", "").into_bytes(),
            good.replace("\"slot\":\"orders_slot\"", "\"slot\":\"\"")
                .into_bytes(),
            good.replace("}", ",\"extra\":1}").into_bytes(),
            good.replace("\"timeline\":1", "\"timeline\":-1")
                .into_bytes(),
            good.replace("\"timeline\":1", "\"timeline\":4294967296")
                .into_bytes(),
            good.as_bytes()[..good.len() - 1].to_vec(),
            vec![b' '; MAX_RECORD_BYTES + 1],
        ];
        for bytes in cases {
            assert!(
                Checkpoint::decode(&bytes).is_err(),
                "{:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    /// A checkpoint inside a transaction is version 2 and reads back; one
    /// without is still version 1, readable by relays before version 2.
    #[test]
    fn a_partial_checkpoint_is_version_2_and_a_whole_one_version_1() {
        let whole = checkpoint(0x100);
        let text = String::from_utf8(whole.encode()).unwrap();
        assert!(
            text.contains("\"version\":1") && !text.contains("partial"),
            "{text}"
        );
        let split = Checkpoint {
            partial: Some(Partial {
                commit_lsn: Lsn(0x180),
                events: 5000,
            }),
            ..whole
        };
        let text = String::from_utf8(split.encode()).unwrap();
        assert!(text.contains("\"version\":2"), "{text}");
        assert!(text.contains("\"partial_commit_lsn\":\"0/180\""), "{text}");
        assert_eq!(Checkpoint::decode(text.as_bytes()), Ok(split));
        for bad in [
            text.replace("\"version\":2", "\"version\":1"),
            text.replace(",\"partial_events\":5000", ""),
            text.replace("\"partial_events\":5000", "\"partial_events\":0"),
            text.replace("0/180", "0/80"),
            String::from_utf8(checkpoint(0x100).encode())
                .unwrap()
                .replace("\"version\":1", "\"version\":2"),
        ] {
            assert!(Checkpoint::decode(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_batch_splits_only_after_its_split_bound() {
        let t0 = Instant::now();
        let mut batch = Batch::new(bounds());
        assert!(!batch.split_due(t0 + Duration::from_secs(60)));
        batch.record(1, t0);
        assert!(!batch.split_due(t0 + Duration::from_millis(499)));
        assert!(batch.split_due(t0 + Duration::from_millis(500)));
        assert_eq!(batch.split_at(), Some(t0 + Duration::from_millis(500)));
    }

    #[test]
    fn only_a_checkpoint_of_this_system_and_slot_is_used() {
        let here = server("7301234567890123456", 1);
        let wal = Lsn(5000);
        let c = checkpoint(900);
        assert_eq!(usable(None, "orders_slot", &here, wal), Found::Nothing);
        assert_eq!(
            usable(Some(&c), "orders_slot", &here, wal),
            Found::Use(Lsn(900))
        );
        // Another timeline of the same system: used, and the position
        // module reports the server change.
        assert_eq!(
            usable(
                Some(&c),
                "orders_slot",
                &server("7301234567890123456", 2),
                wal
            ),
            Found::Use(Lsn(900))
        );
        assert_eq!(
            usable(
                Some(&c),
                "orders_slot",
                &server("7309999999999999999", 1),
                wal
            ),
            Found::OtherSystem {
                found: c.server.clone()
            }
        );
        assert_eq!(
            usable(Some(&c), "billing_slot", &here, wal),
            Found::OtherSlot {
                found: "orders_slot".into()
            }
        );
    }

    /// A data directory restored from a snapshot keeps its system
    /// identifier and timeline, and its WAL ends below checkpoints written
    /// before the restore: such a checkpoint would skip every new
    /// transaction up to it. One at the server's position (an idle
    /// checkpoint taken at the end of WAL) is still used.
    #[test]
    fn a_checkpoint_above_the_servers_wal_is_never_used() {
        let here = server("7301234567890123456", 1);
        let c = checkpoint(900);
        assert_eq!(
            usable(Some(&c), "orders_slot", &here, Lsn(900)),
            Found::Use(Lsn(900))
        );
        assert_eq!(
            usable(Some(&c), "orders_slot", &here, Lsn(899)),
            Found::AheadOfServer {
                found: Lsn(900),
                server_wal: Lsn(899)
            }
        );
        assert_eq!(
            usable(
                Some(&c),
                "orders_slot",
                &server("7301234567890123456", 2),
                Lsn(0)
            ),
            Found::AheadOfServer {
                found: Lsn(900),
                server_wal: Lsn(0)
            }
        );
        // Another system's or slot's checkpoint says so first: its LSN
        // means nothing here.
        assert!(matches!(
            usable(
                Some(&c),
                "orders_slot",
                &server("7309999999999999999", 1),
                Lsn(0)
            ),
            Found::OtherSystem { .. }
        ));
        assert!(matches!(
            usable(Some(&c), "billing_slot", &here, Lsn(0)),
            Found::OtherSlot { .. }
        ));
    }

    fn bounds() -> Bounds {
        Bounds {
            max_events: 3,
            max_bytes: 1000,
            max_open: Duration::from_millis(100),
            quiet_after: Duration::from_millis(1),
            split_after: Duration::from_millis(500),
        }
    }

    #[test]
    fn a_batch_is_due_at_each_bound_and_not_before() {
        let t0 = Instant::now();
        let mut batch = Batch::new(bounds());
        assert!(!batch.open() && !batch.due(t0 + Duration::from_secs(60)));
        assert_eq!(batch.deadline(), None);
        batch.record(10, t0);
        batch.record(10, t0);
        assert!(batch.open());
        assert!(!batch.due(t0 + Duration::from_millis(99)));
        assert!(batch.due(t0 + Duration::from_millis(100)));
        assert_eq!(batch.deadline(), Some(t0 + Duration::from_millis(100)));
        batch.record(10, t0 + Duration::from_millis(50));
        assert!(batch.due(t0), "three records");
        batch.reset();
        assert!(!batch.open() && !batch.due(t0 + Duration::from_secs(60)));
        batch.record(999, t0);
        assert!(!batch.due(t0));
        batch.record(1, t0);
        assert!(batch.due(t0), "1000 bytes");
        // The clock going backwards does not make it due or panic.
        batch.reset();
        batch.record(1, t0 + Duration::from_secs(1));
        assert!(!batch.due(t0));
    }

    proptest! {
        /// Transactions laid out as in WAL: each commit record at its own
        /// place, [final_lsn, end_lsn), in order, with gaps. For a
        /// checkpoint at any transaction's end, the rule skips exactly the
        /// transactions whose end LSN is at or below it.
        #[test]
        fn the_skip_rule_is_end_lsn_at_or_below_the_checkpoint(
            gaps in prop::collection::vec((0u64..50, 1u64..50), 1..40),
            pick in any::<prop::sample::Index>(),
        ) {
            let mut at = 0u64;
            let mut txns = Vec::new();
            for (gap, len) in gaps {
                let final_lsn = at + gap;
                let end = final_lsn + len;
                txns.push((Lsn(final_lsn), Lsn(end)));
                at = end;
            }
            let checkpoint = txns[pick.index(txns.len())].1;
            for (final_lsn, end) in &txns {
                prop_assert_eq!(
                    already_committed(*final_lsn, checkpoint),
                    *end <= checkpoint,
                    "txn [{}, {}) checkpoint {}", final_lsn, end, checkpoint
                );
            }
        }

        #[test]
        fn every_checkpoint_round_trips(
            slot in "[a-z0-9_]{1,63}",
            lsn in any::<u64>(),
            system_id in "[0-9]{1,20}",
            timeline in any::<u32>(),
            partial in proptest::option::of((any::<u32>().prop_map(u64::from), 1u64..)),
        ) {
            let c = Checkpoint {
                slot,
                lsn: Lsn(lsn),
                server: ServerIdentity { system_id, timeline },
                partial: partial.map(|(ahead, events)| Partial {
                    commit_lsn: Lsn(lsn.saturating_add(ahead)),
                    events,
                }),
            };
            prop_assert_eq!(Checkpoint::decode(&c.encode()), Ok(c));
        }

        /// Arbitrary bytes never panic the decoder, and whatever it accepts
        /// encodes back to a record it reads the same.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(c) = Checkpoint::decode(&bytes) {
                prop_assert_eq!(Checkpoint::decode(&c.encode()), Ok(c));
            }
        }

        /// A batch is due exactly when one of its bounds is reached.
        #[test]
        fn a_batch_is_due_exactly_at_a_bound(
            sizes in prop::collection::vec(0usize..400, 1..10),
            elapsed_ms in 0u64..200,
        ) {
            let t0 = Instant::now();
            let mut batch = Batch::new(bounds());
            for size in &sizes {
                batch.record(*size, t0);
            }
            let bytes: usize = sizes.iter().sum();
            let expected = sizes.len() as u64 >= 3 || bytes >= 1000 || elapsed_ms >= 100;
            prop_assert_eq!(batch.due(t0 + Duration::from_millis(elapsed_ms)), expected);
        }
    }
}
