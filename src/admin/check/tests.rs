use std::collections::{BTreeMap, HashSet};

use super::*;
use crate::admin::kafka_facts::KafkaFacts;
use crate::admin::pg_facts::{
    ColumnFacts, HolderFacts, PgFacts, PublicationFacts, RoleFacts, TableFacts,
};
use crate::pg::PgError;
use crate::replication::OutboxTable;

fn config() -> Config {
    let mut config = Config::default();
    config.postgres.slot = "outbox_relay".into();
    config.postgres.publication = "outbox_pub".into();
    config.postgres.table = "public.outbox".into();
    config.kafka.brokers = "k1:9092".into();
    config
}

fn column(name: &str, type_name: &str) -> ColumnFacts {
    ColumnFacts {
        name: name.into(),
        type_name: type_name.into(),
        not_null: true,
    }
}

fn debezium_columns() -> Vec<ColumnFacts> {
    vec![
        column("id", "uuid"),
        column("aggregatetype", "text"),
        column("aggregateid", "character varying"),
        column("type", "text"),
        column("payload", "jsonb"),
        column("timestamp", "timestamp with time zone"),
        column("tracingspancontext", "text"),
    ]
}

fn slot_row() -> serde_json::Value {
    serde_json::json!({
        "slot_name": "outbox_relay", "plugin": "pgoutput", "slot_type": "logical",
        "database": "app", "active": false, "active_pid": null, "wal_status": "reserved",
        "safe_wal_size": 1073741824_i64, "confirmed_flush_lsn": "0/1549D80", "two_phase": false
    })
}

