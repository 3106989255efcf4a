//! Redaction of secrets in connection strings and Kafka properties.
//!
//! Role: the crate's one conninfo redactor. Everything that prints a
//! conninfo (config `Debug`/`Display`, the PostgreSQL connections' log lines
//! and errors) goes through [`redact_conninfo`]; the PostgreSQL client
//! (`pg::conninfo`) adds a scrub of the parsed password on top, never a
//! redactor of its own.
//!
//! Invariant: when in doubt, hide more. A string that cannot be parsed is
//! replaced whole; a URL whose user info is ambiguous loses more than the
//! password rather than showing part of it; values are shown only for libpq
//! parameters known to be harmless, never for unknown ones.

/// Marker shown instead of a secret.
const HIDDEN: &str = "***";

/// Substrings of librdkafka property names whose values are secret
/// (`sasl.password`, `ssl.key.password`, `ssl.key.pem`, `ssl.keystore.key`,
/// `sasl.oauthbearer.client.secret`, `sasl.jaas.config`, ...). `key` covers
/// every private key and key password; the few harmless names it also
/// matches (`ssl.keystore.location`) lose nothing that matters by hiding.
const SECRET_PROPERTY_MARKERS: &[&str] = &[
    "password",
    "secret",
    "key",
    "sasl.jaas",
    "sasl.oauthbearer.config",
    "token",
    "credential",
];

/// Whether the value of the librdkafka property `name` must not be shown.
pub fn is_secret_property(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PROPERTY_MARKERS.iter().any(|m| name.contains(m))
}

/// libpq connection parameters whose values are never secret, so a redacted
/// conninfo still shows them. Every other key (`password`, `sslpassword`,
/// any spelling or case of them, anything unknown) has its value hidden.
const SHOWN_PARAMETERS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// Whether `key` is a libpq parameter whose value is never secret.
pub(crate) fn is_shown_parameter(key: &str) -> bool {
    SHOWN_PARAMETERS
        .iter()
        .any(|shown| shown.eq_ignore_ascii_case(key))
}

/// A connection string fit for logs and errors: every value that is or may
/// be a secret replaced by `***`.
///
/// * URL form (`postgres://` or `postgresql://`, any case, leading blanks
///   ignored): the user info may hold `/ ? # : = @` and anything else, so
///   everything from the first `:` to the *last* `@` is hidden. That covers
///   the password whichever `@` a parser takes as the end of the user info
///   (tokio-postgres takes the first). When a `?` comes before that `@`, the
///   query may have begun inside the hidden part, so what follows the `@` up
///   to the next `&` may be the end of a password and is hidden too (the
///   host with it; logs name the endpoint separately). Query parameters (keys
///   percent-decoded) show their value only when the key is a known harmless
///   libpq parameter.
/// * key=value form, tokenized like libpq and tokio-postgres do (`key = value`,
///   values bare or single-quoted with `\` escapes): values are shown only for
///   known harmless parameters; from the first thing that does not parse on,
///   the rest is hidden.
/// * In both forms a parameter whose name is neither a harmless libpq
///   parameter nor `password`/`sslpassword` is hidden whole, name included.
/// * Anything else may be a bare password and is hidden whole.
pub fn redact_conninfo(conninfo: &str) -> String {
    let trimmed = conninfo.trim_start();
    if let Some((scheme, rest)) = split_url_scheme(trimmed) {
        return format!("{scheme}{}", redact_url_rest(rest));
    }
    if trimmed.contains('=') {
        redact_key_values(trimmed)
    } else if trimmed.is_empty() {
        String::new()
    } else {
        HIDDEN.to_owned()
    }
}

/// `(scheme with "://", rest)` when `s` starts with a PostgreSQL URL scheme
/// in any letter case.
pub(crate) fn split_url_scheme(s: &str) -> Option<(&str, &str)> {
    ["postgresql://", "postgres://"].iter().find_map(|scheme| {
        let head = s.get(..scheme.len())?;
        head.eq_ignore_ascii_case(scheme)
            .then(|| s.split_at(scheme.len()))
    })
}

/// Redacts the part of a URL after `scheme://`.
fn redact_url_rest(rest: &str) -> String {
    // Hide from the first ':' to the last '@': whichever '@' a parser ends
    // the user info at, the password lies in between.
    let Some(at) = rest.rfind('@') else {
        return redact_query(rest);
    };
    let Some(colon) = rest[..at].find(':') else {
        // No ':' before any '@': no password in the user info.
        return redact_query(rest);
    };
    let user = &rest[..=colon];
    let after_at = &rest[at + 1..];
    if rest[..at].contains('?') {
        // The query may have begun before the '@' (a '?' in the password, or
        // an '@' in a parameter value): then what follows the '@' up to the
        // next '&' may be the end of a password rather than a host.
        let params = after_at.split_once('&').map(|(_, params)| {
            params
                .split('&')
                .map(redact_query_param)
                .collect::<Vec<_>>()
        });
        let mut out = redact_query(user);
        if !out.ends_with(HIDDEN) {
            out.push_str(HIDDEN);
        }
        out.push('@');
        out.push_str(HIDDEN);
        for param in params.into_iter().flatten() {
            out.push('&');
            out.push_str(&param);
        }
        out
    } else {
        format!("{user}{HIDDEN}@{}", redact_query(after_at))
    }
}

