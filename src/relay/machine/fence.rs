//! Exactly-once: what a failed session ends with when its producer may
//! have been fenced, and which troubles of the checkpoint topic were said
//! already; decided here without I/O. `exactly_once.rs` asks the producer
//! whether it was fenced, aborts, logs, and carries the verdict out.
//!
//! A fence is told from a transaction the coordinator aborted: both bump
//! the producer's epoch and look the same to librdkafka, but a Kafka
//! transaction open longer than `transaction.timeout.ms` (the relay paused
//! by SIGSTOP or a frozen VM: the monotonic clock runs on) explains the
//! fence without another producer, and is retried from the last committed
//! checkpoint. A lost relay lock says more than either: the relay that took
//! over fenced this producer.

use std::time::Duration;

use crate::relay::error::SessionError;
use crate::sink::TxnFailure;
use pgoutput::lsn::Lsn;

/// What the session ends with after a failure in exactly-once mode.
#[derive(Debug)]
pub enum AfterFailure {
    /// This error, as it is: the relay lock was lost, or the producer was
    /// fenced while no transaction had outlived the timeout.
    End(SessionError),
    /// Not fenced: abort the open transaction (best effort), then end with
    /// this error.
    Abort(SessionError),
    /// The coordinator aborted the open transaction, open past its timeout:
    /// it is over (the machine forgets it) and the session ends with this
    /// retriable error.
    Expired(SessionError),
}

/// Decides what `error` ends the session with. `fenced` asks the producer
/// whether it was fenced (asked only when `error` does not say); `outlived`
/// is how long the open transaction had been open when that was `timeout`
/// or more ([`super::SessionMachine::transaction_outlived`]).
pub fn after_failure(
    error: SessionError,
    fenced: impl FnOnce() -> Option<TxnFailure>,
    outlived: Option<Duration>,
    timeout: Duration,
) -> AfterFailure {
    let fenced = match error {
        SessionError::LockLost { .. } => return AfterFailure::End(error),
        SessionError::Transaction(fenced @ TxnFailure::Fenced { .. }) => fenced,
        error => match fenced() {
            Some(fenced) => fenced,
            None => return AfterFailure::Abort(error),
        },
    };
    let Some(open) = outlived else {
        return AfterFailure::End(SessionError::Transaction(fenced));
    };
    AfterFailure::Expired(SessionError::Transaction(TxnFailure::Abortable(format!(
        "the transaction coordinator aborted the Kafka transaction: it was open {:.1} s, \
         longer than transaction.timeout.ms ({} s; was the relay paused?), and the producer \
         was fenced ({fenced})",
        open.as_secs_f64(),
        timeout.as_secs()
    ))))
}

/// What exactly-once's start said already, owned by the outer loop across
/// its sessions: each session reads the checkpoint topic again, and the
/// same trouble is not said again and again.
#[derive(Debug, Default)]
pub struct Said {
    /// The last checkpoint found above the server's WAL.
    ahead: Option<Lsn>,
    /// The checkpoint topic's compaction could not be checked, or it is
    /// also deleted by retention.
    topic: bool,
}

impl Said {
    /// Whether a checkpoint found above the server's WAL at `found` is news:
    /// each is said once, not at every session that reads it again before
    /// the first commit.
    pub fn checkpoint_ahead(&mut self, found: Lsn) -> bool {
        self.ahead.replace(found) != Some(found)
    }

    /// Whether a warning about the checkpoint topic is news: said once.
    pub fn topic_warning(&mut self) -> bool {
        !std::mem::replace(&mut self.topic, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(60);

    fn fence() -> TxnFailure {
        TxnFailure::Fenced {
            transactional_id: "relay-1".into(),
            detail: "epoch bumped".into(),
        }
    }

    fn broker_error() -> SessionError {
        SessionError::Transaction(TxnFailure::Abortable("broker down".into()))
    }

    fn never_asked() -> Option<TxnFailure> {
        panic!("the producer is asked only when the error does not say")
    }

    #[test]
    fn a_lost_lock_ends_the_session_as_it_is() {
        let lost = SessionError::LockLost { slot: "s".into() };
        let verdict = after_failure(lost, never_asked, Some(TIMEOUT * 2), TIMEOUT);
        assert!(matches!(
            verdict,
            AfterFailure::End(SessionError::LockLost { .. })
        ));
    }

    #[test]
    fn a_failure_without_a_fence_aborts_the_open_transaction() {
        let verdict = after_failure(broker_error(), || None, Some(TIMEOUT * 2), TIMEOUT);
        let AfterFailure::Abort(error) = verdict else {
            panic!("abort expected, got {verdict:?}");
        };
        assert_eq!(error.to_string(), broker_error().to_string());
    }

    #[test]
    fn a_fence_with_nothing_open_past_the_timeout_is_another_producers() {
        let verdict = after_failure(broker_error(), || Some(fence()), None, TIMEOUT);
        assert!(
            matches!(
                verdict,
                AfterFailure::End(SessionError::Transaction(TxnFailure::Fenced { .. }))
            ),
            "{verdict:?}"
        );
        let told = SessionError::Transaction(fence());
        let verdict = after_failure(told, never_asked, None, TIMEOUT);
        assert!(matches!(
            verdict,
            AfterFailure::End(SessionError::Transaction(TxnFailure::Fenced { .. }))
        ));
    }

    #[test]
    fn a_fence_after_a_transaction_outlived_the_timeout_is_the_coordinators_abort() {
        let open = TIMEOUT + Duration::from_millis(1500);
        for error in [broker_error(), SessionError::Transaction(fence())] {
            let verdict = after_failure(error, || Some(fence()), Some(open), TIMEOUT);
            let AfterFailure::Expired(SessionError::Transaction(TxnFailure::Abortable(why))) =
                verdict
            else {
                panic!("the coordinator's abort expected, got {verdict:?}");
            };
            assert!(why.contains("open 61.5 s"), "{why}");
            assert!(why.contains("transaction.timeout.ms (60 s"), "{why}");
        }
    }

    #[test]
    fn each_checkpoint_trouble_is_said_once_per_owner() {
        let mut said = Said::default();
        assert!(said.checkpoint_ahead(Lsn(0x900)));
        assert!(
            !said.checkpoint_ahead(Lsn(0x900)),
            "the same checkpoint again"
        );
        assert!(said.checkpoint_ahead(Lsn(0xA00)), "another one");
        assert!(said.topic_warning());
        assert!(!said.topic_warning());
        // Owned, not process-global: another relay in the same process
        // says its own once.
        let mut other = Said::default();
        assert!(other.checkpoint_ahead(Lsn(0x900)));
        assert!(other.topic_warning());
    }
}
