//! The delivery table missing: at start the relay refuses (exit 3, the
//! table and `outbox-relay init` named) instead of running without ever
//! sending; dropped while the relay runs, the retry worker backs off
//! (counted in `outbox_relay_reconnects_total{reason="delivery_table"}`)
//! instead of retrying as fast as it can, and goes on once the table is
//! back. A table from an older relay (no `after_dead_letter` column) is
//! refused at start until `init` adds the column, keeping its rows.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::http::{http_get, metric_value};
use crate::support::webhook::*;
use crate::support::*;

/// How long the refusal may take: connecting, the slot, the checks.
const REFUSED_WITHIN: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_its_delivery_table_is_refused_at_start() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    // Named, never created: `outbox-relay init` was not run.
    let table = random_name("delivery");
    let config = outbox.write_config(&webhook_toml(
        &receiver.url(),
        &["new-secret".to_owned()],
        "",
    ));
    let vars = [("OUTBOX_RELAY__POSTGRES__DELIVERY_TABLE", table.as_str())];
    let mut relay = Relay::process_with_env(&config, &vars);
    let status = relay.wait(REFUSED_WITHIN).await;
    let log = relay.log_text();
    assert_eq!(
        status.code(),
        Some(EXIT_SOURCE),
        "a missing delivery table is PostgreSQL's side: {log}"
    );
    assert!(
        log.contains(&format!("\"public\".\"{table}\"")),
        "the message names the table: {log}"
    );
    assert!(
        log.contains("outbox-relay init --config") && log.contains("--admin-url"),
        "the message names the command that creates it: {log}"
    );
    assert_eq!(receiver.requests(), 0);
    outbox.drop_all().await;
}

