//! Connection strings for every PostgreSQL connection: libpq's URL
//! (`postgres://user:pw@host:port/db?k=v`) and key=value (`host=h user=u`)
//! forms, parsed into the endpoints, credentials and TLS settings the
//! connection needs, plus the redacted form every log line and error shows.
//!
//! Role: `tokio_postgres::Config` parses everything it understands; the
//! parameters it does not (`sslmode` beyond `require`, `sslrootcert`,
//! `sslcert`, `sslkey`, and `replication`, which the relay always sets
//! itself) are taken out of the string first and handled here.
//!
//! Invariants: the password never leaves this module except towards the
//! authentication exchange ([`Conninfo::password`]). Everything shown about a
//! conninfo goes through the crate's one redactor,
//! [`crate::config::redact_conninfo`]; as a second line of defence a
//! `Conninfo` also cuts every form of its password it knows (as written, as
//! parsed, percent-decoded and percent-encoded) out of its `Display`, its
//! `Debug` and the reasons of the errors it returns, including those from
//! tokio-postgres's parser. A URL with more than one raw `@`, whose user info
//! parsers would split in different places, is refused rather than guessed,
//! and so is a parameter name nobody knows (it is not quoted either: it is
//! often the tail of a password cut at an unencoded `&` or unquoted space).
//!
//! libpq semantics are kept where the relay depends on them: `host` is the name the TLS certificate is verified against and
//! `hostaddr` (when given) the address actually connected to; a `host`
//! starting with `/` is a Unix socket directory (`<dir>/.s.PGSQL.<port>`);
//! `dbname` defaults to the user name. Unlike libpq, nothing is read from the
//! environment (`PGHOST` etc.): the library takes validated values only.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::SslNegotiation;

use super::error::PgError;
use crate::redact::redact_conninfo;

mod params;
mod secrets;

use params::{check_form, endpoints, split_own_params};
use secrets::{Secrets, with_cause};

/// PostgreSQL's default port.
const DEFAULT_PORT: u16 = 5432;

/// libpq's `sslmode`. `Prefer` is libpq's default too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, unverified; plain otherwise.
    #[default]
    Prefer,
    /// TLS or fail; unverified unless `sslrootcert` is set (then as `VerifyCa`,
    /// like libpq).
    Require,
    /// TLS, certificate chain verified against `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name `host`.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl FromStr for SslMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // `allow` tries plain first; the relay does not downgrade-by-default.
            other => {
                return Err(format!(
                    "sslmode {other:?} is not supported (use disable, prefer, require, verify-ca \
                     or verify-full)"
                ));
            }
        })
    }
}

/// libpq's `channel_binding`: whether SCRAM authentication is bound to the
/// TLS channel (SCRAM-SHA-256-PLUS with `tls-server-end-point`), so that a
/// man in the middle who terminates TLS cannot relay it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelBinding {
    /// Never bind.
    Disable,
    /// Bind when the connection is TLS and the server offers
    /// SCRAM-SHA-256-PLUS.
    #[default]
    Prefer,
    /// Bind or fail: no other authentication, no plain connection.
    Require,
}

impl ChannelBinding {
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelBinding::Disable => "disable",
            ChannelBinding::Prefer => "prefer",
            ChannelBinding::Require => "require",
        }
    }
}

/// `sslrootcert`: what the server certificate must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file with the CA certificate(s); nothing else is trusted.
    File(PathBuf),
    /// `sslrootcert=system` (libpq 16): the system's trust store, allowed
    /// only with `verify-full` (any public CA can sign a certificate for some
    /// name, so the name must be checked too).
    System,
}

/// TLS settings from the conninfo.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// `None`: no `sslrootcert`. libpq would then read
    /// `~/.postgresql/root.crt`; the relay reads nothing from the environment,
    /// so `verify-ca`/`verify-full` without it are refused (see `tls.rs`).
    pub root_cert: Option<RootCert>,
    /// Client certificate (PEM) and its key, for `cert` authentication.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// One place to try connecting to, in conninfo order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp {
        /// `host`: for TLS verification and SNI; connected to when `addr` is None.
        host: Option<String>,
        /// `hostaddr`: connected to instead of resolving `host`.
        addr: Option<IpAddr>,
        port: u16,
    },
    /// The socket file itself, `<dir>/.s.PGSQL.<port>`.
    Unix { socket: PathBuf },
}

