//! Serving the producer's delivery reports where the relay waits for them.
//!
//! librdkafka puts each batch of delivery reports on its main queue, and
//! somebody must poll that queue to run [`super::ReportingContext`]'s
//! callback, which hands each report to the relay's channel. rdkafka's
//! `ThreadedProducer` keeps a thread for it: each batch of reports woke
//! that thread, which then woke the relay's runtime, two wake-ups where one
//! does. At a steady 1,000 events/s that thread cost 15–17 µs of CPU and
//! 1.1 context switches per event.
//!
//! Here the queue wakes the runtime instead: librdkafka calls
//! [`on_queued`] (from its broker thread, under the queue's lock) when an
//! event lands on the empty queue, which only stores a wake-up in a
//! [`Notify`]; a task of the runtime then polls the queue empty, a bounded
//! number of events at a time. Without a runtime (a producer built outside
//! one) a plain thread polls, as rdkafka's did. Side by side, the relay's
//! CPU per event at a steady 1,000/s fell from 112–113 to 98 µs, at 5,000/s
//! by about 5 %; a backlog drains as fast, exactly-once a little faster
//! (benches/cpu-notes.md, thirty-second round).
//!
//! The session may also hold the reports ([`PumpGuard::hold`]) while one
//! event waits for the broker and more are expected soon (a steady rate):
//! a report landing on the empty queue then wakes nobody, and the session
//! serves the queue itself at the start of its next turn; a record handed
//! over meanwhile lets go of the hold ([`PumpGuard::before_send`]). At a
//! steady 1,000 events/s that is about one wake-up per event fewer: the
//! report of one event is served by the wake-up of the next one's WAL.
//! The machine says when, and for how long (`machine/pace.rs`,
//! `reports_wait_until`).

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafka;
use tokio::sync::{Notify, oneshot};

use super::ReportingContext;

/// The relay's producer: polled by [`spawn`]'s pump, not by a thread of
/// rdkafka's.
pub(super) type RelayProducer<T> = BaseProducer<ReportingContext<T>>;

/// At most this many queue events (each a batch of reports) per turn of
/// the pump before it lets the runtime's other tasks run.
const EVENTS_PER_TURN: usize = 64;

/// How long the thread that stands in for the pump without a runtime
/// waits in one poll (rdkafka's polling thread waited as long).
const THREAD_POLL: Duration = Duration::from_millis(100);

/// The handle on the producer's main queue the pump asks for its length.
struct MainQueue(NonNull<rd::rd_kafka_queue_t>);

// SAFETY: librdkafka's queue handles may be used from any thread; the pump
// and the session only ask the length, and the reference is destroyed once.
unsafe impl Send for MainQueue {}
// SAFETY: shared by the pump and the session, which only ask the length
// (under the queue's own lock); the reference is destroyed once, by drop.
unsafe impl Sync for MainQueue {}

impl MainQueue {
    fn len(&self) -> usize {
        // SAFETY: the handle is this struct's own reference to the queue.
        unsafe { rd::rd_kafka_queue_length(self.0.as_ptr()) }
    }
}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: this struct's own reference, released once.
        unsafe { rd::rd_kafka_queue_destroy(self.0.as_ptr()) }
    }
}

/// What librdkafka's callback and the session share: the pump's wake-up,
/// and whether the session holds the reports (then a report landing on the
/// empty queue wakes nobody).
#[derive(Default)]
pub(super) struct Wake {
    ready: Notify,
    held: AtomicBool,
}

/// Called by librdkafka when an event lands on the empty main queue: wakes
/// the pump unless the session holds the reports. `opaque` is the [`Wake`]
/// of the producer's context, which lives as long as the librdkafka handle
/// that calls this.
unsafe extern "C" fn on_queued(_rk: *mut RDKafka, opaque: *mut c_void) {
    // SAFETY: see above; neither the load nor `notify_one` blocks or calls
    // librdkafka.
    let wake = unsafe { &*(opaque as *const Wake) };
    // Called under the queue's lock, after the event was added: a session
    // that stops holding stores `false` before it reads the queue's length
    // (under the same lock), so either it finds this event or this load
    // finds `false` (see `PumpGuard::hold`).
    if !wake.held.load(Ordering::SeqCst) {
        wake.ready.notify_one();
    }
}

