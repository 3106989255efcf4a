//! Property test: a password made of any printable characters (the ones
//! URLs and key=value strings give a meaning to included), in any place a
//! conninfo can carry one and under any key spelling, never shows in what the
//! relay prints about a conninfo: the redacted string, `Display` and `Debug`
//! of [`Conninfo`], [`ReplicationSettings`] and [`Config`], and the text of
//! every [`PgError`] that parsing or connecting returns.
//!
//! Each password starts and ends with a random marker, so a leak of its
//! beginning or its end is caught even where the middle was cut off, and a
//! short random password cannot match some other text by accident.

use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;

use super::Conninfo;
use crate::config::{Config, redact_conninfo};
use crate::replication::{ReplicationSettings, ReplicationStream};
use pgoutput::lsn::Lsn;

/// One piece of a password: any printable character, or a sequence that
/// means something to a URL or key=value parser.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[ -~]",
        1 => "\\PC",
        3 => prop::sample::select(vec![
            "/", "?", "@", "#", ":", "%", "=", "'", "\"", " ", "\\", "&", ",", "%41", "%2F",
            "%40", "%zz", "%4", "\\'", "''", "password=", "@127.0.0.1/app?", "://", "[", "]",
            " host=x ", "\t",
        ])
        .prop_map(str::to_owned),
    ]
}

#[derive(Debug, Clone)]
struct Password {
    text: String,
    head: String,
    tail: String,
}

fn password() -> impl Strategy<Value = Password> {
    ("[A-Z][a-z0-9]{7}", vec(piece(), 0..10), "[a-z0-9]{8}").prop_map(|(a, middle, b)| {
        let head = format!("Cy{a}");
        let tail = format!("Zq{b}");
        Password {
            text: format!("{head}{}{tail}", middle.concat()),
            head,
            tail,
        }
    })
}

/// Every byte but RFC 3986's unreserved ones as `%XX`.
fn encode_all(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Only what tokio-postgres would otherwise misread: `%`, `@` (and `&` in a
/// query); `/ ? # : =`, quotes and spaces stay as they are.
fn encode_minimal(s: &str, also: &[char]) -> String {
    s.chars()
        .map(|c| {
            if c == '%' || c == '@' || also.contains(&c) {
                encode_all(&c.to_string())
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Encoding {
    All,
    Minimal,
    Raw,
}

fn encoding() -> impl Strategy<Value = Encoding> {
    prop_oneof![
        Just(Encoding::All),
        Just(Encoding::Minimal),
        Just(Encoding::Raw)
    ]
}

/// A conninfo holding `password`, in one of the places one can be.
fn conninfo_with(password: &str) -> impl Strategy<Value = String> + use<> {
    let password = password.to_owned();
    let scheme = prop::sample::select(vec![
        "postgres://",
        "postgresql://",
        "POSTGRES://",
        " postgresql://",
    ]);
    let url_query = prop::sample::select(vec![
        "",
        "?sslmode=disable",
        "?application_name=a@b",
        "?sslmode=disable&connect_timeout=1",
    ]);
    let query_key = prop::sample::select(vec![
        "password",
        "PASSWORD",
        "Password",
        "sslpassword",
        "SSLPassword",
        "pass%77ord",
    ]);
    let kv_key = prop::sample::select(vec![
        "password",
        "PASSWORD",
        "Password",
        "sslpassword",
        "SslPassword",
    ]);
    let user_info = {
        let password = password.clone();
        (scheme.clone(), encoding(), url_query).prop_map(move |(scheme, enc, query)| {
            let shown = match enc {
                Encoding::All => encode_all(&password),
                Encoding::Minimal => encode_minimal(&password, &[]),
                Encoding::Raw => password.clone(),
            };
            format!("{scheme}relay:{shown}@127.0.0.1:1/app{query}")
        })
    };
    let in_query = {
        let password = password.clone();
        (scheme, encoding(), query_key).prop_map(move |(scheme, enc, key)| {
            let shown = match enc {
                Encoding::All => encode_all(&password),
                Encoding::Minimal => encode_minimal(&password, &['&']),
                Encoding::Raw => password.clone(),
            };
            format!(
                "{scheme}relay@127.0.0.1:1/app?sslmode=disable&{key}={shown}&application_name=x"
            )
        })
    };
    let key_value =
        (kv_key, any::<bool>(), any::<bool>()).prop_map(move |(key, quoted, spaced)| {
            let value = if quoted {
                let escaped: String = password
                    .chars()
                    .flat_map(|c| match c {
                        '\'' | '\\' => vec!['\\', c],
                        c => vec![c],
                    })
                    .collect();
                format!("'{escaped}'")
            } else {
                password
                    .chars()
                    .flat_map(|c| {
                        if c.is_whitespace() || c == '\'' || c == '\\' {
                            vec!['\\', c]
                        } else {
                            vec![c]
                        }
                    })
                    .collect()
            };
            let eq = if spaced { " = " } else { "=" };
            format!("host=127.0.0.1 port=1 user=relay {key}{eq}{value} dbname=app")
        });
    prop_oneof![user_info, in_query, key_value]
}

fn case() -> impl Strategy<Value = (Password, String)> {
    password().prop_flat_map(|p| {
        let conninfo = conninfo_with(&p.text);
        (Just(p), conninfo)
    })
}

/// Everything the relay may print about `conninfo`.
fn shown(conninfo: &str) -> Vec<(&'static str, String)> {
    let mut out = vec![("redact_conninfo", redact_conninfo(conninfo))];
    match Conninfo::parse(conninfo) {
        Ok(parsed) => {
            out.push(("Conninfo Display", parsed.to_string()));
            out.push(("Conninfo Debug", format!("{parsed:?}")));
            out.push(("Conninfo Debug alternate", format!("{parsed:#?}")));
            for endpoint in &parsed.endpoints {
                out.push(("Endpoint", endpoint.to_string()));
            }
        }
        Err(error) => {
            out.push(("parse error Display", error.to_string()));
            out.push(("parse error Debug", format!("{error:?}")));
        }
    }
    if let Ok(parsed) = Conninfo::parse(conninfo) {
        let mut settings = ReplicationSettings::new(parsed, "s", "p");
        settings.connection.connect_timeout = Duration::from_secs(2);
        out.push(("ReplicationSettings Debug", format!("{settings:?}")));
        // Port 1 on loopback refuses at once: the error of a real connect attempt.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        if let Err(error) = runtime.block_on(ReplicationStream::connect(&settings, Lsn::ZERO)) {
            out.push(("connect error Display", error.to_string()));
            out.push(("connect error Debug", format!("{error:?}")));
        }
    }

    let mut config = Config::default();
    config.postgres.url = conninfo.to_owned();
    config.postgres.slot = "s".into();
    config.postgres.publication = "p".into();
    out.push(("Config Debug", format!("{config:?}")));
    out.push(("Config Debug alternate", format!("{config:#?}")));
    out.push(("Config Display", config.to_string()));
    if let Err(error) = config.validate() {
        out.push(("Config validate", format!("{error} {error:?}")));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_password_never_shows_in_anything_printed_about_its_conninfo((p, conninfo) in case()) {
        let forbidden = [
            p.text.clone(),
            encode_all(&p.text),
            p.head.clone(),
            p.tail.clone(),
        ];
        for (what, text) in shown(&conninfo) {
            for secret in &forbidden {
                prop_assert!(
                    !text.contains(secret.as_str()),
                    "{what} shows {secret:?}:\n{text}\nconninfo: {conninfo}"
                );
            }
        }
    }
}
