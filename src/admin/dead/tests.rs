use super::*;
use bytes::Bytes;
use chrono::DateTime;

const TEMPLATE: &str = "outbox.event.{aggregatetype}";

fn letter(id: Option<&str>, partition: i32, offset: i64, reason: &str) -> DlqRecord {
    let mut headers = vec![
        ("dlq_reason".to_owned(), Bytes::from(reason.to_owned())),
        (
            "dlq_reason_code".to_owned(),
            Bytes::from_static(b"payload_not_json"),
        ),
        ("aggregatetype".to_owned(), Bytes::from_static(b"order")),
        ("type".to_owned(), Bytes::from_static(b"Placed")),
        (
            "source_table".to_owned(),
            Bytes::from_static(b"public.outbox"),
        ),
    ];
    if let Some(id) = id {
        headers.push(("id".to_owned(), Bytes::from(id.to_owned())));
    }
    DlqRecord {
        topic: "dlq".into(),
        partition,
        offset,
        timestamp: DateTime::from_timestamp(1_700_000_000 + offset, 0),
        key: Some(Bytes::from_static(b"k")),
        value: Some(Bytes::from_static(b"{}")),
        headers,
    }
}

fn row(event_id: &str, route: &str) -> table::DeadRow {
    table::DeadRow {
        event_id: event_id.into(),
        route: route.into(),
        last_error: "HTTP 500".into(),
        attempts: 5,
        max_attempts: 5,
        last_status: Some(500),
        age_seconds: 90.0,
        id: 12,
        status: "DEAD".into(),
    }
}

fn inventory(replays: &HashMap<(i32, i64), (String, String)>) -> Inventory {
    let table = table::delivery_table("public", None);
    let mut entries = vec![table_entry(row("r'1%", "billing é"), &table, None)];
    entries.extend(kafka_entries(
        vec![
            letter(Some("e-1"), 0, 0, "old"),
            letter(None, 0, 1, "no id"),
            letter(Some("e-2"), 1, 0, "x"),
            // The same event dead-lettered again after a replay.
            letter(Some("e-1"), 1, 5, "new"),
        ],
        replays,
        kafka::Rebuild {
            topic_template: TEMPLATE,
            source: "/s",
            contracts: &crate::contracts::Contracts::default(),
        },
    ));
    Inventory {
        entries,
        delivery: Some(table.clone()),
        delivery_name: Some(table),
        ..Inventory::default()
    }
}

#[test]
fn copies_of_one_event_are_one_entry_and_an_anonymous_one_is_named_by_location() {
    let inv = inventory(&HashMap::new());
    let ids: Vec<&str> = inv.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["r'1%", "e-1", "dlq/0/1", "e-2"]);
    let e1 = &inv.entries[1];
    assert_eq!(e1.copies, 2);
    assert_eq!(e1.reason, "new", "the newest copy describes the entry");
    assert_eq!(e1.location, "dlq/1/5");
    assert_eq!(e1.route, "outbox.event.order");
    assert_eq!(e1.open.len(), 2);
    assert!(e1.retryable);
    assert!(!inv.entries[2].retryable, "no id: cannot become an event");
}

#[test]
fn the_replay_record_decides_the_state_copy_by_copy() {
    let mut replays = HashMap::new();
    replays.insert((0, 0), ("replayed".to_owned(), "then".to_owned()));
    replays.insert((1, 0), ("discarded".to_owned(), "now".to_owned()));
    let inv = inventory(&replays);
    let state = |id: &str| inv.entries.iter().find(|e| e.id == id).unwrap().state;
    // e-1 has a copy written after the replay: dead again.
    assert_eq!(state("e-1"), State::Dead);
    assert_eq!(inv.entries[1].open, vec![("dlq".to_owned(), 1, 5)]);
    assert_eq!(state("e-2"), State::Discarded);
    let listed: Vec<&str> = inv
        .listed(false, None)
        .iter()
        .map(|e| e.id.as_str())
        .collect();
    assert_eq!(listed, ["r'1%", "e-1", "dlq/0/1"]);
    assert_eq!(inv.listed(true, None).len(), 4);
    let billing: Vec<&str> = inv
        .listed(true, Some("billing é"))
        .iter()
        .map(|e| e.id.as_str())
        .collect();
    assert_eq!(billing, ["r'1%"]);
}

