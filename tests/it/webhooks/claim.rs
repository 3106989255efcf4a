//! The retry worker's claim under a backlog: while an endpoint is down,
//! each aggregate's head backs off and the events queued behind it are due
//! at once, so the due rows are mostly rows no claim may take. A claim
//! looks at a bounded number of them, then walks the heads, one per
//! aggregate: its cost does not grow with the rows queued behind them.

use std::time::Duration;

use bytes::Bytes;
use outbox_relay::pg::{ConnectSettings, Conninfo};
use outbox_relay::routes::AfterDeadLetter;
use outbox_relay::sink::http::WebhookEvent;
use outbox_relay::sink::http::store::{self, CLAIM_LOOK, DeliveryTable, Session};
use serde_json::Value;

use crate::support::*;

const ROUTE: &str = "hooks";

/// Rows read by the scans of an `EXPLAIN (ANALYZE, FORMAT JSON)` plan:
/// each scan node's rows times its loops, summed over the tree.
fn rows_scanned(plan: &Value) -> f64 {
    let own = match plan["Node Type"].as_str() {
        Some(t) if t.contains("Scan") && t != "Function Scan" && t != "CTE Scan" => {
            plan["Actual Rows"].as_f64().unwrap_or(0.0)
                * plan["Actual Loops"].as_f64().unwrap_or(0.0)
        }
        _ => 0.0,
    };
    let below: f64 = plan["Plans"]
        .as_array()
        .map_or(0.0, |plans| plans.iter().map(rows_scanned).sum());
    own + below
}

/// `statement` run under `EXPLAIN ANALYZE` for [`ROUTE`] (prepared, as
/// the relay's own parameter), in a transaction rolled back (its row locks
/// go with it): the rows its scans read, and the plan.
async fn scanned_by(admin: &tokio_postgres::Client, statement: &str) -> (f64, String) {
    let messages = admin
        .simple_query(&format!(
            "BEGIN; PREPARE measured (text) AS {statement}; \
             EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE measured ('{ROUTE}'); \
             ROLLBACK; DEALLOCATE measured"
        ))
        .await
        .unwrap();
    let text = messages
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .expect("a plan");
    let plan: Value = serde_json::from_str(&text).unwrap();
    (rows_scanned(&plan[0]["Plan"]), text)
}

