//! Sharded slots (`postgres.shards`, `postgres.shard`): `init` creates each
//! shard's row-filtered publication and its slot, `check` finds the filter
//! right, and one relay per shard delivers the union: nothing lost,
//! per-aggregate order kept, every aggregate only through its own shard.
//! And how far sharding speeds up draining a backlog (ignored; by hand).
//!
//! Beside the row filter: [`messages`] (outbox logical messages, which no
//! row filter reaches, each published by its aggregate's shard only) and
//! [`cleanup`] (a delete by `xmin` that keeps to its shard's rows); the
//! relay's own `hashtext` against the server's, here.

mod cleanup;
mod messages;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use outbox_relay::admin::shards::filter_sql;
use outbox_relay::outbox::shard::{hashtext, shard_of as shard_of_id};

use crate::support::cli::{cli, shown};
use crate::support::services;
use crate::support::*;

/// The outbox `base`'s table and topics, with a publication and a slot of
/// their own for one shard (not created yet).
pub(crate) async fn shard_of(base: &TestOutbox) -> TestOutbox {
    let mut outbox = TestOutbox::from_parts(
        services::shared().await,
        pg_admin().await,
        base.table.clone(),
        random_name("pub"),
        random_name("slot"),
    );
    outbox.topic_prefix = base.topic_prefix.clone();
    outbox.dlq_topic = base.dlq_topic.clone();
    outbox
}

/// A relay config for one shard: its own publication and slot, and a
/// CloudEvents source naming the shard, so each record tells which relay
/// produced it.
pub(crate) fn shard_config(outbox: &TestOutbox, shards: u32, shard: u32) -> PathBuf {
    let path = outbox.write_config("");
    let text = std::fs::read_to_string(&path).unwrap();
    let table_line = format!("table = \"public.{}\"\n", outbox.table);
    assert!(text.contains(&table_line), "config layout changed");
    let text = text
        .replace(
            &table_line,
            &format!("{table_line}shards = {shards}\nshard = {shard}\n"),
        )
        .replace(
            "source = \"/orders-service\"",
            &format!("source = \"/shard-{shard}\""),
        );
    std::fs::write(&path, text).unwrap();
    path
}

/// The test cluster's `server_version_num`.
pub(crate) async fn server_version_num() -> i32 {
    pg_admin()
        .await
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .unwrap()
        .get(0)
}

/// The shard PostgreSQL puts `aggregate` in, by the relay's own filter.
pub(crate) async fn shard_on_server(
    admin: &tokio_postgres::Client,
    aggregate: &str,
    shards: u32,
) -> u32 {
    let filter = filter_sql("a", shards, 0);
    // The filter's left-hand side: the shard number of column `a`.
    let expr = filter.split(" = ").next().unwrap();
    let row = admin
        .query_one(
            &format!("SELECT ({expr})::int FROM (SELECT $1::text AS a) t"),
            &[&aggregate],
        )
        .await
        .unwrap();
    u32::try_from(row.get::<_, i32>(0)).unwrap()
}

/// Shards `0..shards` of `base`, each with `postgres_extra` added to its
/// config's `[postgres]` section and set up by `init` (its row-filtered
/// publication and its slot): each shard's outbox and relay config. `None`
/// before PostgreSQL 15, which has no row filters (the test above shows
/// init refusing there).
pub(crate) async fn init_shards(
    base: &TestOutbox,
    shards: u32,
    postgres_extra: &str,
) -> Option<Vec<(TestOutbox, PathBuf)>> {
    if server_version_num().await < 150_000 {
        println!("PostgreSQL before 15: no sharded slots");
        return None;
    }
    let mut out = Vec::new();
    for k in 0..shards {
        let shard = shard_of(base).await;
        let config = shard_config(&shard, shards, k);
        let text = std::fs::read_to_string(&config).unwrap();
        let anchor = "heartbeat_interval_secs = 0\n";
        assert!(text.contains(anchor), "config layout changed");
        let text = text.replace(anchor, &format!("{anchor}{postgres_extra}"));
        std::fs::write(&config, text).unwrap();
        let config_arg = config.display().to_string();
        let init = cli([
            "init",
            "--config",
            &config_arg,
            "--admin-url",
            &env("PG_URL"),
        ]
        .map(String::from)
        .to_vec())
        .await;
        assert!(init.status.success(), "{}", shown(&init));
        out.push((shard, config));
    }
    Some(out)
}

/// Drops each shard's slot (once let go) and publication.
pub(crate) async fn drop_shards(shards: &[(TestOutbox, PathBuf)]) {
    for (shard, _) in shards {
        wait_until("the slot to be let go", DEADLINE, || async {
            !shard.slot_active().await
        })
        .await;
        let _ = shard
            .admin
            .batch_execute(&format!(
                "SELECT pg_drop_replication_slot('{}'); DROP PUBLICATION IF EXISTS {};",
                shard.slot, shard.publication
            ))
            .await;
    }
}

