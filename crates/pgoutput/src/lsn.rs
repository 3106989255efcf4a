//! Log sequence numbers: positions in PostgreSQL's write-ahead log.
//!
//! Role: the one type for every WAL position the relay handles (commit LSNs,
//! end LSNs, the flush LSN it confirms). PostgreSQL prints an LSN as two
//! uppercase hex halves, `X/Y` (`16/B374D848`), the high and low 32 bits of a
//! `u64`; [`Lsn`] parses and prints exactly that form so values can be
//! compared with `pg_replication_slots.confirmed_flush_lsn` by eye.
//!
//! Invariants: an `Lsn` is a plain `u64` with total order; `Lsn::ZERO`
//! (`0/0`) means "no position" (PostgreSQL's `InvalidXLogRecPtr`), and
//! `START_REPLICATION ... LOGICAL 0/0` asks the server to start at the slot.

use std::fmt;
use std::str::FromStr;

/// A position in the write-ahead log (PostgreSQL `XLogRecPtr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    /// `0/0`, PostgreSQL's `InvalidXLogRecPtr`.
    pub const ZERO: Lsn = Lsn(0);

    /// The raw 64-bit value.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Bytes of WAL between `earlier` and `self`, or 0 when `earlier` is not
    /// earlier (a lag can't be negative; a reordered report must not wrap).
    pub const fn bytes_since(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl From<u64> for Lsn {
    fn from(value: u64) -> Self {
        Lsn(value)
    }
}

impl From<Lsn> for u64 {
    fn from(lsn: Lsn) -> Self {
        lsn.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// Why a string is not an LSN in PostgreSQL's `X/Y` form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LsnParseError {
    #[error("LSN {input:?} has no '/': expected PostgreSQL's X/Y hex form, e.g. 16/B374D848")]
    MissingSlash { input: String },
    #[error(
        "LSN {input:?}: the {half} half is not a hex number of 1 to 8 digits (expected X/Y, e.g. 16/B374D848)"
    )]
    InvalidHalf { input: String, half: &'static str },
}

impl FromStr for Lsn {
    type Err = LsnParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (high, low) = s
            .split_once('/')
            .ok_or_else(|| LsnParseError::MissingSlash {
                input: s.to_owned(),
            })?;
        let high = parse_half(high).ok_or_else(|| LsnParseError::InvalidHalf {
            input: s.to_owned(),
            half: "high",
        })?;
        let low = parse_half(low).ok_or_else(|| LsnParseError::InvalidHalf {
            input: s.to_owned(),
            half: "low",
        })?;
        Ok(Lsn((u64::from(high) << 32) | u64::from(low)))
    }
}

/// One half of `X/Y`: 1–8 hex digits. `u32::from_str_radix` alone would also
/// accept a leading `+`, which PostgreSQL's `pg_lsn` input does not.
fn parse_half(half: &str) -> Option<u32> {
    if half.is_empty() || half.len() > 8 || !half.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(half, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_like_postgresql() {
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        assert_eq!(Lsn::ZERO.to_string(), "0/0");
        assert_eq!(Lsn(u64::MAX).to_string(), "FFFFFFFF/FFFFFFFF");
        assert_eq!(Lsn(0x1_0000_0000).to_string(), "1/0");
    }

    #[test]
    fn parses_upper_and_lower_case() {
        assert_eq!("16/B374D848".parse::<Lsn>().unwrap(), Lsn(0x16_B374_D848));
        assert_eq!("16/b374d848".parse::<Lsn>().unwrap(), Lsn(0x16_B374_D848));
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn::ZERO);
        assert_eq!("FFFFFFFF/FFFFFFFF".parse::<Lsn>().unwrap(), Lsn(u64::MAX));
    }

    #[test]
    fn round_trips_through_display() {
        for raw in [
            0,
            1,
            0xFFFF_FFFF,
            0x1_0000_0000,
            0x0123_4567_89AB_CDEF,
            u64::MAX,
        ] {
            let lsn = Lsn(raw);
            assert_eq!(lsn.to_string().parse::<Lsn>().unwrap(), lsn);
        }
    }

    #[test]
    fn rejects_malformed_input() {
        assert!(matches!(
            "16B374D848".parse::<Lsn>(),
            Err(LsnParseError::MissingSlash { .. })
        ));
        for (input, half) in [
            ("/1", "high"),
            ("1/", "low"),
            ("+1/1", "high"),
            ("1/-1", "low"),
            ("123456789/0", "high"),
            ("0/G", "low"),
            ("0/1/2", "low"),
        ] {
            assert_eq!(
                input.parse::<Lsn>(),
                Err(LsnParseError::InvalidHalf {
                    input: input.to_owned(),
                    half
                }),
                "{input}"
            );
        }
    }

    #[test]
    fn error_text_names_the_expected_form() {
        let err = "nonsense".parse::<Lsn>().unwrap_err();
        assert!(err.to_string().contains("X/Y"), "{err}");
    }

    #[test]
    fn bytes_since_saturates() {
        assert_eq!(Lsn(100).bytes_since(Lsn(40)), 60);
        assert_eq!(Lsn(40).bytes_since(Lsn(100)), 0);
        assert_eq!(Lsn(7).bytes_since(Lsn(7)), 0);
    }

    #[test]
    fn orders_and_converts() {
        assert!(Lsn(1) < Lsn(2));
        assert_eq!(Lsn::from(5u64).as_u64(), 5);
        assert_eq!(u64::from(Lsn(9)), 9);
        assert_eq!(Lsn::default(), Lsn::ZERO);
    }
}