impl Endpoint {
    /// The name a TLS certificate must carry (`host`, else `hostaddr`).
    pub fn server_name(&self) -> Option<String> {
        match self {
            Endpoint::Tcp { host: Some(h), .. } => Some(h.clone()),
            Endpoint::Tcp { addr: Some(a), .. } => Some(a.to_string()),
            _ => None,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp {
                host: Some(h),
                addr: Some(a),
                port,
            } => write!(f, "{h} ({a}):{port}"),
            Endpoint::Tcp {
                host: Some(h),
                port,
                ..
            } => write!(f, "{h}:{port}"),
            Endpoint::Tcp {
                addr: Some(a),
                port,
                ..
            } => write!(f, "{a}:{port}"),
            Endpoint::Tcp { port, .. } => write!(f, "?:{port}"),
            Endpoint::Unix { socket } => write!(f, "{}", socket.display()),
        }
    }
}

/// A parsed conninfo. `Display`/`Debug` never show the password.
#[derive(Clone)]
pub struct Conninfo {
    pub endpoints: Vec<Endpoint>,
    pub user: String,
    password: Option<Vec<u8>>,
    pub dbname: String,
    /// Server `options` (e.g. `-c statement_timeout=0`).
    pub options: Option<String>,
    pub application_name: Option<String>,
    pub connect_timeout: Option<Duration>,
    pub tls: TlsSettings,
    pub channel_binding: ChannelBinding,
    redacted: String,
    secrets: Secrets,
}

impl Conninfo {
    /// Parses a libpq URL or key=value string.
    ///
    /// # Errors
    /// [`ConninfoError`] naming the problem; the string in it is redacted,
    /// and the reason never quotes the password.
    pub fn parse(conninfo: &str) -> Result<Conninfo, ConninfoError> {
        let mut secrets = Secrets::of(conninfo);
        let redacted = secrets.scrub(&redact_conninfo(conninfo));
        let invalid = |reason: String| ConninfoError {
            conninfo: redacted.clone(),
            reason: secrets.scrub(&reason),
        };
        check_form(conninfo).map_err(|reason| invalid(reason.to_owned()))?;
        let (rest, own) = split_own_params(conninfo).map_err(invalid)?;
        let config =
            tokio_postgres::Config::from_str(&rest).map_err(|e| invalid(with_cause(&e)))?;

        let mut tls = TlsSettings::default();
        let mut sslmode_given = false;
        for (key, value) in own {
            match key.as_str() {
                "sslmode" => {
                    tls.mode = value.parse().map_err(invalid)?;
                    sslmode_given = true;
                }
                "sslrootcert" if value == "system" => tls.root_cert = Some(RootCert::System),
                "sslrootcert" => tls.root_cert = Some(RootCert::File(PathBuf::from(value))),
                "sslcert" => tls.cert = Some(PathBuf::from(value)),
                "sslkey" => tls.key = Some(PathBuf::from(value)),
                // `replication` is always `database` on this connection.
                _ => {}
            }
        }
        if tls.root_cert == Some(RootCert::System) {
            // libpq 16: sslrootcert=system makes verify-full the default and
            // refuses anything weaker.
            if !sslmode_given {
                tls.mode = SslMode::VerifyFull;
            } else if tls.mode != SslMode::VerifyFull {
                return Err(invalid(format!(
                    "sslmode={} may not be used with sslrootcert=system: use sslmode=verify-full \
                     (any CA in the system store can sign a certificate for some name, so the \
                     host name must be checked too)",
                    tls.mode.as_str()
                )));
            }
        }
        let channel_binding = match config.get_channel_binding() {
            tokio_postgres::config::ChannelBinding::Disable => ChannelBinding::Disable,
            tokio_postgres::config::ChannelBinding::Prefer => ChannelBinding::Prefer,
            // Require, and whatever a later tokio-postgres may add: the
            // strictest reading.
            _ => ChannelBinding::Require,
        };
        if channel_binding == ChannelBinding::Require && tls.mode == SslMode::Disable {
            return Err(invalid(
                "channel_binding=require needs TLS, but sslmode=disable: set sslmode=require or \
                 stronger (verify-full also checks the server's name), or drop \
                 channel_binding=require"
                    .into(),
            ));
        }
        if tls.cert.is_some() != tls.key.is_some() {
            return Err(invalid("sslcert and sslkey must be given together".into()));
        }
        if config.get_ssl_negotiation() == SslNegotiation::Direct {
            return Err(invalid(
                "sslnegotiation=direct is not supported; use the default (postgres)".into(),
            ));
        }

        let user = config
            .get_user()
            .ok_or_else(|| invalid("no user given (user=... or user@ in the URL)".into()))?
            .to_owned();
        let dbname = config.get_dbname().unwrap_or(&user).to_owned();
        let endpoints = endpoints(&config).map_err(invalid)?;
        let password = config.get_password().map(<[u8]>::to_vec);
        if let Some(password) = &password {
            secrets.add(&String::from_utf8_lossy(password));
        }
        Ok(Conninfo {
            endpoints,
            password,
            dbname,
            options: config.get_options().map(str::to_owned),
            application_name: config.get_application_name().map(str::to_owned),
            connect_timeout: config.get_connect_timeout().copied(),
            user,
            tls,
            channel_binding,
            redacted: secrets.scrub(&redacted),
            secrets,
        })
    }

