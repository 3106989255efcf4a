use super::*;

fn report() -> StatusReport {
    StatusReport {
        slot: "outbox_relay".into(),
        database: "app".into(),
        exists: true,
        confirmed_flush_lsn: Some("0/1549D80".into()),
        current_lsn: Some("0/1569D80".into()),
        lag_bytes: Some(131_072),
        wal_status: Some("reserved".into()),
        safe_wal_size: None,
        active_pid: Some(4242),
        failover: None,
        synced: None,
        holder: Some(HolderFacts {
            pid: 4242,
            application_name: Some("outbox-relay".into()),
            client_addr: Some("10.0.0.5".into()),
            backend_type: Some("walsender".into()),
            state: Some("streaming".into()),
            flush_lag_seconds: Some(0.25),
            ..HolderFacts::default()
        }),
        pending: Pending {
            method: AgeMethod::CommitTimestamp,
            keeps_rows: Some(true),
            rows: Some(12),
            oldest_age_seconds: Some(4.2),
            note: None,
        },
        webhooks: Vec::new(),
        parked: Some(ParkedStats::default()),
        parked_note: None,
        unusable: None,
        verdict: Verdict::Ok,
        problem: None,
    }
}

#[test]
fn the_table_for_people_says_lag_holder_and_pending_rows() {
    let text = render_text(&report());
    for needle in [
        "\"outbox_relay\" in database \"app\"",
        "0/1549D80",
        "128.0 KiB (131072 bytes)",
        "reserved (no limit (max_slot_wal_keep_size = -1))",
        "pid 4242, application_name \"outbox-relay\", from 10.0.0.5, streaming, flush lag 0.2 s",
        "12 at most; the oldest is 4.2 s old (by commit timestamp)",
    ] {
        assert!(text.contains(needle), "{needle}\n{text}");
    }
}

#[test]
fn an_unheld_slot_and_an_empty_outbox_say_so() {
    let mut r = report();
    r.holder = None;
    r.active_pid = None;
    r.safe_wal_size = Some(1 << 30);
    r.pending = Pending {
        method: AgeMethod::TimestampColumn,
        keeps_rows: Some(false),
        rows: None,
        oldest_age_seconds: None,
        note: Some("the outbox table is empty".into()),
    };
    let text = render_text(&r);
    assert!(
        text.contains("nobody: no relay is reading the slot"),
        "{text}"
    );
    assert!(
        text.contains("1.0 GiB more WAL before the slot is lost"),
        "{text}"
    );
    assert!(text.contains("the outbox table is empty"), "{text}");
    r.pending.rows = Some(0);
    assert!(
        render_text(&r).contains("pending rows     none"),
        "{}",
        render_text(&r)
    );
}

#[test]
fn a_missing_slot_is_said_and_nothing_else() {
    let r = StatusReport {
        exists: false,
        ..report()
    };
    let text = render_text(&r);
    assert!(text.contains("does not exist"), "{text}");
    assert!(!text.contains("lag"), "{text}");
}

#[test]
fn json_is_one_line_with_stable_fields() {
    let json = render_json(&report());
    assert!(!json.contains('\n'));
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["lag_bytes"], 131_072);
    assert_eq!(value["pending"]["method"], "commit_timestamp");
    assert_eq!(value["pending"]["rows"], 12);
    assert_eq!(value["holder"]["pid"], 4242);
    assert_eq!(value["safe_wal_size"], serde_json::Value::Null);
}

#[test]
fn the_commit_time_comes_from_commit_timestamps_when_tracked() {
    let (expr, method) = commit_time_expression(true, Some("timestamp"));
    assert_eq!(method, AgeMethod::CommitTimestamp);
    assert_eq!(
        expr.unwrap(),
        "coalesce(pg_catalog.pg_xact_commit_timestamp(t.xmin), t.\"timestamp\"::timestamptz)"
    );
    let (expr, method) = commit_time_expression(false, Some("created\"at"));
    assert_eq!(method, AgeMethod::TimestampColumn);
    assert_eq!(expr.unwrap(), "t.\"created\"\"at\"::timestamptz");
    assert_eq!(commit_time_expression(false, None), (None, AgeMethod::None));
    let (expr, _) = commit_time_expression(true, None);
    assert_eq!(expr.unwrap(), "pg_catalog.pg_xact_commit_timestamp(t.xmin)");
}

#[test]
fn pending_rows_are_those_not_older_than_the_catalog_xmin() {
    let sql = pending_sql(("public", "out'box"), Some("t.ts"));
    assert!(sql.contains("FROM \"public\".\"out'box\" t"), "{sql}");
    assert!(
        sql.contains("WHERE pg_catalog.age(t.xmin) <= pg_catalog.age($1::xid)"),
        "{sql}"
    );
    assert!(pending_sql(("s", "t"), None).contains("NULL::timestamptz AS ts"));
}

#[test]
fn caught_up_only_when_the_confirmed_position_reached_the_end_of_the_wal() {
    assert!(caught_up(Some("0/1549D80"), Some("0/1549D80")));
    assert!(caught_up(Some("0/1549D81"), Some("0/1549D80")));
    assert!(!caught_up(Some("0/1549D7F"), Some("0/1549D80")));
    assert!(!caught_up(None, Some("0/1549D80")));
    assert!(!caught_up(Some("0/1549D80"), None));
    assert!(!caught_up(Some("garbage"), Some("0/0")));
}

