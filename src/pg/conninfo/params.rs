//! Reading a conninfo string before tokio-postgres does: refusing the forms
//! parsers would read differently from the person who wrote them, taking
//! out the parameters the relay handles itself (`sslmode` and the other TLS
//! files, `replication`), and turning tokio-postgres's hosts into endpoints.
//!
//! Role: helpers of [`super::Conninfo::parse`].
//!
//! Invariants: no reason returned here quotes the string or a parameter name
//! nobody knows (it may be the tail of a password).

use std::borrow::Cow;

use percent_encoding::percent_decode_str;
use tokio_postgres::config::Host;

use super::{DEFAULT_PORT, Endpoint};
use crate::redact::{key_values, split_url_scheme};

/// Refuses the forms the parsers below would read differently from the
/// person who wrote them. The reasons never quote the string.
pub(super) fn check_form(conninfo: &str) -> Result<(), &'static str> {
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
pub(super) fn endpoints(config: &tokio_postgres::Config) -> Result<Vec<Endpoint>, String> {
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
    if crate::redact::is_shown_parameter(key) {
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
pub(super) fn split_own_params(conninfo: &str) -> Result<(String, Vec<(String, String)>), String> {
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

/// Percent-decodes a URL query key or value: two hex digits after every
/// `%`, UTF-8 once decoded. The error does not quote `s`: it may be a
/// password.
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let well_formed = s.match_indices('%').all(|(at, _)| {
        bytes
            .get(at + 1..at + 3)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return Err("invalid percent-encoding in a URL parameter".into());
    }
    percent_decode_str(s)
        .decode_utf8()
        .map(Cow::into_owned)
        .map_err(|_| "a URL parameter is not UTF-8 once percent-decoded".into())
}
