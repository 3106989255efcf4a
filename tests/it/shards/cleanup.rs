//! Sharded slots with `postgres.cleanup = "delete-after-ack"`: a relay
//! deletes only its own shard's rows, also when a transaction outgrows the
//! ids it holds and its rows are deleted by `xmin` (the inserting
//! transaction, which may hold rows of every shard).

use std::time::Duration;

use outbox_relay::admin::shards::filter_sql;
use outbox_relay::cleanup::MAX_HELD_IDS;

use super::{drop_shards, init_shards};
use crate::support::*;

/// Rows of shard `shard` of 2 in the outbox table now, by the server's filter.
async fn rows_of_shard(base: &TestOutbox, shard: u32) -> i64 {
    base.admin
        .query_one(
            &format!(
                "SELECT count(*) FROM public.{} WHERE {}",
                base.table,
                filter_sql("aggregateid", 2, shard)
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

// One transaction of more rows of shard 0 than a relay holds ids of, and of
// rows of shard 1, over many aggregates; only shard 0's relay runs. Once it
// confirmed and deleted its rows (the last of them by xmin), every row of
// shard 1 is still in the table; shard 1's relay, started then, publishes
// them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_by_xmin_leaves_the_other_shards_rows_in_the_table() {
    let base = TestOutbox::create("jsonb").await;
    base.admin
        .batch_execute(&format!("GRANT DELETE ON public.{} TO relay", base.table))
        .await
        .unwrap();
    let topic = base.topic("order");
    base.create_topic(&topic, 4).await;
    let Some(shards) = init_shards(&base, 2, "cleanup = \"delete-after-ack\"\n").await else {
        base.drop_all().await;
        return;
    };
    // More of shard 0 than fit the id cap: the rest goes by xmin.
    let rows = [MAX_HELD_IDS as i64 + 5_000, 5_000];
    let mut insert = String::from("BEGIN;");
    for (k, n) in rows.iter().enumerate() {
        // The aggregates agg-0 .. agg-999 of shard k, round robin.
        let aggregates = format!(
            "(SELECT array_agg(a ORDER BY i) FROM (SELECT i, 'agg-' || i AS a \
             FROM generate_series(0, 999) i) s WHERE {})",
            filter_sql("a", 2, k as u32)
        );
        insert.push_str(&format!(
            "INSERT INTO public.{table} (id, aggregatetype, aggregateid, type, payload, seq) \
             SELECT gen_random_uuid(), 'order', ids[1 + g % array_length(ids, 1)], \
             'OrderPlaced', jsonb_build_object('seq', g, 'total', 42.5), g \
             FROM generate_series(1, {n}) g, {aggregates} AS a(ids);",
            table = base.table
        ));
    }
    insert.push_str("COMMIT;");
    base.admin.batch_execute(&insert).await.unwrap();
    let committed = base.committed_from_table().await;
    assert_eq!(
        [rows_of_shard(&base, 0).await, rows_of_shard(&base, 1).await],
        rows
    );

    let mut first = Relay::process(&shards[0].1);
    wait_until_explained(
        "shard 0's relay to publish, confirm and delete its rows",
        Duration::from_secs(600),
        || async { rows_of_shard(&base, 0).await == 0 },
        || async {
            format!(
                "{} rows of shard 0 left; slot confirmed {:?}",
                rows_of_shard(&base, 0).await,
                shards[0].0.confirmed_flush_lsn().await
            )
        },
    )
    .await;
    assert_eq!(
        rows_of_shard(&base, 1).await,
        rows[1],
        "shard 0's cleanup deleted rows of shard 1, which no relay has published"
    );
    assert!(
        topic_len(&topic).await >= rows[0],
        "shard 0's events are out"
    );

    let mut second = Relay::process(&shards[1].1);
    let total = rows[0] + rows[1];
    wait_until(
        "every row's event on the topic",
        Duration::from_secs(600),
        || async { topic_len(&topic).await >= total },
    )
    .await;
    wait_until("shard 1's relay to delete its rows", DEADLINE, || async {
        rows_of_shard(&base, 1).await == 0
    })
    .await;
    for relay in [&mut first, &mut second] {
        assert!(relay.terminate().await.success(), "{}", relay.log_text());
    }
    let received = consume_ids_to_end(&topic).await;
    let summary = check_delivery("shards-cleanup-by-xmin", &committed, &received);
    assert_eq!(
        summary.duplicated, 0,
        "a graceful run publishes each event once"
    );
    drop_shards(&shards).await;
    base.drop_all().await;
}
