//! A bounds-checked cursor over one message.
//!
//! Role: the only place that reads bytes off a message. Every read checks the
//! remaining length first and reports the offset where it failed, so the
//! decoders above it cannot index out of bounds. Byte runs are returned as
//! `Bytes` slices of the input (zero-copy: a refcount, not a copy).

use bytes::{Buf, Bytes};

use super::DecodeError;
use crate::lsn::Lsn;

pub(crate) struct Reader {
    buf: Bytes,
    /// Length of the whole message, to turn "bytes left" into an offset.
    len: usize,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Self {
        let len = buf.len();
        Reader { buf, len }
    }

    /// Offset of the next unread byte from the start of the message.
    pub(crate) fn offset(&self) -> usize {
        self.len - self.buf.len()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Everything not read yet, consuming it.
    pub(crate) fn take_rest(&mut self) -> Bytes {
        self.buf.split_off(0)
    }

    fn need(&self, what: &'static str, n: usize) -> Result<(), DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated {
                what,
                needed: n - self.buf.len(),
                offset: self.offset(),
            });
        }
        Ok(())
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.need(what, 1)?;
        Ok(self.buf.get_u8())
    }

    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16, DecodeError> {
        self.need(what, 2)?;
        Ok(self.buf.get_i16())
    }

    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        self.need(what, 4)?;
        Ok(self.buf.get_i32())
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.need(what, 4)?;
        Ok(self.buf.get_u32())
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        self.need(what, 8)?;
        Ok(self.buf.get_i64())
    }

    pub(crate) fn lsn(&mut self, what: &'static str) -> Result<Lsn, DecodeError> {
        self.need(what, 8)?;
        Ok(Lsn(self.buf.get_u64()))
    }

    /// `n` bytes as a slice of the input.
    pub(crate) fn bytes(&mut self, what: &'static str, n: usize) -> Result<Bytes, DecodeError> {
        self.need(what, n)?;
        Ok(self.buf.split_to(n))
    }

    /// A non-negative `Int32` length that fits in what is left of the message,
    /// checked before the caller allocates or slices anything for it.
    /// `min_item_size` is the fewest bytes one counted item occupies, so that
    /// a count of items (not bytes) is also bounded by the remaining length.
    pub(crate) fn count_i32(
        &mut self,
        what: &'static str,
        min_item_size: usize,
    ) -> Result<usize, DecodeError> {
        let offset = self.offset();
        let raw = self.i32(what)?;
        self.check_count(what, i64::from(raw), min_item_size, offset)
    }

    /// Like [`Reader::count_i32`] for an `Int16` count.
    pub(crate) fn count_i16(
        &mut self,
        what: &'static str,
        min_item_size: usize,
    ) -> Result<usize, DecodeError> {
        let offset = self.offset();
        let raw = self.i16(what)?;
        self.check_count(what, i64::from(raw), min_item_size, offset)
    }

    fn check_count(
        &self,
        what: &'static str,
        raw: i64,
        min_item_size: usize,
        offset: usize,
    ) -> Result<usize, DecodeError> {
        let invalid = DecodeError::InvalidLength {
            what,
            len: raw,
            offset,
        };
        let count = usize::try_from(raw).map_err(|_| invalid.clone())?;
        match count.checked_mul(min_item_size) {
            Some(bytes) if bytes <= self.remaining() => Ok(count),
            _ => Err(invalid),
        }
    }

    /// A NUL-terminated UTF-8 string (PostgreSQL's `String` field type).
    pub(crate) fn cstr(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let offset = self.offset();
        let nul = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::UnterminatedString { what, offset })?;
        let raw = self.buf.split_to(nul);
        self.buf.advance(1);
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::InvalidUtf8 { what, offset })
    }

    /// Fails unless the whole message was consumed.
    pub(crate) fn finish(&self, message: &'static str) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                message,
                count: self.buf.len(),
                offset: self.offset(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_offset_of_truncation() {
        let mut r = Reader::new(Bytes::from_static(&[0, 0, 0, 1, 0xAA]));
        assert_eq!(r.i32("first").unwrap(), 1);
        assert_eq!(
            r.i32("second"),
            Err(DecodeError::Truncated {
                what: "second",
                needed: 3,
                offset: 4
            })
        );
    }

    #[test]
    fn counts_are_bounded_by_remaining_bytes() {
        // count 3 of 4-byte items, but only 8 bytes follow
        let mut bytes = vec![0, 0, 0, 3];
        bytes.extend([0u8; 8]);
        let mut r = Reader::new(Bytes::from(bytes));
        assert_eq!(
            r.count_i32("relation count", 4),
            Err(DecodeError::InvalidLength {
                what: "relation count",
                len: 3,
                offset: 0
            })
        );
        let mut r = Reader::new(Bytes::from_static(&[0xFF, 0xFF]));
        assert!(matches!(
            r.count_i16("column count", 1),
            Err(DecodeError::InvalidLength { len: -1, .. })
        ));
    }

    #[test]
    fn strings_need_nul_and_utf8() {
        let mut r = Reader::new(Bytes::from_static(b"public\0x"));
        assert_eq!(r.cstr("namespace").unwrap(), "public");
        assert_eq!(r.offset(), 7);
        assert_eq!(
            r.cstr("name"),
            Err(DecodeError::UnterminatedString {
                what: "name",
                offset: 7
            })
        );
        let mut r = Reader::new(Bytes::from_static(b"\xFF\0"));
        assert!(matches!(
            r.cstr("name"),
            Err(DecodeError::InvalidUtf8 { .. })
        ));
    }
}