/// Redacts the parameters after the first '?' of `s`.
fn redact_query(s: &str) -> String {
    match s.split_once('?') {
        Some((before, query)) => {
            let params: Vec<String> = query.split('&').map(redact_query_param).collect();
            format!("{before}?{}", params.join("&"))
        }
        None => s.to_owned(),
    }
}

fn redact_query_param(param: &str) -> String {
    if param.is_empty() {
        return String::new();
    }
    match param.split_once('=') {
        Some((key, _)) => match percent_decoded(key) {
            Some(decoded) => redact_pair(key, &decoded, || param.to_owned()),
            None => HIDDEN.to_owned(),
        },
        None => HIDDEN.to_owned(),
    }
}

/// One `key=value` as shown: whole for a harmless parameter, `key=***` for
/// a password parameter, `***` for anything else. An unknown name is hidden
/// too: it is often the tail of a password cut at an unencoded `&` or an
/// unquoted space.
fn redact_pair(written_key: &str, key: &str, whole: impl FnOnce() -> String) -> String {
    if is_shown_parameter(key) {
        whole()
    } else if ["password", "sslpassword"]
        .iter()
        .any(|p| p.eq_ignore_ascii_case(key))
    {
        format!("{written_key}={HIDDEN}")
    } else {
        HIDDEN.to_owned()
    }
}

/// `s` percent-decoded, `None` if that is not UTF-8 or an escape is broken
/// (the caller then treats the text as unknown).
fn percent_decoded(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One `key = value` of a key=value conninfo, as written.
pub(crate) struct KeyValue<'a> {
    pub key: &'a str,
    /// The value as written (quotes and escapes included).
    pub raw: &'a str,
    /// The value once quotes and escapes are resolved.
    pub value: String,
}

/// Tokenizes a key=value conninfo the way libpq and tokio-postgres do.
/// Returns the pairs read and whether the whole string was read (`false`:
/// the text after the last pair does not parse).
pub(crate) fn key_values(conninfo: &str) -> (Vec<KeyValue<'_>>, bool) {
    let mut pairs = Vec::new();
    let mut rest = conninfo;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return (pairs, true);
        }
        let key_end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        let after_key = rest[key_end..].trim_start();
        let Some(after_eq) = after_key.strip_prefix('=') else {
            return (pairs, false);
        };
        if key.is_empty() {
            return (pairs, false);
        }
        let value_start = after_eq.trim_start();
        let Some((raw, value, remaining)) = split_value(value_start) else {
            return (pairs, false);
        };
        pairs.push(KeyValue { key, raw, value });
        rest = remaining;
    }
}

/// Splits one value off the front of `s`: single-quoted (up to the
/// unescaped closing quote) or bare (up to whitespace), `\` escaping the
/// next character in both. `None` if a quote is unterminated.
fn split_value(s: &str) -> Option<(&str, String, &str)> {
    let quoted = s.starts_with('\'');
    let body = if quoted { &s[1..] } else { s };
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            '\'' if quoted => {
                let end = 1 + i + 1;
                return Some((&s[..end], value, &s[end..]));
            }
            c if !quoted && c.is_whitespace() => return Some((&s[..i], value, &s[i..])),
            c => value.push(c),
        }
    }
    if quoted { None } else { Some((s, value, "")) }
}

