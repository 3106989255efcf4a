//! What the relay does with a row whose record the broker refused.
//!
//! The producer runs with `enable.gapless.guarantee`: a record refused for
//! good stops it, the session ends and the relay replays from the confirmed
//! position. [`Refusals`] remembers, across those replays, what the replay
//! must do differently with each refused row; [`note_refusal`] is the one
//! place that decides it, and [`fatal_refusal`] the one place that decides
//! which refusals end the relay.

use std::collections::HashMap;

use crate::metrics as m;
use crate::sink::{DeliveryError, FailureKind, OnUnroutable, RefusalClass, RefusalKind, Refused};
use pgoutput::lsn::Lsn;

use super::delivery_tag::DeliveryTag;
use super::error::SessionError;

/// Rows whose records a broker refused, by row key (the outbox id, or
/// [`anonymous_row_key`] for a row whose id cannot be read), remembered
/// across producer rebuilds: with `enable.gapless.guarantee` a refusal stops
/// the producer, and the relay replays from the slot, where the row comes
/// back and is sent as its [`RowFate`] says.
///
/// The broker refuses a whole batch when one record breaks a rule (it
/// exceeds the topic's `max.message.bytes`, a policy or validation refuses
/// it), so a refusal in a batch only makes its records suspects. On the
/// replay a suspect is sent alone (nothing else in flight, reading paused):
/// refused again, it is dead-lettered; delivered, it was an innocent batch
/// mate and is sent as usual from then on. The same goes for a dead letter
/// the dead-letter topic refuses as too large: alone, it is sent again
/// without its payload.
///
/// An entry goes only once its row's transaction is confirmed
/// ([`forget_confirmed`]), not when the row settles: another row of the same
/// transaction may still end the session, and the replay then brings the
/// settled row back. Forgotten, it would start its refusals over, and two
/// such rows in one transaction would take turns ending sessions for ever.
pub type Refusals = HashMap<String, RowFate>;

/// What the replay does with a row whose record was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowFate {
    pub event: EventFate,
    pub dead_letter: DeadLetterFate,
    /// Commit LSN of the row's transaction: the entry is kept until the
    /// confirmed position passes it.
    pub commit: Lsn,
}

/// Forgets the rows of transactions at or below `confirmed`: the slot will
/// not send them again. (A transaction's commit LSN is below its end LSN,
/// and every later transaction commits at or after that end, so "commit
/// below the confirmed position" is "transaction confirmed".)
pub fn forget_confirmed(refusals: &mut Refusals, confirmed: Lsn) {
    if !refusals.is_empty() {
        refusals.retain(|_, fate| fate.commit >= confirmed);
    }
}

/// The isolated record of `tag` went through alone: it was an innocent batch
/// mate (or a dead letter that fits after all). Its row is sent as usual on a
/// replay before its transaction is confirmed.
pub fn note_innocent(refusals: &mut Refusals, tag: &DeliveryTag) {
    if let Some(fate) = refusals.get_mut(&tag.row_key) {
        if tag.dead_letter {
            if fate.dead_letter == DeadLetterFate::Suspect {
                fate.dead_letter = DeadLetterFate::Send;
            }
        } else if fate.event == EventFate::Suspect {
            fate.event = EventFate::Send;
        }
    }
}

/// What becomes of the row's event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EventFate {
    /// Sent as usual.
    #[default]
    Send,
    /// Refused in a batch: may be innocent; sent alone.
    Suspect,
    /// Refused on its own (or for a reason that is its own, like a missing
    /// topic): dead-lettered with this reason.
    DeadLetter { reason: String, code: &'static str },
}

/// What becomes of the row's dead letter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeadLetterFate {
    /// Sent whole, payload included.
    #[default]
    Send,
    /// The dead-letter topic refused it as too large in a batch: sent alone.
    Suspect,
    /// Refused as too large on its own: sent as [`crate::deadletter::headers_only`].
    Truncate,
    /// Even the headers-only stand-in was refused: [`crate::deadletter::minimal`].
    Minimal,
}

/// The row key of a dead-lettered row whose id cannot be read: stable across
/// replays (same commit, same key, same payload), which is all the
/// [`Refusals`] need; identical rows share a fate, rightly.
pub fn anonymous_row_key(lsn: Lsn, key: &[u8], value: &[u8]) -> String {
    let mut hasher = openssl::sha::Sha256::new();
    hasher.update(&(key.len() as u64).to_be_bytes());
    hasher.update(key);
    hasher.update(value);
    let digest = hex::encode(&hasher.finish()[..12]);
    format!("@{lsn}/{digest}")
}

