//! PostgreSQL: conninfo, TLS, the replication connection's own wire
//! protocol, ordinary SQL sessions on tokio-postgres, and the one error
//! type, [`PgError`]. The one place that opens a connection to PostgreSQL
//! (one module owns the I/O of each external system).
//!
//! Where the line runs: every connection's transport is the relay's own
//! (parse a conninfo once, [`Conninfo`]; try its endpoints in order; TLS per
//! `sslmode`, `tls.rs`). On it, either
//! * the replication connection (a walsender: [`crate::replication`]) runs
//!   the relay's own startup, authentication (trust / password / md5 /
//!   SCRAM-SHA-256, bound to TLS per `channel_binding`) and simple queries
//!   ([`sql::simple_query`]): a walsender speaks the simple query protocol
//!   only, so the names its checks compare are quoted literals there; or
//! * an ordinary session ([`PgClient`]) runs tokio-postgres's startup,
//!   authentication and extended protocol: every ordinary statement of the
//!   relay (the relay lock, the slot's lag, the heartbeat, catalog look-ups,
//!   the cleanup, the operator's commands) with its values as typed
//!   parameters, never spliced into SQL text.
//!
//! [`SqlConnection`] (simple queries on an ordinary or walsender session)
//! remains for the modules not moved to [`PgClient`] yet. What a connection
//! is *for* (a slot, a publication, START_REPLICATION, the outbox table) is
//! not known here: that is `replication`'s.
//!
//! Invariants:
//! * no password in any log line or error (see `conninfo.rs`);
//! * every error is classified once, by SQLSTATE where the server sent one
//!   ([`PgError::kind`]), the same for both clients ([`PgError::client`]);
//! * every connect is bounded by [`ConnectSettings::connect_timeout`].
//!
//! Modules, and which others each uses (no cycles; `pg` is this file, for
//! [`ConnectSettings`]; tests aside):
//! * `quote`: none (quoting for fix hints and replication commands);
//! * `error`: quote;
//! * `conninfo`: error (and the crate's conninfo redactor in `redact`);
//! * `tls`: conninfo, error;
//! * `socket`: conninfo, error, tls;
//! * `protocol`: error, socket (one backend message, ErrorResponse fields);
//! * `auth`: conninfo, error, protocol, socket;
//! * `sql`: pg, auth, conninfo, error, protocol, socket (simple queries,
//!   [`SqlConnection`]);
//! * `client`: pg, auth (the startup's error classification), conninfo,
//!   error, socket ([`PgClient`]: tokio-postgres on the relay's transport);
//! * `params`: none (values sent as text parameters, for columns of a type
//!   the relay does not know);
//! * `pg`: conninfo (the settings hold a [`Conninfo`]).
//!
//! `conninfo` has private submodules (`conninfo/params.rs`,
//! `conninfo/secrets.rs`) that use only what its line above names.
//!
//! The replication stream builds on `auth`, `protocol`, `socket` and `sql`
//! directly (its startup asks for a walsender, and it reads CopyData
//! frames), so those are visible to the crate, not only here.

pub(crate) mod auth;
mod client;
pub mod conninfo;
pub mod error;
pub mod params;
pub(crate) mod protocol;
pub(crate) mod quote;
pub(crate) mod socket;
pub mod sql;
mod tls;

use std::future::Future;
use std::time::Duration;

pub use client::PgClient;
pub use conninfo::{ChannelBinding, Conninfo, ConninfoError, Endpoint, RootCert, SslMode};
pub use error::{ErrorKind, PgError, ServerError};
pub use params::{AsText, TextArray};
pub use quote::{clip, display_ident, qualified, renamed_table_sql};
pub use sql::SqlConnection;

/// What opening a connection needs, as validated plain data: where and as
/// whom, how long a connect may take, and the name it shows.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    /// Where and as whom to connect, parsed once (the config check does it
    /// for the relay). Holds the password; shows itself redacted.
    pub conninfo: Conninfo,
    /// Bounds the whole connect: TCP, TLS, authentication (and, for the
    /// replication stream, its checks and start).
    pub connect_timeout: Duration,
    /// Used when the conninfo has no `application_name` (libpq's
    /// `fallback_application_name`); shows in `pg_stat_activity` (and
    /// `pg_stat_replication` for the stream).
    pub application_name: String,
}

/// Tries the conninfo's endpoints in order, each attempt (`open` with the
/// endpoint and its text for errors) bounded by the connect timeout: the
/// first that connects wins, with its endpoint; otherwise the last error.
/// Both kinds of session connect through it, so they fail over alike.
pub(crate) async fn first_endpoint<T, F, Fut>(
    settings: &ConnectSettings,
    mut open: F,
) -> Result<(T, String, Endpoint), PgError>
where
    F: FnMut(&Endpoint, String) -> Fut,
    Fut: Future<Output = Result<T, PgError>>,
{
    let mut last_error = None;
    for endpoint in &settings.conninfo.endpoints {
        let target = endpoint.to_string();
        match tokio::time::timeout(settings.connect_timeout, open(endpoint, target.clone())).await {
            Ok(Ok(connected)) => return Ok((connected, target, endpoint.clone())),
            Ok(Err(e)) => last_error = Some(e),
            Err(_) => {
                last_error = Some(PgError::ConnectTimeout {
                    target,
                    timeout: settings.connect_timeout,
                });
            }
        }
    }
    Err(last_error.unwrap_or_else(|| PgError::Conninfo {
        conninfo: settings.conninfo.to_string(),
        reason: "no host to connect to".into(),
    }))
}

impl ConnectSettings {
    /// Settings with the documented defaults: 10 s to connect, application
    /// name `outbox-relay`.
    pub fn new(conninfo: Conninfo) -> Self {
        ConnectSettings {
            conninfo,
            connect_timeout: Duration::from_secs(10),
            application_name: "outbox-relay".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_debug_hides_the_password() {
        let conninfo = Conninfo::parse("postgres://relay:hunter2@db/app").unwrap();
        let settings = ConnectSettings::new(conninfo);
        let debug = format!("{settings:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("postgres://relay:***@db/app"), "{debug}");
    }
}