#[test]
fn webhook_rows_show_pending_stuck_and_dead_per_route() {
    let r = StatusReport {
        webhooks: vec![
            crate::sink::http::store::RouteStats {
                route: "billing".into(),
                pending: 7,
                pending_over_10m: 2,
                dead: 1,
                oldest_pending_secs: 900.0,
            },
            crate::sink::http::store::RouteStats {
                route: "audit".into(),
                ..Default::default()
            },
        ],
        ..report()
    };
    let text = render_text(&r);
    assert!(
        text.contains("webhook billing")
            && text.contains("7 pending (2 for over 10 min, the oldest 15 min 0 s old), 1 dead"),
        "{text}"
    );
    assert!(text.contains("1 dead"), "{text}");
    assert!(
        text.contains("webhook audit") && text.contains("0 pending (0 for over 10 min), 0 dead"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert_eq!(json["webhooks"][0]["pending_over_10m"], 2);
    let plain: serde_json::Value = serde_json::from_str(&render_json(&report())).unwrap();
    assert!(plain.get("webhooks").is_none(), "no sink, no webhook field");
}

#[test]
fn failover_shows_from_postgresql_17_only() {
    let before_17 = render_text(&report());
    assert!(!before_17.contains("failover"), "{before_17}");
    let primary = render_text(&StatusReport {
        failover: Some(true),
        synced: Some(false),
        ..report()
    });
    assert!(
        primary.contains("failover") && primary.contains("keep a copy in step"),
        "{primary}"
    );
    let standby = render_text(&StatusReport {
        failover: Some(true),
        synced: Some(true),
        ..report()
    });
    assert!(standby.contains("synchronized copy"), "{standby}");
    let plain = render_text(&StatusReport {
        failover: Some(false),
        synced: Some(false),
        ..report()
    });
    assert!(
        plain.contains("failover") && plain.contains("no such slot"),
        "{plain}"
    );
}

#[test]
fn a_holder_whose_state_is_hidden_names_the_grant_that_shows_it() {
    let mut r = report();
    let hidden = HolderFacts {
        state: None,
        flush_lag_seconds: None,
        asked_as: Some("relay".into()),
        reads_all_stats: Some(false),
        ..r.holder.clone().unwrap()
    };
    r.holder = Some(hidden.clone().with_hint());
    let text = render_text(&r);
    assert!(
        text.contains("state and flush lag are hidden from role \"relay\"")
            && text.contains("GRANT pg_read_all_stats TO relay;"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert_eq!(json["holder"]["state"], serde_json::Value::Null);
    let hint = json["holder"]["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("GRANT pg_read_all_stats TO relay;"), "{json}");
    // A role that may read the statistics sees the state, or there is none
    // to see (a holder that is no walsender): no hint.
    let visible = HolderFacts {
        reads_all_stats: Some(true),
        ..hidden
    };
    assert_eq!(visible.with_hint().hint, None);
    assert_eq!(report().holder.unwrap().with_hint().hint, None);
}

#[test]
fn the_verdict_fails_where_the_relay_cannot_use_the_slot_and_warns_on_unread_wal() {
    // Held and read: ok, whatever the lag.
    assert_eq!(judge(&report()), (Verdict::Ok, None));
    // Nobody reads it while it holds WAL: a warning naming the amount.
    let mut unread = report();
    unread.holder = None;
    unread.active_pid = None;
    let (verdict, why) = judge(&unread);
    assert_eq!(verdict, Verdict::Warn);
    assert!(
        why.unwrap()
            .contains("nobody reads the slot, and it holds 128.0 KiB")
    );
    // ... unless it holds nothing, or it is a standby's synchronized copy.
    assert_eq!(
        judge(&StatusReport {
            lag_bytes: Some(0),
            ..unread.clone()
        })
        .0,
        Verdict::Ok
    );
    assert_eq!(
        judge(&StatusReport {
            synced: Some(true),
            ..unread.clone()
        })
        .0,
        Verdict::Ok
    );
    // WAL due for removal, read or not.
    let (verdict, why) = judge(&StatusReport {
        wal_status: Some("unreserved".into()),
        ..report()
    });
    assert_eq!(verdict, Verdict::Warn);
    assert!(why.unwrap().contains("due for removal"));
    // A slot the relay cannot use (its own verdict), or none at all.
    let (verdict, why) = judge(&StatusReport {
        unusable: Some("replication slot \"outbox_relay\" uses plugin test_decoding".into()),
        ..report()
    });
    assert_eq!(verdict, Verdict::Fail);
    assert!(why.unwrap().contains("test_decoding"));
    assert_eq!(
        judge(&StatusReport {
            exists: false,
            ..report()
        })
        .0,
        Verdict::Fail
    );
}

#[test]
fn parked_aggregates_show_with_the_dead_list_hint_and_do_not_change_the_verdict() {
    let mut r = report();
    assert!(
        render_text(&r).contains("parked           none"),
        "{}",
        render_text(&r)
    );
    r.parked = Some(ParkedStats {
        aggregates: 3,
        events: 41,
        oldest_head_secs: 5_400.0,
    });
    let text = render_text(&r);
    assert!(
        text.contains(
            "parked           3 aggregates behind a dead letter, 41 events waiting behind them; \
             the oldest parked 1 h 30 min ago: `outbox-relay dead list` shows them"
        ),
        "{text}"
    );
    assert_eq!(judge(&r), (Verdict::Ok, None));
    let json: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert_eq!(json["parked"]["aggregates"], 3);
    assert_eq!(json["parked"]["events"], 41);
    assert_eq!(json["parked"]["oldest_head_secs"], 5_400.0);
    assert!(json.get("parked_note").is_none(), "{json}");

    r.parked = None;
    r.parked_note = Some("the parking table public.outbox_parked does not exist".into());
    assert!(
        render_text(&r).contains("parked           the parking table public.outbox_parked"),
        "{}",
        render_text(&r)
    );
    let json: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert!(json["parked"].is_null(), "{json}");
    assert!(
        json["parked_note"]
            .as_str()
            .unwrap()
            .contains("does not exist")
    );
}
