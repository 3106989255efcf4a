//! `after_dead_letter = "park"` (the default) on a webhook sink: an event
//! the endpoint refuses for good is DEAD in the delivery table and holds
//! its aggregate; the aggregate's later events wait behind it, untried,
//! while other aggregates flow (also through the retry worker); so does an
//! event the retry worker marks DEAD later. `outbox-relay dead retry` of the
//! DEAD event sends it first and then the ones behind it in commit order;
//! `dead discard` lets the ones behind it go on. (Under
//! "skip" the aggregate goes on at once: the 410 test in `webhooks.rs`.)

use std::collections::HashMap;

use crate::support::cli::shown;
use crate::support::webhook::*;
use crate::support::*;

use super::{cli, secrets};

/// Events per aggregate, and aggregates: agg-0 is the one refused.
const PER_AGGREGATE: usize = 4;
const AGGREGATES: usize = 3;

/// A relay on a fresh delivery table, the dead-letter commands' config
/// (as the superuser, with the replay record they need), and the receiver.
struct Case {
    outbox: TestOutbox,
    receiver: Receiver,
    table: String,
    config: std::path::PathBuf,
    relay: Relay,
}

async fn start() -> Case {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    outbox.create_topic(&outbox.dlq_topic, 1).await;
    replay_record(&outbox.admin, "public").await;
    let toml = webhook_toml(&receiver.url(), &secrets(), "");
    let config = outbox.write_config_with_url(&env("PG_URL"), &toml);
    let mut settings = outbox.settings_with(&toml);
    settings.webhooks.table.name = table.clone();
    let relay = Relay::in_process(settings);
    Case {
        outbox,
        receiver,
        table,
        config,
        relay,
    }
}

impl Case {
    /// `outbox-relay dead <verb> <id>` as an operator runs it.
    async fn dead(&self, verb: &str, id: &str) {
        let args = ["dead", verb, id, "--config"]
            .iter()
            .map(|s| (*s).to_owned())
            .chain([self.config.display().to_string()])
            .collect();
        let out = cli(args, &self.table).await;
        assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    }

    /// Waits until the slot confirmed past everything committed so far:
    /// every event is handled (delivered, or its row committed).
    async fn all_handled(&self) {
        let after = self.outbox.current_wal_lsn().await;
        wait_until("every event handled", DEADLINE, || async {
            self.outbox
                .confirmed_flush_lsn()
                .await
                .is_some_and(|c| c >= after)
        })
        .await;
    }

    /// `(status, attempts)` of the row of each event id, by id.
    async fn rows(&self) -> HashMap<String, (String, i32)> {
        self.outbox
            .admin
            .query(
                &format!(
                    "SELECT event_id, status, attempts FROM public.{}",
                    self.table
                ),
                &[],
            )
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2))))
            .collect()
    }

    fn accepted_ids(&self) -> Vec<String> {
        self.receiver.accepted().into_iter().map(|a| a.id).collect()
    }

    /// Requests the receiver saw for `ids` (accepted or not).
    fn requests_for(&self, ids: &[String]) -> usize {
        self.receiver
            .log()
            .iter()
            .filter(|(id, _, _)| ids.contains(id))
            .count()
    }
}

/// The events of `aggregate` in commit order.
fn of(committed: &[Committed], aggregate: &str) -> Vec<String> {
    committed
        .iter()
        .filter(|c| c.aggregate == aggregate)
        .map(|c| c.id.clone())
        .collect()
}

