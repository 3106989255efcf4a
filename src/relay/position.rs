//! Where the next session starts: the relay's confirmed position carried
//! from one session to the next, but only to the same server.
//!
//! A confirmed LSN is a position in one server's WAL history. After a
//! failover to a promoted standby, or when the URL now points at another
//! cluster, the history forked somewhere below it: carrying the old
//! position would make the new server's transactions between the fork and
//! that position look like replays (skipped), and would push the new slot
//! forward over them. So the position is carried only when the server's
//! system identifier and timeline are unchanged; otherwise the new slot's
//! own position is taken and the change is reported loudly.
//!
//! A slot found *ahead* of the position this relay confirmed on the same
//! server means somebody else moved it (another relay, a person with
//! `pg_replication_slot_advance`, a slot dropped and recreated): the server
//! streams from there, so what lies in between is never read. That is
//! reported too, with the gap, never taken silently.

use crate::events;
use crate::replication::ReplicationStream;

use crate::replication::ServerIdentity;
use pgoutput::lsn::Lsn;

/// What the relay confirmed, and on which server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub server: ServerIdentity,
    pub confirmed: Lsn,
}

/// How a new session relates to the position carried from the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// No earlier session in this process: start where the slot is.
    First,
    /// Same server; the slot is at or behind the carried position (it may
    /// be behind after a server crash: the slot's position is persisted at
    /// checkpoints). Transactions the slot re-sends below it are replays.
    Carried,
    /// Same server, but the slot is ahead of what this relay confirmed.
    SlotAhead { confirmed: Lsn, slot: Lsn },
    /// Another server answers (failover, or another cluster behind the URL).
    ServerChanged { previous: Position },
    /// Same server, but what this relay confirmed is above its WAL
    /// position: the database was restored from a backup or snapshot while
    /// the relay ran. Carried, the position would skip every new
    /// transaction below it.
    AheadOfServer { confirmed: Lsn, server_wal: Lsn },
}

/// Decides where a session on `server`, whose slot is at `slot` and whose
/// WAL is flushed up to `server_wal`, starts: returns the position to start
/// from (the tracker's confirmed LSN) and what happened.
pub fn resume(
    carried: Option<&Position>,
    server: &ServerIdentity,
    slot: Lsn,
    server_wal: Lsn,
) -> (Lsn, Resume) {
    match carried {
        None => (slot, Resume::First),
        Some(previous) if previous.server != *server => (
            slot,
            Resume::ServerChanged {
                previous: previous.clone(),
            },
        ),
        // Only flushed WAL is streamed, so a position confirmed on this
        // server stays at or below its flush position for good.
        Some(previous) if previous.confirmed > server_wal => (
            slot,
            Resume::AheadOfServer {
                confirmed: previous.confirmed,
                server_wal,
            },
        ),
        Some(previous) if slot > previous.confirmed => (
            slot,
            Resume::SlotAhead {
                confirmed: previous.confirmed,
                slot,
            },
        ),
        Some(previous) => (previous.confirmed, Resume::Carried),
    }
}

/// Says how a session resumes; loud when the position could not be carried.
pub(super) fn report_resume(
    resumed: &Resume,
    server: &ServerIdentity,
    stream: &ReplicationStream,
    slot: &str,
) {
    let slot_position = stream.slot_confirmed_flush();
    match resumed {
        Resume::First | Resume::Carried => {}
        Resume::SlotAhead {
            confirmed,
            slot: at,
        } => {
            events::SlotAhead {
                slot,
                confirmed_by_relay: *confirmed,
                slot_position: *at,
            }
            .emit();
        }
        Resume::AheadOfServer {
            confirmed,
            server_wal,
        } => {
            events::ConfirmedAboveServerWal {
                slot,
                confirmed_by_relay: *confirmed,
                server_wal: *server_wal,
                server,
                slot_position,
            }
            .emit();
        }
        Resume::ServerChanged { previous } => {
            let fork = stream
                .timeline_fork_point()
                .map_or_else(|| "unknown".to_owned(), |lsn| lsn.to_string());
            events::ServerChanged {
                slot,
                previous_server: &previous.server,
                previous_confirmed: previous.confirmed,
                server,
                timeline_fork: &fork,
                slot_position,
            }
            .emit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(system: &str, timeline: u32) -> ServerIdentity {
        ServerIdentity {
            system_id: system.into(),
            timeline,
        }
    }

    /// The server's WAL position in the tests that are not about it.
    const WAL: Lsn = Lsn(1_000_000);

    fn carried(confirmed: u64) -> Position {
        Position {
            server: server("7001", 1),
            confirmed: Lsn(confirmed),
        }
    }

    #[test]
    fn the_first_session_starts_at_the_slot() {
        assert_eq!(
            resume(None, &server("7001", 1), Lsn(500), WAL),
            (Lsn(500), Resume::First)
        );
    }

    #[test]
    fn the_same_server_carries_the_position_over_a_slot_left_behind() {
        let previous = carried(900);
        assert_eq!(
            resume(Some(&previous), &server("7001", 1), Lsn(500), WAL),
            (Lsn(900), Resume::Carried)
        );
        assert_eq!(
            resume(Some(&previous), &server("7001", 1), Lsn(900), WAL),
            (Lsn(900), Resume::Carried)
        );
    }

    #[test]
    fn a_slot_ahead_is_reported_with_the_gap() {
        let previous = carried(900);
        assert_eq!(
            resume(Some(&previous), &server("7001", 1), Lsn(1500), WAL),
            (
                Lsn(1500),
                Resume::SlotAhead {
                    confirmed: Lsn(900),
                    slot: Lsn(1500)
                }
            )
        );
    }

    #[test]
    fn another_timeline_or_system_never_inherits_the_position() {
        let previous = carried(900);
        for other in [server("7001", 2), server("8002", 1)] {
            // Whether the new slot is behind (the usual failover) or ahead.
            for slot in [Lsn(100), Lsn(2000)] {
                let (start, what) = resume(Some(&previous), &other, slot, WAL);
                assert_eq!(start, slot);
                assert_eq!(
                    what,
                    Resume::ServerChanged {
                        previous: previous.clone()
                    }
                );
            }
        }
    }

    /// A database restored from a snapshot while the relay ran: same
    /// system and timeline, WAL ending below what the relay confirmed. The
    /// carried position would skip every new transaction below it.
    #[test]
    fn a_position_above_the_servers_wal_is_never_carried() {
        let previous = carried(900);
        assert_eq!(
            resume(Some(&previous), &server("7001", 1), Lsn(400), Lsn(899)),
            (
                Lsn(400),
                Resume::AheadOfServer {
                    confirmed: Lsn(900),
                    server_wal: Lsn(899)
                }
            )
        );
        // At the server's position (an idle confirmation at the end of
        // WAL): carried.
        assert_eq!(
            resume(Some(&previous), &server("7001", 1), Lsn(400), Lsn(900)),
            (Lsn(900), Resume::Carried)
        );
    }
}
