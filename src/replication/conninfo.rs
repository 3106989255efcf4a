//! Connection strings for the replication connection: libpq's URL
//! (`postgres://user:pw@host:port/db?k=v`) and key=value (`host=h user=u`)
//! forms, parsed into the endpoints, credentials and TLS settings the
//! connection needs, plus the redacted form used in every log line and error.
//!
//! Role: `tokio_postgres::Config` parses everything it understands; the
//! parameters it does not (`sslmode` beyond `require`, `sslrootcert`,
//! `sslcert`, `sslkey`, and `replication`, which the relay always sets
//! itself) are taken out of the string first and handled here.
//!
//! Invariants: the password never leaves this module except towards the
//! authentication exchange ([`Conninfo::password`]); `Debug` and `Display`
//! show `***` in its place. libpq semantics are kept where the relay depends
//! on them: `host` is the name the TLS certificate is verified against and
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

/// TLS settings from the conninfo.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// PEM file with the CA certificate(s) the server certificate must chain to.
    pub root_cert: Option<PathBuf>,
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
    redacted: String,
}

impl Conninfo {
    /// Parses a libpq URL or key=value string.
    ///
    /// # Errors
    /// [`ReplicationError::Conninfo`] (fatal) naming the problem; the string
    /// in it is redacted.
    pub fn parse(conninfo: &str) -> Result<Conninfo, ReplicationError> {
        let redacted = redact(conninfo);
        let invalid = |reason: String| ReplicationError::Conninfo {
            conninfo: redacted.clone(),
            reason,
        };
        let (rest, own) = split_own_params(conninfo).map_err(invalid)?;
        let config = tokio_postgres::Config::from_str(&rest).map_err(|e| invalid(e.to_string()))?;

        let mut tls = TlsSettings::default();
        for (key, value) in own {
            match key.as_str() {
                "sslmode" => tls.mode = value.parse().map_err(invalid)?,
                "sslrootcert" => tls.root_cert = Some(PathBuf::from(value)),
                "sslcert" => tls.cert = Some(PathBuf::from(value)),
                "sslkey" => tls.key = Some(PathBuf::from(value)),
                // `replication` is always `database` on this connection.
                _ => {}
            }
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
        Ok(Conninfo {
            endpoints,
            password: config.get_password().map(<[u8]>::to_vec),
            dbname,
            options: config.get_options().map(str::to_owned),
            application_name: config.get_application_name().map(str::to_owned),
            connect_timeout: config.get_connect_timeout().copied(),
            user,
            tls,
            redacted,
        })
    }

    /// The password, for the authentication exchange only.
    pub(super) fn password(&self) -> Option<&[u8]> {
        self.password.as_deref()
    }
}

impl fmt::Display for Conninfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for Conninfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conninfo")
            .field("conninfo", &self.redacted)
            .field("endpoints", &self.endpoints)
            .field("user", &self.user)
            .field("dbname", &self.dbname)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
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

fn is_url(conninfo: &str) -> bool {
    conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://")
}

/// Splits `conninfo` into a string for tokio-postgres (same form, without
/// our parameters) and our parameters, decoded.
fn split_own_params(conninfo: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut own = Vec::new();
    if is_url(conninfo) {
        let Some((base, query)) = conninfo.split_once('?') else {
            return Ok((conninfo.to_owned(), own));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(key)?;
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
        let mut kept: Vec<(String, String)> = Vec::new();
        for (key, value) in parse_key_values(conninfo)? {
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

/// libpq key=value syntax: `key = value` pairs separated by whitespace;
/// values may be single-quoted; `\` escapes the next character.
fn parse_key_values(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("missing \"=\" after {key:?}"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => return Err(format!("unterminated quoted value for {key:?}")),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
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
                .ok_or_else(|| format!("invalid percent-encoding in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once percent-decoded"))
}

/// The conninfo with its password replaced by `***`, for logs and errors.
/// A string that cannot be parsed is not shown at all: it might hold a
/// password in a place the parser did not recognize.
pub fn redact(conninfo: &str) -> String {
    const HIDDEN: &str = "<unparseable conninfo hidden>";
    if is_url(conninfo) {
        let (scheme, rest) = conninfo.split_once("://").unwrap_or(("postgres", conninfo));
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        let authority_end = before_query.find('/').unwrap_or(before_query.len());
        let (authority, path) = before_query.split_at(authority_end);
        let authority = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***@{hosts}"),
                None => authority.to_owned(),
            },
            None => authority.to_owned(),
        };
        let mut out = format!("{scheme}://{authority}{path}");
        if let Some(query) = query {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if percent_decode(key).as_deref() == Ok("password") => {
                        format!("{key}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            out.push('?');
            out.push_str(&pairs.join("&"));
        }
        out
    } else {
        match parse_key_values(conninfo) {
            Ok(pairs) => pairs
                .into_iter()
                .map(|(key, value)| {
                    let mut out = format!("{key}=");
                    if key == "password" {
                        out.push_str("***");
                    } else if value.is_empty() || value.contains([' ', '\'', '\\']) {
                        push_quoted(&mut out, &value);
                    } else {
                        out.push_str(&value);
                    }
                    out
                })
                .collect::<Vec<_>>()
                .join(" "),
            Err(_) => HIDDEN.to_owned(),
        }
    }
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
        assert_eq!(
            redact("postgresql://relay:p%40ss@h/db?password=other&sslmode=require"),
            "postgresql://relay:***@h/db?password=***&sslmode=require"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn key_value_password_is_redacted() {
        let s = "host=db.internal user=relay password='a b\\'c' dbname=app";
        assert_eq!(
            redact(s),
            "host=db.internal user=relay password=*** dbname=app"
        );
        let c = Conninfo::parse(s).unwrap();
        assert_eq!(c.password(), Some(&b"a b'c"[..]));
        assert!(!format!("{c} {c:?}").contains("a b"));
        assert_eq!(
            redact("host=x password='unterminated"),
            "<unparseable conninfo hidden>"
        );
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
        assert_eq!(c.tls.root_cert, Some(PathBuf::from("/ca.pem")));
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
        ] {
            let err = Conninfo::parse(s).unwrap_err();
            assert_eq!(err.kind(), super::super::ErrorKind::Fatal);
            assert!(!err.to_string().contains("topsecret"), "{err}");
        }
    }
}