/// The error that ends the relay for `refused`, if it does: authorization
/// and authentication always; an unroutable record under
/// `on_unroutable = "stop"`, or a dead letter (there is nowhere else to send
/// it).
pub fn fatal_refusal(
    on_unroutable: OnUnroutable,
    tag: &DeliveryTag,
    refused: &Refused,
) -> Option<SessionError> {
    let fatal = match refused.kind.class() {
        RefusalClass::Unauthorized => true,
        RefusalClass::Unroutable => tag.dead_letter || on_unroutable == OnUnroutable::Stop,
        RefusalClass::TooLarge => false,
    };
    fatal.then(|| SessionError::Refused(refused.clone()))
}

/// Notes in `refusals` what the replay does with the row of a refused
/// record (`alone`: it was sent alone, or refused on the spot); returns the
/// error that ends the relay instead, if the refusal is fatal.
pub fn note_refusal(
    refusals: &mut Refusals,
    on_unroutable: OnUnroutable,
    tag: &DeliveryTag,
    refused: &Refused,
    alone: bool,
) -> Option<SessionError> {
    if let Some(fatal) = fatal_refusal(on_unroutable, tag, refused) {
        return Some(fatal);
    }
    let fate = refusals.entry(tag.row_key.clone()).or_default();
    fate.commit = fate.commit.max(tag.lsn);
    if tag.dead_letter {
        // Only "too large" gets here (see fatal_refusal).
        fate.dead_letter = match fate.dead_letter {
            DeadLetterFate::Send | DeadLetterFate::Suspect if !alone => DeadLetterFate::Suspect,
            DeadLetterFate::Send | DeadLetterFate::Suspect => DeadLetterFate::Truncate,
            DeadLetterFate::Truncate => DeadLetterFate::Minimal,
            DeadLetterFate::Minimal => return Some(SessionError::Refused(refused.clone())),
        };
    } else if alone || refused.kind == RefusalKind::TopicMissing {
        // A missing topic is no batch's fault: every record for it fails.
        fate.event = EventFate::DeadLetter {
            reason: refused.reason(),
            code: refused.kind.reason_code(),
        };
    } else if fate.event == EventFate::Send {
        fate.event = EventFate::Suspect;
    }
    None
}