/// The relay's counter of the worker's retries on the delivery table.
async fn table_retries(metrics_port: u16) -> f64 {
    match http_get(metrics_port, "/metrics").await {
        Some((200, body)) => metric_value(
            &body,
            "outbox_relay_reconnects_total",
            "reason=\"delivery_table\"",
        ),
        _ => panic!("no /metrics on port {metrics_port}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_table_dropped_while_running_is_retried_with_backoff() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    let metrics_port = free_port();
    let config = outbox.write_config(&format!(
        "[relay]\nmetrics_addr = \"127.0.0.1:{metrics_port}\"\n{}",
        webhook_toml(&receiver.url(), &["new-secret".to_owned()], "")
    ));
    let vars = [("OUTBOX_RELAY__POSTGRES__DELIVERY_TABLE", table.as_str())];
    let mut relay = Relay::process_with_env(&config, &vars);
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox.commit_events(&mut writer, 4, 1, 2, &mut seqs).await;
    wait_until("the relay delivers", DEADLINE, || async {
        receiver.has_all(&committed)
    })
    .await;

    outbox
        .admin
        .batch_execute(&format!("DROP TABLE public.{table}"))
        .await
        .unwrap();
    let warned = "retry_worker_table_failing";
    relay.wait_for_event(warned, DEADLINE).await;
    // A window of 10 s of the failure: the retries a back-off allows, not
    // the ~300 of a loop retrying every poll (4 loops, 30 a second before).
    let before = table_retries(metrics_port).await;
    let lines_before = relay.event_lines(warned).len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let retries = table_retries(metrics_port).await - before;
    let lines = relay.event_lines(warned).len() - lines_before;
    eprintln!("summary: retries_in_10s={retries} warn_lines_in_10s={lines}");
    assert!(
        (1.0..=12.0).contains(&retries),
        "the worker's retries in 10 s on a dropped table: {retries} (warn lines: {lines}); \
         expected a few, backing off"
    );
    assert!(
        lines <= 1,
        "one warning per incident, not per retry: {lines}"
    );
    assert!(relay.running(), "a table dropped while running is retried");

    // The table is back (init run again): the worker uses it again within
    // its longest back-off, and an event parked there is delivered.
    let sql = include_str!("../../../sql/outbox_delivery.sql").replace("outbox_delivery", &table);
    outbox.admin.batch_execute(&sql).await.unwrap();
    outbox
        .admin
        .batch_execute(&format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON public.{table} TO relay"
        ))
        .await
        .unwrap();
    receiver.set_mode(Mode::Status(503));
    let parked = outbox.commit_events(&mut writer, 2, 1, 2, &mut seqs).await;
    wait_until("the events parked in the table again", DEADLINE, || async {
        delivery_counts(&outbox, &table).await.get("PENDING") == Some(&2)
    })
    .await;
    receiver.set_mode(Mode::Accept {
        delay: Duration::ZERO,
    });
    committed.extend(parked);
    wait_until(
        "the worker delivers after the table is back",
        DEADLINE,
        || async { receiver.has_all(&committed) },
    )
    .await;
    relay.terminate().await;
    outbox.drop_all().await;
}

/// A delivery table from a relay before `after_dead_letter`: the relay
/// refuses to start on it (the slot keeps the events), check says to run
/// init, and init adds the column keeping every row; the rows already
/// there read "skip", so an old DEAD row holds nothing, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_delivery_table_is_refused_until_init_adds_its_column() {
    let outbox = TestOutbox::create("jsonb").await;
    let receiver = Receiver::start(&["new-secret"]).await;
    let table = create_delivery_table(&outbox).await;
    // As an older relay left it: no column, a DEAD row of agg-0.
    outbox
        .admin
        .batch_execute(&format!(
            "ALTER TABLE public.{table} DROP COLUMN IF EXISTS after_dead_letter;
             INSERT INTO public.{table} (event_id, route, aggregate_key, status, attempts,
                 max_attempts, headers, body)
             VALUES ('old-dead', 'hooks', 'agg-0', 'DEAD', 1, 3, '{{}}', '\\x00'::bytea)"
        ))
        .await
        .unwrap();
    let config = outbox.write_config(&webhook_toml(
        &receiver.url(),
        &["new-secret".to_owned()],
        "",
    ));
    let vars = [("OUTBOX_RELAY__POSTGRES__DELIVERY_TABLE", table.as_str())];
    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let committed = outbox.commit_events(&mut writer, 4, 1, 2, &mut seqs).await;

    let mut relay = Relay::process_with_env(&config, &vars);
    let status = relay.wait(REFUSED_WITHIN).await;
    let log = relay.log_text();
    assert_eq!(status.code(), Some(EXIT_SOURCE), "{log}");
    assert!(
        log.contains(&format!(
            "\"public\".\"{table}\" has no column after_dead_letter"
        )),
        "the message names the table and the column: {log}"
    );
    assert!(
        log.contains("outbox-relay init --config") && log.contains("--admin-url"),
        "the message names the command that adds it: {log}"
    );
    assert_eq!(receiver.requests(), 0);

    let config_path = config;
    let config = config_path.display().to_string();
    let check = vec![
        "check".to_owned(),
        "--config".to_owned(),
        config.clone(),
        "--json".to_owned(),
    ];
    let item = super::delivery_item(&super::cli(check.clone(), &table).await);
    assert_eq!(item["status"], "fail", "{item}");
    assert!(
        item["detail"]
            .as_str()
            .unwrap()
            .contains("has no column after_dead_letter"),
        "{item}"
    );
    assert!(item["fix"].as_str().unwrap().contains("init"), "{item}");

    let init = vec![
        "init".to_owned(),
        "--config".to_owned(),
        config,
        "--admin-url".to_owned(),
        env("PG_URL"),
    ];
    let output = super::cli(init, &table).await;
    assert!(
        output.status.success(),
        "{}",
        crate::support::cli::shown(&output)
    );
    let old: String = outbox
        .admin
        .query_one(
            &format!("SELECT after_dead_letter FROM public.{table} WHERE event_id = 'old-dead'"),
            &[],
        )
        .await
        .expect("init keeps the rows")
        .get(0);
    assert_eq!(old, "skip", "a row written before the column holds nothing");
    let item = super::delivery_item(&super::cli(check, &table).await);
    assert_eq!(item["status"], "ok", "{item}");

    // Started again: every event committed meanwhile arrives, agg-0's too
    // (the old DEAD row does not hold it).
    let mut relay = Relay::process_with_env(&config_path, &vars);
    wait_until(
        "the events kept by the slot delivered",
        DEADLINE,
        || async { receiver.has_all(&committed) },
    )
    .await;
    check_webhook_delivery("webhook-older-table", &committed, &receiver.accepted(), &[]);
    relay.terminate().await;
    outbox.drop_all().await;
}
