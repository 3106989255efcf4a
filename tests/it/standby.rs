//! Standby relays (`relay.standby_lock`): several relays run with the same
//! config, one streams and the others say they stand by (/ready, the role
//! gauge); when the active one is killed with -9 or cut off from PostgreSQL
//! by a dead route (no FIN, no RST), a standby takes over within seconds,
//! and the relay cut off has stopped producing before it does: nothing
//! lost, per-aggregate order kept, never two relays producing at once
//! (judged on the broker's append times and each relay's CloudEvents
//! source).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::support::http;
use crate::support::proxy::StallProxy;
use crate::support::*;

const ROLE: &str = "outbox_relay_role_active";

/// One relay of the group: its process, the proxy between it and
/// PostgreSQL, its /metrics port, and the CloudEvents source that marks
/// every record it produces.
struct Member {
    name: String,
    relay: Option<Relay>,
    proxy: StallProxy,
    port: u16,
    source: String,
    starts: u32,
}

impl Member {
    async fn new(outbox: &TestOutbox, name: &str) -> Self {
        let proxy = StallProxy::start(pg_addr()).await;
        let mut member = Member {
            name: name.to_owned(),
            relay: None,
            proxy,
            port: 0,
            source: String::new(),
            starts: 0,
        };
        member.start(outbox);
        member
    }

    /// Starts (again) a relay process behind the member's proxy, with a
    /// source of its own: each process is a producer of its own.
    fn start(&mut self, outbox: &TestOutbox) {
        self.starts += 1;
        self.port = free_port();
        self.source = format!("/relay-{}-{}", self.name, self.starts);
        let url = format!(
            "postgres://relay:relay-test-password@127.0.0.1:{}/postgres",
            self.proxy.addr().port()
        );
        let config = outbox.write_config_with_url(
            &url,
            &format!("[relay]\nmetrics_addr = \"127.0.0.1:{}\"", self.port),
        );
        let text = std::fs::read_to_string(&config).unwrap();
        let text = text.replace(
            "source = \"/orders-service\"",
            &format!("source = \"{}\"", self.source),
        );
        std::fs::write(&config, text).unwrap();
        self.relay = Some(Relay::process(&config));
    }

    async fn ready(&self) -> Option<(u16, String)> {
        http::http_get(self.port, "/ready").await
    }

    async fn role(&self) -> Option<f64> {
        let (_, body) = http::http_get(self.port, "/metrics").await?;
        body.contains(ROLE)
            .then(|| http::metric_value(&body, ROLE, ""))
    }

    async fn wait_ready(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let answer = self.ready().await;
            if answer.as_ref().is_some_and(|(code, _)| *code == 200) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay {} not ready within {within:?}: /ready {answer:?}; log:\n{}",
                self.source,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for /ready to say "standby". Run with the lock off
    /// (`OUTBOX_RELAY__RELAY__STANDBY_LOCK=false` in the environment, which
    /// the relays inherit), to see what the lock prevents, it waits for any
    /// 503 instead.
    async fn wait_standby(&self, within: Duration) {
        let lock_off =
            std::env::var("OUTBOX_RELAY__RELAY__STANDBY_LOCK").is_ok_and(|v| v == "false");
        wait_until(
            &format!("relay {} to stand by", self.source),
            within,
            || async {
                self.ready().await.is_some_and(|(code, body)| {
                    code == 503 && (body.starts_with("standby") || lock_off)
                })
            },
        )
        .await;
    }

    fn log(&self) -> String {
        self.relay.as_ref().map(Relay::log_text).unwrap_or_default()
    }
}

fn pg_addr() -> std::net::SocketAddr {
    format!("127.0.0.1:{}", env("PG_PORT")).parse().unwrap()
}

/// Commits small transactions in the background until stopped; returns
/// what it committed, in commit order.
struct Writer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    committed: Arc<Mutex<Vec<Committed>>>,
}

