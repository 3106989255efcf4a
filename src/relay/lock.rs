//! The relay lock: of several relays run with the same config, one streams
//! (the active relay) and the others stand by, without anything but
//! PostgreSQL to agree on it.
//!
//! Election: a session-level advisory lock, `pg_try_advisory_lock(key)`
//! with a key derived from the slot name ([`lock_key`]), taken on an
//! ordinary SQL session (same conninfo, TLS and authentication as the
//! stream) and held for as long as that session lives. A relay that does
//! not get it stands by and tries again every [`LockSettings::poll`].
//!
//! Fencing: the lock is only as good as the holder's knowledge that it
//! still holds it. The session sets `idle_session_timeout` to the lease, so
//! the server itself ends it (and so releases the lock) once no query
//! arrived for a lease; the holder sends one every [`LockSettings::renew_every`].
//! The holder counts its lease from the moment it SENT the last query that
//! came back, which is before the server's idle clock started, and gives it
//! up [`LockSettings::margin`] before the lease runs out. So a relay cut off
//! from PostgreSQL (a dead route: no FIN, no RST) has stopped producing
//! before the server releases the lock to anyone else; a relay whose
//! connection closes (kill -9, a reset) loses the lock and learns of it
//! together, at the next renewal at the latest.
//!
//! Invariants:
//! * [`HeldLock::lost`] turns true at the latest at `sent + lease - margin`
//!   after the last renewal sent at `sent` that succeeded, and never turns
//!   back;
//! * the relay streams only while it holds an unlost lock (see `relay.rs`),
//!   and only from the server the lock is held on ([`HeldLock::server`]):
//!   an advisory lock excludes relays on its own server only;
//! * dropping a [`HeldLock`] closes its session: the lock is released.
//!
//! What it does not cover: a relay process frozen (SIGSTOP, a VM paused)
//! longer than the margin while the producer holds unsent records; those
//! may reach the broker after the next holder started. Kafka transactions
//! (`transactional.id` fencing) close that window on the broker's side.

use super::{RelaySettings, Upkeep};
use crate::events;
use crate::metrics::{self as m, Health};

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

use crate::pg::{Endpoint, ErrorKind, PgClient, PgError};

use crate::replication::ReplicationSettings;

/// The longest and shortest lease `relay.lock_lease_ms` accepts.
pub const MIN_LEASE: Duration = Duration::from_millis(1_000);
pub const MAX_LEASE: Duration = Duration::from_millis(60_000);
/// The default lease: a takeover within about 4 s of the holder's network
/// going dead, yet a renewal may take up to 2.25 s on a loaded server
/// before the holder gives up.
pub const DEFAULT_LEASE: Duration = Duration::from_millis(3_000);

/// `relay.standby_lock` and `relay.lock_lease_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockSettings {
    /// Whether relays elect one of them by the lock; off, every relay tries
    /// the slot and waits while it is busy.
    pub enabled: bool,
    /// The server ends the lock's session after this long without a query.
    pub lease: Duration,
}

impl Default for LockSettings {
    fn default() -> Self {
        LockSettings {
            enabled: true,
            lease: DEFAULT_LEASE,
        }
    }
}

impl LockSettings {
    /// How often the holder renews: four renewals per lease, so that a
    /// slow one or two do not cost the lock.
    pub fn renew_every(&self) -> Duration {
        self.lease / 4
    }

    /// How long before the server could release the lock the holder
    /// considers it lost.
    pub fn margin(&self) -> Duration {
        self.lease / 4
    }

    /// The holder may produce until this long after sending a renewal that
    /// succeeded.
    pub fn valid_for(&self) -> Duration {
        self.lease - self.margin()
    }

    /// How often a standby tries for the lock (one query on a session it
    /// keeps open).
    pub fn poll(&self) -> Duration {
        self.lease / 10
    }
}

/// The advisory lock key of `slot`: FNV-1a (64 bit) of a fixed prefix and
/// the slot name. Stable across releases and platforms, so relays of
/// different versions on one slot still exclude each other.
pub fn lock_key(slot: &str) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for byte in b"outbox-relay slot ".iter().chain(slot.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash as i64
}

/// Why the lock could not be tried.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Connecting or querying failed (its own kind: transient or fatal).
    #[error("relay lock for slot {slot:?}: {source}")]
    Connection { slot: String, source: PgError },
    /// The server refused the lease (`idle_session_timeout` is
    /// PostgreSQL 14+).
    #[error(
        "relay lock for slot {slot:?}: the server refused the lease ({detail}); the relay lock \
         needs PostgreSQL 14 or later (idle_session_timeout). Set relay.standby_lock = false to \
         run without it (one relay per slot, or a slow takeover)"
    )]
    Unsupported { slot: String, detail: String },
}