/// Commits the events and waits until agg-0's first is DEAD and the
/// others of agg-0 are handled; asserts they wait behind it untried while
/// agg-1 and agg-2 arrive, agg-1 partly through the retry worker.
/// `by_worker`: agg-0's first event fails for a while first (PENDING), and
/// the retry worker is the one that finds it refused for good and marks it
/// DEAD; else it is refused in line at once.
async fn park_agg_0(case: &Case, by_worker: bool) -> Vec<Committed> {
    // agg-0's first event is refused for good; agg-1's third fails for a
    // while (503), so it and the one behind it go through the retry worker
    // after agg-0's rows are queued.
    case.receiver
        .refuse("agg-0", 1, if by_worker { 503 } else { 410 });
    case.receiver.refuse("agg-1", 3, 503);
    let mut writer = case.outbox.writer().await;
    let mut seqs = HashMap::new();
    let committed = case
        .outbox
        .commit_events(
            &mut writer,
            PER_AGGREGATE * AGGREGATES,
            1,
            AGGREGATES,
            &mut seqs,
        )
        .await;
    case.all_handled().await;
    let k = of(&committed, "agg-0");
    if by_worker {
        assert_eq!(
            case.rows().await.get(&k[0]).map(|r| r.0.clone()),
            Some("PENDING".to_owned())
        );
        case.receiver.refuse("agg-0", 1, 410);
        wait_until(
            "the retry worker marks agg-0's first DEAD",
            DEADLINE,
            || async { case.rows().await.get(&k[0]).is_some_and(|r| r.0 == "DEAD") },
        )
        .await;
    }
    let rows = case.rows().await;
    assert_eq!(
        rows.get(&k[0]).map(|r| r.0.as_str()),
        Some("DEAD"),
        "{rows:?}"
    );
    for id in &k[1..] {
        assert_eq!(
            rows.get(id),
            Some(&("PENDING".to_owned(), 0)),
            "agg-0's later events are queued behind its DEAD event, untried: {rows:?}"
        );
    }
    // The worker now takes agg-1's failing event and the one behind it,
    // both due after agg-0's queued rows: were those claimable, the worker
    // (oldest due first) would have tried them by then.
    case.receiver.forgive("agg-1", 3);
    let others: Vec<Committed> = committed
        .iter()
        .filter(|c| c.aggregate != "agg-0")
        .cloned()
        .collect();
    wait_until("the other aggregates accepted", DEADLINE, || async {
        case.receiver.has_all(&others)
    })
    .await;
    assert_eq!(
        case.requests_for(&k[1..]),
        0,
        "no event of agg-0 after its DEAD one was sent"
    );
    assert_eq!(
        case.rows().await.get(&k[1]),
        Some(&("PENDING".to_owned(), 0))
    );
    committed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_event_holds_its_aggregate_until_dead_retry_sends_it_first() {
    let case = start().await;
    let committed = park_agg_0(&case, false).await;
    let k = of(&committed, "agg-0");
    let held: String = case
        .outbox
        .admin
        .query_one(
            &format!(
                "SELECT after_dead_letter FROM public.{} WHERE event_id = $1",
                case.table
            ),
            &[&k[0]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, "park", "the row records its route's setting");

    retry_agg_0(case, committed, "webhook-park-retry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_retry_worker_marks_dead_holds_its_aggregate_too() {
    let case = start().await;
    let committed = park_agg_0(&case, true).await;
    retry_agg_0(case, committed, "webhook-park-worker-dead").await;
}

/// The endpoint is fixed, the operator retries agg-0's DEAD event: it
/// arrives first, then the rest of agg-0 in commit order, nothing twice.
async fn retry_agg_0(case: Case, committed: Vec<Committed>, name: &str) {
    let k = of(&committed, "agg-0");
    case.receiver.forgive("agg-0", 1);
    case.dead("retry", &k[0]).await;
    wait_until("agg-0's events accepted", DEADLINE, || async {
        let ids = case.accepted_ids();
        k.iter().all(|id| ids.contains(id))
    })
    .await;
    let accepted = case.receiver.accepted();
    let agg_0: Vec<String> = accepted
        .iter()
        .filter(|a| a.aggregate == "agg-0")
        .map(|a| a.id.clone())
        .collect();
    assert_eq!(
        agg_0, k,
        "the retried event first, then the rest in commit order"
    );
    let duplicates = check_webhook_delivery(name, &committed, &accepted, &[]);
    assert_eq!(duplicates, 0);
    assert_eq!(case.receiver.max_in_flight_per_key(), 1);
    wait_until("every row SENT", DEADLINE, || async {
        case.rows()
            .await
            .values()
            .all(|(status, _)| status == "SENT")
    })
    .await;
    case.relay.stop().await.expect("graceful stop");
    case.outbox.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_discard_lets_the_held_aggregate_go_on_without_it() {
    let case = start().await;
    let committed = park_agg_0(&case, false).await;
    let k = of(&committed, "agg-0");

    case.dead("discard", &k[0]).await;
    wait_until("agg-0's later events accepted", DEADLINE, || async {
        let ids = case.accepted_ids();
        k[1..].iter().all(|id| ids.contains(id))
    })
    .await;
    let accepted = case.receiver.accepted();
    let duplicates = check_webhook_delivery("webhook-park-discard", &committed, &accepted, &k[..1]);
    assert_eq!(duplicates, 0);
    assert!(
        !accepted.iter().any(|a| a.id == k[0]),
        "the discarded event is never sent"
    );
    assert_eq!(case.rows().await.get(&k[0]), None, "its row is deleted");
    case.relay.stop().await.expect("graceful stop");
    case.outbox.drop_all().await;
}