/// Ends the pump when dropped (the sink holding it is gone); through it the
/// session holds the reports and serves them itself.
pub(super) struct PumpGuard {
    _closed: Option<oneshot::Sender<()>>,
    /// The queue and the wake-up of the pump task; `None` with a polling
    /// thread (no runtime), which holds nothing.
    queue: Option<(Arc<MainQueue>, Arc<Wake>)>,
}

impl PumpGuard {
    /// Holds the reports (`true`: a report landing on the empty queue wakes
    /// nobody; the session serves them at its next turn) or lets them wake
    /// the pump again (`false`). Either way, whatever already waits is
    /// served now: held, so that the session sees it this turn; let go, since
    /// nothing woke the pump for it.
    pub(super) fn hold<T: Send + Sync + 'static>(
        &self,
        producer: &Arc<RelayProducer<T>>,
        hold: bool,
    ) {
        let Some((queue, wake)) = &self.queue else {
            return;
        };
        wake.held.store(hold, Ordering::SeqCst);
        if queue.len() > 0 && serve(&Arc::downgrade(producer), queue) {
            // More than one turn's worth: the pump takes the rest.
            wake.ready.notify_one();
        }
    }

    /// Before a record is handed to the producer: lets go of held reports
    /// as if they had never been held. What landed meanwhile wakes the
    /// pump, which serves it once the session's turn yields, as it would
    /// have without the hold. It is not served here: a failure's purge of
    /// the records behind it (`ReportingContext::purge_behind_failure`)
    /// must also catch the record about to be handed over, which the
    /// session hands over before it learns of the failure.
    pub(super) fn before_send(&self) {
        if let Some((queue, wake)) = &self.queue
            && wake.held.swap(false, Ordering::SeqCst)
            && queue.len() > 0
        {
            wake.ready.notify_one();
        }
    }
}

/// Starts serving `producer`'s delivery reports: a task of the current
/// runtime woken by the queue, or without one a polling thread. Either
/// holds the producer only while it polls, and ends once the returned
/// guard is dropped (the task) or the producer is (the thread).
pub(super) fn spawn<T: Send + Sync + 'static>(producer: &Arc<RelayProducer<T>>) -> PumpGuard {
    let weak = Arc::downgrade(producer);
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        let _ = std::thread::Builder::new()
            .name("kafka-reports".into())
            .spawn(move || {
                while let Some(producer) = weak.upgrade() {
                    producer.poll(THREAD_POLL);
                }
            });
        return PumpGuard {
            _closed: None,
            queue: None,
        };
    };
    let rk = producer.client().native_ptr();
    let wake = Arc::clone(&producer.context().reports_wake);
    // SAFETY: `rk` is the live handle of `producer`; the queue reference it
    // returns is released by `MainQueue`'s drop. The callback's opaque is
    // the context's `Wake`, which outlives the handle (the context is
    // dropped after librdkafka's destroy returned).
    let queue = unsafe {
        let queue = NonNull::new(rd::rd_kafka_queue_get_main(rk))
            .map(MainQueue)
            .expect("librdkafka returns the main queue of a live producer");
        rd::rd_kafka_queue_cb_event_enable(
            queue.0.as_ptr(),
            Some(on_queued),
            Arc::as_ptr(&wake) as *mut c_void,
        );
        Arc::new(queue)
    };
    // Anything queued before the callback was set.
    wake.ready.notify_one();
    let (closed_tx, mut closed) = oneshot::channel::<()>();
    let (pump_queue, pump_wake) = (Arc::clone(&queue), Arc::clone(&wake));
    runtime.spawn(async move {
        let (queue, wake) = (pump_queue, pump_wake);
        loop {
            tokio::select! {
                _ = &mut closed => return,
                () = wake.ready.notified() => {}
            }
            while serve(&weak, &queue) {
                tokio::task::yield_now().await;
            }
        }
    });
    PumpGuard {
        _closed: Some(closed_tx),
        queue: Some((queue, wake)),
    }
}