#[test]
fn ids_select_by_event_id_or_location_and_unknown_ones_are_reported() {
    let inv = inventory(&HashMap::new());
    let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let s = inv.select(
        &ids(&["e-1", "dlq/0/1", "dlq/1/5", "nope", "r'1%", "%"]),
        None,
    );
    let chosen: Vec<&str> = s.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        chosen,
        ["e-1", "dlq/0/1", "r'1%"],
        "dlq/1/5 is a copy of e-1"
    );
    assert_eq!(s.unknown, ["nope", "%"]);
    let all = inv.select(&[], Some("outbox.event.order"));
    assert_eq!(all.entries.len(), 3);
    assert!(all.unknown.is_empty());
    let problem = inv.unknown_problem("no\"pe", "dlq");
    assert!(problem.contains("\"no\\\"pe\""), "{problem}");
    assert!(problem.contains("public.outbox_delivery"), "{problem}");
}

#[test]
fn the_table_escapes_control_characters_and_the_json_has_every_field() {
    let mut inv = inventory(&HashMap::new());
    inv.entries[0].reason = "line one\nline two\u{1b}[31m".into();
    let entries = inv.listed(false, None);
    let text = render_text(&entries, false);
    assert!(text.contains("line one\\nline two\\u{1b}[31m"), "{text}");
    assert!(text.starts_with("ID "), "{text}");
    assert!(text.contains("5/5"), "{text}");
    assert!(
        text.contains("\n4 dead letters (kafka: 3, table: 1)\n"),
        "{text}"
    );
    // What cannot be retried says so under the table, by id.
    assert!(
        text.ends_with(
            "cannot retry \"dlq/0/1\": it has no readable event id, so it cannot become an event\n"
        ),
        "{text}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&render_json(entries, Vec::new(), &inv)).unwrap();
    let first = &doc["dead_letters"][0];
    assert_eq!(first["id"], "r'1%");
    assert_eq!(first["sink"], "table");
    assert_eq!(first["route"], "billing é");
    assert_eq!(first["attempts"], 5);
    assert_eq!(first["state"], "dead");
    assert_eq!(first["location"], "public.outbox_delivery#12");
    assert_eq!(doc["dead_letters"][2]["retryable"], false);
    assert!(doc["problems"].as_array().unwrap().is_empty());
}

fn record(id: &str, row_id: i64, action: &str) -> table::Replay {
    table::Replay {
        dlq_topic: "public.outbox_delivery".into(),
        event_id: id.into(),
        partition: table::ROW_PARTITION,
        offset: row_id,
        action: action.into(),
        at: "then".into(),
    }
}

#[test]
fn rows_the_replay_record_names_keep_their_state_unless_dead_again() {
    let table = table::delivery_table("public", None);
    let mut retried = row("r", "billing");
    retried.status = "PENDING".into();
    retried.id = 1;
    let mut dead_again = row("d", "billing");
    dead_again.id = 2;
    let records: HashMap<i64, table::Replay> = [
        (1, record("r", 1, "replayed")),
        (2, record("d", 2, "replayed")),
        (3, record("gone", 3, "discarded")),
    ]
    .into_iter()
    .collect();
    let entries = table_entries(vec![retried, dead_again], &records, &table);
    let got: Vec<(&str, State, &str)> = entries
        .iter()
        .map(|e| (e.id.as_str(), e.state, e.location.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("r", State::Replayed, "public.outbox_delivery#1"),
            ("d", State::Dead, "public.outbox_delivery#2"),
            ("gone", State::Discarded, "public.outbox_delivery#3"),
        ]
    );
    assert_eq!(entries[0].route, "billing", "a retried row keeps its route");
    assert_eq!(
        entries[1].open,
        vec![("public.outbox_delivery".to_owned(), table::ROW_PARTITION, 2)]
    );
    let inv = Inventory {
        entries,
        ..Inventory::default()
    };
    let shown = |all| {
        inv.listed(all, None)
            .iter()
            .map(|e| e.id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(shown(false), ["d"]);
    assert_eq!(shown(true), ["r", "d", "gone"]);
    let text = render_text(&inv.listed(true, None), true);
    assert!(
        text.lines()
            .any(|l| l.starts_with("gone ") && l.ends_with("discarded")),
        "{text}"
    );
}

/// A config for the acting functions: only names are read.
fn config() -> crate::config::Config {
    crate::config::Config::default()
}

#[tokio::test]
async fn what_was_done_already_is_skipped_in_either_sink_and_needs_no_database() {
    let table = table::delivery_table("public", None);
    let records: HashMap<i64, table::Replay> =
        [(3, record("gone", 3, "discarded"))].into_iter().collect();
    let mut replays = HashMap::new();
    replays.insert((1, 0), ("discarded".to_owned(), "now".to_owned()));
    let mut inv = inventory(&replays);
    inv.entries
        .extend(table_entries(Vec::new(), &records, &table));
    let ids = vec!["gone".to_owned(), "e-2".to_owned()];
    let outcome = discard(&config(), &inv, None, &ids).await;
    assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
    assert_eq!(outcome.done.len(), 2, "{:?}", outcome.done);
    assert!(
        outcome.done.iter().all(|d| d.contains("already discarded")),
        "{:?}",
        outcome.done
    );
}

#[tokio::test]
async fn a_dead_letter_retry_cannot_send_is_refused_for_its_reason_first() {
    let mut inv = inventory(&HashMap::new());
    inv.replay_unusable =
        Some("the replay record x does not exist: run `outbox-relay init`".into());
    let ids = vec!["dlq/0/1".to_owned(), "e-1".to_owned()];
    let outcome = retry(&config(), &inv, None, &ids, None).await;
    assert_eq!(outcome.problems.len(), 2, "{:?}", outcome.problems);
    assert!(
        outcome.problems[0]
            .starts_with("\"dlq/0/1\" cannot be retried: it has no readable event id"),
        "{:?}",
        outcome.problems
    );
    assert!(
        !outcome.problems[0].contains("replay record"),
        "{:?}",
        outcome.problems
    );
    assert!(
        outcome.problems[1].contains("\"e-1\": not retried")
            && outcome.problems[1].contains("run `outbox-relay init`"),
        "{:?}",
        outcome.problems
    );
}

#[test]
fn only_this_relays_dead_letters_are_taken_and_unattributed_ones_when_asked() {
    let mut config = config();
    config.postgres.table = "app.orders_outbox".into();
    assert_eq!(own_sources(&config), ["app.orders_outbox"]);
    config.postgres.source = crate::outbox::Source::Both;
    config.postgres.message_prefix = "orders".into();
    assert_eq!(
        own_sources(&config),
        ["app.orders_outbox", "message:orders"]
    );
    let own = own_sources(&config);
    let from = |source: Option<&str>, id: &str, offset: i64| {
        let mut record = letter(Some(id), 0, offset, "r");
        record.headers.retain(|(n, _)| n != "source_table");
        if let Some(source) = source {
            record
                .headers
                .push(("source_table".into(), Bytes::from(source.to_owned())));
        }
        record
    };
    let records = vec![
        from(Some("app.orders_outbox"), "mine", 0),
        from(Some("message:orders"), "my-message", 1),
        from(Some("public.outbox"), "theirs", 2),
        from(Some("message:billing"), "their-message", 3),
        from(None, "nobody", 4),
        from(Some(""), "empty", 5),
    ];
    let origins: Vec<Origin> = records.iter().map(|r| origin(r, &own)).collect();
    assert_eq!(
        origins,
        [
            Origin::Own,
            Origin::Own,
            Origin::Other("public.outbox".into()),
            Origin::Other("message:billing".into()),
            Origin::Unattributed,
            Origin::Unattributed,
        ]
    );
    let build = |unattributed: bool| {
        let mut inv = Inventory {
            unattributed,
            ..Inventory::default()
        };
        let kept = scoped(records.clone(), &config, &mut inv);
        inv.entries = kafka_entries(
            kept,
            &HashMap::new(),
            kafka::Rebuild {
                topic_template: TEMPLATE,
                source: "/s",
                contracts: &crate::contracts::Contracts::default(),
            },
        );
        inv
    };
    let ids = |entries: Vec<&Entry>| entries.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
    let inv = build(false);
    assert_eq!(ids(inv.listed(true, None)), ["mine", "my-message"]);
    assert_eq!(ids(inv.select(&[], None).entries), ["mine", "my-message"]);
    assert_eq!(inv.entries[0].source.as_deref(), Some("app.orders_outbox"));
    assert!(
        inv.notes.iter().any(|n| n.starts_with("2 dead letter(s)")
            && n.contains("\"public.outbox\", \"message:billing\"")),
        "{:?}",
        inv.notes
    );
    // Named by id, an unattributed one is the operator's choice; another
    // relay's is refused, naming its source.
    let named = inv.select(&["nobody".to_owned(), "theirs".to_owned()], None);
    assert_eq!(ids(named.entries), ["nobody"]);
    assert_eq!(named.unknown, ["theirs"]);
    let problem = inv.unknown_problem("theirs", "dlq");
    assert!(
        problem.contains("another source (\"public.outbox\")") && problem.contains("config"),
        "{problem}"
    );
    let problem = inv.unknown_problem("dlq/0/3", "dlq");
    assert!(problem.contains("\"message:billing\""), "{problem}");
    let inv = build(true);
    assert_eq!(
        ids(inv.listed(true, None)),
        ["mine", "my-message", "nobody", "empty"]
    );
}

fn parked_head(event_id: &str, aggregateid: &str) -> parked::Parked {
    parked::Parked {
        head: crate::parking::release::LiveHead {
            row: 1,
            aggregatetype: "order".into(),
            aggregateid: aggregateid.into(),
            event_id: event_id.into(),
            reason: "topic_missing: no topic".into(),
            waiting: 7,
            age_seconds: 90.0,
        },
        release_interrupted: None,
    }
}

#[test]
fn a_head_whose_dead_letter_was_handled_but_which_is_live_is_an_interrupted_release() {
    let mut replays = HashMap::new();
    replays.insert((0, 1), ("replayed".to_owned(), "2026-01-01".to_owned()));
    replays.insert((0, 2), ("discarded".to_owned(), "2026-01-01".to_owned()));
    let mut inv = inventory(&replays);
    inv.entries = kafka_entries(
        vec![
            letter(Some("r"), 0, 1, "x"),
            letter(Some("d"), 0, 2, "x"),
            letter(Some("l"), 0, 3, "x"),
        ],
        &replays,
        kafka::Rebuild::new(&config(), &crate::contracts::Contracts::default()),
    );
    inv.parked = vec![
        parked_head("r", "o1"),
        parked_head("d", "o2"),
        parked_head("l", "o3"),
    ];
    parked::mark_interrupted(&mut inv);
    let hints: Vec<Option<&str>> = inv
        .parked
        .iter()
        .map(|p| p.release_interrupted.as_deref())
        .collect();
    assert_eq!(
        hints,
        [
            Some("release interrupted: run `dead retry r` again"),
            Some("release interrupted: run `dead discard d` again"),
            None
        ]
    );
    let shown: Vec<&parked::Parked> = inv.parked.iter().collect();
    let text = render::parked_text(&shown);
    assert!(text.contains("order/o1"), "{text}");
    assert!(text.contains("3 parked aggregates:"), "{text}");
    assert!(
        text.contains("r: release interrupted: run `dead retry r` again"),
        "{text}"
    );
    assert_eq!(render::parked_text(&[]), "", "nothing parked, no section");
}

#[test]
fn a_parked_aggregate_id_reaches_the_terminal_with_its_control_characters_escaped() {
    let head = parked_head("h\u{1b}[2J", "o\n1");
    let text = render::parked_text(&[&head]);
    assert!(!text.contains('\u{1b}'), "{text:?}");
    assert!(text.contains("order/o\\n1"), "{text}");
}
