//! librdkafka's log lines, forwarded to `tracing` (target `librdkafka`) at
//! their own level, with two exceptions.
//!
//! A broker connection failing (facility `FAIL`: connection refused, TLS
//! handshake failed, disconnected) goes to debug: librdkafka reports the
//! same failure, same words, through the client error callback, where the
//! relay logs connection trouble once per incident (`broker_watch`);
//! logged here too it would repeat with every reconnect.
//!
//! And the configuration warning that
//! `enable.gapless.guarantee` is experimental. The relay sets that property
//! on purpose (see [`super::KafkaSink::new`]), so the warning says nothing an
//! operator can act on; printed at warn on every start it would teach people
//! to skip warnings. It goes to debug, with the reason beside it.

use rdkafka::config::RDKafkaLogLevel;
use tracing::Level;

/// The start of librdkafka's text for that warning (after its thread tag).
const GAPLESS_EXPERIMENTAL: &str =
    "Configuration property enable.gapless.guarantee is experimental";

/// Why the gapless warning is expected, logged beside it.
const GAPLESS_REASON: &str = "expected: the relay sets enable.gapless.guarantee so that a record \
     that failed for good stops the producer instead of being overtaken by later records of its \
     aggregate";

/// Why a `FAIL` line goes to debug, logged beside it.
const FAIL_REASON: &str = "also reported as a client error, logged once per incident";

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