impl Writer {
    fn start(outbox: Arc<TestOutbox>) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let committed = Arc::new(Mutex::new(Vec::new()));
        let out = committed.clone();
        let task = tokio::spawn(async move {
            let mut writer = outbox.writer().await;
            let mut seqs = HashMap::new();
            while !*stopped.borrow() {
                let batch = outbox.commit_events(&mut writer, 2, 2, 10, &mut seqs).await;
                out.lock().unwrap().extend(batch);
                let _ = tokio::time::timeout(Duration::from_millis(20), stopped.changed()).await;
            }
        });
        Writer {
            stop,
            task,
            committed,
        }
    }

    fn len(&self) -> usize {
        self.committed.lock().unwrap().len()
    }

    async fn finish(self) -> Vec<Committed> {
        self.stop.send_replace(true);
        self.task.await.unwrap();
        Arc::try_unwrap(self.committed)
            .unwrap()
            .into_inner()
            .unwrap()
    }
}

/// An outbox whose topic stamps records with the broker's append time.
async fn outbox_with_append_times() -> (TestOutbox, String) {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox
        .create_topic_with_config(&topic, 3, &[("message.timestamp.type", "LogAppendTime")])
        .await;
    (outbox, topic)
}

// The second relay on the slot stands by and says so (/ready 503
// "standby", /health 200, role 0), the first streams (role 1); killed with
// -9, the first is replaced by the second within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_relay_says_so_and_takes_over_when_the_active_one_is_killed() {
    let (outbox, topic) = outbox_with_append_times().await;
    let a = Member::new(&outbox, "a").await;
    a.wait_ready(DEADLINE).await;
    let b = Member::new(&outbox, "b").await;
    b.wait_standby(DEADLINE).await;
    let (code, body) = http::http_get(b.port, "/health").await.unwrap();
    assert_eq!(
        (code, body.as_str()),
        (200, "standby\n"),
        "a standby is alive"
    );
    // For orchestrators that count ready replicas, a standby in its place
    // is ready on request; the active one is ready either way.
    let standby_ok = http::http_get(b.port, "/ready?standby=ok").await.unwrap();
    assert_eq!((standby_ok.0, standby_ok.1.as_str()), (200, "standby\n"));
    assert_eq!(
        http::http_get(a.port, "/ready?standby=ok").await.unwrap().0,
        200
    );
    assert_eq!(a.role().await, Some(1.0));
    assert_eq!(b.role().await, Some(0.0));
    assert!(
        b.log()
            .contains("standby: another relay holds the relay lock"),
        "{}",
        b.log()
    );

    let mut writer = outbox.writer().await;
    let mut seqs = HashMap::new();
    let mut committed = outbox
        .commit_events(&mut writer, 50, 2, 10, &mut seqs)
        .await;
    consume_all_ids(&topic, &committed, DEADLINE).await;
    // Still standing by: it never tried the slot meanwhile.
    assert_eq!(b.role().await, Some(0.0));
    assert!(!b.log().contains("streaming from the slot"), "{}", b.log());

    let killed = Instant::now();
    a.relay.unwrap().kill9();
    b.wait_ready(DEADLINE).await;
    let takeover = killed.elapsed();
    assert_eq!(b.role().await, Some(1.0));
    committed.extend(
        outbox
            .commit_events(&mut writer, 50, 2, 10, &mut seqs)
            .await,
    );
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    check_delivery("standby-takeover", &committed, &received);
    println!(
        "takeover: case=standby-kill9 secs={:.2}",
        takeover.as_secs_f64()
    );
    assert!(
        takeover < Duration::from_secs(5),
        "takeover after kill -9 took {takeover:?}"
    );
    outbox.drop_all().await;
}

enum Fault {
    Kill9,
    /// A dead route between the active relay and PostgreSQL.
    NetworkCut,
}

/// Median and maximum, in seconds.
fn median_max(samples: &[Duration]) -> (f64, f64) {
    let mut secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
    secs.sort_by(f64::total_cmp);
    let median = if secs.len().is_multiple_of(2) {
        (secs[secs.len() / 2 - 1] + secs[secs.len() / 2]) / 2.0
    } else {
        secs[secs.len() / 2]
    };
    (median, *secs.last().unwrap())
}