/// Strings of 0 to 60 characters, ASCII and 2-, 3- and 4-byte UTF-8 mixed,
/// from a seeded generator (splitmix64): the same ones for a seed.
fn random_strings(count: usize, seed: u64) -> Vec<String> {
    const CHARS: &[char] = &[
        'a',
        'q',
        'Z',
        '0',
        '7',
        '-',
        ' ',
        '_',
        '~',
        '\u{7f}',
        'é',
        'ÿ',
        '\u{7ff}',
        '€',
        '\u{ffff}',
        '😀',
        '\u{10000}',
        '\u{10ffff}',
    ];
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..count)
        .map(|_| {
            let len = (next() % 61) as usize;
            (0..len)
                .map(|_| CHARS[(next() % CHARS.len() as u64) as usize])
                .collect()
        })
        .collect()
}

// The relay's `hashtext`, and its shard of an aggregate id, are the
// server's: for random strings of every length up to 60 characters,
// multi-byte UTF-8 among them (a logical message's shard is decided by the
// relay, its rows' by the server; they must agree or an aggregate's events
// split between two relays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relays_hashtext_and_shard_are_the_servers_on_random_strings() {
    let seed: u64 = std::env::var("TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    let strings = random_strings(500, seed);
    let admin = pg_admin().await;
    let rows = admin
        .query(
            "SELECT hashtext(x), coalesce(abs(hashtext(x)::bigint) % 7, 0)::int \
             FROM unnest($1::text[]) WITH ORDINALITY AS t(x, i) ORDER BY i",
            &[&strings],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), strings.len());
    for (text, row) in strings.iter().zip(&rows) {
        assert_eq!(
            hashtext(text.as_bytes()),
            row.get::<_, i32>(0),
            "hashtext({text:?}), seed {seed}"
        );
        assert_eq!(
            i32::try_from(shard_of_id(Some(text), 7)).unwrap(),
            row.get::<_, i32>(1),
            "shard of {text:?} of 7, seed {seed}"
        );
    }
    let bytes: usize = strings.iter().map(String::len).sum();
    println!(
        "hashtext: {} random strings ({bytes} bytes of UTF-8) agree with the server",
        strings.len()
    );
}

// Two shards of one outbox table: init creates each shard's filtered
// publication and slot, check passes the filter, two relays deliver the
// union of the shards exactly as committed, and every aggregate's events
// come from its own shard's relay only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_two_relays_deliver_everything_each_aggregate_through_its_shard() {
    let base = TestOutbox::create("jsonb").await;
    let topic = base.topic("order");
    base.create_topic(&topic, 3).await;
    let mut shards = Vec::new();
    let mut relays = Vec::new();
    for k in 0..2 {
        let shard = shard_of(&base).await;
        let config = shard_config(&shard, 2, k);
        let config_arg = config.display().to_string();
        let init = cli([
            "init",
            "--config",
            &config_arg,
            "--admin-url",
            &env("PG_URL"),
        ]
        .map(String::from)
        .to_vec())
        .await;
        if server_version_num().await < 150_000 {
            // No row filters before 15: init must refuse, saying why.
            assert!(
                !init.status.success() && shown(&init).contains("needs publication row filters"),
                "init of a shard on PostgreSQL 14 did not refuse: {}",
                shown(&init)
            );
            println!("PostgreSQL before 15: init refuses shards, as it must");
            base.drop_all().await;
            return;
        }
        assert!(init.status.success(), "{}", shown(&init));
        assert!(
            shown(&init).contains(&format!("(shard {k} of 2)")),
            "{}",
            shown(&init)
        );
        let check = cli(["check", "--config", &config_arg, "--json"]
            .map(String::from)
            .to_vec())
        .await;
        let items: Vec<serde_json::Value> = serde_json::from_slice(&check.stdout)
            .unwrap_or_else(|e| panic!("check --json ({e}): {}", shown(&check)));
        let item = items
            .iter()
            .find(|i| i["name"] == "postgres.shard")
            .unwrap_or_else(|| panic!("no postgres.shard item: {}", shown(&check)));
        assert_eq!(item["status"], "ok", "{item}");
        relays.push(Relay::process(&config));
        shards.push(shard);
    }
    for shard in &shards {
        wait_until("each shard's relay to hold its slot", DEADLINE, || {
            shard.slot_active()
        })
        .await;
    }
    let mut writer = base.writer().await;
    let mut seqs = HashMap::new();
    let committed = base.commit_events(&mut writer, 200, 2, 20, &mut seqs).await;
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    check_delivery("two-shards", &committed, &received);

    let aggregate_of: HashMap<&str, &str> = committed
        .iter()
        .map(|c| (c.id.as_str(), c.aggregate.as_str()))
        .collect();
    let mut expected_shard = HashMap::new();
    for aggregate in seqs.keys() {
        expected_shard.insert(
            aggregate.clone(),
            shard_on_server(&base.admin, aggregate, 2).await,
        );
    }
    let mut per_shard = [0usize; 2];
    for record in &received {
        let id = record.header("ce_id").unwrap();
        let aggregate = aggregate_of[id];
        let source = record.header("ce_source").unwrap();
        let want = expected_shard[aggregate];
        assert_eq!(
            source,
            format!("/shard-{want}"),
            "aggregate {aggregate} belongs to shard {want}"
        );
        per_shard[want as usize] += 1;
    }
    assert!(
        per_shard.iter().all(|n| *n > 0),
        "both shards carried events: {per_shard:?}"
    );
    println!("two-shards: events per shard {per_shard:?}");
    drop(relays);
    for shard in &shards {
        wait_until("the slot to be let go", DEADLINE, || async {
            !shard.slot_active().await
        })
        .await;
        let _ = shard
            .admin
            .batch_execute(&format!(
                "SELECT pg_drop_replication_slot('{}'); DROP PUBLICATION IF EXISTS {};",
                shard.slot, shard.publication
            ))
            .await;
    }
    base.drop_all().await;
}

