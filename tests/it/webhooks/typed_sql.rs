//! The relay's statements on the delivery table carry every value as a
//! typed parameter: what PostgreSQL shows of the sessions working on the
//! table (`pg_stat_activity.query`, each session's latest statement) never
//! holds an event's id or the route's name, whichever way the event went:
//! sent in line, parked and sent by the retry worker, refused for good
//! (DEAD).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::support::webhook::*;
use crate::support::*;

use super::secrets;

/// The latest statements of the other sessions that name `table`.
const SAMPLE: &str = "SELECT query FROM pg_stat_activity \
                      WHERE pid <> pg_backend_pid() AND strpos(query, $1) > 0";

async fn sample(admin: &tokio_postgres::Client, table: &str) -> Vec<String> {
    admin
        .query(SAMPLE, &[&table])
        .await
        .expect("sample pg_stat_activity")
        .into_iter()
        .map(|r| r.get(0))
        .collect()
}

/// [`sample`] every 20 ms into `seen` until `stop` turns true.
async fn watch_statements(
    table: String,
    seen: Arc<Mutex<BTreeSet<String>>>,
    mut stop: watch::Receiver<bool>,
) {
    let admin = pg_admin().await;
    loop {
        let latest = sample(&admin, &table).await;
        seen.lock().unwrap().extend(latest);
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_value_is_spliced_into_the_delivery_tables_statements() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    let mut settings = outbox.settings_with(&webhook_toml(&receiver.url(), &secrets(), ""));
    settings.webhooks.table.name = table.clone();
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let (stop, stopped) = watch::channel(false);
    let watcher = tokio::spawn(watch_statements(table.clone(), Arc::clone(&seen), stopped));
    let relay = Relay::in_process(settings);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();

    // Sent in line.
    let mut committed = outbox.commit_events(&mut writer, 5, 1, 5, &mut seqs).await;
    wait_until("the first events accepted", DEADLINE, || async {
        receiver.has_all(&committed)
    })
    .await;
    // Parked (looked up, inserted PENDING), then claimed, sent and
    // recorded SENT by the retry worker.
    receiver.set_mode(Mode::Status(503));
    committed.extend(outbox.commit_events(&mut writer, 5, 1, 5, &mut seqs).await);
    wait_until("the events of the outage parked", DEADLINE, || async {
        delivery_counts(&outbox, &table).await.get("PENDING") == Some(&5)
    })
    .await;
    receiver.set_mode(Mode::Accept {
        delay: Duration::ZERO,
    });
    wait_until("the parked events sent by the worker", DEADLINE, || async {
        delivery_counts(&outbox, &table).await.get("SENT") == Some(&5)
    })
    .await;
    // Refused for good: inserted DEAD.
    let next = seqs.get("agg-0").copied().unwrap_or(0) + 1;
    receiver.refuse("agg-0", next, 410);
    committed.extend(outbox.commit_events(&mut writer, 1, 1, 1, &mut seqs).await);
    wait_until("the refused event DEAD", DEADLINE, || async {
        delivery_counts(&outbox, &table).await.get("DEAD") == Some(&1)
    })
    .await;
    stop.send_replace(true);
    watcher.await.expect("the watcher ran");
    // The sessions stay idle on their latest statement: one more sample
    // after the last event.
    let latest = sample(&outbox.admin, &table).await;
    seen.lock().unwrap().extend(latest);
    relay.stop().await.expect("graceful stop");

    let seen = seen.lock().unwrap().clone();
    for query in &seen {
        let spliced: Vec<&str> = committed
            .iter()
            .map(|c| c.id.as_str())
            .filter(|id| query.contains(id))
            .collect();
        assert!(
            spliced.is_empty(),
            "a statement holds event ids {spliced:?}: {query}"
        );
        assert!(
            !query.contains("'hooks'"),
            "a statement holds the route's name: {query}"
        );
    }
    // What was sampled is the relay's statements, with their parameters:
    // the look-up and the insert stay the latest statement of their idle
    // sessions (the claim is, only while its request is in flight).
    for part in ["WHERE event_id = $1", "INSERT INTO"] {
        assert!(
            seen.iter().any(|q| q.contains(part)),
            "no statement with {part:?} seen: {seen:#?}"
        );
    }
    outbox.drop_all().await;
}