/// Redacts a libpq key=value string (`host=h password='p w' dbname=d`).
fn redact_key_values(conninfo: &str) -> String {
    let (pairs, complete) = key_values(conninfo);
    let mut out: Vec<String> = pairs
        .iter()
        .map(|pair| redact_pair(pair.key, pair.key, || format!("{}={}", pair.key, pair.raw)))
        .collect();
    if !complete {
        // A value running on after an unterminated quote, a word without
        // '=': it may be (part of) a secret.
        out.push(HIDDEN.to_owned());
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "Canary-Pw-7781";

    #[test]
    fn url_password_is_hidden() {
        let cases = [
            (
                format!("postgres://relay:{CANARY}@127.0.0.1:5432/app"),
                "postgres://relay:***@127.0.0.1:5432/app",
            ),
            (
                format!("postgresql://relay:{CANARY}@db/app?sslmode=require"),
                "postgresql://relay:***@db/app?sslmode=require",
            ),
            (
                format!(
                    "postgres://relay@db/app?password={CANARY}&sslpassword={CANARY}&sslmode=disable"
                ),
                "postgres://relay@db/app?password=***&sslpassword=***&sslmode=disable",
            ),
            (
                format!("POSTGRES://relay:{CANARY}@db"),
                "POSTGRES://relay:***@db",
            ),
            (
                format!("  postgresql://relay:{CANARY}@db"),
                "postgresql://relay:***@db",
            ),
            (
                "postgres://db:5432/app".to_owned(),
                "postgres://db:5432/app",
            ),
            (
                format!("postgres://db/app?password={CANARY}&application_name=a@b"),
                "postgres://db/app?password=***&application_name=a@b",
            ),
            (
                // Keys count once percent-decoded, in any case.
                format!("postgres://db/app?pass%77ord={CANARY}&PASSWORD={CANARY}&x={CANARY}"),
                "postgres://db/app?pass%77ord=***&PASSWORD=***&***",
            ),
            (
                format!("postgres://db/app?{CANARY}"),
                "postgres://db/app?***",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(redact_conninfo(&input), expected, "{input}");
        }
    }

    #[test]
    fn url_password_with_delimiters_is_hidden() {
        for password in [
            format!("a@{CANARY}"),
            format!("{CANARY}/x@y"),
            format!("{CANARY}?q"),
            format!("{CANARY}#frag"),
            format!("{CANARY}:x=y&password=z"),
            format!("{CANARY}%2F%zz'\" x"),
        ] {
            for query in ["", "?sslmode=disable", "?application_name=a@b"] {
                let url = format!("postgres://relay:{password}@db/app{query}");
                let shown = redact_conninfo(&url);
                assert!(!shown.contains(CANARY), "{shown}");
                assert!(shown.starts_with("postgres://relay:***@"), "{shown}");
            }
        }
        // The last '@' ends what is hidden: a '/' before it is the
        // password's (tokio-postgres reads it so), not the path's.
        assert_eq!(
            redact_conninfo(&format!(
                "postgres://relay:{CANARY}/pa@db/app?sslmode=require"
            )),
            "postgres://relay:***@db/app?sslmode=require"
        );
        // After a '?' the '@' may sit in a query value, and what follows it
        // in the same parameter is hidden as well.
        for (url, expected) in [
            (
                format!("postgres://relay:{CANARY}/pa?ss@db/app?sslmode=require"),
                "postgres://relay:***@***",
            ),
            (
                format!("postgres://db:5432/app?password={CANARY}@{CANARY}&sslmode=disable"),
                "postgres://db:***@***&sslmode=disable",
            ),
            (
                format!("postgres://db/app?sslmode=disable&password=a:{CANARY}@{CANARY}"),
                "postgres://db/app?sslmode=disable&password=***@***",
            ),
            (
                format!("postgres://db/app?password=a:{CANARY}@{CANARY}&sslmode=disable"),
                "postgres://db/app?password=***@***&sslmode=disable",
            ),
        ] {
            assert_eq!(redact_conninfo(&url), expected, "{url}");
        }
    }

    #[test]
    fn key_value_password_is_hidden() {
        let cases = [
            (
                format!("host=/run/postgresql user=relay password={CANARY} dbname=app"),
                "host=/run/postgresql user=relay password=*** dbname=app",
            ),
            (
                format!("host=db password = '{CANARY} with \\' quote' dbname=app"),
                "host=db password=*** dbname=app",
            ),
            (
                format!("host=db PASSWORD='{CANARY}' SslPassword={CANARY}\\ x user=u"),
                "host=db PASSWORD=*** SslPassword=*** user=u",
            ),
            (format!("password='{CANARY}"), "***"),
            (format!("host=db {CANARY}"), "host=db ***"),
            (format!("sslpassword={CANARY}"), "sslpassword=***"),
            (format!("host=db unknown={CANARY}"), "host=db ***"),
            (
                // The tail of a password cut at an unquoted space.
                format!("host=db password=x {CANARY}=y"),
                "host=db password=*** ***",
            ),
            (
                format!("host=db options='-c a=b' password= {CANARY}"),
                "host=db options='-c a=b' password=***",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(redact_conninfo(&input), expected, "{input}");
        }
    }

    #[test]
    fn key_values_are_read_like_libpq() {
        let (pairs, complete) = key_values("a=1 b = 'x \\'y' c=p\\ q d= e");
        assert!(complete);
        let read: Vec<(&str, &str, &str)> = pairs
            .iter()
            .map(|p| (p.key, p.raw, p.value.as_str()))
            .collect();
        assert_eq!(
            read,
            [
                ("a", "1", "1"),
                ("b", "'x \\'y'", "x 'y"),
                ("c", "p\\ q", "p q"),
                ("d", "e", "e"),
            ]
        );
        assert!(!key_values("a=1 b").1);
        assert!(!key_values("a='1").1);
        assert!(!key_values("=1").1);
    }

    #[test]
    fn unrecognisable_strings_are_hidden_whole() {
        assert_eq!(redact_conninfo(CANARY), "***");
        assert_eq!(redact_conninfo(""), "");
    }

    #[test]
    fn secret_properties_are_recognised() {
        for name in [
            "sasl.password",
            "ssl.key.password",
            "ssl.key.pem",
            "ssl.keystore.password",
            "ssl.keystore.key",
            "ssl_key",
            "sasl.oauthbearer.client.secret",
            "sasl.jaas.config",
            "SASL.PASSWORD",
            "SSL.KEY.PASSWORD",
        ] {
            assert!(is_secret_property(name), "{name}");
        }
        for name in ["compression.type", "sasl.username", "client.id"] {
            assert!(!is_secret_property(name), "{name}");
        }
    }
}