/// Commits `rows` outbox rows in transactions of 1000, over 1000 aggregates.
async fn commit_backlog(outbox: &TestOutbox, rows: usize) {
    let sql = format!(
        "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq) \
         SELECT gen_random_uuid(), 'order', 'agg-' || (g % 1000), 'OrderPlaced', \
         '{{\"total\": 42.5}}'::jsonb, g FROM generate_series($1::bigint, $2::bigint) g",
        outbox.table
    );
    let mut from = 0i64;
    while (from as usize) < rows {
        let to = (from + 999).min(rows as i64 - 1);
        outbox.admin.execute(&sql, &[&from, &to]).await.unwrap();
        from = to + 1;
    }
}

/// Drains a backlog of SHARD_BACKLOG rows (default 100000) with 1, 2 and 4
/// shards, back to back: each run a fresh table with its shards'
/// publications and slots made before the backlog, then one relay per
/// shard started together; the time until the topic holds every row.
/// Every walsender decodes all of the WAL, so adding shards stops paying
/// once decoding, not producing, is what limits a relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test --test it -- --ignored shards::drain"]
async fn drain_a_backlog_with_1_2_and_4_shards() {
    let rows: usize = std::env::var("SHARD_BACKLOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let mut table = Vec::new();
    for shards in [1u32, 2, 4] {
        let base = TestOutbox::create("jsonb").await;
        let topic = base.topic("order");
        base.create_topic(&topic, 8).await;
        let mut parts = Vec::new();
        for k in 0..shards {
            let shard = shard_of(&base).await;
            let filter = if shards > 1 {
                format!(" WHERE ({})", filter_sql("aggregateid", shards, k))
            } else {
                String::new()
            };
            shard
                .admin
                .batch_execute(&format!(
                    "CREATE PUBLICATION {} FOR TABLE public.{}{filter} WITH (publish = 'insert')",
                    shard.publication, base.table
                ))
                .await
                .unwrap();
            // Its own transaction: a slot is not created after writes.
            shard
                .admin
                .execute(
                    "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&shard.slot],
                )
                .await
                .unwrap();
            parts.push(shard);
        }
        commit_backlog(&base, rows).await;
        let started = Instant::now();
        let relays: Vec<Relay> = (0..shards)
            .map(|k| Relay::process(&shard_config(&parts[k as usize], shards, k)))
            .collect();
        wait_until(
            "the backlog on the topic",
            Duration::from_secs(1800),
            || async { topic_len(&topic).await >= rows as i64 },
        )
        .await;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "shard-drain: shards={shards} rows={rows} secs={secs:.1} rows_per_sec={:.0}",
            rows as f64 / secs
        );
        table.push((shards, secs));
        drop(relays);
        for shard in &parts {
            wait_until("the slot to be let go", DEADLINE, || async {
                !shard.slot_active().await
            })
            .await;
            let _ = shard
                .admin
                .batch_execute(&format!(
                    "SELECT pg_drop_replication_slot('{}'); DROP PUBLICATION {};",
                    shard.slot, shard.publication
                ))
                .await;
        }
        base.drop_all().await;
    }
    println!("shard-drain-summary: {table:?}");
}