impl LockError {
    /// Its stable name, for the `fatal_error` line when it stops the relay.
    pub fn cause(&self) -> crate::error::Cause {
        match self {
            LockError::Connection { source, .. } => source.cause(),
            LockError::Unsupported { .. } => crate::error::Cause::RelayLockUnusable,
        }
    }

    pub fn is_fatal(&self) -> bool {
        match self {
            LockError::Connection { source, .. } => source.kind() == ErrorKind::Fatal,
            LockError::Unsupported { .. } => true,
        }
    }
}

/// The lock, held: a background task renews it and says when it is lost.
pub struct HeldLock {
    lost: watch::Receiver<bool>,
    renewer: JoinHandle<()>,
    /// When it was granted: the lease's length so far.
    taken: Instant,
    /// The server the lock's session is on: the lock excludes other
    /// relays there only, so the stream must read the slot there too.
    server: Endpoint,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        // The task owns the session: aborting it drops the client, whose
        // connection then says goodbye and closes, and the server releases
        // the lock.
        self.renewer.abort();
    }
}

impl HeldLock {
    /// Whether the lock is lost (or may be, for all the holder knows).
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// How long the lock has been held (the supervisor backs off between
    /// leases that keep being lost soon).
    pub fn held_for(&self) -> Duration {
        self.taken.elapsed()
    }

    /// A receiver that turns true once the lock is lost.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }

    /// The server the lock's session is on. With several hosts in
    /// `postgres.url`, the lock's session and the stream would each take
    /// the first host that answers, possibly different servers, and the
    /// lock would fence nothing on the server whose slot is read: the
    /// relay pins its connections to this one while it holds the lock.
    pub fn server(&self) -> &Endpoint {
        &self.server
    }
}

/// A relay that wants the lock: it keeps one session open between tries,
/// so that a standby's try is one query, not a new connection each time.
#[derive(Default)]
pub struct Candidate {
    session: Option<PgClient>,
}

impl Candidate {
    /// Tries the lock once: `Ok(None)` when another session holds it.
    /// Granted, it ends whatever process still reads the slot (a relay that
    /// lost the lock, or a reader nobody elected) before it returns, so the
    /// stream that follows finds the slot free.
    ///
    /// # Errors
    /// [`LockError`]: the session could not be opened, or the lease set;
    /// the session is dropped and the next try opens another.
    pub async fn try_acquire(
        &mut self,
        replication: &ReplicationSettings,
        settings: LockSettings,
    ) -> Result<Option<HeldLock>, LockError> {
        let slot = &replication.slot;
        let wrap = |source| LockError::Connection {
            slot: slot.clone(),
            source,
        };
        let session = match self.session.take() {
            Some(session) => session,
            None => open(replication, settings).await?,
        };
        let sent = Instant::now();
        let granted: bool = session
            .query_one("SELECT pg_try_advisory_lock($1)", &[&lock_key(slot)])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| wrap(session.error("trying the relay lock", e)))?;
        if !granted {
            self.session = Some(session);
            return Ok(None);
        }
        // The slot's reader, if any, cannot hold the lock: end it, waiting
        // at most a quarter lease so the first renewal stays in time. One
        // that takes longer to exit is found busy by the stream, which
        // retries.
        let evict = "SELECT active_pid, pg_terminate_backend(active_pid, $1) \
                     FROM pg_replication_slots WHERE slot_name = $2 AND active_pid IS NOT NULL";
        let wait_ms = i64::try_from(settings.margin().as_millis()).unwrap_or(i64::MAX);
        let evicted = async {
            let rows = session.query(evict, &[&wait_ms, slot]).await?;
            rows.first().map(|row| row.try_get::<_, i32>(0)).transpose()
        };
        match timeout_at(sent + settings.margin(), evicted).await {
            Ok(Ok(pid)) => {
                if let Some(pid) = pid {
                    let pid = pid.to_string();
                    events::SlotReaderEnded { slot, pid: &pid }.emit();
                }
            }
            // Not allowed to signal it (another role), or the query failed:
            // the stream waits for the slot as without the lock.
            Ok(Err(e)) => {
                let e = session.error("ending the slot's previous reader", e);
                events::SlotReaderNotEnded { slot, error: &e }.emit();
            }
            Err(_) => {
                events::SlotReaderEndTimedOut { slot }.emit();
                return Err(wrap(PgError::Io {
                    target: session.target().to_owned(),
                    action: "ending the slot's previous reader",
                    source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                }));
            }
        }
        let (tx, lost) = watch::channel(false);
        let server = session.endpoint().clone();
        let renewer = tokio::spawn(renew(session, settings, sent, tx, slot.clone()));
        Ok(Some(HeldLock {
            lost,
            renewer,
            taken: sent,
            server,
        }))
    }
}