/// A healthy setup.
fn healthy() -> PgFacts {
    PgFacts {
        server_version_num: 150_018,
        server_version: "15.18".into(),
        database: "app".into(),
        session_role: "relay".into(),
        session_can_replicate: true,
        settings: [
            ("wal_level", "logical"),
            ("max_replication_slots", "10"),
            ("max_wal_senders", "10"),
            ("max_slot_wal_keep_size", "1024"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        slots_used: 3,
        walsenders_used: 1,
        role: Some(RoleFacts {
            name: "relay".into(),
            login: true,
            replication: true,
            superuser: false,
            schema_usage: Some(true),
            table_select: Some(true),
            table_delete: Some(false),
        }),
        table: Some(TableFacts {
            oid: 16_384,
            partitioned: false,
            partitions: 0,
            owner: "app".into(),
            columns: debezium_columns(),
        }),
        publication: Some(PublicationFacts {
            insert: true,
            has_table: true,
            ..PublicationFacts::default()
        }),
        slot: Some(slot_row()),
        slot_holder: None,
        relay_lock_holder: None,
        wal_insert_lsn: Some("0/1549D80".into()),
        rows_after_slot: None,
    }
}

fn outbox_table() -> OutboxTable {
    OutboxTable {
        schema: "public".into(),
        name: "outbox".into(),
        oid: 16_384,
        current_name: "public.outbox".into(),
        members: HashSet::from([16_384]),
        publication_has_other_tables: false,
    }
}

fn side(facts: PgFacts) -> PgSide {
    PgSide {
        facts,
        outbox: Ok(outbox_table()),
    }
}

fn evaluate(side: &PgSide) -> Vec<Item> {
    evaluate_postgres(&config(), "relay", "outbox-relay", side)
}

fn item<'a>(items: &'a [Item], name: &str) -> &'a Item {
    items
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no item {name} in {items:#?}"))
}

#[test]
fn a_healthy_setup_passes_every_postgres_item() {
    let items = evaluate(&side(healthy()));
    let not_ok: Vec<&Item> = items.iter().filter(|i| i.status != Status::Ok).collect();
    assert!(not_ok.is_empty(), "{not_ok:#?}");
    // Every item the preflight promises is there.
    for name in [
        "postgres.connection",
        "postgres.version",
        "postgres.wal_level",
        "postgres.max_replication_slots",
        "postgres.max_wal_senders",
        "postgres.max_slot_wal_keep_size",
        "postgres.role.login",
        "postgres.role.replication",
        "postgres.role.select",
        "postgres.table",
        "postgres.publication",
        "postgres.slot",
        "postgres.slot.wal_status",
        "postgres.slot.holder",
        "postgres.column.id",
        "postgres.column.aggregate_type",
        "postgres.column.aggregate_id",
        "postgres.column.event_type",
        "postgres.column.payload",
        "postgres.column.timestamp",
        "postgres.column.tracing_span_context",
    ] {
        item(&items, name);
    }
    assert!(item(&items, "postgres.slot").detail.contains("0/1549D80"));
    assert!(
        item(&items, "postgres.slot.wal_status")
            .detail
            .contains("1.0 GiB")
    );
}

#[test]
fn server_settings_fail_with_their_fix() {
    let mut facts = healthy();
    facts.settings.insert("wal_level".into(), "replica".into());
    facts
        .settings
        .insert("max_slot_wal_keep_size".into(), "-1".into());
    facts.server_version_num = 130_000;
    facts.server_version = "13.0".into();
    let items = evaluate(&side(facts));
    let wal = item(&items, "postgres.wal_level");
    assert_eq!(wal.status, Status::Fail);
    assert!(wal.detail.contains("replica"));
    assert!(
        wal.fix
            .as_ref()
            .unwrap()
            .contains("ALTER SYSTEM SET wal_level = logical")
    );
    let keep = item(&items, "postgres.max_slot_wal_keep_size");
    assert_eq!(keep.status, Status::Warn);
    assert!(keep.detail.contains("unlimited"), "{keep:?}");
    assert_eq!(item(&items, "postgres.version").status, Status::Fail);
}

#[test]
fn no_free_slot_fails_only_when_the_relay_has_none_yet() {
    let mut facts = healthy();
    facts.slots_used = 10;
    let items = evaluate(&side(facts.clone()));
    assert_eq!(
        item(&items, "postgres.max_replication_slots").status,
        Status::Ok
    );
    facts.slot = None;
    let items = evaluate(&side(facts));
    let slots = item(&items, "postgres.max_replication_slots");
    assert_eq!(slots.status, Status::Fail);
    assert!(
        slots
            .fix
            .as_ref()
            .unwrap()
            .contains("max_replication_slots = 11")
    );
}

#[test]
fn wal_senders_all_busy_fail_unless_one_serves_the_slot() {
    let mut facts = healthy();
    facts.walsenders_used = 10;
    let items = evaluate(&side(facts.clone()));
    assert_eq!(
        item(&items, "postgres.max_wal_senders").status,
        Status::Fail
    );
    facts.slot_holder = Some(HolderFacts {
        pid: 9,
        ..HolderFacts::default()
    });
    let items = evaluate(&side(facts));
    assert_eq!(
        item(&items, "postgres.max_wal_senders").status,
        Status::Warn
    );
}

#[test]
fn a_role_without_replication_or_login_fails_with_alter_role() {
    let mut facts = healthy();
    let role = facts.role.as_mut().unwrap();
    role.replication = false;
    role.login = false;
    role.table_select = Some(false);
    let items = evaluate(&side(facts.clone()));
    let replication = item(&items, "postgres.role.replication");
    assert_eq!(replication.status, Status::Fail);
    assert_eq!(
        replication.fix.as_deref(),
        Some("ALTER ROLE relay REPLICATION;")
    );
    assert_eq!(
        item(&items, "postgres.role.login").fix.as_deref(),
        Some("ALTER ROLE relay LOGIN;")
    );
    let select = item(&items, "postgres.role.select");
    assert_eq!(select.status, Status::Warn);
    assert!(
        select
            .fix
            .as_ref()
            .unwrap()
            .starts_with("GRANT SELECT ON \"public\".\"outbox\" TO relay;"),
        "{select:?}"
    );
    // A superuser replicates without the attribute.
    facts.role.as_mut().unwrap().superuser = true;
    let items = evaluate(&side(facts));
    assert_eq!(item(&items, "postgres.role.replication").status, Status::Ok);
}

#[test]
fn cleanup_wants_delete_on_the_outbox_table_and_says_how_to_grant_it() {
    let mut config = config();
    let facts = healthy();
    // Without cleanup, DELETE is nobody's business.
    let items = evaluate(&side(facts.clone()));
    assert!(items.iter().all(|i| i.name != "postgres.role.delete"));

    config.postgres.cleanup = crate::cleanup::Cleanup::DeleteAfterAck;
    let items = evaluate_postgres(&config, "relay", "outbox-relay", &side(facts.clone()));
    let delete = item(&items, "postgres.role.delete");
    assert_eq!(delete.status, Status::Warn, "{delete:?}");
    assert!(delete.detail.contains("every row stays"), "{delete:?}");
    assert_eq!(
        delete.fix.as_deref(),
        Some("GRANT DELETE ON \"public\".\"outbox\" TO relay;  -- or outbox-relay init --grant")
    );

    let mut granted = facts.clone();
    granted.role.as_mut().unwrap().table_delete = Some(true);
    let items = evaluate_postgres(&config, "relay", "outbox-relay", &side(granted));
    assert_eq!(item(&items, "postgres.role.delete").status, Status::Ok);

    let mut no_table = facts;
    no_table.role.as_mut().unwrap().table_delete = None;
    let items = evaluate_postgres(&config, "relay", "outbox-relay", &side(no_table));
    assert_eq!(item(&items, "postgres.role.delete").status, Status::Skip);
}

#[test]
fn a_missing_role_fails_with_create_role() {
    let mut facts = healthy();
    facts.role = None;
    let items = evaluate(&side(facts));
    let role = item(&items, "postgres.role");
    assert_eq!(role.status, Status::Fail);
    assert!(
        role.fix
            .as_ref()
            .unwrap()
            .contains("CREATE ROLE relay LOGIN REPLICATION")
    );
}

#[test]
fn publication_problems_carry_the_relays_own_message() {
    for (error, needle) in [
        (
            PgError::PublicationWithoutInserts {
                publication: "outbox_pub".into(),
            },
            "does not publish inserts",
        ),
        (
            PgError::PublicationMissing {
                publication: "outbox_pub".into(),
                database: "app".into(),
            },
            "does not exist",
        ),
        (
            PgError::PublicationLacksTable {
                publication: "outbox_pub".into(),
                table: "public.outbox".into(),
            },
            "ADD TABLE",
        ),
    ] {
        let expected = error.to_string();
        let side = PgSide {
            facts: healthy(),
            outbox: Err(error),
        };
        let items = evaluate(&side);
        let publication = item(&items, "postgres.publication");
        assert_eq!(publication.status, Status::Fail);
        assert_eq!(publication.detail, expected);
        assert!(publication.detail.contains(needle), "{publication:?}");
        assert_eq!(item(&items, "postgres.table").status, Status::Ok);
    }
}

#[test]
fn a_missing_table_fails_and_skips_its_columns() {
    let mut facts = healthy();
    facts.table = None;
    facts.role.as_mut().unwrap().table_select = None;
    let side = PgSide {
        facts,
        outbox: Err(PgError::TableMissing {
            table: "public.outbox".into(),
            database: "app".into(),
        }),
    };
    let items = evaluate(&side);
    assert_eq!(item(&items, "postgres.table").status, Status::Fail);
    assert_eq!(item(&items, "postgres.columns").status, Status::Skip);
    assert_eq!(item(&items, "postgres.role.select").status, Status::Skip);
    assert_eq!(item(&items, "postgres.publication").status, Status::Skip);
}

#[test]
fn a_missing_slot_fails_and_skips_what_depends_on_it() {
    let mut facts = healthy();
    facts.slot = None;
    let items = evaluate(&side(facts));
    let slot = item(&items, "postgres.slot");
    assert_eq!(slot.status, Status::Fail);
    assert!(slot.detail.contains("does not exist"), "{slot:?}");
    assert!(slot.fix.as_ref().unwrap().contains("outbox-relay init"));
    assert_eq!(
        item(&items, "postgres.slot.wal_status").status,
        Status::Skip
    );
    assert_eq!(item(&items, "postgres.slot.holder").status, Status::Skip);
}

#[test]
fn slot_problems_carry_the_relays_own_message() {
    for (field, value, needle) in [
        ("plugin", serde_json::json!("wal2json"), "wal2json"),
        ("database", serde_json::json!("other"), "other"),
        ("two_phase", serde_json::json!(true), "two_phase"),
        ("wal_status", serde_json::json!("lost"), "lost"),
    ] {
        let mut facts = healthy();
        facts.slot.as_mut().unwrap()[field] = value;
        let items = evaluate(&side(facts));
        let slot = item(&items, "postgres.slot");
        assert_eq!(slot.status, Status::Fail, "{field}");
        assert!(slot.detail.contains(needle), "{slot:?}");
    }
    let mut facts = healthy();
    facts.slot.as_mut().unwrap()["wal_status"] = "unreserved".into();
    let items = evaluate(&side(facts));
    assert_eq!(
        item(&items, "postgres.slot.wal_status").status,
        Status::Warn
    );
}

#[test]
fn a_slot_held_by_another_process_fails_and_by_a_relay_warns() {
    let mut facts = healthy();
    let row = facts.slot.as_mut().unwrap();
    row["active"] = true.into();
    row["active_pid"] = 4242.into();
    facts.slot_holder = Some(HolderFacts {
        pid: 4242,
        application_name: Some("pg_recvlogical".into()),
        client_addr: Some("10.1.2.3".into()),
        ..HolderFacts::default()
    });
    let items = evaluate(&side(facts.clone()));
    // The slot itself is fine; its holder is the problem.
    assert_eq!(item(&items, "postgres.slot").status, Status::Ok);
    let holder = item(&items, "postgres.slot.holder");
    assert_eq!(holder.status, Status::Fail);
    assert!(
        holder.detail.contains("4242") && holder.detail.contains("pg_recvlogical"),
        "{holder:?}"
    );
    assert!(
        holder
            .fix
            .as_ref()
            .unwrap()
            .contains("pg_terminate_backend(4242)")
    );

    // A relay by name that does not hold this config's relay lock: a warning.
    facts.slot_holder.as_mut().unwrap().application_name = Some("outbox-relay".into());
    let items = evaluate(&side(facts.clone()));
    let holder = item(&items, "postgres.slot.holder");
    assert_eq!(holder.status, Status::Warn, "{holder:?}");
    assert!(holder.detail.contains("relay lock"), "{holder:?}");

    // The relay running with this config: its lock session, from the same
    // client, holds the relay lock. That is the healthy case.
    facts.relay_lock_holder = Some(HolderFacts {
        pid: 4243,
        application_name: Some("outbox-relay".into()),
        client_addr: Some("10.1.2.3".into()),
        ..HolderFacts::default()
    });
    let items = evaluate(&side(facts.clone()));
    let holder = item(&items, "postgres.slot.holder");
    assert_eq!(holder.status, Status::Ok, "{holder:?}");
    assert!(
        holder.detail.contains("pid 4243 holds the relay lock"),
        "{holder:?}"
    );
    assert!(holder.fix.is_none());

    // The lock held from another client is another relay's.
    facts.relay_lock_holder.as_mut().unwrap().client_addr = Some("10.9.9.9".into());
    let items = evaluate(&side(facts.clone()));
    assert_eq!(item(&items, "postgres.slot.holder").status, Status::Warn);

    // Without the relay lock, the application_name is all there is.
    facts.relay_lock_holder = None;
    let mut config = config();
    config.relay.standby_lock = false;
    let items = evaluate_postgres(&config, "relay", "outbox-relay", &side(facts));
    assert_eq!(item(&items, "postgres.slot.holder").status, Status::Ok);
}

#[test]
fn column_types_are_judged_by_what_the_relay_does_with_them() {
    let mut facts = healthy();
    facts.table.as_mut().unwrap().columns = vec![
        column("id", "bigint"),
        column("aggregatetype", "text"),
        column("type", "text"),
        column("payload", "bytea"),
        column("timestamp", "timestamp without time zone"),
    ];
    let items = evaluate(&side(facts.clone()));
    assert_eq!(item(&items, "postgres.column.id").status, Status::Warn);
    assert_eq!(
        item(&items, "postgres.column.aggregate_id").status,
        Status::Fail
    );
    assert_eq!(item(&items, "postgres.column.payload").status, Status::Fail);
    assert_eq!(
        item(&items, "postgres.column.timestamp").status,
        Status::Warn
    );
    // An absent optional column is fine.
    assert_eq!(
        item(&items, "postgres.column.tracing_span_context").status,
        Status::Ok
    );
    facts.table.as_mut().unwrap().columns = vec![column("payload", "text")];
    let items = evaluate(&side(facts));
    assert_eq!(item(&items, "postgres.column.payload").status, Status::Ok);
}

fn cluster(topics: &[(&str, usize)], auto_create: Option<bool>) -> Result<KafkaFacts, String> {
    Ok(KafkaFacts {
        brokers: vec!["1@k1:9092".into()],
        topics: topics.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect(),
        broker_auto_create: auto_create,
        max_message_bytes: BTreeMap::new(),
        config_problem: None,
        cleanup_policy: BTreeMap::new(),
    })
}

#[test]
fn unreachable_brokers_fail_and_skip_the_topics() {
    let items = evaluate_kafka(
        &config(),
        &Err("no answer".into()),
        &Topics::Fixed("events".into()),
    );
    assert_eq!(item(&items, "kafka.brokers").status, Status::Fail);
    assert_eq!(item(&items, "kafka.dead_letter_topic").status, Status::Skip);
}

#[test]
fn missing_topics_fail_without_auto_creation_and_warn_with_it() {
    let topics = Topics::FromRows {
        topics: [
            "outbox.event.order".to_owned(),
            "outbox.event.user".to_owned(),
        ]
        .into(),
        invalid: Vec::new(),
    };
    let facts = cluster(
        &[("outbox.event.order", 12), ("outbox.dlq", 1)],
        Some(false),
    );
    let items = evaluate_kafka(&config(), &facts, &topics);
    assert_eq!(
        item(&items, "kafka.topic.outbox.event.order").status,
        Status::Ok
    );
    let user = item(&items, "kafka.topic.outbox.event.user");
    assert_eq!(user.status, Status::Fail);
    assert!(
        user.fix
            .as_ref()
            .unwrap()
            .contains("--create --topic outbox.event.user")
    );
    assert_eq!(item(&items, "kafka.dead_letter_topic").status, Status::Ok);

    let facts = cluster(&[("outbox.event.order", 12)], Some(true));
    let items = evaluate_kafka(&config(), &facts, &topics);
    assert_eq!(
        item(&items, "kafka.topic.outbox.event.user").status,
        Status::Warn
    );
    assert_eq!(item(&items, "kafka.dead_letter_topic").status, Status::Warn);

    // The producer may refuse to ask for creation even if the broker would.
    let mut no_create = config();
    no_create
        .kafka
        .properties
        .insert("allow.auto.create.topics".into(), "false".into());
    let items = evaluate_kafka(&no_create, &facts, &topics);
    let dlq = item(&items, "kafka.dead_letter_topic");
    assert_eq!(dlq.status, Status::Fail);
    assert!(dlq.detail.contains("allow.auto.create.topics"), "{dlq:?}");
}

#[test]
fn topics_unknown_from_rows_depend_on_auto_creation() {
    let unknown = Topics::Unknown("the outbox table holds no rows to take them from".into());
    let facts = cluster(&[("outbox.dlq", 1)], Some(true));
    assert_eq!(
        item(&evaluate_kafka(&config(), &facts, &unknown), "kafka.topics").status,
        Status::Ok
    );
    let facts = cluster(&[("outbox.dlq", 1)], Some(false));
    assert_eq!(
        item(&evaluate_kafka(&config(), &facts, &unknown), "kafka.topics").status,
        Status::Warn
    );
}

#[test]
fn a_producer_limit_above_the_topics_warns() {
    let mut facts = cluster(&[("events", 3), ("outbox.dlq", 1)], Some(false)).unwrap();
    facts.max_message_bytes.insert("events".into(), 500_000);
    facts
        .max_message_bytes
        .insert("outbox.dlq".into(), 2_000_000);
    let items = evaluate_kafka(
        &config(),
        &Ok(facts.clone()),
        &Topics::Fixed("events".into()),
    );
    let size = item(&items, "kafka.message_size.events");
    assert_eq!(size.status, Status::Warn);
    assert!(
        size.detail.contains("1000000") && size.detail.contains("500000"),
        "{size:?}"
    );
    assert!(
        items
            .iter()
            .all(|i| i.name != "kafka.message_size.outbox.dlq")
    );

    let mut small = config();
    small
        .kafka
        .properties
        .insert("message.max.bytes".into(), "400000".into());
    let items = evaluate_kafka(&small, &Ok(facts), &Topics::Fixed("events".into()));
    assert_eq!(item(&items, "kafka.message_size").status, Status::Ok);
}

#[test]
fn topics_come_from_the_template_and_the_rows() {
    assert_eq!(
        topics_for("events", Err("unused".into())),
        Topics::Fixed("events".into())
    );
    assert!(matches!(
        topics_for("outbox.event.{aggregatetype}", Ok(Vec::new())),
        Topics::Unknown(_)
    ));
    let rows = vec![
        ("order".to_owned(), String::new()),
        ("user".to_owned(), String::new()),
        ("bad name".to_owned(), String::new()),
    ];
    match topics_for("outbox.event.{aggregatetype}", Ok(rows)) {
        Topics::FromRows { topics, invalid } => {
            assert_eq!(
                topics.into_iter().collect::<Vec<_>>(),
                ["outbox.event.order", "outbox.event.user"]
            );
            assert_eq!(invalid.len(), 1, "{invalid:?}");
        }
        other => panic!("{other:?}"),
    }
    match topics_for(
        "{aggregatetype}.{type}",
        Ok(vec![("order".into(), "Placed".into())]),
    ) {
        Topics::FromRows { topics, .. } => assert!(topics.contains("order.Placed")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_report_passes_unless_an_item_fails_and_prints_fixes() {
    let mut report = Report {
        items: vec![
            Item::ok("a", "fine"),
            Item::warn("b", "hmm").fix("do x"),
            Item::skip("c", "no"),
        ],
    };
    assert!(report.passed());
    report.items.push(Item::fail("d", "broken").fix("do y"));
    assert!(!report.passed());
    let text = report.render_text();
    assert!(text.contains("FAIL  d  broken"), "{text}");
    assert!(text.contains("fix: do y"), "{text}");
    assert!(
        text.contains("1 failed, 1 warnings, 1 ok, 1 skipped"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&report.render_json()).unwrap();
    assert_eq!(json[3]["status"], "fail");
    assert_eq!(json[3]["fix"], "do y");
    assert!(json[0].get("fix").is_none());
}

#[test]
fn a_missing_event_topic_without_auto_creation_fails_unless_its_events_are_dead_lettered() {
    let topics = Topics::Fixed("events".into());
    let facts = cluster(&[("outbox.dlq", 1)], Some(false));
    let items = evaluate_kafka(&config(), &facts, &topics);
    let topic = item(&items, "kafka.topic.events");
    assert_eq!(topic.status, Status::Fail, "{topic:?}");
    assert!(topic.detail.contains("the relay stops"), "{topic:?}");
    assert!(
        topic
            .fix
            .as_ref()
            .unwrap()
            .contains("kafka.on_unroutable = \"dead-letter\""),
        "{topic:?}"
    );

    let mut dead_letter = config();
    dead_letter.kafka.on_unroutable = crate::sink::OnUnroutable::DeadLetter;
    let items = evaluate_kafka(&dead_letter, &facts, &topics);
    let topic = item(&items, "kafka.topic.events");
    assert_eq!(topic.status, Status::Warn, "{topic:?}");
    assert!(
        topic.detail.contains("go to the dead-letter topic"),
        "{topic:?}"
    );
    // The dead-letter topic itself has nowhere else to go.
    let facts = cluster(&[], Some(false));
    let items = evaluate_kafka(&dead_letter, &facts, &topics);
    assert_eq!(item(&items, "kafka.dead_letter_topic").status, Status::Fail);
}

#[test]
fn the_shard_item_compares_the_publications_row_filter() {
    let deparsed =
        "(COALESCE((abs((hashtext((aggregateid)::text))::bigint) % (2)::bigint), (0)::bigint) = 1)";
    let with_filter = |filter: Option<&str>| {
        let mut facts = healthy();
        if let Some(p) = facts.publication.as_mut() {
            p.row_filter = filter.map(str::to_owned);
        }
        side(facts)
    };
    let evaluate_as = |shards: u32, shard: u32, side: &PgSide| {
        let mut config = config();
        config.postgres.shards = shards;
        config.postgres.shard = shard;
        evaluate_postgres(&config, "relay", "outbox-relay", side)
    };
    // Unsharded without a filter: no item.
    assert!(
        evaluate(&with_filter(None))
            .iter()
            .all(|i| i.name != "postgres.shard")
    );
    // Unsharded with one: a warning.
    assert_eq!(
        item(&evaluate(&with_filter(Some(deparsed))), "postgres.shard").status,
        Status::Warn
    );
    // The right shard passes, another shard or no filter fails with the fix.
    let ok = evaluate_as(2, 1, &with_filter(Some(deparsed)));
    assert_eq!(item(&ok, "postgres.shard").status, Status::Ok);
    for (shard, filter) in [(0, Some(deparsed)), (1, None)] {
        let items = evaluate_as(2, shard, &with_filter(filter));
        let shard_item = item(&items, "postgres.shard");
        assert_eq!(shard_item.status, Status::Fail, "{shard_item:?}");
        assert!(
            shard_item
                .fix
                .as_deref()
                .unwrap()
                .contains("WHERE (coalesce("),
            "{shard_item:?}"
        );
    }
    // PostgreSQL 14 cannot filter.
    let mut old = healthy();
    old.server_version_num = 140_019;
    old.server_version = "14.19".into();
    let items = evaluate_as(2, 0, &side(old));
    assert_eq!(item(&items, "postgres.shard").status, Status::Fail);
}

#[test]
fn on_postgresql_17_check_shows_failover_and_warns_without_standby_slots() {
    let on_17 = |failover: bool, synced: bool, standby_slots: &str| {
        let mut facts = healthy();
        facts.server_version_num = 170_006;
        facts.server_version = "17.6".into();
        if let Some(serde_json::Value::Object(slot)) = facts.slot.as_mut() {
            slot.insert("failover".into(), failover.into());
            slot.insert("synced".into(), synced.into());
        }
        facts
            .settings
            .insert("synchronized_standby_slots".into(), standby_slots.into());
        evaluate(&side(facts))
    };
    let items = on_17(true, false, "standby_1");
    assert_eq!(item(&items, "postgres.slot.failover").status, Status::Ok);
    assert_eq!(
        item(&items, "postgres.synchronized_standby_slots").status,
        Status::Ok
    );
    let items = on_17(true, false, "");
    let warned = item(&items, "postgres.synchronized_standby_slots");
    assert_eq!(warned.status, Status::Warn);
    assert!(
        warned
            .fix
            .as_deref()
            .unwrap()
            .contains("synchronized_standby_slots")
    );
    let items = on_17(false, false, "standby_1");
    assert_eq!(item(&items, "postgres.slot.failover").status, Status::Warn);
    // On the standby, its synchronized copy: shown as such.
    let items = on_17(true, true, "");
    let shown = item(&items, "postgres.slot.failover");
    assert!(shown.detail.contains("synced = true"), "{shown:?}");
    // Before 17: nothing to say.
    assert!(
        evaluate(&side(healthy()))
            .iter()
            .all(|i| i.name != "postgres.slot.failover")
    );
}
