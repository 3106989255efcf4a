//! librdkafka's log lines, forwarded to `tracing` (target `librdkafka`) at
//! their own level, with four exceptions; and the client errors of the
//! checkpoint reader's consumers ([`ReaderContext`]).
//!
//! A broker connection failing (facility `FAIL`: connection refused, TLS
//! handshake failed, disconnected) goes to debug: librdkafka reports the
//! same failure, same words, through the client error callback, where the
//! relay logs connection trouble once per incident (`broker_watch`);
//! logged here too it would repeat with every reconnect.
//!
//! The configuration warning that
//! `enable.gapless.guarantee` is experimental. The relay sets that property
//! on purpose (see [`super::KafkaSink::new`]), so the warning says nothing an
//! operator can act on; printed at warn on every start it would teach people
//! to skip warnings. It goes to debug, with the reason beside it.
//!
//! And a producer id request the transaction coordinator answers "not yet"
//! (facility `GETPID`: coordinator loading, not available, moved, or busy
//! ending the previous producer's transaction), which librdkafka retries by
//! itself: on every first start after a broker came up it is the
//! coordinator loading its state. Should it last, `init_transactions` times
//! out and the relay logs that at warn and retries; the line itself goes to
//! debug.
//!
//! And a producer's fatal error and a failed transaction (facilities
//! `FATAL`, `TXNERR`, `ADDPARTS`: a topic or transactional id refused, an
//! idempotence sequence given up): the record or transactional call it
//! fails comes back to the relay, which then logs one line of its own,
//! ERROR naming the fix when retrying cannot cure it, else WARN as it
//! rebuilds the producer and replays. Logged here too, a refused ACL would
//! read as two or three errors, the first without the fix.

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tracing::Level;

use super::refusal_kind::{RefusalClass, classify_error};

/// The start of librdkafka's text for that warning (after its thread tag).
const GAPLESS_EXPERIMENTAL: &str =
    "Configuration property enable.gapless.guarantee is experimental";

/// Why the gapless warning is expected, logged beside it.
const GAPLESS_REASON: &str = "expected: the relay sets enable.gapless.guarantee so that a record \
     that failed for good stops the producer instead of being overtaken by later records of its \
     aggregate";

/// Why a `FAIL` line goes to debug, logged beside it.
const FAIL_REASON: &str = "also reported as a client error, logged once per incident";

/// librdkafka's words (`rd_kafka_err2str`) for the coordinator's answers
/// that a producer id request retries.
const COORDINATOR_NOT_YET: &[&str] = &[
    "Broker: Coordinator load in progress",
    "Broker: Coordinator not available",
    "Broker: Not coordinator",
    "Broker: Producer attempted to update a transaction while another concurrent operation",
];

/// Why a `GETPID` retry goes to debug, logged beside it.
const GETPID_REASON: &str = "transient: librdkafka retries the producer id request; if it \
     lasts, init_transactions times out and the relay warns and retries";

/// Why a producer's fatal error or a failed transaction goes to debug,
/// logged beside it (and beside the fatal error's client-error callback).
pub(super) const REPORTED_BY_THE_RELAY: &str = "the record or transactional call this fails \
     comes back to the relay, which stops naming the fix or warns and replays";

/// The level a librdkafka line is logged at, and a note to log with it.
pub(super) fn classify(
    level: RDKafkaLogLevel,
    fac: &str,
    message: &str,
) -> (Level, Option<&'static str>) {
    if fac == "CONFWARN" && message.contains(GAPLESS_EXPERIMENTAL) {
        return (Level::DEBUG, Some(GAPLESS_REASON));
    }
    if fac == "FAIL" {
        return (Level::DEBUG, Some(FAIL_REASON));
    }
    if matches!(fac, "FATAL" | "TXNERR" | "ADDPARTS") {
        return (Level::DEBUG, Some(REPORTED_BY_THE_RELAY));
    }
    if fac == "GETPID"
        && message.ends_with(": retrying")
        && COORDINATOR_NOT_YET
            .iter()
            .any(|words| message.contains(words))
    {
        return (Level::DEBUG, Some(GETPID_REASON));
    }
    let level = match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => Level::ERROR,
        RDKafkaLogLevel::Warning => Level::WARN,
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => Level::INFO,
        RDKafkaLogLevel::Debug => Level::DEBUG,
    };
    (level, None)
}

