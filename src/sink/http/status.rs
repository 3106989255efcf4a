//! What an HTTP answer means for an event: delivered, worth another try, or
//! refused for good. Pure.
//!
//! 2xx: delivered. 408 (request timeout), 429 (too many requests, with its
//! `Retry-After`) and 5xx: retried. Any other 4xx: permanent, the event is
//! DEAD at once (the receiver says the request itself is wrong; sending it
//! again cannot help). 1xx and 3xx: retried (a final 1xx cannot happen and
//! redirects are not followed: a webhook URL that moved is a config change,
//! and retrying keeps the event until someone makes it).

use std::time::Duration;

/// The verdict on one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Try again; the receiver may ask for a delay (`Retry-After`).
    Retry,
    /// Refused for good.
    Permanent,
}

/// The verdict on status `code`.
pub fn classify(code: u16) -> Outcome {
    match code {
        200..=299 => Outcome::Delivered,
        408 | 429 => Outcome::Retry,
        400..=499 => Outcome::Permanent,
        _ => Outcome::Retry,
    }
}

/// A `Retry-After` value in seconds (the HTTP-date form is not honoured:
/// the schedule applies). Capped at a day.
pub fn retry_after(value: &str) -> Option<Duration> {
    let secs: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(86_400)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_from_100_to_599() {
        for code in 100..=599u16 {
            let expected = if (200..300).contains(&code) {
                Outcome::Delivered
            } else if code == 408 || code == 429 {
                Outcome::Retry
            } else if (400..500).contains(&code) {
                Outcome::Permanent
            } else {
                // 1xx, 3xx, 5xx
                Outcome::Retry
            };
            assert_eq!(classify(code), expected, "status {code}");
        }
        assert_eq!(classify(503), Outcome::Retry);
        assert_eq!(classify(404), Outcome::Permanent);
        assert_eq!(classify(301), Outcome::Retry);
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(retry_after("999999999"), Some(Duration::from_secs(86_400)));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after("-1"), None);
    }
}