    /// The password, for the authentication exchange only.
    pub(super) fn password(&self) -> Option<&[u8]> {
        self.password.as_deref()
    }

    /// The same conninfo with `endpoint` as its only endpoint: for a
    /// connection that must reach the server another connection reached
    /// (the stream, the server the relay lock is held on). Everything else
    /// (credentials, TLS, options) stays; `endpoint` normally is one of
    /// [`Conninfo::endpoints`].
    pub fn pinned_to(&self, endpoint: &Endpoint) -> Conninfo {
        Conninfo {
            endpoints: vec![endpoint.clone()],
            ..self.clone()
        }
    }

    /// `text` with every form of this conninfo's password cut out: for
    /// messages that may echo what a server or library was given.
    pub fn scrub(&self, text: &str) -> String {
        self.secrets.scrub(text)
    }
}

impl fmt::Display for Conninfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for Conninfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// The fields, rendered first so the whole text can be scrubbed.
        struct Fields<'a>(&'a Conninfo);
        impl fmt::Debug for Fields<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let c = self.0;
                f.debug_struct("Conninfo")
                    .field("conninfo", &c.redacted)
                    .field("endpoints", &c.endpoints)
                    .field("user", &c.user)
                    .field("dbname", &c.dbname)
                    .field("tls", &c.tls)
                    .field("channel_binding", &c.channel_binding)
                    .finish_non_exhaustive()
            }
        }
        let text = if f.alternate() {
            format!("{:#?}", Fields(self))
        } else {
            format!("{:?}", Fields(self))
        };
        f.write_str(&self.secrets.scrub(&text))
    }
}

/// Why a conninfo string cannot be used. Shows the string redacted; the
/// reason names the problem and the fix and never quotes the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid replication conninfo {conninfo}: {reason}")]
pub struct ConninfoError {
    conninfo: String,
    reason: String,
}

impl ConninfoError {
    /// The problem and the fix, without the conninfo: for messages that
    /// must not show the string at all (the config check).
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Fatal, like every configuration mistake.
impl From<ConninfoError> for PgError {
    fn from(error: ConninfoError) -> Self {
        PgError::Conninfo {
            conninfo: error.conninfo,
            reason: error.reason,
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
