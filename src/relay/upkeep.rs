//! Where the relay's upkeep runs: the work beside the event stream that must
//! keep its own time whatever the stream does. The relay lock's session and
//! its renewals, the slot-lag monitor, the webhook retry worker, the
//! cleanup's deletes, the trace exporter, the parked gauges and the metrics
//! endpoint.
//!
//! `outbox-relay run` gives the stream a runtime of one worker thread and
//! the upkeep a runtime of its own (`main.rs`). One worker for the stream,
//! because a second one is woken for nothing: at a steady rate each event
//! wakes the stream twice (its WAL, its delivery report), and a multi-thread
//! runtime wakes a second worker to look for more work at each of those:
//! 1.2 of the relay's 6 context switches per event at 1,000 events/s
//! (benches/cpu-notes.md, thirty-third round). A runtime of its own for the
//! upkeep, because the lock's renewal must not wait behind a long turn of
//! the stream: the lease is counted from the renewal's send.
//!
//! Whatever the upkeep spawns, and every socket it opens, must be made on
//! its runtime: a tokio socket is served by the I/O driver of the runtime it
//! was made on, and a task runs on the runtime it was spawned on. So the
//! upkeep's tasks are spawned inside [`Upkeep::enter`], and what the stream
//! awaits from it (taking the lock) runs there through [`Upkeep::run`].
//!
//! A relay run as a library ([`crate::relay::run`]) and the tests have one
//! runtime: [`Upkeep::current`] keeps everything on it.

use std::future::Future;

use tokio::runtime::Handle;

/// The runtime the relay's upkeep runs on.
#[derive(Debug, Clone, Default)]
pub struct Upkeep {
    /// `None`: the runtime the caller runs on.
    handle: Option<Handle>,
}

impl Upkeep {
    /// The upkeep on the caller's runtime, beside the stream.
    pub fn current() -> Upkeep {
        Upkeep { handle: None }
    }

    /// The upkeep on the runtime `handle` belongs to. That runtime must
    /// outlive the relay's: [`Upkeep::run`] panics if it shut down first.
    pub fn on(handle: Handle) -> Upkeep {
        Upkeep {
            handle: Some(handle),
        }
    }

    /// Calls `spawn` with the upkeep's runtime as the current one, so that
    /// the tasks it spawns (with `tokio::spawn`) run there.
    pub fn enter<R>(&self, spawn: impl FnOnce() -> R) -> R {
        match &self.handle {
            Some(handle) => {
                let _entered = handle.enter();
                spawn()
            }
            None => spawn(),
        }
    }

    /// Runs `work` to its end on the upkeep's runtime and returns what it
    /// returned. A panic in `work` goes on in the caller. Dropping the
    /// returned future before it is ready leaves `work` running to its end,
    /// its result dropped.
    ///
    /// # Panics
    /// If the upkeep's runtime shut down before `work` ended: the process
    /// drops it only after the relay's runtime (`main.rs`).
    pub async fn run<F>(&self, work: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Some(handle) = &self.handle else {
            return work.await;
        };
        match handle.spawn(work).await {
            Ok(output) => output,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(e) => panic!("the upkeep runtime shut down before the relay: {e}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    /// A runtime of one worker whose thread is named, to tell it apart.
    fn named_runtime(name: &str) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()
            .expect("a runtime")
    }

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }

    #[test]
    fn tasks_spawned_inside_enter_and_work_given_to_run_go_to_the_upkeeps_runtime() {
        let upkeep_runtime = named_runtime("test-upkeep");
        let stream_runtime = named_runtime("test-stream");
        let upkeep = Upkeep::on(upkeep_runtime.handle().clone());
        let (spawned, ran, own) = stream_runtime.block_on(async move {
            tokio::spawn(async move {
                let spawned = upkeep.enter(|| tokio::spawn(async { thread_name() }));
                let ran = upkeep.run(async { thread_name() }).await;
                (spawned.await.expect("a name"), ran, thread_name())
            })
            .await
            .expect("the stream's task")
        });
        assert_eq!(spawned, "test-upkeep");
        assert_eq!(ran, "test-upkeep");
        assert_eq!(own, "test-stream");
    }

    #[test]
    fn the_current_upkeep_stays_on_the_callers_runtime() {
        let stream_runtime = named_runtime("test-stream");
        let upkeep = Upkeep::current();
        let (spawned, ran) = stream_runtime.block_on(async move {
            let spawned = upkeep.enter(|| tokio::spawn(async { thread_name() }));
            let ran = tokio::spawn(async move { upkeep.run(async { thread_name() }).await });
            (spawned.await.expect("a name"), ran.await.expect("a name"))
        });
        assert_eq!(spawned, "test-stream");
        assert_eq!(ran, "test-stream");
    }

    /// Blocks the stream runtime's only worker until a timer of the
    /// upkeep's fired (or `within` passed): whether the upkeep keeps its
    /// time through a long turn of the stream.
    fn upkeep_timer_fires_while_the_stream_is_blocked(upkeep: Upkeep, within: Duration) -> bool {
        let stream_runtime = named_runtime("test-stream");
        stream_runtime.block_on(async move {
            tokio::spawn(async move {
                let (fired, heard) = std::sync::mpsc::channel();
                upkeep.enter(|| {
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        let _ = fired.send(());
                    })
                });
                // A turn that does not yield, as a long decode would.
                heard.recv_timeout(within).is_ok()
            })
            .await
            .expect("the stream's task")
        })
    }

    #[test]
    fn the_upkeep_keeps_its_time_while_the_streams_worker_is_busy() {
        let upkeep_runtime = named_runtime("test-upkeep");
        let upkeep = Upkeep::on(upkeep_runtime.handle().clone());
        assert!(upkeep_timer_fires_while_the_stream_is_blocked(
            upkeep,
            Duration::from_secs(30)
        ));
        // On the stream's own runtime of one worker the timer cannot fire
        // before the turn ends: the wait below only bounds the test.
        assert!(!upkeep_timer_fires_while_the_stream_is_blocked(
            Upkeep::current(),
            Duration::from_millis(500)
        ));
    }

    #[test]
    fn a_panic_in_work_goes_on_in_the_caller() {
        let upkeep_runtime = named_runtime("test-upkeep");
        let stream_runtime = named_runtime("test-stream");
        let upkeep = Upkeep::on(upkeep_runtime.handle().clone());
        let outcome = stream_runtime.block_on(async move {
            tokio::spawn(async move { upkeep.run(async { panic!("in the upkeep") }).await }).await
        });
        let panic = outcome.expect_err("the panic").into_panic();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"in the upkeep"));
    }
}