/// A session for the lock, its lease set.
async fn open(
    replication: &ReplicationSettings,
    settings: LockSettings,
) -> Result<PgClient, LockError> {
    let slot = &replication.slot;
    let session = PgClient::connect(&replication.connection)
        .await
        .map_err(|source| LockError::Connection {
            slot: slot.clone(),
            source,
        })?;
    let lease_ms = settings.lease.as_millis().to_string();
    match session
        .execute(
            "SELECT set_config('idle_session_timeout', $1, false)",
            &[&lease_ms],
        )
        .await
        .map_err(|e| session.error("setting the relay lock's lease", e))
    {
        Ok(_) => Ok(session),
        // 42704: unrecognized configuration parameter (before 14).
        Err(e @ PgError::Server { .. }) if matches!(&e, PgError::Server { server, .. } if server.code == "42704") => {
            Err(LockError::Unsupported {
                slot: slot.clone(),
                detail: e.to_string(),
            })
        }
        Err(source) => Err(LockError::Connection {
            slot: slot.clone(),
            source,
        }),
    }
}

/// Renews the lease until a renewal fails or does not come back in time;
/// then says the lock is lost and ends (closing the session).
async fn renew(
    session: PgClient,
    settings: LockSettings,
    mut sent: Instant,
    lost: watch::Sender<bool>,
    slot: String,
) {
    let mut valid_until = sent + settings.valid_for();
    loop {
        tokio::time::sleep_until((sent + settings.renew_every()).min(valid_until)).await;
        sent = Instant::now();
        match timeout_at(valid_until, session.simple_query("SELECT 1")).await {
            Ok(Ok(_)) => valid_until = sent + settings.valid_for(),
            Ok(Err(e)) => {
                let e = session.error("renewing the relay lock", e);
                events::RelayLockSessionFailed {
                    slot: &slot,
                    error: &e,
                }
                .emit();
                break;
            }
            Err(_) => {
                events::RelayLockRenewalLate {
                    slot: &slot,
                    lease_ms: settings.lease.as_millis() as u64,
                }
                .emit();
                break;
            }
        }
    }
    lost.send_replace(true);
}

/// Tries the relay lock: `Ok(true)` when this relay holds it now,
/// `Ok(false)` when another relay does (this one stands by: /ready says so,
/// the role gauge is 0). Logs a change of role once.
pub(super) async fn hold_lock(
    settings: &RelaySettings,
    candidate: &mut Candidate,
    upkeep: &Upkeep,
    lock: &mut Option<HeldLock>,
    health: &Health,
    standing_by: &mut bool,
) -> Result<bool, LockError> {
    let slot = &settings.replication.slot;
    if lock.take().is_some() {
        events::RelayLockLostBetweenSessions { slot }.emit();
    }
    // On the upkeep's runtime: the lock's session, and the renewer spawned
    // with it, run there, never behind the stream (`upkeep.rs`).
    let replication = settings.replication.clone();
    let lease = settings.lock;
    let mut trying = std::mem::take(candidate);
    let (tried, acquired) = upkeep
        .run(async move {
            let acquired = trying.try_acquire(&replication, lease).await;
            (trying, acquired)
        })
        .await;
    *candidate = tried;
    match acquired? {
        Some(held) => {
            events::RelayLockHeld {
                slot,
                key: lock_key(slot),
            }
            .emit();
            *lock = Some(held);
            *standing_by = false;
            health.set_standby(false);
            Ok(true)
        }
        None => {
            if !*standing_by {
                events::StandingBy {
                    slot,
                    key: lock_key(slot),
                }
                .emit();
                *standing_by = true;
            }
            metrics::gauge!(m::ROLE_ACTIVE).set(0.0);
            health.set_standby(true);
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_depends_on_the_slot_name_alone_and_is_stable() {
        assert_eq!(lock_key("outbox"), lock_key("outbox"));
        assert_ne!(lock_key("outbox"), lock_key("outbox2"));
        assert_ne!(lock_key("a"), lock_key("b"));
        // Pinned: relays of different releases must derive the same key.
        assert_eq!(lock_key("outbox_relay"), lock_key_reference("outbox_relay"));
        assert_eq!(lock_key("outbox_relay"), 0x4d68_005d_834e_c6bfu64 as i64);
    }

    /// FNV-1a spelled out byte by byte, as its specification gives it.
    fn lock_key_reference(slot: &str) -> i64 {
        let text = format!("outbox-relay slot {slot}");
        let mut h: u64 = 14_695_981_039_346_656_037;
        for b in text.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(1_099_511_628_211);
        }
        h as i64
    }

    #[test]
    fn the_holder_gives_up_before_the_server_could_release_the_lock() {
        for ms in [1_000, 3_000, 60_000] {
            let s = LockSettings {
                enabled: true,
                lease: Duration::from_millis(ms),
            };
            assert!(s.valid_for() < s.lease, "{s:?}");
            assert!(
                s.renew_every() < s.valid_for(),
                "at least one renewal in time"
            );
            assert!(
                s.poll() < s.renew_every(),
                "a standby's session never idles out"
            );
        }
    }
}