/// A superuser connection and a delivery table of its own, created.
async fn new_table() -> (tokio_postgres::Client, DeliveryTable) {
    let admin = pg_admin().await;
    let table = DeliveryTable {
        schema: "public".to_owned(),
        name: random_name("claim"),
    };
    admin.batch_execute(&table.create_sql()).await.unwrap();
    (admin, table)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_behind_a_backlog_of_queued_rows_reads_a_bounded_number_of_them() {
    let (admin, table) = new_table().await;
    let t = table.quoted();
    // 20 aggregates whose heads back off (due in an hour), each with 100
    // events queued behind it and due at once, as the relay writes them;
    // then one aggregate whose head is due, later than every queued row.
    let (aggregates, queued) = (20, 100);
    admin
        .execute(
            &format!(
                "INSERT INTO {t} (event_id, route, aggregate_key, status, attempts, max_attempts, \
                 next_attempt_at, headers, body, after_dead_letter) \
                 SELECT 'e-' || a || '-' || n, $1, 'agg-' || a, 'PENDING', \
                        CASE WHEN n = 0 THEN 3 ELSE 0 END, 10, \
                        CASE WHEN n = 0 THEN now() + interval '1 hour' \
                             ELSE now() - interval '10 seconds' + n * interval '1 millisecond' END, \
                        '{{}}', '\\x00'::bytea, 'park' \
                 FROM generate_series(1, $2::int) a, generate_series(0, $3::int) n \
                 ORDER BY n, a"
            ),
            &[&ROUTE, &aggregates, &queued],
        )
        .await
        .unwrap();
    admin
        .execute(
            &format!(
                "INSERT INTO {t} (event_id, route, aggregate_key, status, attempts, max_attempts, \
                 next_attempt_at, headers, body, after_dead_letter) \
                 VALUES ('e-late', $1, 'late', 'PENDING', 2, 10, now() - interval '1 second', \
                         '{{}}', '\\x00'::bytea, 'park')"
            ),
            &[&ROUTE],
        )
        .await
        .unwrap();
    admin.batch_execute(&format!("ANALYZE {t}")).await.unwrap();
    let due_queued = f64::from(aggregates * queued);
    assert!(
        due_queued > 4.0 * CLAIM_LOOK as f64,
        "the backlog outgrows the first look"
    );

    // The one head that is due is claimed, though 2,000 rows that may not
    // be claimed are due before it.
    let settings = ConnectSettings::new(Conninfo::parse(&env("PG_URL")).expect("conninfo"));
    let mut session = Session::connect(&settings, &table).await.unwrap();
    let claimed = store::claim(&mut session, ROUTE)
        .await
        .unwrap()
        .expect("the due head behind the backlog is claimed");
    assert_eq!(claimed.event.id, "e-late");
    assert_eq!(claimed.event.key, "late");
    drop(session);

    // What each statement reads: the first look at most its bound (the
    // due rows it takes, each row and its key's queue), the walk a few
    // probes per aggregate. A scan of every due row in due order, with a
    // probe of its key's queue each, reads twice the backlog.
    let (first_look, first_plan) = scanned_by(&admin, &store::claim_sql(&t)).await;
    let (walk, walk_plan) = scanned_by(&admin, &store::claim_by_heads_sql(&t)).await;
    println!(
        "claim behind {due_queued} queued rows of {aggregates} aggregates: first look read \
         {first_look} rows, the heads' walk {walk}"
    );
    assert!(
        first_look <= 4.0 * CLAIM_LOOK as f64,
        "the first look read {first_look} rows: {first_plan}"
    );
    assert!(
        walk <= 6.0 * f64::from(aggregates + 1),
        "the walk read {walk} rows for {} aggregates: {walk_plan}",
        aggregates + 1
    );
    admin
        .batch_execute(&format!("DROP TABLE {t}"))
        .await
        .unwrap();
}

/// The walk keeps every rule of the claim: a head another session holds
/// is skipped and nothing behind it is taken; a head that is DEAD under
/// `park` holds its queue; a head not yet due is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walk_behind_a_backlog_takes_only_free_due_heads() {
    let (admin, table) = new_table().await;
    let t = table.quoted();
    let settings = ConnectSettings::new(Conninfo::parse(&env("PG_URL")).expect("conninfo"));
    let mut writer = Session::connect(&settings, &table).await.unwrap();
    // Rows in the order the relay writes them: per key by id.
    let row = |key: &str, n: usize| WebhookEvent {
        id: format!("{key}-{n}"),
        key: key.to_owned(),
        headers: Vec::new(),
        body: Bytes::from_static(b"{}"),
        after_dead_letter: AfterDeadLetter::Park,
    };
    let write = |key: &'static str, n: usize, status: &'static str, delay: Duration| {
        (row(key, n), status, delay)
    };
    let hour = Duration::from_secs(3600);
    let mut rows = vec![
        // The backlog: a backing-off head and more queued rows than the
        // first look takes, due at once.
        write("backlog", 0, store::PENDING, hour),
    ];
    rows.extend(
        (1..=CLAIM_LOOK as usize + 10).map(|n| write("backlog", n, store::PENDING, Duration::ZERO)),
    );
    rows.extend([
        // DEAD under park: holds the due row behind it.
        write("parked", 0, store::DEAD, Duration::ZERO),
        write("parked", 1, store::PENDING, Duration::ZERO),
        // Due head, to be held by another session first.
        write("held", 0, store::PENDING, Duration::ZERO),
        write("held", 1, store::PENDING, Duration::ZERO),
        // Due head, free.
        write("free", 0, store::PENDING, Duration::ZERO),
        write("free", 1, store::PENDING, Duration::ZERO),
    ]);
    for (event, status, delay) in &rows {
        let new = store::NewRow {
            route: ROUTE,
            event,
            status,
            attempts: 0,
            max_attempts: 10,
            delay: *delay,
            last_status: None,
            last_error: None,
        };
        store::insert(&mut writer, &new).await.unwrap();
    }
    // "held" and "free" were written after the backlog's queued rows, so
    // they are due after them, beyond the first look.
    let mut first = Session::connect(&settings, &table).await.unwrap();
    let mut second = Session::connect(&settings, &table).await.unwrap();
    let a = store::claim(&mut first, ROUTE)
        .await
        .unwrap()
        .expect("a due head");
    let b = store::claim(&mut second, ROUTE)
        .await
        .unwrap()
        .expect("another due head");
    let mut taken = [a.event.id.clone(), b.event.id.clone()];
    taken.sort();
    assert_eq!(taken, ["free-0".to_owned(), "held-0".to_owned()]);
    let mut third = Session::connect(&settings, &table).await.unwrap();
    assert!(
        store::claim(&mut third, ROUTE).await.unwrap().is_none(),
        "nothing else is free: the rows behind the held heads, the parked queue, the backlog"
    );
    // Their open transactions hold the table.
    drop((first, second, third, writer));
    admin
        .batch_execute(&format!("DROP TABLE {t}"))
        .await
        .unwrap();
}
