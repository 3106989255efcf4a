//! `DecodeError`: what was malformed in a pgoutput or replication message,
//! and where.
//!
//! Every variant carries the byte offset within the message being decoded
//! (the pgoutput message for [`super::decode`], the CopyData payload for
//! [`super::decode_copy_data`]), so a bad message from the server can be
//! located in a hex dump without a debugger.

use thiserror::Error;

/// A message the decoder could not make sense of. Never a panic: every
/// malformed input ends here.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The message ended before a field it must contain.
    #[error("message truncated: {what} needs {needed} more byte(s) at offset {offset}")]
    Truncated {
        what: &'static str,
        needed: usize,
        offset: usize,
    },
    /// The first byte is not a tag this decoder knows.
    #[error("unknown message tag {tag:#04x} ({}) at offset {offset}", printable(*tag))]
    UnknownMessage { tag: u8, offset: usize },
    /// A known tag that the negotiated protocol version cannot send; seeing it
    /// means the stream was started with other options than the decoder was
    /// told.
    #[error(
        "{message} message needs pgoutput protocol version {required}, but the decoder was told \
         version {negotiated}: the stream's proto_version and the DecodeContext disagree"
    )]
    NotInProtocolVersion {
        message: &'static str,
        required: u32,
        negotiated: u32,
    },
    /// A count or length that is negative or larger than what is left of the
    /// message. Checked before anything is allocated for it.
    #[error(
        "invalid {what} {len} at offset {offset}: negative or larger than the remaining message"
    )]
    InvalidLength {
        what: &'static str,
        len: i64,
        offset: usize,
    },
    /// A NUL-terminated string without its NUL.
    #[error("{what} at offset {offset} is not NUL-terminated")]
    UnterminatedString { what: &'static str, offset: usize },
    /// A name the server sent is not UTF-8 (the relay expects a UTF8
    /// database encoding).
    #[error("{what} at offset {offset} is not valid UTF-8 (is the database encoding UTF8?)")]
    InvalidUtf8 { what: &'static str, offset: usize },
    /// A tuple column kind other than 'n', 'u', 't', 'b'.
    #[error("unknown tuple column kind {kind:#04x} ({}) at offset {offset}", printable(*kind))]
    UnknownColumnKind { kind: u8, offset: usize },
    /// A tuple marker ('K', 'O', 'N') that does not fit the message.
    #[error(
        "unexpected tuple marker {marker:#04x} ({}) in {message} at offset {offset}",
        printable(*marker)
    )]
    UnexpectedTupleMarker {
        message: &'static str,
        marker: u8,
        offset: usize,
    },
    /// Bytes left over after a complete message: each CopyData carries exactly
    /// one message, so leftovers mean the decoder and the server disagree on
    /// the format (often a protocol version or streaming option mismatch).
    #[error(
        "{count} unexpected trailing byte(s) after a complete {message} message at offset {offset}"
    )]
    TrailingBytes {
        message: &'static str,
        count: usize,
        offset: usize,
    },
}

/// The tag as a character when it is printable ASCII, for error texts.
fn printable(byte: u8) -> String {
    if byte.is_ascii_graphic() {
        format!("'{}'", byte as char)
    } else {
        "non-printable".to_owned()
    }
}
