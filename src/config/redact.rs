//! Redaction of secrets in connection strings and Kafka properties.
//!
//! Invariant: when in doubt, hide more. A string that cannot be parsed is
//! replaced whole; a URL whose user info is ambiguous loses more than the
//! password rather than showing part of it.

/// Marker shown instead of a secret.
const HIDDEN: &str = "***";

/// Substrings of librdkafka property names whose values are secret
/// (`sasl.password`, `ssl.key.password`, `ssl.key.pem`,
/// `sasl.oauthbearer.client.secret`, `sasl.jaas.config`, ...).
const SECRET_PROPERTY_MARKERS: &[&str] = &[
    "password",
    "secret",
    "sasl.jaas",
    "ssl.key",
    "sasl.oauthbearer.config",
    "token",
];

/// Whether the value of the librdkafka property `name` must not be shown.
pub fn is_secret_property(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PROPERTY_MARKERS.iter().any(|m| name.contains(m))
}

/// A connection string with every password replaced by `***`: the URL
/// user-info password, `password`/`sslpassword` query parameters, and
/// `password=` (any key containing "password") in key=value form.
pub fn redact_conninfo(conninfo: &str) -> String {
    let trimmed = conninfo.trim_start();
    let lower = trimmed.to_ascii_lowercase();
    for scheme in ["postgresql://", "postgres://"] {
        if lower.starts_with(scheme) {
            let (head, rest) = trimmed.split_at(scheme.len());
            return format!("{head}{}", redact_url_rest(rest));
        }
    }
    if trimmed.contains('=') {
        redact_key_values(trimmed)
    } else if trimmed.is_empty() {
        String::new()
    } else {
        // Neither form: it may be anything, including a bare password.
        HIDDEN.to_owned()
    }
}

/// Redacts the part of a URL after `scheme://`.
fn redact_url_rest(rest: &str) -> String {
    // The last '@' ends the user info; an '@' inside a query value makes the
    // cut land later, hiding more than needed, never less.
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at..]),
        None => (None, rest),
    };
    let mut out = String::with_capacity(rest.len());
    if let Some(userinfo) = userinfo {
        // `user:password`; a '/', '?' or '=' means the cut landed past the
        // user info (an '@' in the path or query), so hide from there on.
        match userinfo.find([':', '/', '?', '=']) {
            Some(i) => {
                let delimiter_len = 1;
                out.push_str(&userinfo[..i + delimiter_len]);
                out.push_str(HIDDEN);
            }
            None => out.push_str(userinfo),
        }
    }
    match after.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if key.to_ascii_lowercase().contains("password") => {
                        format!("{key}={HIDDEN}")
                    }
                    _ => param.to_owned(),
                })
                .collect();
            out.push_str(&params.join("&"));
        }
        None => out.push_str(after),
    }
    out
}

/// Redacts a libpq key=value string (`host=h password='p w' dbname=d`).
fn redact_key_values(conninfo: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut rest = conninfo.trim_start();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else {
            // A trailing word without '=' is malformed; it may be a secret.
            out.push(HIDDEN.to_owned());
            break;
        };
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            out.push(HIDDEN.to_owned());
            break;
        }
        let value_and_rest = rest[eq + 1..].trim_start();
        let Some((value, remaining)) = split_value(value_and_rest) else {
            out.push(format!("{key}={HIDDEN}"));
            break;
        };
        if key.to_ascii_lowercase().contains("password") {
            out.push(format!("{key}={HIDDEN}"));
        } else {
            out.push(format!("{key}={value}"));
        }
        rest = remaining.trim_start();
    }
    out.join(" ")
}

/// Splits one value (quoted with `'` and backslash escapes, or bare up to
/// whitespace) off the front; `None` if a quote is unterminated.
fn split_value(s: &str) -> Option<(&str, &str)> {
    if let Some(quoted) = s.strip_prefix('\'') {
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '\'' => return Some((&s[..i + 2], &quoted[i + 1..])),
                _ => {}
            }
        }
        None
    } else {
        let mut escaped = false;
        for (i, c) in s.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                c if c.is_whitespace() => return Some((&s[..i], &s[i..])),
                _ => {}
            }
        }
        Some((s, ""))
    }
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
                format!("postgres://relay@db/app?password={CANARY}&sslpassword={CANARY}&a=b"),
                "postgres://relay@db/app?password=***&sslpassword=***&a=b",
            ),
            (
                format!("POSTGRES://relay:{CANARY}@db"),
                "POSTGRES://relay:***@db",
            ),
            (
                "postgres://db:5432/app".to_owned(),
                "postgres://db:5432/app",
            ),
            (
                format!("postgres://db/app?password={CANARY}&x=a@b"),
                "postgres://db/***@b",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(redact_conninfo(&input), expected);
        }
    }

    #[test]
    fn url_password_with_at_sign_or_slash_is_hidden() {
        for password in [
            format!("a@{CANARY}"),
            format!("{CANARY}/x@y"),
            format!("{CANARY}?q"),
        ] {
            let url = format!("postgres://relay:{password}@db/app?application_name=a@b");
            let shown = redact_conninfo(&url);
            assert!(!shown.contains(CANARY), "{shown}");
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
            (format!("password='{CANARY}"), "password=***"),
            (format!("host=db {CANARY}"), "host=db ***"),
            (format!("sslpassword={CANARY}"), "sslpassword=***"),
        ];
        for (input, expected) in cases {
            assert_eq!(redact_conninfo(&input), expected);
        }
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
            "sasl.oauthbearer.client.secret",
            "sasl.jaas.config",
            "SASL.PASSWORD",
        ] {
            assert!(is_secret_property(name), "{name}");
        }
        for name in ["compression.type", "sasl.username", "client.id"] {
            assert!(!is_secret_property(name), "{name}");
        }
    }
}
