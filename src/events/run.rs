//! The relay process's events: start, its endpoint, the stop asked for,
//! the configuration's warnings, a fatal error, the progress summary, and
//! what the relay checks or exports beside the stream.

use std::fmt::Display;
use std::time::Duration;

use pgoutput::lsn::Lsn;

use super::{event, say};
use crate::error::Cause;

/// `outbox-relay run` starts.
pub struct Starting<'a> {
    pub version: &'a str,
}
event!(Starting<'_>, "starting", INFO, Lifecycle);

impl Starting<'_> {
    pub fn emit(&self) {
        say!(version = self.version, "outbox-relay starting");
    }
}

/// /metrics, /health and /ready are served at `addr`.
pub struct ServingMetrics<'a> {
    pub addr: &'a dyn Display,
}
event!(ServingMetrics<'_>, "serving_metrics", INFO, Lifecycle);

impl ServingMetrics<'_> {
    pub fn emit(&self) {
        say!(addr = %self.addr, "serving /metrics, /health and /ready");
    }
}

/// A stop was asked for (SIGTERM, SIGINT).
pub struct StopRequested;
event!(StopRequested, "stop_requested", INFO, Lifecycle);

impl StopRequested {
    pub fn emit(&self) {
        say!("stop requested: draining in-flight events");
    }
}

/// The configuration works but something in it is likely a mistake
/// (`warning` says what and the fix).
pub struct ConfigWarning<'a> {
    pub warning: &'a dyn Display,
}
event!(ConfigWarning<'_>, "config_warning", WARN, Notice);

impl ConfigWarning<'_> {
    pub fn emit(&self) {
        let warning = self.warning;
        say!("{warning}");
    }
}

/// The relay ends with an error a person must fix; `error` names it and
/// the fix (authentication refused, a privilege missing, the slot missing
/// or invalidated, a topic refused, the checkpoint topic not compacted),
/// `cause` tells which by a stable name (`cause=slot_missing`), and
/// `exit_code` is the process's exit code.
pub struct FatalError<'a> {
    pub cause: Cause,
    pub exit_code: u8,
    pub error: &'a str,
}
event!(FatalError<'_>, "fatal_error", ERROR, Fault);

impl FatalError<'_> {
    pub fn emit(&self) {
        let error = self.error;
        say!(
            cause = %self.cause.name(),
            exit_code = self.exit_code,
            "{error}"
        );
    }
}

/// A stop was asked for during start-up, before any session streamed:
/// nothing was sent, so nothing is left to drain.
pub struct StoppedBeforeStreaming;
event!(
    StoppedBeforeStreaming,
    "stopped_before_streaming",
    INFO,
    Lifecycle
);

impl StoppedBeforeStreaming {
    pub fn emit(&self) {
        say!("stopped during start-up, before streaming: nothing to drain");
    }
}

/// The progress summary of one interval (see `relay::progress`).
pub struct Progress {
    pub elapsed: Duration,
    pub events: u64,
    pub events_per_sec: f64,
    pub dead_lettered: u64,
    pub in_flight: u64,
    pub slot_lag_bytes: Option<u64>,
    pub confirmed: Lsn,
}
event!(Progress, "progress", INFO, Lifecycle);

impl Progress {
    /// Numbers are recorded as numbers (a JSON log shows them unquoted);
    /// the lag is left out until it was sampled.
    pub fn emit(&self) {
        say!(
            events = self.events,
            events_per_sec = self.events_per_sec,
            dead_lettered = self.dead_lettered,
            in_flight = self.in_flight,
            slot_lag_bytes = self.slot_lag_bytes,
            confirmed = %self.confirmed,
            "progress over the last {} s",
            self.elapsed.as_secs()
        );
    }
}

/// The dead-letter topic could not be checked at start.
pub struct DeadLetterTopicUnchecked<'a> {
    pub topic: &'a str,
    pub why: &'a dyn Display,
}
event!(
    DeadLetterTopicUnchecked<'_>,
    "dead_letter_topic_unchecked",
    WARN,
    Notice
);

impl DeadLetterTopicUnchecked<'_> {
    pub fn emit(&self) {
        say!(
            topic = self.topic,
            why = %self.why,
            "could not check the dead-letter topic at start; a missing one will stop the relay \
             at the first dead letter"
        );
    }
}

/// Spans cannot be exported to the OTLP collector: dropped until it
/// answers. Once per outage (the exporter decides).
pub struct OtlpUnreachable<'a> {
    pub endpoint: &'a dyn Display,
    pub error: &'a dyn Display,
}
event!(OtlpUnreachable<'_>, "otlp_unreachable", WARN, Notice);

impl OtlpUnreachable<'_> {
    pub fn emit(&self) {
        say!(
            endpoint = %self.endpoint,
            error = %self.error,
            "cannot export spans to the OTLP collector; dropping them until it answers"
        );
    }
}

/// The OTLP collector takes spans again.
pub struct OtlpAnswers;
event!(OtlpAnswers, "otlp_answers", INFO, Lifecycle);

impl OtlpAnswers {
    pub fn emit(&self) {
        say!("the OTLP collector takes spans again");
    }
}
