//! Connection strings for the replication connection: libpq's URL
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

use tokio_postgres::config::{Host, SslNegotiation};

use super::error::ReplicationError;
use crate::config::{key_values, redact_conninfo, split_url_scheme};

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
    /// [`ReplicationError::Conninfo`] (fatal) naming the problem; the string
    /// in it is redacted, and the reason never quotes the password.
    pub fn parse(conninfo: &str) -> Result<Conninfo, ReplicationError> {
        let mut secrets = Secrets::of(conninfo);
        let redacted = secrets.scrub(&redact_conninfo(conninfo));
        let invalid = |reason: String| ReplicationError::Conninfo {
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

/// A conninfo string as logs and errors may show it, for places that hold
/// the string rather than a parsed [`Conninfo`].
pub(super) fn redacted(conninfo: &str) -> String {
    match Conninfo::parse(conninfo) {
        Ok(parsed) => parsed.redacted,
        Err(_) => Secrets::of(conninfo).scrub(&redact_conninfo(conninfo)),
    }
}

/// Every form in which a conninfo may carry a password, collected before
/// anything parses it, so that even a parser's error about a malformed
/// string can be cleaned.
#[derive(Clone, Default)]
struct Secrets(Vec<String>);

/// Shown in place of a scrubbed secret.
const SCRUBBED: &str = "***";

impl Secrets {
    fn of(conninfo: &str) -> Secrets {
        let mut secrets = Secrets::default();
        let trimmed = conninfo.trim_start();
        if let Some((_, rest)) = split_url_scheme(trimmed) {
            // The user info ends at the first '@' for tokio-postgres, maybe
            // at the last for whoever wrote the URL: take both readings.
            for at in [rest.find('@'), rest.rfind('@')].into_iter().flatten() {
                if let Some((_, password)) = rest[..at].split_once(':') {
                    secrets.add(password);
                }
            }
            for param in rest.split(['?', '&']) {
                if let Some((key, value)) = param.split_once('=')
                    && is_password_key(&percent_decode_lossy(key))
                {
                    secrets.add(value);
                }
            }
        } else {
            for pair in key_values(trimmed).0 {
                if is_password_key(pair.key) {
                    secrets.add(pair.raw);
                    secrets.add(&pair.value);
                }
            }
        }
        secrets
    }

    /// Adds `text` as written, percent-decoded and percent-encoded.
    fn add(&mut self, text: &str) {
        for form in [
            text.to_owned(),
            percent_decode_lossy(text),
            percent_encode(text),
        ] {
            if !form.is_empty() && !self.0.contains(&form) {
                self.0.push(form);
            }
        }
        // Longest first, so a form inside another is not cut out of it first
        // and leaves the rest of the longer one behind.
        self.0.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), SCRUBBED);
            }
        }
        out
    }
}

/// `error` and its causes: tokio-postgres's own text is only "invalid
/// connection string", the cause says which option. Scrubbed by the caller.
fn with_cause(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

fn is_password_key(key: &str) -> bool {
    key.to_ascii_lowercase().contains("password")
}

/// Refuses the forms the parsers below would read differently from the
/// person who wrote them. The reasons never quote the string.
fn check_form(conninfo: &str) -> Result<(), &'static str> {
    match split_url_scheme(conninfo.trim_start()) {
        Some(_) if !is_url(conninfo) => Err(
            "a URL must start with postgres:// or postgresql://, in lower case and with nothing \
             before it",
        ),
        // tokio-postgres ends the user info at the first '@', so a raw '@'
        // in the password would make the rest of it the host; one in a
        // parameter value would make everything before it the user name.
        Some((_, rest)) if rest.matches('@').count() > 1 => Err(
            "the URL has more than one '@': percent-encode '@' as %40 in the user name, the \
             password and parameter values",
        ),
        _ => Ok(()),
    }
}

