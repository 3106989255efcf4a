//! The operator commands against the real services: `init` from nothing
//! to events on a topic, its refusals, `check`'s failure paths (a role
//! without REPLICATION, a publication without inserts, a missing slot, a
//! slot held by another process, a server with `wal_level = replica`), and
//! `status` while a backlog drains.
//!
//! Each test uses its own randomly named table, publication, slot, roles and
//! topics; the `wal_level = replica` server is a throwaway cluster of the
//! test's own: the shared cluster's settings are never changed.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::auth::{self, TestRole};
use crate::support::cli::{cli, shown as text};
use crate::support::cluster::Cluster;
use crate::support::{
    Relay, TestOutbox, consume, env, pg_admin, random_name, services, slot_state, topic_exists,
    wait_until,
};
use outbox_relay::admin::AdminTarget;
use outbox_relay::admin::status::{self, StatusReport};
use outbox_relay::config::Config;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// An outbox whose objects do not exist yet (for `init` to create).
async fn fresh() -> TestOutbox {
    TestOutbox::from_parts(
        services::shared().await,
        pg_admin().await,
        random_name("outbox"),
        random_name("pub"),
        random_name("slot"),
    )
}

/// `check --json` for `config`: the exit status and the items.
async fn check(config: &std::path::Path) -> (Option<i32>, Vec<serde_json::Value>, Output) {
    let output = cli(vec![
        "check".into(),
        "--config".into(),
        config.display().to_string(),
        "--json".into(),
    ])
    .await;
    let items: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("check --json is not a JSON array ({e}): {}", text(&output)));
    (output.status.code(), items, output)
}

fn item<'a>(items: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    items
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("no item {name} in {items:#?}"))
}

fn failed(items: &[serde_json::Value]) -> Vec<&str> {
    items
        .iter()
        .filter(|i| i["status"] == "fail")
        .map(|i| i["name"].as_str().unwrap())
        .collect()
}

async fn slot_exists(o: &TestOutbox) -> bool {
    slot_state(&o.admin, &o.slot).await.is_some()
}

async fn table_exists(o: &TestOutbox) -> bool {
    o.admin
        .query_one(
            "SELECT to_regclass('public.' || quote_ident($1)) IS NOT NULL",
            &[&o.table],
        )
        .await
        .unwrap()
        .get(0)
}

async fn publication_exists(o: &TestOutbox) -> bool {
    o.admin
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&o.publication],
        )
        .await
        .unwrap()
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_sets_up_from_nothing_then_events_arrive() {
    let o = fresh().await;
    let config = o.write_config("");
    let config_arg = config.display().to_string();
    let init = || {
        args(&[
            "init",
            "--config",
            &config_arg,
            "--create-table",
            "--grant",
            "relay",
            "--admin-url",
            &env("PG_URL"),
        ])
    };
    let first = cli(init()).await;
    assert!(first.status.success(), "{}", text(&first));
    let stdout = String::from_utf8_lossy(&first.stdout);
    for step in [
        format!("done: create the outbox table public.{}", o.table),
        format!("done: grant relay SELECT on public.{}", o.table),
        format!("done: create publication \"{}\"", o.publication),
        // "(pgoutput)", or on PostgreSQL 17+ "(pgoutput, failover)".
        format!("done: create replication slot \"{}\" (pgoutput", o.slot),
    ] {
        assert!(stdout.contains(&step), "{step}: {}", text(&first));
    }

    // What init made is what the relay needs.
    let publication = o
        .admin
        .query_one(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, \
               (SELECT count(*) FROM pg_publication_tables pt \
                WHERE pt.pubname = p.pubname AND pt.tablename = $2) \
             FROM pg_publication p WHERE pubname = $1",
            &[&o.publication, &o.table],
        )
        .await
        .unwrap();
    let flags: (bool, bool, bool, bool, i64) = (
        publication.get(0),
        publication.get(1),
        publication.get(2),
        publication.get(3),
        publication.get(4),
    );
    assert_eq!(flags, (true, false, false, false, 1));
    let slot = slot_state(&o.admin, &o.slot)
        .await
        .expect("init made the slot");
    assert_eq!(
        (
            slot.plugin.as_deref(),
            slot.slot_type.as_str(),
            slot.two_phase
        ),
        (Some("pgoutput"), "logical", false)
    );
    let can_select: bool = o
        .admin
        .query_one(
            "SELECT has_table_privilege('relay', 'public.' || quote_ident($1), 'SELECT')",
            &[&o.table],
        )
        .await
        .unwrap()
        .get(0);
    assert!(can_select);

    // Again: nothing to do, nothing changed.
    let second = cli(init()).await;
    assert!(second.status.success(), "{}", text(&second));
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(stdout.contains("nothing to do"), "{}", text(&second));
    assert!(!stdout.contains("done:"), "{}", text(&second));

    // The preflight passes.
    let (code, items, output) = check(&config).await;
    assert_eq!(code, Some(0), "{}", text(&output));
    assert!(failed(&items).is_empty(), "{items:#?}");

    // And the relay streams what the service writes.
    let relay = Relay::in_process(o.settings());
    let mut ids = Vec::new();
    for n in 0..3 {
        let id = uuid::Uuid::new_v4().to_string();
        o.admin
            .execute(
                &format!(
                    "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                     VALUES ($1::text::uuid, 'order', $2, 'OrderPlaced', '{{\"n\": 1}}')",
                    o.table
                ),
                &[&id, &format!("order-{n}")],
            )
            .await
            .unwrap();
        ids.push(id);
    }
    let received = consume(&o.topic("order"), Duration::from_secs(60), |r| r.len() >= 3).await;
    let got: Vec<&str> = received.iter().filter_map(|r| r.header("ce_id")).collect();
    assert_eq!(got.len(), 3, "{received:?}");
    for id in &ids {
        assert!(got.contains(&id.as_str()), "{id} missing from {got:?}");
    }
    relay.stop().await.unwrap();
    o.drop_all().await;
}

