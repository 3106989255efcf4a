//! Shards of one outbox table (`postgres.shards`): each shard an outbox of
//! its own (publication and slot) over the base outbox's table and topics,
//! its row-filtered publication made the way `init` makes it, and its relay
//! config naming the shard in the CloudEvents source, so each record tells
//! which relay produced it.

use std::path::PathBuf;

use outbox_relay::admin::shards::filter_sql;

use super::services;
use super::{DEADLINE, TestOutbox, pg_admin, random_name, wait_until};

/// The outbox `base`'s table and topics, with a publication and a slot of
/// their own for one shard (not created yet). It shares `base`'s hold on
/// the services lock (so it must not outlive `base`): taking a share again
/// would wait forever behind a waiting exclusive test, and could not be
/// had at all by a test that holds the lock exclusively (the soaks).
pub async fn shard_of(base: &TestOutbox) -> TestOutbox {
    let mut outbox = TestOutbox::from_parts(
        services::Shared::held_by_caller(),
        pg_admin().await,
        base.table.clone(),
        random_name("pub"),
        random_name("slot"),
    );
    outbox.topic_prefix = base.topic_prefix.clone();
    outbox.dlq_topic = base.dlq_topic.clone();
    outbox
}

/// [`shard_of`], and its publication (filtered to shard `shard` of
/// `shards`, as `init` creates it) and slot created.
pub async fn create_shard(base: &TestOutbox, shards: u32, shard: u32) -> TestOutbox {
    let outbox = shard_of(base).await;
    let filter = if shards > 1 {
        format!(" WHERE ({})", filter_sql("aggregateid", shards, shard))
    } else {
        String::new()
    };
    outbox
        .admin
        .batch_execute(&format!(
            "CREATE PUBLICATION {} FOR TABLE public.{}{filter} WITH (publish = 'insert')",
            outbox.publication, base.table
        ))
        .await
        .unwrap();
    // Its own transaction: a slot is not created after writes.
    outbox
        .admin
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&outbox.slot],
        )
        .await
        .unwrap();
    outbox
}

/// Drops a shard's slot (once its relay let go) and publication.
pub async fn drop_shard(shard: &TestOutbox) {
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

/// A relay config for one shard: its own publication and slot, `shards`
/// and `shard`, and a CloudEvents source naming the shard (`/shard-<k>`);
/// `postgres`, `kafka` and `extra` as [`TestOutbox::write_config_with`].
pub fn shard_config(
    outbox: &TestOutbox,
    (shards, shard): (u32, u32),
    postgres: &str,
    kafka: &str,
    extra: &str,
) -> PathBuf {
    let path = outbox.write_config_with(
        &format!("shards = {shards}\nshard = {shard}\n{postgres}"),
        kafka,
        extra,
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("source = \"/orders-service\""),
        "config layout changed"
    );
    let text = text.replace(
        "source = \"/orders-service\"",
        &format!("source = \"/shard-{shard}\""),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The test cluster's `server_version_num`.
pub async fn server_version_num() -> i32 {
    pg_admin()
        .await
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .unwrap()
        .get(0)
}
