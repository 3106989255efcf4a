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

use std::ffi::c_void;
use std::ptr::NonNull;
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
// only asks the length and destroys its own reference once.
unsafe impl Send for MainQueue {}

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

/// Called by librdkafka when an event lands on the empty main queue: wakes
/// the pump. `opaque` is the [`Notify`] of the producer's context, which
/// lives as long as the librdkafka handle that calls this.
unsafe extern "C" fn on_queued(_rk: *mut RDKafka, opaque: *mut c_void) {
    // SAFETY: see above; `notify_one` neither blocks nor calls librdkafka.
    let ready = unsafe { &*(opaque as *const Notify) };
    ready.notify_one();
}

/// Ends the pump when dropped (the sink holding it is gone).
pub(super) struct PumpGuard {
    _closed: Option<oneshot::Sender<()>>,
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
        return PumpGuard { _closed: None };
    };
    let rk = producer.client().native_ptr();
    let ready = Arc::clone(&producer.context().reports_ready);
    // SAFETY: `rk` is the live handle of `producer`; the queue reference it
    // returns is released by `MainQueue`'s drop. The callback's opaque is
    // the context's `Notify`, which outlives the handle (the context is
    // dropped after librdkafka's destroy returned).
    let queue = unsafe {
        let queue = NonNull::new(rd::rd_kafka_queue_get_main(rk))
            .map(MainQueue)
            .expect("librdkafka returns the main queue of a live producer");
        rd::rd_kafka_queue_cb_event_enable(
            queue.0.as_ptr(),
            Some(on_queued),
            Arc::as_ptr(&ready) as *mut c_void,
        );
        queue
    };
    // Anything queued before the callback was set.
    ready.notify_one();
    let (closed_tx, mut closed) = oneshot::channel::<()>();
    runtime.spawn(async move {
        loop {
            tokio::select! {
                _ = &mut closed => return,
                () = ready.notified() => {}
            }
            while serve(&weak, &queue) {
                tokio::task::yield_now().await;
            }
        }
    });
    PumpGuard {
        _closed: Some(closed_tx),
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

    fn send_all(sink: &KafkaSink<u32>, topic: &str) {
        for n in 0..RECORDS {
            let record = KafkaRecord {
                topic: topic.to_owned(),
                key: Bytes::from(format!("agg-{}", n % 7)),
                value: Bytes::from_static(b"{}"),
                headers: Vec::new(),
            };
            sink.send(record, n).expect("queued");
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
}
