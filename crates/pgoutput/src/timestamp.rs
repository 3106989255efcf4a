//! PostgreSQL timestamps on the wire: microseconds since 2000-01-01 00:00 UTC
//! (the "PostgreSQL epoch"), signed 64-bit.
//!
//! `i64::MAX` and `i64::MIN` are `infinity` and `-infinity`; they and any
//! value outside chrono's range convert to `None` rather than a wrong date.

use chrono::{DateTime, Utc};

/// 2000-01-01T00:00:00Z as microseconds since the Unix epoch.
pub const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// A wire timestamp as a UTC date-time; `None` for ±infinity or out of range.
pub fn pg_timestamp_to_utc(micros: i64) -> Option<DateTime<Utc>> {
    if micros == i64::MAX || micros == i64::MIN {
        return None;
    }
    DateTime::from_timestamp_micros(micros.checked_add(PG_EPOCH_UNIX_MICROS)?)
}

/// A UTC date-time as a wire timestamp (for the standby status update's
/// client clock). Saturates far outside PostgreSQL's range.
pub fn utc_to_pg_timestamp(time: DateTime<Utc>) -> i64 {
    time.timestamp_micros().saturating_sub(PG_EPOCH_UNIX_MICROS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_the_postgresql_epoch() {
        let epoch = pg_timestamp_to_utc(0).unwrap();
        assert_eq!(epoch.to_rfc3339(), "2000-01-01T00:00:00+00:00");
        assert_eq!(utc_to_pg_timestamp(epoch), 0);
    }

    #[test]
    fn converts_both_ways() {
        // 2024-05-06T07:08:09.123456Z
        let t = DateTime::parse_from_rfc3339("2024-05-06T07:08:09.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let micros = utc_to_pg_timestamp(t);
        assert_eq!(pg_timestamp_to_utc(micros), Some(t));
        assert_eq!(
            pg_timestamp_to_utc(-1).unwrap().to_rfc3339(),
            "1999-12-31T23:59:59.999999+00:00"
        );
    }

    #[test]
    fn infinity_and_overflow_are_none() {
        assert_eq!(pg_timestamp_to_utc(i64::MAX), None);
        assert_eq!(pg_timestamp_to_utc(i64::MIN), None);
        assert_eq!(pg_timestamp_to_utc(i64::MAX - 1), None);
    }
}