// Two relays under a steady stream of writes; the active one is killed
// with -9 or cut off from PostgreSQL (a stalled route) ten times each,
// alternately. Every takeover is timed (fault to /ready 200 on the
// standby); the killed relay is started again, the cut-off one gets its
// route back, and either must come back as the standby. At the end:
// nothing lost, per-aggregate order kept, and the broker's append times
// show the relays producing in turns only.
//
// Faults per kind: STANDBY_FAULTS (default 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_under_kill9_and_network_cuts_never_produce_at_once() {
    let started = Instant::now();
    let faults: usize = std::env::var("STANDBY_FAULTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let (outbox, topic) = outbox_with_append_times().await;
    let outbox = Arc::new(outbox);
    // A first, so that it is the one to hold the lock.
    let a = Member::new(&outbox, "a").await;
    a.wait_ready(DEADLINE).await;
    let mut members = [a, Member::new(&outbox, "b").await];
    let mut active = 0;
    members[1].wait_standby(DEADLINE).await;
    let mut holders = vec![members[active].source.clone()];
    let writer = Writer::start(outbox.clone());
    let (mut kills, mut cuts) = (Vec::new(), Vec::new());

    for round in 0..2 * faults {
        let fault = if round % 2 == 0 {
            Fault::Kill9
        } else {
            Fault::NetworkCut
        };
        // Events flow through the active relay before each fault.
        let before = writer.len();
        wait_until("new commits", DEADLINE, || async {
            writer.len() >= before + 20
        })
        .await;
        let standby = 1 - active;
        let at = Instant::now();
        match fault {
            Fault::Kill9 => members[active].relay.take().unwrap().kill9(),
            Fault::NetworkCut => members[active].proxy.stall(),
        }
        members[standby].wait_ready(DEADLINE).await;
        let took = at.elapsed();
        holders.push(members[standby].source.clone());
        match fault {
            Fault::Kill9 => {
                kills.push(took);
                members[active].start(&outbox);
            }
            Fault::NetworkCut => {
                cuts.push(took);
                // Whatever the cut-off relay holds, it must not produce
                // now; then its route comes back.
                members[active].proxy.resume();
            }
        }
        members[active].wait_standby(DEADLINE).await;
        println!(
            "takeover: round={round} fault={} secs={:.2}",
            if round % 2 == 0 {
                "kill9"
            } else {
                "network-cut"
            },
            took.as_secs_f64()
        );
        active = standby;
    }

    let committed = writer.finish().await;
    let received = consume_all_ids(&topic, &committed, DEADLINE).await;
    check_delivery("standby-faults", &committed, &received);
    let everything = consume_to_end(&topic).await;
    let runs = check_single_producer("standby-faults", &everything, "ce_source", &holders);
    assert!(runs.len() >= 2, "the relays took turns: {runs:?}");
    let (kill_median, kill_max) = median_max(&kills);
    let (cut_median, cut_max) = median_max(&cuts);
    println!(
        "takeover-summary: kill9 n={} median={kill_median:.2}s max={kill_max:.2}s; \
         network-cut n={} median={cut_median:.2}s max={cut_max:.2}s",
        kills.len(),
        cuts.len()
    );
    for member in &members {
        assert!(!member.log().contains("panicked"), "{}", member.log());
    }
    assert!(
        kill_max < 5.0,
        "takeover after kill -9: max {kill_max:.2} s"
    );
    assert!(
        cut_max < 5.0,
        "takeover after a network cut: max {cut_max:.2} s"
    );
    drop(members);
    outbox.drop_all().await;
    report_wall_time("standby-faults", started);
}