/// Logs one librdkafka line.
pub(super) fn forward(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match classify(level, fac, message) {
        (_, Some(note)) => {
            tracing::debug!(target: "librdkafka", note, "librdkafka: {fac} {message}")
        }
        (Level::ERROR, None) => {
            tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
        (Level::WARN, None) => tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}"),
        (Level::INFO, None) => tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}"),
        (_, None) => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}"),
    }
}

/// The client context of the checkpoint reader's consumers: librdkafka's
/// lines as [`forward`] logs them, client errors as [`reader_error`] says.
/// (rdkafka's default context logs every client error at error, the end of
/// a partition included, which the reader asks for and reads as a result.)
pub(crate) struct ReaderContext;

impl rdkafka::consumer::ConsumerContext for ReaderContext {}

/// A consumer of the checkpoint reader.
pub(crate) type Reader = rdkafka::consumer::BaseConsumer<ReaderContext>;

impl ClientContext for ReaderContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if reader_error(&error) == Level::ERROR {
            tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}");
        } else {
            tracing::debug!(target: "librdkafka", "librdkafka: {error}: {reason}");
        }
    }
}

/// The level of a client error of the checkpoint reader: error for what a
/// person must fix (credentials refused, a fatal error), debug for the
/// rest. The end of a partition is no error at all; a broker that does not
/// answer makes the read fail, and the relay logs that failure at warn as
/// it retries; the topic refused fails the read too, and the relay stops
/// naming the grant.
pub(super) fn reader_error(error: &KafkaError) -> Level {
    let refused = classify_error(error).is_some_and(|k| {
        k.class() == RefusalClass::Unauthorized && k != super::RefusalKind::TopicUnauthorized
    });
    if refused || error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
        Level::ERROR
    } else {
        Level::DEBUG
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librdkafka's own text for the warning (rdkafka_conf.c), with the
    /// thread tag its log callback puts in front.
    const GAPLESS_LINE: &str = "[thrd:app]: Configuration property enable.gapless.guarantee is \
         experimental: When set to `true`, any error that could result in a gap in the produced \
         message series when a batch of messages fails, will raise a fatal error";

    #[test]
    fn the_gapless_warning_goes_to_debug_with_its_reason() {
        let (level, note) = classify(RDKafkaLogLevel::Warning, "CONFWARN", GAPLESS_LINE);
        assert_eq!(level, Level::DEBUG);
        assert!(
            note.is_some_and(|n| n.contains("the relay sets enable.gapless.guarantee")),
            "{note:?}"
        );
    }

    #[test]
    fn a_failed_connection_goes_to_debug_as_the_error_callback_reports_it() {
        let refused = "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to \
             ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)";
        let (level, note) = classify(RDKafkaLogLevel::Error, "FAIL", refused);
        assert_eq!(level, Level::DEBUG);
        assert!(
            note.is_some_and(|n| n.contains("once per incident")),
            "{note:?}"
        );
    }

    #[test]
    fn a_producer_id_request_the_coordinator_defers_goes_to_debug() {
        // librdkafka's words (rd_kafka_idemp_request_pid_failed) on a first
        // start right after the broker came up.
        let loading = "[thrd:main]: Failed to acquire transactional PID from broker \
             TxnCoordinator/1: Broker: Coordinator load in progress: retrying";
        let (level, note) = classify(RDKafkaLogLevel::Warning, "GETPID", loading);
        assert_eq!(level, Level::DEBUG);
        assert!(note.is_some_and(|n| n.contains("if it lasts")), "{note:?}");
        let busy = "[thrd:main]: Failed to acquire transactional PID from broker \
             TxnCoordinator/1: Broker: Producer attempted to update a transaction while another \
             concurrent operation on the same transaction was ongoing: retrying";
        assert_eq!(
            classify(RDKafkaLogLevel::Warning, "GETPID", busy).0,
            Level::DEBUG
        );
        // Another reason to fail a producer id request keeps its level.
        let other = "[thrd:main]: Failed to acquire idempotence PID from broker 1: Broker: \
             Unknown broker error: retrying";
        assert_eq!(
            classify(RDKafkaLogLevel::Warning, "GETPID", other),
            (Level::WARN, None)
        );
    }

    #[test]
    fn the_checkpoint_reader_logs_at_error_only_what_a_person_must_fix() {
        // The end of a partition (enable.partition.eof), reported to the
        // client context as a "Global error" by rdkafka.
        let eof = KafkaError::Global(RDKafkaErrorCode::PartitionEOF);
        assert_eq!(reader_error(&eof), Level::DEBUG);
        let down = KafkaError::Global(RDKafkaErrorCode::AllBrokersDown);
        assert_eq!(reader_error(&down), Level::DEBUG);
        // Fails the read, which stops the relay naming the grant.
        let topic_refused = KafkaError::Global(RDKafkaErrorCode::TopicAuthorizationFailed);
        assert_eq!(reader_error(&topic_refused), Level::DEBUG);
        for refused in [
            RDKafkaErrorCode::SaslAuthenticationFailed,
            RDKafkaErrorCode::Fatal,
        ] {
            assert_eq!(
                reader_error(&KafkaError::Global(refused)),
                Level::ERROR,
                "{refused:?}"
            );
        }
    }

    /// librdkafka's own words (rdkafka_txnmgr.c, rdkafka.c) when the
    /// relay's principal lacks WRITE on the checkpoint topic or on an event
    /// topic: the relay's own line names the grant, so these go to debug.
    #[test]
    fn fatal_errors_and_failed_transactions_go_to_debug() {
        for (fac, line) in [
            (
                "ADDPARTS",
                "[thrd:main]: TxnCoordinator/1: Failed to add partition \"cp\" [0] to \
                 transaction: Broker: Topic authorization failed",
            ),
            (
                "TXNERR",
                "[thrd:main]: Current transaction failed in state BeginCommit: Failed to add \
                 partition(s) to transaction on broker TxnCoordinator/1: Broker: Topic \
                 authorization failed (after 11 ms) (TOPIC_AUTHORIZATION_FAILED)",
            ),
            (
                "FATAL",
                "[thrd:sasl_ssl://127.0.0.1:9093/1]: Fatal error: Local: Gap-less ordering \
                 would not be guaranteed if proceeding: ProduceRequest for t [0] with 1 \
                 message(s) failed: Broker: Topic authorization failed",
            ),
        ] {
            let (level, note) = classify(RDKafkaLogLevel::Error, fac, line);
            assert_eq!(level, Level::DEBUG, "{fac}");
            assert_eq!(note, Some(REPORTED_BY_THE_RELAY), "{fac}");
        }
    }

    #[test]
    fn other_warnings_keep_their_level() {
        // Another experimental or deprecated property someone set in
        // kafka.properties: that one they should see.
        let other = "[thrd:app]: Configuration property queuing.strategy is experimental: ...";
        assert_eq!(
            classify(RDKafkaLogLevel::Warning, "CONFWARN", other),
            (Level::WARN, None)
        );
        // The same words under another facility are not the config warning.
        assert_eq!(
            classify(RDKafkaLogLevel::Warning, "CONFWARN2", GAPLESS_LINE),
            (Level::WARN, None)
        );
        assert_eq!(
            classify(RDKafkaLogLevel::Error, "ERROR", "connection refused"),
            (Level::ERROR, None)
        );
        assert_eq!(
            classify(RDKafkaLogLevel::Notice, "X", "y"),
            (Level::INFO, None)
        );
        assert_eq!(
            classify(RDKafkaLogLevel::Debug, "X", "y"),
            (Level::DEBUG, None)
        );
    }
}