/// Polls up to [`EVENTS_PER_TURN`] events off the queue; true when more
/// are left. The producer is held only for this; if the sink let go of it
/// meanwhile, its drop (which flushes, blocking for up to half a second)
/// goes to a blocking thread.
fn serve<T: Send + Sync + 'static>(producer: &Weak<RelayProducer<T>>, queue: &MainQueue) -> bool {
    let Some(producer) = producer.upgrade() else {
        return false;
    };
    let mut served = 0;
    while served < EVENTS_PER_TURN && queue.len() > 0 {
        producer.poll(Duration::ZERO);
        served += 1;
    }
    let more = queue.len() > 0;
    if let Some(last) = Arc::into_inner(producer) {
        tokio::task::spawn_blocking(move || drop(last));
        return false;
    }
    more
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use rdkafka::mocking::MockCluster;
    use tokio::sync::mpsc;

    use super::super::{DeliveryReport, KafkaSink, SinkSettings};
    use crate::envelope::KafkaRecord;

    const RECORDS: u32 = 200;

    fn settings(brokers: String, topic: &str) -> SinkSettings {
        SinkSettings {
            brokers,
            linger_ms: 5,
            message_timeout_ms: 30_000,
            queue_max_messages: 100_000,
            queue_max_kbytes: None,
            dead_letter_topic: format!("{topic}.dlq"),
            properties: Vec::new(),
        }
    }

    fn record(topic: &str, n: u32) -> KafkaRecord {
        KafkaRecord {
            topic: topic.to_owned(),
            key: Bytes::from(format!("agg-{}", n % 7)),
            value: Bytes::from_static(b"{}"),
            headers: Vec::new(),
        }
    }

    fn send_all(sink: &KafkaSink<u32>, topic: &str) {
        for n in 0..RECORDS {
            sink.send(record(topic, n), n).expect("queued");
        }
    }

    /// [`send_all`] past the hold: the reports stay held.
    fn hand_over_all(sink: &KafkaSink<u32>, topic: &str) {
        for n in 0..RECORDS {
            sink.hand_over(record(topic, n), n).expect("queued");
        }
    }

    /// Takes reports until every record's arrived, failing after 30 s.
    fn all_acknowledged(reports: &mut mpsc::UnboundedReceiver<DeliveryReport<u32>>) -> Vec<u32> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut tags = Vec::new();
        while tags.len() < RECORDS as usize {
            match reports.try_recv() {
                Ok(report) => {
                    assert!(report.result.is_ok(), "record {} failed", report.tag);
                    tags.push(report.tag);
                }
                Err(mpsc::error::TryRecvError::Empty) => {
                    assert!(
                        Instant::now() < deadline,
                        "only {} of {RECORDS} reports within 30 s",
                        tags.len()
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("report channel: {e}"),
            }
        }
        tags.sort_unstable();
        tags
    }

    /// On the runtime, the queue's wake-up serves every report (no thread
    /// polls), and the pump task ends with the sink: a producer rebuilt
    /// after each failure leaves no task behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reports_are_served_by_the_runtime_and_the_pump_ends_with_the_sink() {
        let mock = MockCluster::new(1).expect("mock cluster");
        let topic = "reports-runtime";
        mock.create_topic(topic, 3, 1).expect("topic");
        let metrics = tokio::runtime::Handle::current().metrics();
        let before = metrics.num_alive_tasks();
        let (sink, mut reports) =
            KafkaSink::<u32>::new(&settings(mock.bootstrap_servers(), topic)).expect("producer");
        assert_eq!(metrics.num_alive_tasks(), before + 1, "the pump runs");
        send_all(&sink, topic);
        let tags = tokio::task::spawn_blocking(move || all_acknowledged(&mut reports))
            .await
            .expect("reader");
        assert_eq!(tags, (0..RECORDS).collect::<Vec<_>>());
        tokio::task::spawn_blocking(move || drop(sink))
            .await
            .expect("drop");
        let deadline = Instant::now() + Duration::from_secs(10);
        while metrics.num_alive_tasks() > before {
            assert!(Instant::now() < deadline, "the pump outlived its sink");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Built outside any runtime, the producer's reports are served by a
    /// thread of its own.
    #[test]
    fn reports_are_served_without_a_runtime() {
        let mock = MockCluster::new(1).expect("mock cluster");
        let topic = "reports-thread";
        mock.create_topic(topic, 3, 1).expect("topic");
        let (sink, mut reports) =
            KafkaSink::<u32>::new(&settings(mock.bootstrap_servers(), topic)).expect("producer");
        send_all(&sink, topic);
        assert_eq!(
            all_acknowledged(&mut reports),
            (0..RECORDS).collect::<Vec<_>>()
        );
    }

    /// Whether a wake-up is stored for the pump (taking it).
    fn woken(wake: &super::Wake) -> bool {
        use std::future::Future;
        let mut notified = std::pin::pin!(wake.ready.notified());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        notified.as_mut().poll(&mut cx).is_ready()
    }

    /// librdkafka's callback wakes the pump unless the session holds the
    /// reports.
    #[test]
    fn a_report_landing_while_held_wakes_nobody() {
        let wake = super::Wake::default();
        let opaque = &wake as *const super::Wake as *mut std::ffi::c_void;
        wake.held.store(true, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: the callback only reads the `Wake` behind `opaque`.
        unsafe { super::on_queued(std::ptr::null_mut(), opaque) };
        assert!(!woken(&wake), "held: no wake-up stored");
        wake.held.store(false, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { super::on_queued(std::ptr::null_mut(), opaque) };
        assert!(woken(&wake), "not held: the pump is woken");
    }

    /// Waits (30 s at most) until reports wait on librdkafka's queue.
    async fn reports_queued(sink: &KafkaSink<u32>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let (queue, _) = sink.reports.queue.as_ref().expect("a pump task");
        while queue.len() == 0 {
            assert!(Instant::now() < deadline, "no report within 30 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Awaits `n` successful reports (30 s at most) with no call on the
    /// sink: what the pump serves.
    async fn served_by_the_pump(
        reports: &mut mpsc::UnboundedReceiver<DeliveryReport<u32>>,
        n: usize,
    ) -> Vec<u32> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut tags = Vec::new();
        while tags.len() < n {
            let Ok(Some(report)) = tokio::time::timeout_at(deadline, reports.recv()).await else {
                panic!("only {} of {n} reports within 30 s", tags.len());
            };
            assert!(report.result.is_ok(), "record {} failed", report.tag);
            tags.push(report.tag);
        }
        tags.sort_unstable();
        tags
    }

    /// Held, reports wait on librdkafka's queue until the session serves
    /// them (every one arrives so); a record handed over lets go of the
    /// hold, and the pump serves what waits with no further call; let go by
    /// the session, what waits is served and the rest wake the pump as
    /// before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_reports_wait_for_the_session_and_a_send_or_letting_go_serves_them() {
        let mock = MockCluster::new(1).expect("mock cluster");
        let topic = "reports-held";
        mock.create_topic(topic, 3, 1).expect("topic");
        // The linger leaves the pump time to take the wake-up it was
        // spawned with before any report lands.
        let mut settings = settings(mock.bootstrap_servers(), topic);
        settings.linger_ms = 200;
        let (sink, mut reports) = KafkaSink::<u32>::new(&settings).expect("producer");
        let all: Vec<u32> = (0..RECORDS).collect();

        // Served by the session's turns, held all along.
        sink.hold_reports(true);
        hand_over_all(&sink, topic);
        reports_queued(&sink).await;
        assert!(
            reports.is_empty(),
            "held reports reached the session unserved"
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut tags = Vec::new();
        while tags.len() < RECORDS as usize {
            sink.hold_reports(true);
            while let Ok(report) = reports.try_recv() {
                assert!(report.result.is_ok(), "record {} failed", report.tag);
                tags.push(report.tag);
            }
            assert!(
                Instant::now() < deadline,
                "{} of {RECORDS} reports served",
                tags.len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tags.sort_unstable();
        assert_eq!(tags, all);

        // A record handed over lets go: what landed wakes the pump.
        sink.hold_reports(true);
        hand_over_all(&sink, topic);
        reports_queued(&sink).await;
        assert!(reports.is_empty());
        sink.send(record(topic, RECORDS), RECORDS).expect("queued");
        let tags = served_by_the_pump(&mut reports, RECORDS as usize + 1).await;
        assert_eq!(tags, (0..=RECORDS).collect::<Vec<_>>());

        // Held while the broker answers, then let go once.
        sink.hold_reports(true);
        hand_over_all(&sink, topic);
        reports_queued(&sink).await;
        sink.hold_reports(false);
        assert_eq!(
            served_by_the_pump(&mut reports, RECORDS as usize).await,
            all
        );
        tokio::task::spawn_blocking(move || drop(sink))
            .await
            .expect("drop");
    }
}