/// Pairs hosts, hostaddrs and ports like libpq: one port for all hosts or one
/// per host; `hostaddr` entries pair with `host` entries by position.
fn endpoints(config: &tokio_postgres::Config) -> Result<Vec<Endpoint>, String> {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let ports = config.get_ports();
    let count = hosts.len().max(addrs.len());
    if count == 0 {
        return Err(
            "no host given (host=... or a host in the URL; a Unix socket directory \
                    such as host=/run/postgresql works too)"
                .into(),
        );
    }
    if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
        return Err(format!(
            "{} host(s) but {} hostaddr(s): give one hostaddr per host",
            hosts.len(),
            addrs.len()
        ));
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(format!(
            "{} port(s) for {count} host(s): give one port, or one per host",
            ports.len()
        ));
    }
    Ok((0..count)
        .map(|i| {
            let port = match ports {
                [] => DEFAULT_PORT,
                [one] => *one,
                many => many[i],
            };
            match hosts.get(i) {
                Some(Host::Unix(dir)) => Endpoint::Unix {
                    socket: dir.join(format!(".s.PGSQL.{port}")),
                },
                Some(Host::Tcp(name)) => Endpoint::Tcp {
                    host: Some(name.clone()),
                    addr: addrs.get(i).copied(),
                    port,
                },
                None => Endpoint::Tcp {
                    host: None,
                    addr: addrs.get(i).copied(),
                    port,
                },
            }
        })
        .collect())
}

/// Parameters this module handles itself; tokio-postgres rejects or ignores them.
const OWN_PARAMS: [&str; 5] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "replication"];

/// Parameters tokio-postgres knows (besides [`OWN_PARAMS`]).
const TOKIO_POSTGRES_PARAMS: [&str; 18] = [
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// Refuses a parameter name nobody here knows before tokio-postgres can quote
/// it: such a "name" is often the tail of a password cut at an unencoded
/// `&` or an unquoted space, so it is not shown either.
fn check_key(key: &str) -> Result<(), String> {
    if OWN_PARAMS.contains(&key) || TOKIO_POSTGRES_PARAMS.contains(&key) {
        return Ok(());
    }
    if crate::config::is_shown_parameter(key) {
        return Err(format!(
            "libpq parameter {key} is not supported by the relay"
        ));
    }
    Err(
        "a parameter name that is not a libpq parameter the relay knows (not shown: it may be \
         part of a password; in a URL percent-encode '&' and '=' in the password, in key=value \
         form quote a password with spaces)"
            .into(),
    )
}

fn is_url(conninfo: &str) -> bool {
    conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://")
}

/// Where tokio-postgres starts reading a URL's parameters: the first '?'
/// after the user info, which ends at the first '@' (a '?' before it is the
/// password's).
fn url_query_start(url: &str) -> Option<usize> {
    let after_user_info = url.find('@').map_or(0, |at| at + 1);
    url[after_user_info..]
        .find('?')
        .map(|i| after_user_info + i)
}

/// Splits `conninfo` into a string for tokio-postgres (same form, without
/// our parameters) and our parameters, decoded.
fn split_own_params(conninfo: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut own = Vec::new();
    if is_url(conninfo) {
        let Some(query_start) = url_query_start(conninfo) else {
            return Ok((conninfo.to_owned(), own));
        };
        let (base, query) = (&conninfo[..query_start], &conninfo[query_start + 1..]);
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(
                    "a URL parameter without '=' (percent-encode '&' as %26 in a password)".into(),
                );
            };
            let key = percent_decode(key)?;
            check_key(&key)?;
            if OWN_PARAMS.contains(&key.as_str()) {
                own.push((key, percent_decode(value)?));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok((rest, own))
    } else {
        // As in libpq, a key given twice takes its last value (tokio-postgres
        // would append a second `host` instead).
        let (pairs, complete) = key_values(conninfo);
        if !complete {
            // No key or value is quoted: after a missing quote or '=' the
            // words may be pieces of a password.
            return Err(
                "malformed key=value conninfo: every setting is key=value, and a \
                        value with spaces or quotes is written in single quotes with \\ \
                        before ' and \\ (password='a b\\'c')"
                    .into(),
            );
        }
        let mut kept: Vec<(String, String)> = Vec::new();
        for pair in pairs {
            check_key(pair.key)?;
            let (key, value) = (pair.key.to_owned(), pair.value);
            if OWN_PARAMS.contains(&key.as_str()) {
                own.push((key, value));
            } else if let Some(existing) = kept.iter_mut().find(|(k, _)| *k == key) {
                existing.1 = value;
            } else {
                kept.push((key, value));
            }
        }
        let mut rest = String::new();
        for (key, value) in kept {
            if !rest.is_empty() {
                rest.push(' ');
            }
            rest.push_str(&key);
            rest.push('=');
            push_quoted(&mut rest, &value);
        }
        Ok((rest, own))
    }
}

/// Appends `value` single-quoted with `\` escapes, as key=value syntax reads it.
fn push_quoted(out: &mut String, value: &str) {
    out.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
}

/// Percent-decodes a URL query key or value. The error does not quote `s`:
/// it may be a password.
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "invalid percent-encoding in a URL parameter".to_owned())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a URL parameter is not UTF-8 once percent-decoded".into())
}

