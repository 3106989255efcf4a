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

use crate::metrics as m;
use crate::replication::ReplicationStream;

use crate::lsn::Lsn;
use crate::replication::ServerIdentity;

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
}

/// Decides where a session on `server`, whose slot is at `slot`, starts:
/// returns the position to start from (the tracker's confirmed LSN) and
/// what happened.
pub fn resume(carried: Option<&Position>, server: &ServerIdentity, slot: Lsn) -> (Lsn, Resume) {
    match carried {
        None => (slot, Resume::First),
        Some(previous) if previous.server != *server => (
            slot,
            Resume::ServerChanged {
                previous: previous.clone(),
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
            metrics::counter!(m::SLOT_JUMPS).increment(1);
            tracing::warn!(
                slot,
                confirmed_by_relay = %confirmed,
                slot_position = %at,
                gap_bytes = at.as_u64().saturating_sub(confirmed.as_u64()),
                "the slot is ahead of the position this relay confirmed: someone else advanced \
                 or recreated it, and transactions committed in between are not read"
            );
        }
        Resume::ServerChanged { previous } => {
            metrics::counter!(m::SERVER_CHANGES).increment(1);
            let fork = stream
                .timeline_fork_point()
                .map_or_else(|| "unknown".to_owned(), |lsn| lsn.to_string());
            tracing::error!(
                slot,
                previous_server = %previous.server,
                previous_confirmed = %previous.confirmed,
                %server,
                timeline_fork = %fork,
                slot_position = %slot_position,
                "another PostgreSQL server answers (failover or a new cluster behind the URL): \
                 starting from the new slot's position, not the old server's. Events committed \
                 on the new server before the slot's position (since the timeline fork, when the \
                 slot was created after it) were never decoded by this slot and may be missing; \
                 events the relay confirmed on the old server above the fork may not exist on \
                 the new one"
            );
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

    fn carried(confirmed: u64) -> Position {
        Position {
            server: server("7001", 1),
            confirmed: Lsn(confirmed),
        }
    }

    #[test]
    fn the_first_session_starts_at_the_slot() {
        assert_eq!(
            resume(None, &server("7001", 1), Lsn(500)),
            (Lsn(500), Resume::First)
        );
    }

    #[test]
    fn the_same_server_carries_the_position_over_a_slot_left_behind() {
        let previous = carried(900);
        assert_eq!(
            resume(Some(&previous), &server("7001", 1), Lsn(500)),
            (Lsn(900), Resume::Carried)
        );
        assert_eq!(
            resume(Some(&previous), &server("7001", 1), Lsn(900)),
            (Lsn(900), Resume::Carried)
        );
    }

    #[test]
    fn a_slot_ahead_is_reported_with_the_gap() {
        let previous = carried(900);
        assert_eq!(
            resume(Some(&previous), &server("7001", 1), Lsn(1500)),
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
                let (start, what) = resume(Some(&previous), &other, slot);
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
}
