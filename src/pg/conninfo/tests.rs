use super::*;

#[test]
fn url_with_password_is_redacted_everywhere() {
    let c = Conninfo::parse("postgres://relay:s3cret@127.0.0.1:5432/app").unwrap();
    assert_eq!(c.to_string(), "postgres://relay:***@127.0.0.1:5432/app");
    assert_eq!(c.password(), Some(&b"s3cret"[..]));
    assert!(!format!("{c:?}").contains("s3cret"));
    let c =
        Conninfo::parse("postgresql://relay:p%40ss@h/db?password=other&sslmode=require").unwrap();
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
fn own_url_parameters_are_percent_decoded_strictly() {
    let c = Conninfo::parse("postgres://u@h/db?ssl%6Dode=require&sslrootcert=%2Fca%20dir%2Fr.pem")
        .unwrap();
    assert_eq!(c.tls.mode, SslMode::Require);
    assert_eq!(
        c.tls.root_cert,
        Some(RootCert::File(PathBuf::from("/ca dir/r.pem")))
    );
    // Two hex digits after every '%', nothing else (not a sign either).
    for bad in ["%", "%4", "%zz", "%+1", "%-1", "x%4"] {
        let err = Conninfo::parse(&format!("postgres://u@h/db?sslrootcert={bad}")).unwrap_err();
        assert!(
            err.to_string().contains("invalid percent-encoding"),
            "{bad}: {err}"
        );
    }
    let err = Conninfo::parse("postgres://u@h/db?sslrootcert=%FF").unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");
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
    let err = Conninfo::parse("host=h user=u sslmode=disable channel_binding=require").unwrap_err();
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
        let text = format!("{err} {err:?} {}", err.reason());
        let err = PgError::from(err);
        assert_eq!(err.kind(), super::super::ErrorKind::Fatal);
        for secret in ["topsecret", "tops3cr", "et9x"] {
            assert!(!text.contains(secret), "{text}");
        }
    }
}

#[test]
fn pinned_to_one_endpoint_keeps_everything_but_the_other_hosts() {
    let c = Conninfo::parse(
        "host=a,b port=1,2 user=u password=topsecret dbname=d sslmode=require options='-c x=1'",
    )
    .unwrap();
    let second = c.endpoints[1].clone();
    let pinned = c.pinned_to(&second);
    assert_eq!(pinned.endpoints, vec![second]);
    assert_eq!(
        (
            &pinned.user,
            &pinned.dbname,
            &pinned.options,
            pinned.tls.mode
        ),
        (&c.user, &c.dbname, &c.options, c.tls.mode)
    );
    assert_eq!(pinned.password(), c.password());
    // Still the one redacted form everywhere.
    assert!(!format!("{pinned} {pinned:?}").contains("topsecret"));
}