/// Percent-decodes what decodes and keeps the rest, like tokio-postgres
/// does for the URL password.
fn percent_decode_lossy(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|_| bytes[i] == b'%')
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every byte but RFC 3986's unreserved ones as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_with_password_is_redacted_everywhere() {
        let c = Conninfo::parse("postgres://relay:s3cret@127.0.0.1:5432/app").unwrap();
        assert_eq!(c.to_string(), "postgres://relay:***@127.0.0.1:5432/app");
        assert_eq!(c.password(), Some(&b"s3cret"[..]));
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = Conninfo::parse("postgresql://relay:p%40ss@h/db?password=other&sslmode=require")
            .unwrap();
        assert_eq!(c.password(), Some(&b"other"[..]), "the parameter wins");
        assert_eq!(
            c.to_string(),
            "postgresql://relay:***@h/db?password=***&sslmode=require"
        );
        assert_eq!(
            Conninfo::parse("postgres://u@h/db").unwrap().to_string(),
            "postgres://u@h/db"
        );
    }

    #[test]
    fn a_password_with_slash_or_question_mark_is_hidden_in_the_connect_log_form() {
        // tokio-postgres takes everything up to the '@' as the password.
        let c = Conninfo::parse("postgres://relay:Sekr3t/pa?ss@db.internal/app").unwrap();
        assert_eq!(c.password(), Some(&b"Sekr3t/pa?ss"[..]));
        let shown = format!("{c} {c:?}");
        assert!(
            !shown.contains("Sekr3t") && !shown.contains("pa?ss"),
            "{shown}"
        );
        // The '?' before the '@' may have begun the query, so the host is
        // hidden too (the connect log line names the endpoint separately).
        assert_eq!(c.to_string(), "postgres://relay:***@***");
        assert_eq!(c.endpoints[0].to_string(), "db.internal:5432");
    }

    #[test]
    fn key_value_password_is_redacted() {
        let s = "host=db.internal user=relay password='a b\\'c' dbname=app";
        let c = Conninfo::parse(s).unwrap();
        assert_eq!(
            c.to_string(),
            "host=db.internal user=relay password=*** dbname=app"
        );
        assert_eq!(c.password(), Some(&b"a b'c"[..]));
        assert!(!format!("{c} {c:?} {c:#?}").contains("a b"));
    }

    #[test]
    fn an_at_sign_that_parsers_would_read_differently_is_refused() {
        for s in [
            // A raw '@' in the password: tokio-postgres would connect to
            // "b@127.0.0.1" as "relay" with password "Pw9a".
            "postgres://relay:Pw9a@b@127.0.0.1/app",
            "postgres://relay:Pw9a@127.0.0.1/app?application_name=x@y",
        ] {
            let err = Conninfo::parse(s).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("%40"), "names the fix: {text}");
            assert!(!text.contains("Pw9a"), "{text}");
        }
        // Percent-encoded, it is an ordinary password.
        let c = Conninfo::parse("postgres://relay:Pw9a%40b@127.0.0.1/app").unwrap();
        assert_eq!(c.password(), Some(&b"Pw9a@b"[..]));
    }

    #[test]
    fn an_unknown_parameter_name_is_refused_without_quoting_it() {
        // A password cut at an unencoded '&' or an unquoted space turns its
        // tail into a "parameter name"; tokio-postgres would quote it.
        for s in [
            "postgres://relay@h/db?password=Zk8q&Tail9x&sslmode=disable",
            "postgres://relay@h/db?password=Zk8q&Tail9x=1",
            "host=h user=u password=Zk8q Tail9x=1",
        ] {
            let err = Conninfo::parse(s).unwrap_err();
            let text = format!("{err} {err:?}");
            assert!(!text.contains("Zk8q") && !text.contains("Tail9x"), "{text}");
            assert!(text.contains("percent-encode"), "says how to fix: {text}");
        }
        // A libpq parameter the relay does not support is named.
        let err = Conninfo::parse("host=h user=u sslcrl=/crl.pem").unwrap_err();
        assert!(err.to_string().contains("sslcrl"), "{err}");
    }

    #[test]
    fn every_form_of_the_password_is_scrubbed() {
        let c = Conninfo::parse("postgres://relay:a%2Fb%20c@h/db").unwrap();
        for form in ["a%2Fb%20c", "a/b c"] {
            assert_eq!(c.scrub(&format!("x {form} y")), "x *** y");
        }
        let c = Conninfo::parse("host=h user=u password='it\\'s a/b'").unwrap();
        for form in ["'it\\'s a/b'", "it's a/b", "it%27s%20a%2Fb"] {
            assert_eq!(c.scrub(&format!("x {form} y")), "x *** y", "{form}");
        }
    }

    #[test]
    fn parses_url_with_tls_params_tokio_postgres_does_not_know() {
        let c = Conninfo::parse(
            "postgres://relay:pw@localhost:6543/app?sslmode=verify-full&sslrootcert=/ca.pem\
             &application_name=x&replication=true",
        )
        .unwrap();
        assert_eq!(c.user, "relay");
        assert_eq!(c.dbname, "app");
        assert_eq!(c.application_name.as_deref(), Some("x"));
        assert_eq!(c.tls.mode, SslMode::VerifyFull);
        assert_eq!(
            c.tls.root_cert,
            Some(RootCert::File(PathBuf::from("/ca.pem")))
        );
        assert_eq!(
            c.endpoints,
            vec![Endpoint::Tcp {
                host: Some("localhost".into()),
                addr: None,
                port: 6543
            }]
        );
    }

    #[test]
    fn parses_key_value_with_hostaddr_and_defaults() {
        let c = Conninfo::parse(
            "host=wrong.example hostaddr=127.0.0.1 user=relay sslmode = verify-ca \
             sslcert=/c.pem sslkey='/k.pem'",
        )
        .unwrap();
        assert_eq!(c.dbname, "relay", "dbname defaults to the user");
        assert_eq!(c.tls.mode, SslMode::VerifyCa);
        assert_eq!(c.tls.key, Some(PathBuf::from("/k.pem")));
        let endpoint = &c.endpoints[0];
        assert_eq!(endpoint.server_name().as_deref(), Some("wrong.example"));
        assert_eq!(
            endpoint,
            &Endpoint::Tcp {
                host: Some("wrong.example".into()),
                addr: Some("127.0.0.1".parse().unwrap()),
                port: DEFAULT_PORT
            }
        );
        assert_eq!(c.tls.mode.as_str(), "verify-ca");
    }

    #[test]
    fn sslrootcert_system_means_verify_full_and_refuses_weaker_modes_like_libpq() {
        let c = Conninfo::parse("host=h user=u sslrootcert=system").unwrap();
        assert_eq!(c.tls.mode, SslMode::VerifyFull, "the default with system");
        assert_eq!(c.tls.root_cert, Some(RootCert::System));
        let c = Conninfo::parse("host=h user=u sslmode=verify-full sslrootcert=system").unwrap();
        assert_eq!(c.tls.mode, SslMode::VerifyFull);
        for weak in ["disable", "prefer", "require", "verify-ca"] {
            let err = Conninfo::parse(&format!("host=h user=u sslmode={weak} sslrootcert=system"))
                .unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(&format!("sslmode={weak}")) && text.contains("verify-full"),
                "{text}"
            );
        }
        // Only the exact word: a file may be called anything else.
        let c = Conninfo::parse("host=h user=u sslrootcert=./system").unwrap();
        assert_eq!(
            c.tls.root_cert,
            Some(RootCert::File(PathBuf::from("./system")))
        );
    }

    #[test]
    fn channel_binding_is_read_and_require_without_tls_is_refused_at_once() {
        let c = Conninfo::parse("host=h user=u").unwrap();
        assert_eq!(c.channel_binding, ChannelBinding::Prefer, "libpq's default");
        for (value, expected) in [
            ("disable", ChannelBinding::Disable),
            ("prefer", ChannelBinding::Prefer),
            ("require", ChannelBinding::Require),
        ] {
            let c = Conninfo::parse(&format!("postgres://u@h/db?channel_binding={value}")).unwrap();
            assert_eq!(c.channel_binding, expected);
        }
        let err =
            Conninfo::parse("host=h user=u sslmode=disable channel_binding=require").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("channel_binding=require") && text.contains("sslmode=require"),
            "{text}"
        );
        assert!(Conninfo::parse("host=h user=u channel_binding=maybe").is_err());
    }

    #[test]
    fn unix_socket_directories_become_socket_files() {
        let expected = vec![Endpoint::Unix {
            socket: PathBuf::from("/run/postgresql/.s.PGSQL.5433"),
        }];
        for s in [
            "host=/run/postgresql port=5433 user=relay dbname=app",
            "postgres://relay@%2Frun%2Fpostgresql:5433/app",
            "postgres:///app?host=/run/postgresql&port=5433&user=relay",
        ] {
            assert_eq!(Conninfo::parse(s).unwrap().endpoints, expected, "{s}");
        }
    }

    #[test]
    fn a_repeated_key_takes_its_last_value_like_libpq() {
        let c = Conninfo::parse("host=a user=u host=b sslmode=disable sslmode=verify-ca").unwrap();
        assert_eq!(c.endpoints.len(), 1);
        assert_eq!(c.endpoints[0].to_string(), "b:5432");
        assert_eq!(c.tls.mode, SslMode::VerifyCa);
    }

    #[test]
    fn multiple_hosts_pair_with_ports() {
        let c = Conninfo::parse("host=a,b port=1,2 user=u").unwrap();
        let ports: Vec<String> = c.endpoints.iter().map(ToString::to_string).collect();
        assert_eq!(ports, ["a:1", "b:2"]);
        assert!(Conninfo::parse("host=a,b,c port=1,2 user=u").is_err());
    }

    #[test]
    fn rejects_bad_input_without_echoing_the_password() {
        for s in [
            "postgres://u:topsecret@h/db?sslmode=allow",
            "host=h user=u password=topsecret sslmode=bogus",
            "host=h password=topsecret sslcert=/only-cert",
            "password=topsecret user=u",
            "host=h password=topsecret",
            "host=h user=u password=topsecret port=notaport",
            "POSTGRES://u:topsecret@h/db?sslmode=disable",
            " postgres://u:topsecret@h/db",
            "postgres://u:top@secret@h/db",
            "postgres://u:tops3cr@et9x@h/db",
            "host=h user=u password=topsecret secret2=x",
            "host=h user=u password='topsecret",
            "host=h user=u password=topsecret and more",
            "postgres://u@h/db?password=topsecret&sslmode=%zz",
        ] {
            let err = Conninfo::parse(s).unwrap_err();
            assert_eq!(err.kind(), super::super::ErrorKind::Fatal);
            let text = format!("{err} {err:?}");
            for secret in ["topsecret", "tops3cr", "et9x"] {
                assert!(!text.contains(secret), "{text}");
            }
        }
    }
}

#[cfg(test)]
#[path = "conninfo_proptests.rs"]
mod proptests;