/// Whether `role` has each of SELECT, INSERT, UPDATE, DELETE on
/// `public.table`.
async fn may_use(o: &TestOutbox, role: &str, table: &str) -> Vec<bool> {
    let mut all = Vec::new();
    for privilege in ["SELECT", "INSERT", "UPDATE", "DELETE"] {
        all.push(
            o.admin
                .query_one(
                    "SELECT has_table_privilege($1, 'public.' || quote_ident($2), $3)",
                    &[&role, &table, &privilege],
                )
                .await
                .unwrap()
                .get(0),
        );
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_creates_the_parking_table_for_the_relay_role_and_check_verifies_it() {
    let o = fresh().await;
    let config = o.write_config("");
    // A parking table of a name nothing created yet.
    let parked = random_name("held");
    let text_of = std::fs::read_to_string(&config).unwrap();
    let line = format!("parked_table = \"public.{}\"", o.parked_table());
    assert!(text_of.contains(&line), "config layout changed");
    std::fs::write(
        &config,
        text_of.replace(&line, &format!("parked_table = \"{parked}\"")),
    )
    .unwrap();
    let (_, items, _) = check(&config).await;
    let missing = item(&items, "postgres.parked_table");
    assert_eq!(missing["status"], "fail", "{missing:#}");
    assert!(
        missing["fix"]
            .as_str()
            .unwrap()
            .contains("outbox-relay init"),
        "{missing:#}"
    );

    let init = cli(args(&[
        "init",
        "--config",
        &config.display().to_string(),
        "--create-table",
        "--grant",
        "relay",
        "--admin-url",
        &env("PG_URL"),
    ]))
    .await;
    assert!(init.status.success(), "{}", text(&init));
    let stdout = String::from_utf8_lossy(&init.stdout);
    for step in [
        format!("done: create the parking table public.{parked} (if missing)"),
        format!("done: grant relay SELECT, INSERT, UPDATE, DELETE on public.{parked}"),
    ] {
        assert!(stdout.contains(&step), "{step}: {}", text(&init));
    }
    assert_eq!(may_use(&o, "relay", &parked).await, [true; 4]);
    let (code, items, output) = check(&config).await;
    assert_eq!(code, Some(0), "{}", text(&output));
    assert_eq!(item(&items, "postgres.parked_table")["status"], "ok");

    // A privilege taken away: check says so, and how to give it back.
    o.admin
        .batch_execute(&format!("REVOKE DELETE ON public.{parked} FROM relay"))
        .await
        .unwrap();
    let (code, items, _) = check(&config).await;
    assert_eq!(code, Some(1));
    let lacking = item(&items, "postgres.parked_table");
    assert_eq!(lacking["status"], "fail", "{lacking:#}");
    assert!(
        lacking["detail"].as_str().unwrap().contains("lacks DELETE"),
        "{lacking:#}"
    );
    assert!(
        lacking["fix"]
            .as_str()
            .unwrap()
            .contains("outbox-relay init"),
        "{lacking:#}"
    );
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_dry_run_prints_the_sql_and_changes_nothing() {
    let o = fresh().await;
    let config = o.write_config("");
    let output = cli(args(&[
        "init",
        "--config",
        &config.display().to_string(),
        "--create-table",
        "--dry-run",
    ]))
    .await;
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for sql in [
        format!("CREATE TABLE IF NOT EXISTS \"public\".\"{}\" (", o.table),
        format!(
            "CREATE PUBLICATION \"{}\" FOR TABLE \"public\".\"{}\" WITH (publish = 'insert');",
            o.publication, o.table
        ),
        // On PostgreSQL 17+ with `failover => true` before the `)`.
        format!(
            "SELECT pg_create_logical_replication_slot('{}', 'pgoutput'",
            o.slot
        ),
    ] {
        assert!(stdout.contains(&sql), "{sql}: {}", text(&output));
    }
    assert!(!table_exists(&o).await);
    assert!(!publication_exists(&o).await);
    assert!(!slot_exists(&o).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_refuses_a_new_slot_where_one_was_lost() {
    let o = TestOutbox::create("jsonb").await;
    let config = o.write_config("").display().to_string();
    // The slot is lost: dropped while the publication stays.
    o.admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&o.slot])
        .await
        .unwrap();
    let refused = cli(args(&["init", "--config", &config])).await;
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for needle in [
        o.slot.as_str(),
        o.publication.as_str(),
        "skip",
        "--allow-new-slot",
    ] {
        assert!(stderr.contains(needle), "{needle}: {}", text(&refused));
    }
    assert!(!slot_exists(&o).await, "a refused init created the slot");

    let allowed = cli(args(&["init", "--config", &config, "--allow-new-slot"])).await;
    assert!(allowed.status.success(), "{}", text(&allowed));
    assert!(slot_exists(&o).await);
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_publishes_a_partitioned_outbox_through_its_root() {
    let o = fresh().await;
    o.admin
        .batch_execute(&format!(
            "CREATE TABLE public.{t} (id uuid, aggregatetype text, aggregateid text, type text,
                payload jsonb, \"timestamp\" timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (id, \"timestamp\")) PARTITION BY RANGE (\"timestamp\");
             CREATE TABLE public.{t}_p1 PARTITION OF public.{t} FOR VALUES FROM (MINVALUE) TO (MAXVALUE);",
            t = o.table
        ))
        .await
        .unwrap();
    let config = o.write_config("").display().to_string();
    let output = cli(args(&[
        "init",
        "--config",
        &config,
        "--admin-url",
        &env("PG_URL"),
    ]))
    .await;
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("partitioned, 1 partitions"),
        "{}",
        text(&output)
    );
    let via_root: bool = o
        .admin
        .query_one(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
            &[&o.publication],
        )
        .await
        .unwrap()
        .get(0);
    assert!(via_root);
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_a_role_without_replication_and_init_grant_prints_the_fix() {
    let o = TestOutbox::create("jsonb").await;
    let role = TestRole::create(&o, "LOGIN", "pw-without-replication").await;
    let url = auth::pg_url_for(&role.name, &role.password, "");
    let config = o.write_config_with_url(&url, "").display().to_string();

    // init --grant leaves role attributes to a superuser: it prints them.
    let init = cli(args(&[
        "init",
        "--config",
        &config,
        "--grant",
        "--admin-url",
        &env("PG_URL"),
    ]))
    .await;
    assert!(init.status.success(), "{}", text(&init));
    let expected = format!("ALTER ROLE \"{}\" REPLICATION;", role.name);
    assert!(
        String::from_utf8_lossy(&init.stdout).contains(&expected),
        "{}",
        text(&init)
    );
    let replication: bool = o
        .admin
        .query_one(
            "SELECT rolreplication FROM pg_roles WHERE rolname = $1",
            &[&role.name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!replication, "init changed a role attribute");

    // check connects as that role (a normal session needs no REPLICATION)
    // and says what is missing.
    let (code, items, output) = check(std::path::Path::new(&config)).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    assert_eq!(item(&items, "postgres.connection")["status"], "ok");
    let replication = item(&items, "postgres.role.replication");
    assert_eq!(replication["status"], "fail", "{replication}");
    assert_eq!(
        replication["fix"],
        format!("ALTER ROLE {} REPLICATION;", role.name)
    );
    assert_eq!(failed(&items), ["postgres.role.replication"], "{items:#?}");
    o.drop_all().await;
    role.drop_role(&o.admin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_a_publication_without_inserts() {
    let o = TestOutbox::create("jsonb").await;
    o.admin
        .batch_execute(&format!(
            "ALTER PUBLICATION {} SET (publish = 'update, delete')",
            o.publication
        ))
        .await
        .unwrap();
    let (code, items, output) = check(&o.write_config("")).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    let publication = item(&items, "postgres.publication");
    assert_eq!(publication["status"], "fail");
    let detail = publication["detail"].as_str().unwrap();
    assert!(detail.contains("does not publish inserts"), "{detail}");
    assert!(detail.contains("SET (publish = 'insert')"), "{detail}");
    assert_eq!(failed(&items), ["postgres.publication"], "{items:#?}");
    o.drop_all().await;
}

/// The publication may hold tables the relay's role cannot see (another
/// team's schema): reading which tables it publishes must not need USAGE on
/// their schemas, for `check` or for the relay itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_with_tables_the_role_cannot_see_is_read_by_check_and_run() {
    let o = TestOutbox::create("jsonb").await;
    let hidden = format!("{}_hidden", o.table);
    o.admin
        .batch_execute(&format!(
            "CREATE SCHEMA {hidden}; REVOKE ALL ON SCHEMA {hidden} FROM PUBLIC; \
             CREATE TABLE {hidden}.t (id int PRIMARY KEY); \
             ALTER PUBLICATION {} ADD TABLE {hidden}.t",
            o.publication
        ))
        .await
        .unwrap();
    let (code, items, output) = check(&o.write_config("")).await;
    assert_eq!(
        item(&items, "postgres.publication")["status"],
        "ok",
        "{items:#?}"
    );
    assert_eq!(failed(&items), Vec::<&str>::new(), "{items:#?}");
    assert_eq!(code, Some(0), "{}", text(&output));

    // The relay resolves the same publication at start and delivers.
    let relay = Relay::in_process(o.settings());
    let mut writer = o.writer().await;
    let committed = o
        .commit_events(&mut writer, 3, 1, 3, &mut Default::default())
        .await;
    let received = consume(&o.topic("order"), Duration::from_secs(60), |r| r.len() >= 3).await;
    let got: Vec<&str> = received.iter().filter_map(|r| r.header("ce_id")).collect();
    for c in &committed {
        assert!(
            got.contains(&c.id.as_str()),
            "{} missing from {got:?}",
            c.id
        );
    }
    relay.stop().await.unwrap();
    o.admin
        .batch_execute(&format!("DROP SCHEMA {hidden} CASCADE"))
        .await
        .unwrap();
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_a_missing_slot() {
    let o = TestOutbox::create("jsonb").await;
    o.admin
        .execute("SELECT pg_drop_replication_slot($1)", &[&o.slot])
        .await
        .unwrap();
    let (code, items, output) = check(&o.write_config("")).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    let slot = item(&items, "postgres.slot");
    assert_eq!(slot["status"], "fail");
    assert!(
        slot["detail"].as_str().unwrap().contains("does not exist"),
        "{slot}"
    );
    assert!(slot["fix"].as_str().unwrap().contains("outbox-relay init"));
    assert_eq!(item(&items, "postgres.slot.holder")["status"], "skip");
    assert_eq!(failed(&items), ["postgres.slot"], "{items:#?}");
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_a_slot_held_by_another_process() {
    let o = TestOutbox::create("jsonb").await;
    let config = o.write_config("");
    // Another reader: a relay under another application_name than the one
    // this config's relay would show.
    let mut other_settings = o.settings();
    other_settings.replication.connection.application_name = "another-reader".to_owned();
    let other = Relay::in_process(other_settings);
    wait_until(
        "the other reader holds the slot",
        Duration::from_secs(30),
        || o.slot_active(),
    )
    .await;
    let pid = o.walsender_pid().await.unwrap();
    let (code, items, output) = check(&config).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    let holder = item(&items, "postgres.slot.holder");
    assert_eq!(holder["status"], "fail", "{holder}");
    let detail = holder["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("pid {pid}")) && detail.contains("another-reader"),
        "{detail}"
    );
    assert_eq!(
        holder["fix"].as_str().unwrap(),
        format!(
            "stop that reader, or SELECT pg_terminate_backend({pid});  -- if it must not read \
             the slot"
        )
    );
    assert_eq!(failed(&items), ["postgres.slot.holder"], "{items:#?}");

    // Once it lets go, the same setup passes.
    other.stop().await.unwrap();
    wait_until("the slot is free", Duration::from_secs(30), || async {
        !o.slot_active().await
    })
    .await;
    let (code, items, output) = check(&config).await;
    assert_eq!(code, Some(0), "{}", text(&output));
    assert_eq!(item(&items, "postgres.slot.holder")["status"], "ok");
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_init_on_a_server_with_wal_level_replica() {
    let cluster = Cluster::start(&["wal_level = replica"]);
    let o = fresh().await;
    let config = o
        .write_config_with_url(&cluster.url(), "")
        .display()
        .to_string();

    // init refuses before changing anything.
    let init = cli(args(&["init", "--config", &config, "--create-table"])).await;
    assert_eq!(init.status.code(), Some(1), "{}", text(&init));
    assert!(
        String::from_utf8_lossy(&init.stderr).contains("wal_level is replica"),
        "{}",
        text(&init)
    );
    let client = cluster.client().await;
    let created: bool = client
        .query_one(
            "SELECT to_regclass('public.' || quote_ident($1)) IS NOT NULL",
            &[&o.table],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!created, "a refused init created the table");

    let (code, items, output) = check(std::path::Path::new(&config)).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    let wal_level = item(&items, "postgres.wal_level");
    assert_eq!(wal_level["status"], "fail");
    assert!(wal_level["detail"].as_str().unwrap().starts_with("replica"));
    assert_eq!(
        wal_level["fix"],
        "ALTER SYSTEM SET wal_level = logical;  -- then restart PostgreSQL"
    );
    assert_eq!(item(&items, "postgres.connection")["status"], "ok");
    drop(client);
    drop(cluster);
}

async fn read_status(config: &Config) -> StatusReport {
    let target = AdminTarget::from_config(config, None);
    let client = target.client().await.expect("connect for status");
    status::gather(&client, config).await.expect("status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_lag_falling_while_a_backlog_drains() {
    let o = TestOutbox::create("jsonb").await;
    let config_path = o.write_config("");
    let config = Config::load(Some(&config_path), std::iter::empty()).unwrap();
    let mut writer = o.writer().await;
    let committed = o
        .commit_events(&mut writer, 200, 10, 20, &mut Default::default())
        .await;
    assert_eq!(committed.len(), 2000);

    // The backlog, before any relay ran.
    let before = read_status(&config).await;
    assert!(before.exists);
    assert!(
        before.holder.is_none() && before.active_pid.is_none(),
        "{before:?}"
    );
    let backlog = before.lag_bytes.unwrap();
    assert!(
        backlog > 100_000,
        "2000 rows are more WAL than that: {before:?}"
    );
    // Every row waits, and the bound never misses one.
    assert_eq!(before.pending.rows, Some(2000), "{before:?}");
    assert!(
        before.pending.oldest_age_seconds.unwrap() >= 0.0,
        "{before:?}"
    );

    // The same through the binary, for scripts.
    let output = cli(args(&[
        "status",
        "--config",
        &config_path.display().to_string(),
        "--json",
    ]))
    .await;
    // Nobody reads the slot while its backlog grows: a warning (exit 6).
    assert_eq!(output.status.code(), Some(6), "{}", text(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["verdict"], "warn", "{json}");
    assert!(json["lag_bytes"].as_i64().unwrap() >= backlog, "{json}");
    assert_eq!(json["pending"]["rows"], 2000);

    // Other writes go on meanwhile (to a table outside the publication), so
    // the slot never quite reaches the end of the WAL and the pending rows
    // are judged by the slot's catalog_xmin, as on a busy database.
    let (busy_stop, mut busy_stopped) = tokio::sync::watch::channel(false);
    let busy_table = format!("public.{}_orders", o.table);
    let busy = tokio::spawn(async move {
        let client = pg_admin().await;
        loop {
            client
                .execute(
                    &format!("INSERT INTO {busy_table} (aggregateid, seq) VALUES ('x', 0)"),
                    &[],
                )
                .await
                .unwrap();
            tokio::select! {
                _ = busy_stopped.changed() => break,
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    });

    // Drain it: the lag falls, and status names the relay holding the slot.
    let relay = Relay::in_process(o.settings());
    let mut lags = vec![backlog];
    let mut holder_seen = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let now = read_status(&config).await;
        lags.push(now.lag_bytes.unwrap());
        if let Some(h) = &now.holder {
            holder_seen = Some(h.clone());
        }
        if now.lag_bytes.unwrap() < backlog / 4 && holder_seen.is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lag did not fall: {lags:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let holder = holder_seen.unwrap();
    // The in-process relay's settings come from the config, as the binary's
    // do: it shows the relay's own application_name.
    assert_eq!(
        holder.application_name.as_deref(),
        Some(outbox_relay::admin::RELAY_APPLICATION_NAME)
    );
    assert_eq!(Some(holder.pid), o.walsender_pid().await);
    // The relay's role may not read pg_stat_replication's columns, even of
    // its own walsender: the state is missing, and status names the grant.
    assert_eq!(holder.state, None, "{holder:?}");
    assert!(
        holder
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("GRANT pg_read_all_stats TO relay;")),
        "{holder:?}"
    );
    // A superuser sees the state, and gets no hint.
    let target = AdminTarget::from_config(&config, Some(env("PG_URL")));
    let client = target.client().await.expect("connect as superuser");
    let as_superuser = status::gather(&client, &config).await.unwrap();
    let holder = as_superuser.holder.expect("held");
    assert!(
        holder.state.is_some() && holder.hint.is_none(),
        "{holder:?}"
    );
    println!("lag while draining: {lags:?}");

    // The pending rows fall too, once the slot's catalog_xmin passes them.
    let mut pending = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let rows = read_status(&config).await.pending.rows.unwrap();
        pending.push(rows);
        if rows < 2000 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pending rows did not fall: {pending:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("pending rows while draining: {pending:?}");
    busy_stop.send(true).unwrap();
    busy.await.unwrap();

    // --watch refreshes until Ctrl-C.
    let mut watch = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["status", "--config"])
        .arg(&config_path)
        .args(["--json", "--watch", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(stdout)
            .lines()
            .take(2)
            .map(Result::unwrap)
            .collect::<Vec<String>>()
    })
    .await
    .unwrap();
    for line in &lines {
        let json: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(json["slot"], o.slot.as_str(), "{line}");
    }
    Command::new("kill")
        .args(["-INT", &watch.id().to_string()])
        .status()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = watch.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "status --watch ignored Ctrl-C"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");

    relay.stop().await.unwrap();
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_topics_and_their_configs_from_the_broker_and_creates_none() {
    let o = TestOutbox::create("jsonb").await;
    let order = o.topic("order");
    let user = o.topic("user");
    o.create_topic_with_config(&order, 3, &[("max.message.bytes", "200000")])
        .await;
    o.create_topic(&o.dlq_topic, 1).await;
    for aggregate_type in ["order", "user"] {
        o.admin
            .execute(
                &format!(
                    "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                     VALUES (gen_random_uuid(), $1, '1', 'Created', '{{}}')",
                    o.table
                ),
                &[&aggregate_type],
            )
            .await
            .unwrap();
    }
    let (code, items, output) = check(&o.write_config("")).await;
    // Nothing fails: the missing topic is created by the broker on first use.
    assert_eq!(code, Some(0), "{}", text(&output));
    let existing = item(&items, &format!("kafka.topic.{order}"));
    assert_eq!(existing["status"], "ok", "{existing}");
    assert!(
        existing["detail"]
            .as_str()
            .unwrap()
            .contains("3 partitions")
    );
    let missing = item(&items, &format!("kafka.topic.{user}"));
    assert_eq!(missing["status"], "warn", "{missing}");
    assert!(
        missing["detail"]
            .as_str()
            .unwrap()
            .contains("the broker creates it on first use"),
        "{missing}"
    );
    assert_eq!(item(&items, "kafka.dead_letter_topic")["status"], "ok");
    // The producer's default 1000000 bytes exceed the topic's 200000.
    let size = item(&items, &format!("kafka.message_size.{order}"));
    assert_eq!(size["status"], "warn", "{size}");
    assert!(
        size["detail"].as_str().unwrap().contains("200000"),
        "{size}"
    );
    assert!(
        items
            .iter()
            .all(|i| i["name"] != format!("kafka.message_size.{}", o.dlq_topic)),
        "{items:#?}"
    );
    // check only reads: the missing topic is still missing.
    assert!(!topic_exists(&user).await, "check created {user}");
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_session_keeps_the_relays_tls_and_channel_binding() {
    let o = TestOutbox::create("jsonb").await;
    let password = "relay-test-password";
    let ca = env("PG_CA_CERT");
    // Verified TLS, bound SCRAM: the connection is what the stream's would be.
    let bound = auth::pg_url_at(
        "localhost",
        "relay",
        password,
        &format!("sslmode=verify-full&sslrootcert={ca}&channel_binding=require"),
    );
    let (code, items, output) = check(&o.write_config_with_url(&bound, "")).await;
    assert_eq!(
        item(&items, "postgres.connection")["status"],
        "ok",
        "{}",
        text(&output)
    );
    assert_eq!(code, Some(0), "{}", text(&output));
    // And refused for the same reasons: verify-full without a CA to verify against.
    let unverifiable = auth::pg_url_at("localhost", "relay", password, "sslmode=verify-full");
    let (code, items, output) = check(&o.write_config_with_url(&unverifiable, "")).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    let connection = item(&items, "postgres.connection");
    assert_eq!(connection["status"], "fail");
    assert!(
        connection["detail"]
            .as_str()
            .unwrap()
            .contains("set sslrootcert=<path to the CA certificate file>"),
        "{connection}"
    );
    // The password never shows.
    assert!(!String::from_utf8_lossy(&output.stdout).contains(password));
    // channel_binding=require without TLS is refused with the config, before
    // any connection (so before the password could leave), naming the fix.
    let plain = auth::pg_url_for("relay", password, "sslmode=disable&channel_binding=require");
    let config = o.write_config_with_url(&plain, "").display().to_string();
    let refused = cli(args(&["check", "--config", &config, "--json"])).await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("postgres.url") && stderr.contains("channel_binding=require needs TLS"),
        "{stderr}"
    );
    assert!(!text(&refused).contains(password), "{}", text(&refused));
    o.drop_all().await;
}

/// In exactly-once mode `check` knows the checkpoint topic (missing, not
/// compacted, compacted) and registers the transactional id only while no
/// relay holds the slot (registering it would fence that relay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_in_exactly_once_mode_checks_the_checkpoint_topic_and_the_transactional_id() {
    let o = TestOutbox::create("jsonb").await;
    o.create_topic(&o.dlq_topic, 1).await;
    let plain = random_name("checkpoints");
    let compacted = random_name("checkpoints");
    o.create_topic(&plain, 1).await;
    o.create_topic_with_config(&compacted, 1, &[("cleanup.policy", "compact")])
        .await;
    let config_for = |topic: &str| {
        let path = o.write_config("");
        let text = std::fs::read_to_string(&path).unwrap().replacen(
            "[kafka]\n",
            &format!("[kafka]\ndelivery = \"exactly-once\"\ncheckpoint_topic = \"{topic}\"\n"),
            1,
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let missing = random_name("checkpoints");
    let (code, items, output) = check(&config_for(&missing)).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    let cp = item(&items, "kafka.checkpoint_topic");
    assert_eq!(cp["status"], "fail", "{cp}");
    let fix = cp["fix"].as_str().unwrap();
    assert!(
        fix.starts_with("outbox-relay init --config") && fix.contains("cleanup.policy=compact"),
        "{cp}"
    );
    assert!(!topic_exists(&missing).await, "check created {missing}");

    // Not compacted: a failure naming the command that compacts it.
    let (code, items, output) = check(&config_for(&plain)).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    let cp = item(&items, "kafka.checkpoint_topic");
    assert_eq!(cp["status"], "fail", "{cp}");
    assert!(
        cp["detail"].as_str().unwrap().contains("not compacted"),
        "{cp}"
    );
    assert_eq!(
        cp["fix"].as_str().unwrap(),
        format!(
            "kafka-configs.sh --bootstrap-server {} --alter --entity-type topics --entity-name \
             {plain} --add-config cleanup.policy=compact",
            env("KAFKA_BROKERS")
        ),
        "{cp}"
    );

    let config = config_for(&compacted);
    let (code, items, output) = check(&config).await;
    assert_eq!(item(&items, "kafka.checkpoint_topic")["status"], "ok");
    let id = item(&items, "kafka.transactional_id");
    assert_eq!(id["status"], "ok", "{id}");
    assert!(
        id["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("outbox-relay.{}", o.slot)),
        "{id}"
    );
    assert!(failed(&items).is_empty(), "{}", text(&output));
    assert_eq!(code, Some(0), "{}", text(&output));

    // With a relay streaming, check leaves its transactional id alone.
    let mut relay = Relay::process(&config);
    relay
        .wait_for_event("streaming", crate::support::DEADLINE)
        .await;
    let (_, items, _) = check(&config).await;
    let id = item(&items, "kafka.transactional_id");
    assert_eq!(id["status"], "skip", "{id}");
    assert!(
        relay.running(),
        "check fenced the relay:\n{}",
        relay.log_text()
    );
    let status = relay.terminate().await;
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    o.drop_all().await;
}

/// Inserts `n` outbox rows (the columns every test table has).
async fn insert_rows(o: &TestOutbox, n: i64) {
    o.admin
        .execute(
            &format!(
                "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                 SELECT gen_random_uuid(), 'order', g::text, 'created', '{{}}' \
                 FROM generate_series(1, $1::bigint) g",
                o.table
            ),
            &[&n],
        )
        .await
        .unwrap();
}

/// `status --json` for `config`: the exit status and the object.
async fn status_json(config: &std::path::Path) -> (Option<i32>, serde_json::Value, Output) {
    let output = cli(args(&[
        "status",
        "--config",
        &config.display().to_string(),
        "--json",
    ]))
    .await;
    let json = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {}", text(&output)));
    (output.status.code(), json, output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_refuses_a_publication_over_rows_waiting_in_the_slot() {
    // A new user's path: the table and the slot exist, the publication does
    // not, and a row was committed meanwhile.
    let o = fresh().await;
    let config = o.write_config("");
    let loaded = Config::load(Some(&config), std::iter::empty()).unwrap();
    o.admin
        .batch_execute(&outbox_relay::admin::init::create_table_sql(&loaded))
        .await
        .unwrap();
    o.admin
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&o.slot],
        )
        .await
        .unwrap();
    o.admin
        .execute(
            &format!(
                "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload) \
                 VALUES (gen_random_uuid(), 'order', '1', 'created', '{{}}')",
                o.table
            ),
            &[],
        )
        .await
        .unwrap();
    let before = slot_state(&o.admin, &o.slot).await.unwrap();

    // `run` stops, and its message leads to init, not to the bare SQL.
    let mut relay = Relay::process(&config);
    let status = relay.wait(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(3), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(
        log.contains("outbox-relay init") && !log.contains("CREATE PUBLICATION"),
        "{log}"
    );
    // `check` says the same.
    let (_, items, output) = check(&config).await;
    let publication = item(&items, "postgres.publication");
    assert_eq!(publication["status"], "fail", "{}", text(&output));
    let fix = publication["fix"].as_str().unwrap();
    assert!(
        fix.contains("outbox-relay init") && fix.contains("refuses"),
        "{fix}"
    );

    let config_arg = config.display().to_string();
    let admin_url = env("PG_URL");
    let init = |extra: &[&str]| {
        let mut list = args(&["init", "--config", &config_arg, "--admin-url", &admin_url]);
        list.extend(args(extra));
        list
    };
    let refused = cli(init(&[])).await;
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for needle in [
        o.slot.as_str(),
        o.publication.as_str(),
        "up to 1 outbox rows",
        "never relayed",
        "--recreate-slot",
        "re-insert",
        "changed nothing",
    ] {
        assert!(stderr.contains(needle), "{needle}: {}", text(&refused));
    }
    assert!(!publication_exists(&o).await, "a refused init created it");
    let kept = slot_state(&o.admin, &o.slot).await.unwrap();
    assert_eq!(kept.confirmed_flush_lsn, before.confirmed_flush_lsn);

    // Asked by name: the slot is dropped and made again after the
    // publication, and init says so.
    let recreated = cli(init(&["--recreate-slot"])).await;
    assert!(recreated.status.success(), "{}", text(&recreated));
    let stdout = String::from_utf8_lossy(&recreated.stdout);
    for step in [
        format!(
            "done: drop replication slot \"{}\" (--recreate-slot",
            o.slot
        ),
        "are not relayed by it".to_owned(),
        format!("done: create publication \"{}\"", o.publication),
        format!("done: create replication slot \"{}\"", o.slot),
    ] {
        assert!(stdout.contains(&step), "{step}: {}", text(&recreated));
    }
    assert!(publication_exists(&o).await);
    let new = slot_state(&o.admin, &o.slot).await.unwrap();
    assert!(
        new.confirmed_flush_lsn > before.confirmed_flush_lsn,
        "{new:?} after {before:?}"
    );
    // Set up now: another init has nothing to do.
    let again = cli(init(&["--recreate-slot"])).await;
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("nothing to do"),
        "{}",
        text(&again)
    );
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_pending_rows_of_a_table_without_a_timestamp_column() {
    // Debezium's documented outbox table has no timestamp column.
    let o = TestOutbox::create("jsonb").await;
    o.admin
        .batch_execute(&format!(
            "ALTER TABLE public.{} DROP COLUMN \"timestamp\"",
            o.table
        ))
        .await
        .unwrap();
    insert_rows(&o, 3).await;
    let config = Config::load(Some(&o.write_config("")), std::iter::empty()).unwrap();
    let report = read_status(&config).await;
    assert_eq!(report.pending.rows, Some(3), "{report:?}");
    let tracked: String = o
        .admin
        .query_one("SHOW track_commit_timestamp", &[])
        .await
        .unwrap()
        .get(0);
    if tracked == "on" {
        assert!(report.pending.oldest_age_seconds.is_some(), "{report:?}");
    } else {
        // No column, no commit timestamps: the count, without an age.
        assert_eq!(report.pending.oldest_age_seconds, None, "{report:?}");
        let shown = status::render_text(&report);
        assert!(shown.contains("3 at most (their age is unknown"), "{shown}");
    }
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exits_non_zero_for_an_unread_slot_and_one_the_relay_cannot_use() {
    // A slot nobody reads while its WAL piles up: a warning, exit 6.
    let o = TestOutbox::create("jsonb").await;
    insert_rows(&o, 5).await;
    let config = o.write_config("");
    let (code, json, output) = status_json(&config).await;
    assert_eq!(code, Some(6), "{}", text(&output));
    assert_eq!(json["verdict"], "warn", "{json}");
    assert!(
        json["problem"]
            .as_str()
            .unwrap()
            .contains("nobody reads the slot"),
        "{json}"
    );

    // A test_decoding slot under the relay's slot name: the relay cannot
    // use it, exit 1.
    let other = fresh().await;
    other
        .admin
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
            &[&other.slot],
        )
        .await
        .unwrap();
    let (code, json, output) = status_json(&other.write_config("")).await;
    assert_eq!(code, Some(1), "{}", text(&output));
    assert_eq!(json["verdict"], "fail", "{json}");
    assert!(
        json["problem"].as_str().unwrap().contains("test_decoding"),
        "{json}"
    );
    let shown = cli(args(&[
        "status",
        "--config",
        &other.write_config("").display().to_string(),
    ]))
    .await;
    assert_eq!(shown.status.code(), Some(1), "{}", text(&shown));
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("FAIL: "),
        "{}",
        text(&shown)
    );
    other.drop_all().await;
    o.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_status_report_the_running_relay_as_ok() {
    let o = TestOutbox::create("jsonb").await;
    let config = o.write_config("");
    let relay = Relay::in_process(o.settings());
    wait_until("the relay reads the slot", Duration::from_secs(30), || {
        o.slot_active()
    })
    .await;
    let (code, items, output) = check(&config).await;
    let holder = item(&items, "postgres.slot.holder");
    assert_eq!(holder["status"], "ok", "{}", text(&output));
    assert!(
        holder["detail"]
            .as_str()
            .unwrap()
            .contains("holds the relay lock"),
        "{holder}"
    );
    assert_eq!(code, Some(0), "{}", text(&output));
    assert!(failed(&items).is_empty(), "{items:#?}");
    // Read by the relay: status is ok too, rows or not.
    insert_rows(&o, 2).await;
    let (code, json, output) = status_json(&config).await;
    assert_eq!(code, Some(0), "{}", text(&output));
    assert_eq!(json["verdict"], "ok", "{json}");
    relay.stop().await.unwrap();
    o.drop_all().await;
}