/// With several hosts in `postgres.url`, the stream goes to the server the
/// relay lock is held on, never to another host that happens to accept
/// the replication connection: the lock fences nothing there. The first
/// host (a throwaway cluster) accepts ordinary sessions, so the lock is
/// taken there, but refuses replication (`max_wal_senders = 0`); the
/// second holds the slot. The relay must keep retrying the first, saying
/// so on /ready, and leave the second's slot alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_several_hosts_the_stream_goes_to_the_server_of_the_lock() {
    use crate::support::cluster::Cluster;

    let outbox = TestOutbox::create("jsonb").await;
    let first = Cluster::start(&["max_wal_senders = 0"]);
    first
        .client()
        .await
        .batch_execute("CREATE ROLE relay LOGIN")
        .await
        .expect("the relay's role on the first host");
    let url = format!(
        "postgres://relay:relay-test-password@127.0.0.1:{},127.0.0.1:{}/postgres",
        first.port,
        env("PG_PORT")
    );
    let port = free_port();
    let config = outbox.write_config_with_url(
        &url,
        &format!("[relay]\nmetrics_addr = \"127.0.0.1:{port}\""),
    );
    let relay = Relay::process(&config);
    let first_host = format!("127.0.0.1:{}", first.port);
    wait_until_explained(
        "/ready to say the relay retries the server of its lock",
        Duration::from_secs(60),
        || async {
            http::http_get(port, "/ready")
                .await
                .is_some_and(|(code, body)| {
                    code == 503 && body.contains("retrying") && body.contains(&first_host)
                })
        },
        || async {
            format!(
                "/ready {:?}; slot {:?}; log:\n{}",
                http::http_get(port, "/ready").await,
                outbox.slot().await,
                relay.log_text()
            )
        },
    )
    .await;
    let slot = outbox.slot().await.expect("the slot");
    assert_eq!(
        slot.active_pid, None,
        "the second host's slot is read without the lock there: {slot:?}"
    );
    drop(relay);
    outbox.drop_all().await;
}

/// The relay lock held, the slot read by a process the holder may not end
/// (a superuser's `pg_recvlogical`: the relay's role cannot signal it): the
/// relay waits for the slot, says so once at info, and tries less and less
/// often (every 100 ms before, some 200 tries in the 20 s watched here);
/// once the reader goes, it streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_the_holder_cannot_free_is_waited_for_quietly_and_less_and_less_often() {
    let outbox = TestOutbox::create("jsonb").await;
    let topic = outbox.topic("order");
    outbox.create_topic(&topic, 1).await;
    let mut reader = Reader(
        std::process::Command::new(format!("{}/pg_recvlogical", env("PG_BINDIR")))
            .args(["-d", &env("PG_URL"), "--slot", &outbox.slot, "--start"])
            .args(["-f", "/dev/null", "-o", "proto_version=1", "-o"])
            .arg(format!("publication_names={}", outbox.publication))
            .spawn()
            .expect("start pg_recvlogical"),
    );
    wait_until("the superuser's reader to hold the slot", DEADLINE, || {
        outbox.slot_active()
    })
    .await;
    let port = free_port();
    let config = outbox.write_config(&format!("[relay]\nmetrics_addr = \"127.0.0.1:{port}\""));
    let relay = Relay::process(&config);
    let said = "waiting_for_slot_reader";
    relay.wait_for_event(said, DEADLINE).await;
    // A window of the wait itself, measured: how often the relay tried.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (_, metrics) = http::http_get(port, "/metrics").await.expect("/metrics");
    let tries: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("outbox_relay_reconnects_total{reason=\"slot_busy\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no slot_busy reconnects in {metrics}"));
    let log = relay.log_text();
    let lines = relay.event_lines(said).len();
    println!("a slot held for 20 s: {tries} tries, {lines} log line(s)");
    assert!(
        (2.0..=15.0).contains(&tries),
        "tries in 20 s against a busy slot: {tries}"
    );
    assert_eq!(lines, 1, "said once, then quiet:\n{log}");
    reader.end();
    relay.wait_for_event("streaming", DEADLINE).await;
    drop(relay);
    outbox.drop_all().await;
}

/// The slot's other reader, ended when dropped: a failing test never
/// leaves it on the shared server.
struct Reader(std::process::Child);

impl Reader {
    fn end(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.end();
    }
}
