//! One time round the outer loop, with its I/O: the relay lock, the
//! stream's connect, exactly-once's start, one streaming session. It ends
//! in an [`Outcome`] for the supervisor (`supervisor.rs`), which decides
//! what comes next; what outlives a round (the position carried to the
//! next, the lock, the refusals, the progress line) is kept here.
//!
//! The replication settings of a round are built for it
//! ([`Sessions::replication`]): the configured ones, pinned to the lock's
//! server while the relay lock is held, with the outbox table's OID once
//! a session found it. [`RelaySettings`] is only read.

use super::lock::{self, HeldLock};
use super::machine::{Carry, Said, merge_checkpoint, partial_at};
use super::position::{self, Position};
use super::progress::Progress;
use super::supervisor::Outcome;
use super::{Background, DeliveryTag, Refusals, RelaySettings};
use super::{check_dead_letter_topic, exactly_once, session};
use crate::events;
use crate::metrics::{self as m, Health};
use crate::pg::PgError;
use crate::replication::{ReplicationSettings, ReplicationStream};
use crate::sink::KafkaSink;
use crate::sink::http::table_access;
use pgoutput::lsn::Lsn;

use tokio::sync::watch;

/// The real rounds: the relay lock, PostgreSQL and Kafka.
pub(super) struct Sessions<'a> {
    settings: &'a RelaySettings,
    health: Health,
    background: &'a Background,
    progress: Progress,
    /// The confirmed position and the server it belongs to, carried from
    /// one session to the next (only to the same server: see `position`).
    carried: Option<Position>,
    refusals: Refusals,
    dead_letter_topic_checked: bool,
    lock: Option<HeldLock>,
    candidate: lock::Candidate,
    standing_by: bool,
    /// The outbox table's OID, once a session found it: preferred over the
    /// name, so that a table renamed while the relay runs is still found.
    outbox_oid: Option<u32>,
    /// What exactly-once's start said already, not said again.
    said: Said,
}

