use super::*;
use crate::admin::pg_facts::{PgFacts, PublicationFacts, RoleFacts, TableFacts};

fn config() -> Config {
    let mut config = Config::default();
    config.postgres.slot = "outbox_relay".into();
    config.postgres.publication = "outbox_pub".into();
    config.postgres.table = "public.outbox".into();
    config
}

/// A database with nothing of the relay's in it.
fn empty() -> PgFacts {
    PgFacts {
        server_version_num: 150_018,
        server_version: "15.18".into(),
        database: "app".into(),
        session_role: "postgres".into(),
        session_can_replicate: true,
        settings: [
            ("wal_level", "logical"),
            ("max_replication_slots", "10"),
            ("max_wal_senders", "10"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        slots_used: 2,
        ..PgFacts::default()
    }
}

fn table() -> TableFacts {
    TableFacts {
        oid: 16_384,
        partitioned: false,
        partitions: 0,
        owner: "app".into(),
        columns: Vec::new(),
    }
}

fn publication() -> PublicationFacts {
    PublicationFacts {
        insert: true,
        has_table: true,
        ..PublicationFacts::default()
    }
}

fn slot(plugin: &str, active: bool) -> serde_json::Value {
    serde_json::json!({
        "slot_name": "outbox_relay", "plugin": plugin, "slot_type": "logical",
        "database": "app", "active": active, "active_pid": if active { Some(77) } else { None },
        "wal_status": "reserved", "confirmed_flush_lsn": "0/1549D80", "two_phase": false
    })
}

/// Everything in place, the slot having confirmed all the WAL written (so
/// a change to the publication skips nothing).
fn set_up() -> PgFacts {
    PgFacts {
        table: Some(table()),
        publication: Some(publication()),
        slot: Some(slot("pgoutput", false)),
        wal_insert_lsn: Some("0/1549D80".into()),
        ..empty()
    }
}

fn role(login: bool, replication: bool, superuser: bool, privileges: bool) -> RoleFacts {
    RoleFacts {
        name: "relay".into(),
        login,
        replication,
        superuser,
        schema_usage: Some(privileges),
        table_select: Some(privileges),
        table_delete: Some(privileges),
    }
}

fn summaries(plan: &Plan) -> Vec<&str> {
    plan.steps.iter().map(|s| s.summary.as_str()).collect()
}

#[test]
fn from_nothing_it_creates_table_then_publication_then_slot() {
    let options = InitOptions {
        create_table: true,
        ..InitOptions::default()
    };
    let plan = plan(&config(), &empty(), &options).unwrap();
    assert_eq!(
        summaries(&plan),
        [
            "create the outbox table public.outbox",
            "create publication \"outbox_pub\" on public.outbox",
            "create replication slot \"outbox_relay\" (pgoutput)",
        ]
    );
    assert_eq!(
        plan.steps[1].sql,
        "CREATE PUBLICATION \"outbox_pub\" FOR TABLE \"public\".\"outbox\" WITH (publish = 'insert')"
    );
    assert_eq!(
        plan.steps[2].sql,
        "SELECT pg_create_logical_replication_slot('outbox_relay', 'pgoutput')"
    );
    assert!(plan.manual.is_empty());
}

#[test]
fn a_missing_table_is_created_only_when_asked() {
    let err = plan(&config(), &empty(), &InitOptions::default()).unwrap_err();
    assert!(matches!(err, InitError::TableMissing { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("public.outbox") && text.contains("--create-table"),
        "{text}"
    );
}

#[test]
fn a_complete_setup_needs_nothing() {
    let options = InitOptions {
        create_table: true,
        ..InitOptions::default()
    };
    let plan = plan(&config(), &set_up(), &options).unwrap();
    assert!(plan.steps.is_empty(), "{plan:?}");
    assert_eq!(plan.in_place.len(), 4, "{plan:?}");
    assert!(render_dry_run(&plan).contains("-- nothing to do"));
}

#[test]
fn a_slot_held_by_a_running_relay_is_in_place() {
    let facts = PgFacts {
        slot: Some(slot("pgoutput", true)),
        ..set_up()
    };
    let plan = plan(&config(), &facts, &InitOptions::default()).unwrap();
    assert!(plan.steps.is_empty(), "{plan:?}");
}

#[test]
fn a_publication_without_its_slot_is_a_lost_slot_and_refused() {
    let facts = PgFacts {
        slot: None,
        ..set_up()
    };
    let err = plan(&config(), &facts, &InitOptions::default()).unwrap_err();
    assert!(matches!(err, InitError::SlotWouldSkip { .. }), "{err}");
    let text = err.to_string();
    for needle in ["outbox_relay", "outbox_pub", "skip", "--allow-new-slot"] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let options = InitOptions {
        allow_new_slot: true,
        ..InitOptions::default()
    };
    let plan = plan(&config(), &facts, &options).unwrap();
    assert_eq!(
        summaries(&plan),
        ["create replication slot \"outbox_relay\" (pgoutput)"]
    );
}

#[test]
fn no_slot_and_no_publication_is_a_first_setup_and_allowed() {
    let facts = PgFacts {
        table: Some(table()),
        ..empty()
    };
    let plan = plan(&config(), &facts, &InitOptions::default()).unwrap();
    assert_eq!(plan.steps.len(), 2, "{plan:?}");
}

#[test]
fn a_partitioned_outbox_is_published_through_its_root() {
    let facts = PgFacts {
        table: Some(TableFacts {
            partitioned: true,
            partitions: 3,
            ..table()
        }),
        ..empty()
    };
    let plan = plan(&config(), &facts, &InitOptions::default()).unwrap();
    assert!(
        plan.steps[0]
            .sql
            .ends_with("WITH (publish = 'insert', publish_via_partition_root = true)"),
        "{plan:?}"
    );
    assert!(
        plan.in_place[0].contains("partitioned, 3 partitions"),
        "{plan:?}"
    );
}

#[test]
fn an_existing_publication_only_gains_inserts_and_the_table() {
    let facts = PgFacts {
        publication: Some(PublicationFacts {
            insert: false,
            update: true,
            delete: true,
            truncate: false,
            has_table: false,
            ..PublicationFacts::default()
        }),
        ..set_up()
    };
    let plan = plan(&config(), &facts, &InitOptions::default()).unwrap();
    let sql: Vec<&str> = plan.steps.iter().map(|s| s.sql.as_str()).collect();
    assert_eq!(
        sql,
        [
            "ALTER PUBLICATION \"outbox_pub\" SET (publish = 'insert, update, delete')",
            "ALTER PUBLICATION \"outbox_pub\" ADD TABLE \"public\".\"outbox\"",
        ]
    );
}

#[test]
fn an_unusable_slot_is_never_dropped() {
    for (row, needle) in [
        (slot("wal2json", false), "wal2json"),
        (
            {
                let mut row = slot("pgoutput", false);
                row["wal_status"] = "lost".into();
                row
            },
            "lost",
        ),
        (
            {
                let mut row = slot("pgoutput", false);
                row["database"] = "other".into();
                row
            },
            "other",
        ),
    ] {
        let facts = PgFacts {
            slot: Some(row),
            ..set_up()
        };
        let err = plan(&config(), &facts, &InitOptions::default()).unwrap_err();
        assert!(matches!(err, InitError::SlotUnusable { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(needle) && text.contains("never drops"),
            "{text}"
        );
    }
}

#[test]
fn a_slot_that_cannot_be_created_is_refused_before_anything_runs() {
    let base = PgFacts {
        table: None,
        ..empty()
    };
    let options = InitOptions {
        create_table: true,
        ..InitOptions::default()
    };
    let mut replica = base.clone();
    replica
        .settings
        .insert("wal_level".into(), "replica".into());
    let err = plan(&config(), &replica, &options).unwrap_err();
    assert!(matches!(err, InitError::WalLevel { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("ALTER SYSTEM SET wal_level = logical"),
        "{err}"
    );

    let full = PgFacts {
        slots_used: 10,
        ..base.clone()
    };
    let err = plan(&config(), &full, &options).unwrap_err();
    assert!(matches!(err, InitError::NoFreeSlot { max: 10 }), "{err}");
    assert!(
        err.to_string().contains("max_replication_slots = 11"),
        "{err}"
    );

    let unprivileged = PgFacts {
        session_can_replicate: false,
        session_role: "app_owner".into(),
        ..base.clone()
    };
    let err = plan(&config(), &unprivileged, &options).unwrap_err();
    assert!(matches!(err, InitError::CannotCreateSlot { .. }), "{err}");
    assert!(err.to_string().contains("--admin-url"), "{err}");

    let old = PgFacts {
        server_version_num: 130_011,
        server_version: "13.11".into(),
        ..base
    };
    let err = plan(&config(), &old, &options).unwrap_err();
    assert!(matches!(err, InitError::ServerTooOld { .. }), "{err}");
}

#[test]
fn grants_what_is_missing_and_prints_role_attributes_for_a_superuser() {
    let grant = InitOptions {
        grant: Some("relay".into()),
        ..InitOptions::default()
    };
    let facts = PgFacts {
        role: Some(role(true, false, false, false)),
        ..set_up()
    };
    let plan = plan(&config(), &facts, &grant).unwrap();
    let sql: Vec<&str> = plan.steps.iter().map(|s| s.sql.as_str()).collect();
    assert_eq!(
        sql,
        [
            "GRANT USAGE ON SCHEMA \"public\" TO \"relay\"",
            "GRANT SELECT ON \"public\".\"outbox\" TO \"relay\"",
        ]
    );
    assert_eq!(plan.manual.len(), 1);
    assert_eq!(plan.manual[0].sql, "ALTER ROLE \"relay\" REPLICATION");
    let rendered = render_dry_run(&plan);
    assert!(
        rendered.contains("ALTER ROLE \"relay\" REPLICATION;"),
        "{rendered}"
    );
    assert!(rendered.contains("superuser"), "{rendered}");

    let facts = PgFacts {
        role: Some(role(false, false, false, true)),
        ..set_up()
    };
    let plan = super::plan(&config(), &facts, &grant).unwrap();
    assert!(plan.steps.is_empty(), "{plan:?}");
    assert_eq!(plan.manual[0].sql, "ALTER ROLE \"relay\" LOGIN REPLICATION");

    // A superuser may replicate without the attribute.
    let facts = PgFacts {
        role: Some(role(true, false, true, true)),
        ..set_up()
    };
    assert!(
        super::plan(&config(), &facts, &grant)
            .unwrap()
            .manual
            .is_empty()
    );
}

#[test]
fn with_cleanup_the_grant_includes_delete_on_the_outbox_table() {
    let grant = InitOptions {
        grant: Some("relay".into()),
        ..InitOptions::default()
    };
    let mut cleaning = config();
    cleaning.postgres.cleanup = crate::cleanup::Cleanup::DeleteAfterAck;
    let facts = PgFacts {
        role: Some(role(true, true, false, false)),
        ..set_up()
    };
    let sql: Vec<String> = plan(&cleaning, &facts, &grant)
        .unwrap()
        .steps
        .into_iter()
        .map(|s| s.sql)
        .collect();
    assert_eq!(
        sql,
        [
            "GRANT USAGE ON SCHEMA \"public\" TO \"relay\"",
            "GRANT SELECT ON \"public\".\"outbox\" TO \"relay\"",
            "GRANT DELETE ON \"public\".\"outbox\" TO \"relay\"",
        ]
    );
    // Granted already: in place, nothing to do.
    let facts = PgFacts {
        role: Some(role(true, true, false, true)),
        ..set_up()
    };
    let done = plan(&cleaning, &facts, &grant).unwrap();
    assert!(done.steps.is_empty(), "{done:?}");
    assert!(
        done.in_place
            .contains(&"DELETE on public.outbox for relay (cleanup)".to_owned()),
        "{done:?}"
    );
    // Without cleanup, no DELETE.
    let facts = PgFacts {
        role: Some(role(true, true, false, false)),
        ..set_up()
    };
    let without = plan(&config(), &facts, &grant).unwrap();
    assert!(
        without.steps.iter().all(|s| !s.sql.contains("DELETE")),
        "{without:?}"
    );
}

#[test]
fn granting_to_a_missing_role_is_refused() {
    let grant = InitOptions {
        grant: Some("relay".into()),
        ..InitOptions::default()
    };
    let err = plan(&config(), &set_up(), &grant).unwrap_err();
    assert!(matches!(err, InitError::RoleMissing { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("CREATE ROLE \"relay\" LOGIN REPLICATION"),
        "{err}"
    );
}

#[test]
fn the_created_table_is_sql_outbox_sql_with_the_configured_names() {
    let sql = create_table_sql(&config());
    assert_eq!(
        sql,
        "CREATE TABLE IF NOT EXISTS \"public\".\"outbox\" (\n    \"id\" uuid PRIMARY KEY,\n    \
         \"aggregatetype\" text NOT NULL,\n    \"aggregateid\" text NOT NULL,\n    \
         \"type\" text NOT NULL,\n    \"payload\" jsonb NOT NULL,\n    \
         \"timestamp\" timestamptz NOT NULL DEFAULT now(),\n    \"tracingspancontext\" text\n)"
    );
    let mut custom = config();
    custom.postgres.table = "Events".into();
    custom.postgres.columns.payload = "Data\"x".into();
    custom.postgres.columns.timestamp = String::new();
    custom.postgres.columns.source = Some("src".into());
    custom
        .postgres
        .header_columns
        .insert("tenant".into(), "tenant-id".into());
    custom
        .postgres
        .header_columns
        .insert("src".into(), "origin".into());
    let sql = create_table_sql(&custom);
    assert!(
        sql.starts_with("CREATE TABLE IF NOT EXISTS \"public\".\"Events\" ("),
        "{sql}"
    );
    assert!(sql.contains("\"Data\"\"x\" jsonb NOT NULL"), "{sql}");
    assert!(!sql.contains("timestamptz"), "{sql}");
    assert_eq!(sql.matches("\"src\" text").count(), 1, "{sql}");
    assert!(sql.contains("\"tenant\" text"), "{sql}");
}

#[test]
fn a_failed_step_after_creating_the_publication_says_allow_new_slot_is_safe() {
    let err = InitError::Step {
        done: vec!["create publication \"p\" on public.outbox".into()],
        failed_step: "create replication slot \"s\" (pgoutput)".into(),
        publication_created: true,
        source: Box::new(PgError::Protocol {
            target: "db".into(),
            action: "running init",
            reason: "x".into(),
        }),
    };
    let text = err.to_string();
    assert!(
        text.contains("--allow-new-slot") && text.contains("after create publication"),
        "{text}"
    );
}

#[test]
fn a_publication_without_a_table_had_no_rows_to_skip() {
    // A hand-made publication (FOR ALL TABLES, say) and no outbox table yet:
    // no outbox row was ever committed, so a new slot skips nothing.
    let facts = PgFacts {
        publication: Some(PublicationFacts {
            insert: true,
            all_tables: true,
            has_table: true,
            ..PublicationFacts::default()
        }),
        ..empty()
    };
    let options = InitOptions {
        create_table: true,
        ..InitOptions::default()
    };
    let plan = plan(&config(), &facts, &options).unwrap();
    assert_eq!(
        summaries(&plan),
        [
            "create the outbox table public.outbox",
            "create replication slot \"outbox_relay\" (pgoutput)",
        ]
    );
}

fn exactly_once() -> Config {
    let mut config = Config::default();
    config.kafka.brokers = "k1:9092".into();
    config.postgres.slot = "orders_slot".into();
    config.kafka.delivery = crate::config::Delivery::ExactlyOnce;
    config
}

/// init creates a missing checkpoint topic, leaves a good one alone, and
/// refuses (before anything runs) one the relay would refuse, naming the
/// fix.
#[test]
fn exactly_once_plans_the_checkpoint_topic_and_refuses_one_the_relay_would() {
    use crate::admin::init::checkpoint::{TopicPlan, plan};
    use crate::relay::exactly_once::checkpoint_topic::Looked;
    let config = exactly_once();
    let exists = |partitions, policy: &str| Looked::Exists {
        partitions,
        cleanup_policy: Ok(policy.to_owned()),
    };
    assert_eq!(plan(&Config::default(), None).unwrap(), TopicPlan::NotUsed);
    let create = plan(&config, Some(&Looked::Missing)).unwrap();
    assert_eq!(create, TopicPlan::Create);
    let dry = create.render_dry_run(&config);
    assert!(
        dry.contains("--create --topic outbox-relay.checkpoints --partitions 1")
            && dry.contains("cleanup.policy=compact"),
        "{dry}"
    );
    assert!(matches!(
        plan(&config, Some(&exists(1, "compact"))).unwrap(),
        TopicPlan::InPlace(line) if line.contains("1 partition, compacted")
    ));
    let uncompacted = plan(&config, Some(&exists(1, "delete")))
        .unwrap_err()
        .to_string();
    assert!(
        uncompacted.contains("\"outbox-relay.checkpoints\" exists but is not compacted")
            && uncompacted.contains(
                "kafka-configs.sh --bootstrap-server k1:9092 --alter --entity-type topics \
                 --entity-name outbox-relay.checkpoints --add-config cleanup.policy=compact"
            )
            && uncompacted.contains("changed nothing"),
        "{uncompacted}"
    );
    let partitioned = plan(&config, Some(&exists(3, "compact")))
        .unwrap_err()
        .to_string();
    assert!(
        partitioned.contains("has 3 partitions") && partitioned.contains("kafka.checkpoint_topic"),
        "{partitioned}"
    );
}

/// With ACLs the relay reads and writes its checkpoint topic, describes its
/// configs (the compaction check at start), and uses its transactional id.
#[test]
fn exactly_once_names_every_grant_the_relay_needs() {
    use crate::admin::init::checkpoint::acl_note;
    assert_eq!(acl_note(&Config::default()), "");
    let mut config = exactly_once();
    config.kafka.topic = "outbox.event.{aggregatetype}".into();
    let note = acl_note(&config);
    for grant in [
        "--operation Write --operation Read --operation DescribeConfigs \
         --topic outbox-relay.checkpoints",
        "--operation Write --transactional-id outbox-relay.orders_slot",
        "--operation Write --resource-pattern-type prefixed --topic outbox.event.",
        "--operation IdempotentWrite --cluster",
    ] {
        assert!(note.contains(grant), "{grant}:\n{note}");
    }
    assert!(
        note.lines()
            .filter(|l| !l.is_empty())
            .all(|l| l.starts_with("-- ")),
        "{note}"
    );
}

fn sharded(shards: u32, shard: u32) -> Config {
    let mut config = config();
    config.postgres.shards = shards;
    config.postgres.shard = shard;
    config
}

#[test]
fn a_shard_gets_a_publication_filtered_on_the_aggregate_id() {
    let planned = plan(
        &sharded(4, 2),
        &PgFacts {
            table: Some(table()),
            ..empty()
        },
        &InitOptions::default(),
    )
    .unwrap();
    assert_eq!(
        planned.steps[0].sql,
        "CREATE PUBLICATION \"outbox_pub\" FOR TABLE \"public\".\"outbox\" WHERE \
         (coalesce(abs(hashtext(\"aggregateid\")::bigint) % 4, 0) = 2) WITH (publish = 'insert')"
    );
    assert_eq!(
        planned.steps[0].summary,
        "create publication \"outbox_pub\" on public.outbox (shard 2 of 4)"
    );
    // An existing publication without the table gains it with the filter.
    let facts = PgFacts {
        publication: Some(PublicationFacts {
            insert: true,
            ..PublicationFacts::default()
        }),
        ..set_up()
    };
    let planned = plan(&sharded(2, 1), &facts, &InitOptions::default()).unwrap();
    assert!(
        planned.steps[0].sql.ends_with("ADD TABLE \"public\".\"outbox\" WHERE (coalesce(abs(hashtext(\"aggregateid\")::bigint) % 2, 0) = 1)"),
        "{}",
        planned.steps[0].sql
    );
}

#[test]
fn sharding_is_refused_before_postgresql_15_and_on_another_filter() {
    let old = PgFacts {
        server_version_num: 140_019,
        server_version: "14.19".into(),
        table: Some(table()),
        ..empty()
    };
    let refused = plan(&sharded(2, 0), &old, &InitOptions::default()).unwrap_err();
    assert!(
        matches!(refused, InitError::ShardsNeedRowFilters { shards: 2, .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("14.19"), "{refused}");
    // Unsharded, PostgreSQL 14 is fine.
    plan(&config(), &old, &InitOptions::default()).unwrap();

    // The publication exists with shard 1's filter, or none: never changed.
    let deparsed =
        "(COALESCE((abs((hashtext((aggregateid)::text))::bigint) % (2)::bigint), (0)::bigint) = 1)";
    for found in [Some(deparsed), None] {
        let facts = PgFacts {
            publication: Some(PublicationFacts {
                row_filter: found.map(str::to_owned),
                ..publication()
            }),
            ..set_up()
        };
        let refused = plan(&sharded(2, 0), &facts, &InitOptions::default()).unwrap_err();
        assert!(
            matches!(refused, InitError::ShardFilterMismatch { .. }),
            "{refused}"
        );
        assert!(
            refused.to_string().contains("ALTER PUBLICATION"),
            "{refused}"
        );
    }
    let facts = PgFacts {
        publication: Some(PublicationFacts {
            row_filter: Some(deparsed.to_owned()),
            ..publication()
        }),
        ..set_up()
    };
    let plan = plan(&sharded(2, 1), &facts, &InitOptions::default()).unwrap();
    assert!(plan.steps.is_empty(), "{plan:?}");
}

#[test]
fn on_postgresql_17_the_slot_is_a_failover_slot() {
    let facts = PgFacts {
        server_version_num: 170_006,
        server_version: "17.6".into(),
        table: Some(table()),
        ..empty()
    };
    let planned = plan(&config(), &facts, &InitOptions::default()).unwrap();
    let slot = planned.steps.last().unwrap();
    assert_eq!(
        slot.sql,
        "SELECT pg_create_logical_replication_slot('outbox_relay', 'pgoutput', temporary => \
         false, twophase => false, failover => true)"
    );
    assert!(
        slot.summary.ends_with("(pgoutput, failover)"),
        "{}",
        slot.summary
    );
}

#[test]
fn the_replay_record_is_created_and_granted_once() {
    use crate::admin::dead::table::{ReplayFacts, replay_table};
    let table = replay_table("app");
    let grant = InitOptions {
        grant: Some("relay".into()),
        ..InitOptions::default()
    };
    let planned = |facts: &ReplayFacts, options: &InitOptions| {
        let mut plan = Plan::default();
        super::replay::plan_replay_table(&table, facts, options, &mut plan);
        plan
    };
    let missing = ReplayFacts {
        exists: false,
        missing: vec!["SELECT", "INSERT", "UPDATE"],
    };
    let plan = planned(&missing, &grant);
    let sql: Vec<&str> = plan.steps.iter().map(|s| s.sql.as_str()).collect();
    assert_eq!(sql.len(), 2, "{sql:?}");
    assert!(
        sql[0].starts_with("CREATE TABLE IF NOT EXISTS \"app\".\"outbox_dead_replay\" ("),
        "{sql:?}"
    );
    assert_eq!(
        sql[1],
        "GRANT SELECT, INSERT, UPDATE ON \"app\".\"outbox_dead_replay\" TO \"relay\""
    );
    // Without --grant: created, nothing granted.
    assert_eq!(planned(&missing, &InitOptions::default()).steps.len(), 1);
    // In place: nothing to run.
    let in_place = ReplayFacts {
        exists: true,
        missing: Vec::new(),
    };
    let plan = planned(&in_place, &grant);
    assert!(plan.steps.is_empty(), "{plan:?}");
    assert_eq!(plan.in_place.len(), 2, "{plan:?}");
    // A privilege missing: granted again.
    let partial = ReplayFacts {
        exists: true,
        missing: vec!["UPDATE"],
    };
    assert_eq!(planned(&partial, &grant).steps.len(), 1);
}

#[test]
fn the_parking_table_is_created_and_granted_once_with_usage_on_its_own_schema() {
    use crate::admin::dead::table::ReplayFacts;
    use crate::parking::ParkedTable;
    let grant = InitOptions {
        grant: Some("relay".into()),
        ..InitOptions::default()
    };
    let planned = |table: &ParkedTable, facts: &ReplayFacts, options: &InitOptions| {
        let mut plan = Plan::default();
        super::parked::plan_parked_table(table, ("app", false), facts, options, &mut plan);
        plan
    };
    let table = ParkedTable {
        schema: "app".into(),
        name: "outbox_parked".into(),
    };
    let missing = ReplayFacts {
        exists: false,
        missing: vec!["SELECT", "INSERT", "UPDATE", "DELETE"],
    };
    let plan = planned(&table, &missing, &grant);
    let sql: Vec<&str> = plan.steps.iter().map(|s| s.sql.as_str()).collect();
    assert_eq!(sql.len(), 2, "{sql:?}");
    assert!(
        sql[0].contains("CREATE TABLE IF NOT EXISTS \"app\".\"outbox_parked\" (")
            && sql[0].contains("CREATE UNIQUE INDEX IF NOT EXISTS \"outbox_parked_heads\""),
        "{sql:?}"
    );
    assert_eq!(
        sql[1],
        "GRANT SELECT, INSERT, UPDATE, DELETE ON \"app\".\"outbox_parked\" TO \"relay\""
    );
    assert_eq!(
        planned(&table, &missing, &InitOptions::default())
            .steps
            .len(),
        1
    );
    let in_place = ReplayFacts {
        exists: true,
        missing: Vec::new(),
    };
    let plan = planned(&table, &in_place, &grant);
    assert!(plan.steps.is_empty(), "{plan:?}");
    assert_eq!(plan.in_place.len(), 2, "{plan:?}");
    let partial = ReplayFacts {
        exists: true,
        missing: vec!["DELETE"],
    };
    assert_eq!(planned(&table, &partial, &grant).steps.len(), 1);
    // In a schema of its own: the relay role also gets USAGE on it.
    let elsewhere = ParkedTable {
        schema: "ops".into(),
        name: "held".into(),
    };
    let plan = planned(&elsewhere, &missing, &grant);
    let sql: Vec<&str> = plan.steps.iter().map(|s| s.sql.as_str()).collect();
    assert_eq!(
        sql[1], "GRANT USAGE ON SCHEMA \"ops\" TO \"relay\"",
        "{sql:?}"
    );
    // Which it has already: not again.
    let mut plan = Plan::default();
    super::parked::plan_parked_table(&elsewhere, ("app", true), &missing, &grant, &mut plan);
    assert!(
        plan.steps.iter().all(|s| !s.sql.contains("USAGE")),
        "{plan:?}"
    );
}

/// The slot exists, the publication does not: the setup a person reaches by
/// following `run`'s exit-3 message, with outbox rows waiting in the WAL.
fn slot_without_publication(wal_end: &str) -> PgFacts {
    PgFacts {
        table: Some(table()),
        publication: None,
        slot: Some(slot("pgoutput", false)),
        wal_insert_lsn: Some(wal_end.into()),
        rows_after_slot: Some(3),
        ..empty()
    }
}

#[test]
fn a_publication_for_a_slot_with_unconfirmed_wal_is_refused_naming_what_it_would_skip() {
    let facts = slot_without_publication("0/1569D80");
    let refused = plan(&config(), &facts, &InitOptions::default()).unwrap_err();
    assert!(
        matches!(refused, InitError::PublicationWouldSkip { .. }),
        "{refused}"
    );
    let text = refused.to_string();
    for needle in [
        "\"outbox_relay\"",
        "\"outbox_pub\"",
        "confirmed_flush_lsn 0/1549D80, the WAL ends at 0/1569D80",
        "up to 3 outbox rows",
        "--recreate-slot",
        "re-insert",
        "changed nothing",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    // A publication that lacks the table, or the inserts, is the same trap.
    for publication in [
        PublicationFacts {
            insert: true,
            has_table: false,
            ..PublicationFacts::default()
        },
        PublicationFacts {
            insert: false,
            has_table: true,
            ..PublicationFacts::default()
        },
    ] {
        let facts = PgFacts {
            publication: Some(publication),
            ..slot_without_publication("0/1569D80")
        };
        let refused = plan(&config(), &facts, &InitOptions::default()).unwrap_err();
        assert!(
            matches!(refused, InitError::PublicationWouldSkip { .. }),
            "{refused}"
        );
    }
    // An unknown end of the WAL (a standby) errs on the safe side.
    let facts = PgFacts {
        wal_insert_lsn: None,
        ..slot_without_publication("0/1569D80")
    };
    assert!(plan(&config(), &facts, &InitOptions::default()).is_err());
}

#[test]
fn recreate_slot_drops_the_slot_then_sets_up_publication_and_a_new_slot() {
    let facts = slot_without_publication("0/1569D80");
    let options = InitOptions {
        recreate_slot: true,
        ..InitOptions::default()
    };
    let plan = plan(&config(), &facts, &options).unwrap();
    assert_eq!(
        summaries(&plan),
        [
            "drop replication slot \"outbox_relay\" (--recreate-slot: the outbox rows committed \
             before the new slot is created are not relayed by it)",
            "create publication \"outbox_pub\" on public.outbox",
            "create replication slot \"outbox_relay\" (pgoutput)",
        ]
    );
    assert_eq!(
        plan.steps[0].sql,
        "SELECT pg_drop_replication_slot('outbox_relay')"
    );
}

#[test]
fn a_slot_that_confirmed_all_wal_gets_its_publication_and_is_kept() {
    // Nothing after the slot's position: nothing can be skipped, and
    // --recreate-slot has nothing to do.
    for recreate_slot in [false, true] {
        let facts = slot_without_publication("0/1549D80");
        let options = InitOptions {
            recreate_slot,
            ..InitOptions::default()
        };
        let plan = plan(&config(), &facts, &options).unwrap();
        assert_eq!(
            summaries(&plan),
            ["create publication \"outbox_pub\" on public.outbox"]
        );
        assert!(
            plan.in_place
                .iter()
                .any(|l| l.starts_with("replication slot \"outbox_relay\"")),
            "{plan:?}"
        );
    }
}

#[test]
fn a_slot_the_relay_cannot_use_is_refused_as_such_never_dropped() {
    let facts = PgFacts {
        slot: Some(slot("test_decoding", false)),
        ..slot_without_publication("0/1569D80")
    };
    let options = InitOptions {
        recreate_slot: true,
        ..InitOptions::default()
    };
    let refused = plan(&config(), &facts, &options).unwrap_err();
    assert!(
        matches!(refused, InitError::SlotUnusable { .. }),
        "{refused}"
    );
}
