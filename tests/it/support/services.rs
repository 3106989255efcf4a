//! The shared services from inside a test: `scripts/services` (stop and
//! start Kafka or PostgreSQL, physical standbys), a guard that restarts a
//! stopped service and one that resets a server setting, whatever way the
//! test ends; and the lock that keeps the tests that disturb the services
//! apart from every other test.
//!
//! The lock: every test that uses PostgreSQL or Kafka holds a [`shared`]
//! share of it for its whole run ([`super::TestOutbox`] takes one when
//! created); a test that stops a service, changes a server-wide setting or
//! invalidates slots holds it [`exclusive`]ly, so it runs alone (and lives
//! in an `alone` module, which `make test` runs last, serially). The lock is
//! fair: a waiting exclusive test is not starved by shared ones, and shared
//! tests queue behind it. A test must take its share once: asking again
//! while an exclusive test waits would wait for itself.

use std::process::Command;

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::env;

static SERVICES: RwLock<()> = RwLock::const_new(());

/// A share of the services lock: no test stops a service while it lives.
pub struct Shared(Option<RwLockReadGuard<'static, ()>>);

impl Shared {
    /// For an object whose test holds the lock some other way (exclusively,
    /// or through another object that outlives this one).
    pub fn held_by_caller() -> Self {
        Shared(None)
    }
}

/// The services lock held alone: this test may stop services.
pub struct Exclusive(RwLockWriteGuard<'static, ()>);

/// Waits for a share of the services lock.
pub async fn shared() -> Shared {
    Shared(Some(SERVICES.read().await))
}

/// Waits until no other test uses the services, and keeps them to itself.
///
/// Such a test lives in a module named `alone` (`service_faults::alone::…`):
/// `make test` runs the others first, in parallel, then these one at a time,
/// so that no shared test queues behind them. The test thread's name (the
/// test's path, as libtest names it) tells; a test elsewhere fails here.
pub async fn exclusive() -> Exclusive {
    let thread = std::thread::current();
    if let Some(test) = thread.name().filter(|n| n.contains("::")) {
        assert!(
            test.contains("::alone::"),
            "{test} holds the services alone: move it into its file's `mod alone` \
             so that make test runs it in the serial phase"
        );
    }
    Exclusive(SERVICES.write().await)
}

/// Runs `$OUTBOX_RELAY_SERVICES <args>` (blocking) and says whether it worked.
pub fn run(args: &[&str]) -> bool {
    Command::new(env("OUTBOX_RELAY_SERVICES"))
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// [`run`] off the async workers.
pub async fn run_async(args: &[&str]) -> bool {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || run(&args.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .unwrap()
}

/// `scripts/services <args>`, which must succeed; returns its stdout.
pub fn output(args: &[&str]) -> String {
    let out = Command::new(env("OUTBOX_RELAY_SERVICES"))
        .args(args)
        .output()
        .expect("run scripts/services");
    assert!(
        out.status.success(),
        "scripts/services {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A physical standby of the test cluster named `name`; returns its port.
pub fn standby_create(name: &str) -> String {
    output(&["standby-create", name]).trim().to_owned()
}

pub fn standby_promote(name: &str) {
    output(&["standby-promote", name]);
}

pub fn standby_remove(name: &str) {
    output(&["standby-remove", name]);
}

/// A stopped service; dropping the guard starts it again if the test did
/// not, so a failing test never leaves the cluster without it.
pub struct ServiceDown {
    start: &'static str,
    down: bool,
}

impl ServiceDown {
    /// Runs `stop` (e.g. `["stop-pg", "fast"]`); `start` brings it back.
    pub async fn stop(stop: &[&str], start: &'static str) -> Self {
        // Armed before stopping: a half-done stop is restored too.
        let guard = ServiceDown { start, down: true };
        assert!(run_async(stop).await, "{stop:?} failed");
        guard
    }

    pub async fn start(mut self) {
        assert!(run_async(&[self.start]).await, "{} failed", self.start);
        self.down = false;
    }
}

impl Drop for ServiceDown {
    fn drop(&mut self) {
        if self.down && !run(&[self.start]) {
            eprintln!("could not restore the service with `{}`", self.start);
        }
    }
}

/// `max_slot_wal_keep_size` set for the test; reset (and reloaded) when
/// dropped, whatever happened.
pub struct WalKeepLimit;

impl WalKeepLimit {
    pub async fn set(admin: &tokio_postgres::Client, size: &str) -> Self {
        let guard = WalKeepLimit;
        admin
            .batch_execute(&format!(
                "ALTER SYSTEM SET max_slot_wal_keep_size = '{size}'"
            ))
            .await
            .expect("set max_slot_wal_keep_size");
        admin
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
        guard
    }
}

impl Drop for WalKeepLimit {
    fn drop(&mut self) {
        // psql, not the test's async client: a Drop cannot await, and this
        // must also run while a panic unwinds.
        let ok = super::psql_as_superuser(&[
            "ALTER SYSTEM RESET max_slot_wal_keep_size",
            "SELECT pg_reload_conf()",
        ]);
        if !ok {
            eprintln!("could not reset max_slot_wal_keep_size");
        }
    }
}