impl<'a> Sessions<'a> {
    pub(super) fn new(
        settings: &'a RelaySettings,
        progress: Progress,
        health: Health,
        background: &'a Background,
    ) -> Sessions<'a> {
        Sessions {
            settings,
            health,
            background,
            progress,
            carried: None,
            refusals: Refusals::new(),
            dead_letter_topic_checked: false,
            lock: None,
            candidate: lock::Candidate::default(),
            standing_by: false,
            outbox_oid: settings.replication.outbox_oid,
            said: Said::default(),
        }
    }

    /// The relay lock is lost: let go of it; the relay is not the active
    /// one.
    pub(super) fn let_go_of_lock(&mut self) {
        self.lock = None;
        metrics::gauge!(m::ROLE_ACTIVE).set(0.0);
    }

    /// The replication settings of this round. `postgres.url` may name
    /// several hosts, all of them tried for the lock; while the lock is
    /// held, the relay's connections go to its server only
    /// (`HeldLock::server`).
    fn replication(&self) -> ReplicationSettings {
        let mut replication = self.settings.replication.clone();
        if let Some(held) = &self.lock {
            replication.connection.conninfo =
                replication.connection.conninfo.pinned_to(held.server());
        }
        replication.outbox_oid = self.outbox_oid;
        replication
    }

    /// Once round: hold the lock (if `relay.standby_lock`), connect, start
    /// the Kafka transactions (exactly-once), stream until the session
    /// ends.
    pub(super) async fn round(&mut self, shutdown: &mut watch::Receiver<bool>) -> Outcome {
        let settings = self.settings;
        if settings.lock.enabled && self.lock.as_ref().is_none_or(HeldLock::is_lost) {
            match lock::hold_lock(
                settings,
                &mut self.candidate,
                &self.background.upkeep,
                &mut self.lock,
                &self.health,
                &mut self.standing_by,
            )
            .await
            {
                Ok(true) => {}
                Ok(false) => {
                    // Another relay holds the lock and moves the slot on:
                    // the position this one confirmed is no longer the
                    // last word, and the slot found ahead of it when it
                    // takes over is no gap. It starts from the slot then
                    // (an exactly-once relay from its checkpoint).
                    self.carried = None;
                    return Outcome::StandingBy {
                        poll: settings.lock.poll(),
                    };
                }
                Err(e) => return Outcome::LockUntried(e),
            }
        }
        let replication = self.replication();
        // The stream reports nothing before `confirm` below: the position to
        // report depends on which server answered.
        let mut stream = match ReplicationStream::connect(&replication, Lsn::ZERO).await {
            Ok(stream) => stream,
            Err(error) => {
                return Outcome::Unconnected {
                    error,
                    holding_lock: self.lock.is_some(),
                };
            }
        };
        let server = stream.identity().clone();
        // Exactly-once: the last committed checkpoint is where this session
        // starts (see `exactly_once`).
        let mut prepared = None;
        let mut partial = None;
        if let Some(eos) = &settings.exactly_once {
            match exactly_once::prepare(
                &settings.sink,
                eos,
                &replication.slot,
                &server,
                stream.server_wal_position(),
                &mut self.said,
            )
            .await
            {
                Ok(exactly_once::Prepared {
                    sink,
                    carried: from_checkpoint,
                    partial: from_partial,
                }) => {
                    // How the checkpoint merges with the carried position
                    // is the machine's policy (`machine/carry.rs`).
                    let Carry {
                        carried,
                        partial: merged,
                        none_found,
                    } = merge_checkpoint(self.carried.take(), from_checkpoint, from_partial);
                    self.carried = carried;
                    partial = merged;
                    if none_found {
                        events::NoCheckpoint {
                            topic: &eos.transactions.checkpoint_topic,
                            key: &eos.transactions.transactional_id,
                        }
                        .emit();
                    }
                    prepared = Some(sink);
                }
                Err(e) => return Outcome::Unprepared(e),
            }
        }
        let (start, resumed) = position::resume(
            self.carried.as_ref(),
            &server,
            stream.slot_confirmed_flush(),
            stream.server_wal_position(),
        );
        // The part of a transaction in Kafka counts only from the checkpoint
        // it was written with.
        let partial = partial_at(partial, start);
        position::report_resume(&resumed, &server, &stream, &replication.slot);
        let confirmed = start;
        stream.confirm(confirmed);
        metrics::gauge!(m::CONFIRMED_LSN).set(confirmed.as_u64() as f64);
        let outbox = stream.outbox_table().cloned();
        if !replication.outbox_table_optional && outbox.is_none() {
            // The settings name the table (above), so the stream resolved it.
            return Outcome::Fatal(
                PgError::TableMissing {
                    table: format!("{}.{}", settings.table.0, settings.table.1),
                    database: String::new(),
                }
                .into(),
            );
        }
        if let Some(outbox) = &outbox {
            if outbox.current_name != outbox.qualified_name() {
                events::OutboxRenamed {
                    configured: &outbox.qualified_name(),
                    now: &outbox.current_name,
                    oid: outbox.oid,
                }
                .emit();
            }
            self.outbox_oid = Some(outbox.oid);
        }
        let (mut sink, reports) = match prepared {
            Some(prepared) => prepared,
            None => match KafkaSink::<DeliveryTag>::new(&settings.sink) {
                Ok(sink) => sink,
                Err(e) => return Outcome::Fatal(e.into()),
            },
        };
        let eos = settings
            .exactly_once
            .clone()
            .map(|eos| exactly_once::Eos::new(eos, &replication.slot, server.clone()));
        let brokers = settings.sink.brokers.clone();
        let reach = self.health.clone();
        sink.on_reach(Box::new(move |down| match down {
            Some(why) => reach.kafka_unreachable(&format_args!("{brokers} ({why})")),
            None => reach.kafka_reachable(),
        }));
        // Before the first event: is any broker there at all? If none
        // answers, the probe says so once and the relay streams anyway:
        // the broker may come up later, and events wait in the producer
        // until it does. The dead-letter topic is checked at the first
        // start that reaches one.
        if !self.dead_letter_topic_checked
            && sink
                .probe_brokers(settings.sink.topic_check_timeout())
                .await
        {
            if let Err(e) = check_dead_letter_topic(&mut sink, settings).await {
                return Outcome::Fatal(e.into());
            }
            if let Err(e) = table_access::check_at_start(&self.background.webhooks).await {
                return Outcome::Fatal(e.into());
            }
            self.dead_letter_topic_checked = true;
        }
        // What is parked, before the first event is decided: a restart, a
        // standby taking over, another shard's relay all start from the
        // table.
        let parked = match &settings.parking {
            None => Vec::new(),
            Some(table) => match crate::parking::load(&replication.connection, table).await {
                Ok(heads) => heads,
                Err(
                    e @ (crate::parking::LoadError::Missing { .. }
                    | crate::parking::LoadError::NotPermitted { .. }),
                ) => {
                    return Outcome::Fatal(e.into());
                }
                Err(crate::parking::LoadError::Unavailable { source, .. }) => {
                    return Outcome::Unconnected {
                        error: source,
                        holding_lock: self.lock.is_some(),
                    };
                }
            },
        };
        events::Streaming {
            slot: &replication.slot,
            confirmed,
            parked_aggregates: parked.len(),
        }
        .emit();
        self.health.set_streaming(true);
        let outcome = session::Session::new(
            settings,
            (stream, replication),
            (sink, reports),
            (outbox, confirmed),
            &mut self.refusals,
            self.health.clone(),
            (&mut self.progress, self.background),
        )
        .with_exactly_once(eos, partial)
        .with_parked(parked, settings)
        .fenced_by(self.lock.as_ref().map(HeldLock::watch))
        .run(shutdown)
        .await;
        self.health.set_streaming(false);
        if self.lock.is_none() {
            metrics::gauge!(m::ROLE_ACTIVE).set(0.0);
        }
        // Whatever waited in this session is replayed by the next one.
        metrics::gauge!(m::OLDEST_UNACKED_AGE).set(0.0);
        match outcome {
            Ok((confirmed, stopped)) => Outcome::Stopped { stopped, confirmed },
            Err((error, last_confirmed)) => {
                let progressed = last_confirmed > confirmed;
                let confirmed = confirmed.max(last_confirmed);
                self.carried = Some(Position { server, confirmed });
                Outcome::Failed {
                    error,
                    progressed,
                    confirmed,
                    lock_lost: self.lock.as_ref().is_some_and(HeldLock::is_lost),
                    lease: self.lock.as_ref().map(HeldLock::held_for),
                }
            }
        }
    }
}
