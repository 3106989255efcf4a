//! The operator commands: `init` (set the database up), `check` (a
//! preflight of everything `run` needs), `status` (how far behind the
//! slot is), `dead` (list, retry and discard dead letters) and `schema check`
//! (payloads against their contract, offline).
//!
//! Role: read the catalog and the broker, decide, and print. Each command
//! gathers facts with I/O ([`pg_facts`], [`kafka_facts`]) and hands them to pure
//! functions (the init plan, the check verdicts, the status report) that the
//! unit tests drive with made-up facts.
//!
//! Invariants:
//! * The commands talk to PostgreSQL on ordinary sessions
//!   ([`AdminTarget::client`], a [`PgClient`] with typed parameters; the
//!   modules not moved to it yet on [`AdminTarget::connect`]'s simple-query
//!   session): the same conninfo, TLS and authentication semantics as the
//!   stream, without needing the REPLICATION attribute, so `check` can
//!   report on a role that lacks it.
//! * `check`, `status` and `dead list` never write: no DDL, no topic
//!   creation (metadata is requested for all topics, which never
//!   auto-creates one). `dead retry` and `dead discard` write only what
//!   [`dead`] says.
//! * `init` never drops or replaces anything, and refuses to create a slot
//!   where one was lost (see [`init`]): design invariant "Loud on lost
//!   history".
//! * The verdicts on the slot and on the publication are the relay's own
//!   (`evaluate_slot_json`, `resolve_on`), so `check` says what `run` would.

pub mod check;
pub mod dead;
pub mod init;
pub mod kafka_facts;
pub mod pg_facts;
pub mod schema;
pub mod shards;
pub mod status;

use std::time::Duration;

use crate::config::Config;
use crate::pg::{ConnectSettings, Conninfo, PgClient, PgError};

/// `application_name` of the operator commands' sessions (unless the
/// conninfo sets one), so that they are told apart from the relay in
/// `pg_stat_activity`.
pub const ADMIN_APPLICATION_NAME: &str = "outbox-relay-admin";

/// The relay's fallback `application_name` (see [`crate::relay`]): what a
/// running relay shows in `pg_stat_replication` unless its conninfo sets one.
pub const RELAY_APPLICATION_NAME: &str = "outbox-relay";

/// Where the operator commands connect.
#[derive(Clone)]
pub struct AdminTarget {
    /// The relay's own conninfo (`postgres.url`): its user is the role the
    /// checks are about.
    pub relay_url: String,
    /// `--admin-url`: run the SQL as this role instead (a table owner or
    /// superuser for `init`, a monitoring role for `status`).
    pub admin_url: Option<String>,
    pub connect_timeout: Duration,
}

impl AdminTarget {
    pub fn from_config(config: &Config, admin_url: Option<String>) -> Self {
        AdminTarget {
            relay_url: config.postgres.url.clone(),
            admin_url,
            connect_timeout: config.postgres.connect_timeout(),
        }
    }

    /// The conninfo the commands connect with.
    pub fn session_url(&self) -> &str {
        self.admin_url.as_deref().unwrap_or(&self.relay_url)
    }

    /// The relay's role (the user of `postgres.url`).
    ///
    /// # Errors
    /// The conninfo does not parse.
    pub fn relay_role(&self) -> Result<String, PgError> {
        Ok(Conninfo::parse(&self.relay_url)?.user)
    }

    /// The `application_name` a running relay with this config shows.
    pub fn relay_application_name(&self) -> String {
        Conninfo::parse(&self.relay_url)
            .ok()
            .and_then(|c| c.application_name)
            .unwrap_or_else(|| RELAY_APPLICATION_NAME.to_owned())
    }

    /// Opens an ordinary SQL session ([`PgClient`]: typed parameters).
    ///
    /// # Errors
    /// As [`PgClient::connect`].
    pub async fn client(&self) -> Result<PgClient, PgError> {
        PgClient::connect(&self.settings()?).await
    }

    fn settings(&self) -> Result<ConnectSettings, PgError> {
        Ok(ConnectSettings {
            conninfo: Conninfo::parse(self.session_url())?,
            connect_timeout: self.connect_timeout,
            application_name: ADMIN_APPLICATION_NAME.to_owned(),
        })
    }
}

/// Human-readable byte counts for the tables people read (`1.5 MiB`).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Human-readable durations (`4.2 s`, `3 min 20 s`, `2 h 5 min`).
pub fn human_duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "0 s".to_owned();
    }
    if seconds < 60.0 {
        return format!("{seconds:.1} s");
    }
    let whole = seconds.round() as u64;
    let (days, rest) = (whole / 86_400, whole % 86_400);
    let (hours, rest) = (rest / 3_600, rest % 3_600);
    let (minutes, secs) = (rest / 60, rest % 60);
    if days > 0 {
        format!("{days} d {hours} h")
    } else if hours > 0 {
        format!("{hours} h {minutes} min")
    } else {
        format!("{minutes} min {secs} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_like_people_say_them() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(1023), "1023 bytes");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(1536 * 1024), "1.5 MiB");
        assert_eq!(human_bytes(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn durations_read_like_people_say_them() {
        assert_eq!(human_duration(4.24), "4.2 s");
        assert_eq!(human_duration(200.0), "3 min 20 s");
        assert_eq!(human_duration(7_500.0), "2 h 5 min");
        assert_eq!(human_duration(90_000.0), "1 d 1 h");
        assert_eq!(human_duration(-3.0), "0 s");
        assert_eq!(human_duration(f64::NAN), "0 s");
    }

    #[test]
    fn the_session_connects_as_the_admin_when_given_and_checks_the_relay_role() {
        let target = AdminTarget {
            relay_url: "postgres://relay:pw@db/app?application_name=orders-relay".into(),
            admin_url: Some("postgres://postgres@db/app".into()),
            connect_timeout: Duration::from_secs(1),
        };
        assert_eq!(target.session_url(), "postgres://postgres@db/app");
        assert_eq!(target.relay_role().unwrap(), "relay");
        assert_eq!(target.relay_application_name(), "orders-relay");
        let plain = AdminTarget {
            admin_url: None,
            relay_url: "host=db user=relay dbname=app".into(),
            ..target
        };
        assert_eq!(plain.session_url(), "host=db user=relay dbname=app");
        assert_eq!(plain.relay_application_name(), RELAY_APPLICATION_NAME);
    }
}