/// The metric label of a failed delivery.
pub fn failure_reason(error: &DeliveryError) -> &'static str {
    match error {
        DeliveryError::Refused(r) => match r.kind.class() {
            RefusalClass::TooLarge => m::reason::TOO_LARGE,
            RefusalClass::Unroutable => m::reason::UNROUTABLE,
            RefusalClass::Unauthorized => m::reason::BROKER_ERROR,
        },
        DeliveryError::Failed(f) if f.kind == FailureKind::TimedOut => m::reason::MESSAGE_TIMEOUT,
        DeliveryError::Failed(_) => m::reason::BROKER_ERROR,
        DeliveryError::ProducerFatal(_) => m::reason::PRODUCER_FATAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ack::AckTracker;
    use bytes::Bytes;

    fn tag(dead_letter: bool) -> DeliveryTag {
        DeliveryTag {
            txn: AckTracker::new(Lsn::ZERO).open(),
            row_key: "row-1".into(),
            lsn: Lsn(1),
            key: Bytes::from_static(b"k"),
            dead_letter,
            span: None,
            held_bytes: 0,
        }
    }

    fn refused(kind: RefusalKind, dead_letter: bool) -> Refused {
        Refused {
            kind,
            topic: Some("t".into()),
            dead_letter_topic: dead_letter,
            detail: "Broker: no".into(),
        }
    }

    fn note(
        refusals: &mut Refusals,
        on_unroutable: OnUnroutable,
        kind: RefusalKind,
        dead_letter: bool,
        alone: bool,
    ) -> Option<SessionError> {
        note_refusal(
            refusals,
            on_unroutable,
            &tag(dead_letter),
            &refused(kind, dead_letter),
            alone,
        )
    }

    #[test]
    fn an_event_refused_in_a_batch_is_a_suspect_then_dead_lettered_alone() {
        for kind in [
            RefusalKind::TooLarge,
            RefusalKind::PolicyViolation,
            RefusalKind::InvalidRecord,
        ] {
            let mut r = Refusals::new();
            let dl = OnUnroutable::DeadLetter;
            assert!(note(&mut r, dl, kind, false, false).is_none());
            assert_eq!(r["row-1"].event, EventFate::Suspect, "{kind:?}");
            assert!(note(&mut r, dl, kind, false, true).is_none());
            assert!(
                matches!(&r["row-1"].event, EventFate::DeadLetter { code, .. } if *code == kind.reason_code()),
                "{kind:?}: {:?}",
                r["row-1"]
            );
            // A later batch refusal does not undo what is known.
            assert!(note(&mut r, dl, kind, false, false).is_none());
            assert!(matches!(r["row-1"].event, EventFate::DeadLetter { .. }));
        }
        // A missing topic is the event's own: dead-lettered at once.
        let mut r = Refusals::new();
        let missing = RefusalKind::TopicMissing;
        assert!(note(&mut r, OnUnroutable::DeadLetter, missing, false, false).is_none());
        assert!(matches!(r["row-1"].event, EventFate::DeadLetter { .. }));
    }

    #[test]
    fn a_dead_letter_too_large_goes_alone_then_without_payload_then_minimal() {
        let mut r = Refusals::new();
        let too_large = RefusalKind::TooLarge;
        let stop = OnUnroutable::Stop;
        assert!(note(&mut r, stop, too_large, true, false).is_none());
        assert_eq!(r["row-1"].dead_letter, DeadLetterFate::Suspect);
        assert!(note(&mut r, stop, too_large, true, false).is_none());
        assert_eq!(r["row-1"].dead_letter, DeadLetterFate::Suspect);
        assert!(note(&mut r, stop, too_large, true, true).is_none());
        assert_eq!(r["row-1"].dead_letter, DeadLetterFate::Truncate);
        assert!(note(&mut r, stop, too_large, true, false).is_none());
        assert_eq!(r["row-1"].dead_letter, DeadLetterFate::Minimal);
        // Nothing smaller left: the dead-letter topic is misconfigured.
        assert!(matches!(
            note(&mut r, stop, too_large, true, true),
            Some(SessionError::Refused(_))
        ));
        assert_eq!(
            r["row-1"].event,
            EventFate::Send,
            "the event's fate is untouched"
        );
    }

    #[test]
    fn refusals_that_end_the_relay() {
        use RefusalKind::*;
        for kind in [TopicUnauthorized, ClusterUnauthorized, AuthenticationFailed] {
            for on_unroutable in [OnUnroutable::Stop, OnUnroutable::DeadLetter] {
                for dead_letter in [false, true] {
                    let mut r = Refusals::new();
                    assert!(
                        note(&mut r, on_unroutable, kind, dead_letter, false).is_some(),
                        "{kind:?} is fatal"
                    );
                    assert!(r.is_empty());
                }
            }
        }
        for kind in [TopicMissing, PolicyViolation, InvalidRecord] {
            let mut r = Refusals::new();
            assert!(note(&mut r, OnUnroutable::Stop, kind, false, true).is_some());
            // A dead letter that cannot be routed has nowhere else to go.
            assert!(note(&mut r, OnUnroutable::DeadLetter, kind, true, true).is_some());
            assert!(r.is_empty());
            assert!(note(&mut r, OnUnroutable::DeadLetter, kind, false, true).is_none());
        }
    }

    #[test]
    fn anonymous_row_keys_are_stable_and_tell_rows_apart() {
        let a = anonymous_row_key(Lsn(5), b"k", b"{}");
        assert_eq!(a, anonymous_row_key(Lsn(5), b"k", b"{}"));
        assert_ne!(a, anonymous_row_key(Lsn(6), b"k", b"{}"));
        assert_ne!(a, anonymous_row_key(Lsn(5), b"k2", b"{}"));
        assert_ne!(a, anonymous_row_key(Lsn(5), b"k", b"{ }"));
        // Key and value boundaries do not blur.
        assert_ne!(
            anonymous_row_key(Lsn(5), b"ab", b"c"),
            anonymous_row_key(Lsn(5), b"a", b"bc")
        );
    }

    #[test]
    fn failures_get_their_metric_label() {
        let failed = |kind| {
            DeliveryError::Failed(crate::sink::BrokerFailure {
                kind,
                detail: "Message production error".into(),
            })
        };
        assert_eq!(
            failure_reason(&failed(FailureKind::TimedOut)),
            m::reason::MESSAGE_TIMEOUT
        );
        assert_eq!(
            failure_reason(&failed(FailureKind::Other)),
            m::reason::BROKER_ERROR
        );
        assert_eq!(
            failure_reason(&DeliveryError::ProducerFatal("x".into())),
            m::reason::PRODUCER_FATAL
        );
        let refusal = |k| DeliveryError::Refused(refused(k, false));
        assert_eq!(
            failure_reason(&refusal(RefusalKind::TooLarge)),
            m::reason::TOO_LARGE
        );
        assert_eq!(
            failure_reason(&refusal(RefusalKind::TopicMissing)),
            m::reason::UNROUTABLE
        );
    }
}
