//! Backend messages of the regular (non-streaming) protocol, read off a
//! [`FramedSocket`], and the fields of an ErrorResponse or NoticeResponse.
//!
//! Role: the frame-level helpers every conversation with the server shares
//! (startup, simple queries, START_REPLICATION, the stream's own
//! ErrorResponses): read one message, turn a failed read into the
//! [`PgError`] the caller reports, parse error fields into a
//! [`ServerError`]. No policy: what an error *means* (wrong password, slot
//! missing...) is decided by the caller, by SQLSTATE.
//!
//! Invariant: a malformed message is a protocol error naming the endpoint
//! and what the connection was doing, never a panic.

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{
    ErrorFields, ErrorResponseBody, Message, NoticeResponseBody,
};

use super::error::{PgError, ServerError};
use super::socket::{FramedSocket, ReadError};

/// Maps a frame-reading failure to the error the caller reports.
pub fn read_error(target: &str, action: &'static str, error: ReadError) -> PgError {
    match error {
        ReadError::Io(source) => PgError::Io {
            target: target.to_owned(),
            action,
            source,
        },
        ReadError::Closed => PgError::Closed {
            target: target.to_owned(),
            action,
        },
        ReadError::BadLength(len) => PgError::Protocol {
            target: target.to_owned(),
            action,
            reason: format!("message length {len}"),
        },
    }
}

/// Reads the next backend message of the (non-streaming) protocol.
pub async fn read_message(
    socket: &mut FramedSocket,
    target: &str,
    action: &'static str,
) -> Result<Message, PgError> {
    let mut frame = socket
        .read_frame()
        .await
        .map_err(|e| read_error(target, action, e))?;
    let tag = frame.tag;
    match Message::parse(&mut frame.bytes) {
        Ok(Some(message)) => Ok(message),
        Ok(None) => unreachable_incomplete(target, action),
        Err(e) => Err(PgError::Protocol {
            target: target.to_owned(),
            action,
            reason: format!("message {:?}: {e}", char::from(tag)),
        }),
    }
}

/// `read_frame` only returns complete frames, so `parse` cannot ask for more;
/// reported as a protocol error rather than a panic all the same.
fn unreachable_incomplete<T>(target: &str, action: &'static str) -> Result<T, PgError> {
    Err(PgError::Protocol {
        target: target.to_owned(),
        action,
        reason: "incomplete message".into(),
    })
}

/// The fields of an ErrorResponse.
pub fn server_error(body: &ErrorResponseBody) -> ServerError {
    error_fields(body.fields())
}

/// The fields of a NoticeResponse (same layout as an ErrorResponse).
pub fn server_notice(body: &NoticeResponseBody) -> ServerError {
    error_fields(body.fields())
}

fn error_fields(mut fields: ErrorFields<'_>) -> ServerError {
    let mut error = ServerError {
        severity: String::new(),
        code: String::new(),
        message: String::new(),
        detail: None,
        hint: None,
    };
    let mut localized_severity = String::new();
    // A malformed field list still leaves whatever was read before it.
    while let Ok(Some(field)) = fields.next() {
        let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
        match field.type_() {
            b'S' => localized_severity = value,
            b'V' => error.severity = value,
            b'C' => error.code = value,
            b'M' => error.message = value,
            b'D' => error.detail = Some(value),
            b'H' => error.hint = Some(value),
            _ => {}
        }
    }
    if error.severity.is_empty() {
        error.severity = localized_severity;
    }
    error
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};

    use super::*;

    /// An ErrorResponse ('E') or NoticeResponse ('N') frame with `fields`.
    fn frame(tag: u8, fields: &[(u8, &str)]) -> BytesMut {
        let mut body = BytesMut::new();
        for (kind, value) in fields {
            body.put_u8(*kind);
            body.put_slice(value.as_bytes());
            body.put_u8(0);
        }
        body.put_u8(0);
        let mut frame = BytesMut::new();
        frame.put_u8(tag);
        frame.put_i32(i32::try_from(body.len() + 4).unwrap());
        frame.put_slice(&body);
        frame
    }

    #[test]
    fn error_fields_prefer_the_non_localized_severity() {
        let fields = [
            (b'S', "FEHLER"),
            (b'V', "ERROR"),
            (b'C', "42704"),
            (b'M', "replication slot \"s\" does not exist"),
            (b'D', "d"),
            (b'H', "h"),
            (b'P', "12"),
        ];
        let Ok(Some(Message::ErrorResponse(body))) = Message::parse(&mut frame(b'E', &fields))
        else {
            panic!("not an ErrorResponse");
        };
        let error = server_error(&body);
        assert_eq!(
            error,
            ServerError {
                severity: "ERROR".into(),
                code: "42704".into(),
                message: "replication slot \"s\" does not exist".into(),
                detail: Some("d".into()),
                hint: Some("h".into()),
            }
        );
        // Servers before 9.6 send only the localized one.
        let Ok(Some(Message::NoticeResponse(body))) =
            Message::parse(&mut frame(b'N', &[(b'S', "WARNUNG"), (b'C', "01000")]))
        else {
            panic!("not a NoticeResponse");
        };
        let notice = server_notice(&body);
        assert_eq!(
            (notice.severity.as_str(), notice.code.as_str()),
            ("WARNUNG", "01000")
        );
    }

    #[test]
    fn read_errors_name_the_endpoint_and_the_action() {
        let closed = read_error("db:5432", "streaming", ReadError::Closed);
        assert!(matches!(closed, PgError::Closed { .. }), "{closed}");
        let bad = read_error("db:5432", "streaming", ReadError::BadLength(-1));
        let text = bad.to_string();
        assert!(
            text.contains("db:5432") && text.contains("streaming") && text.contains("-1"),
            "{text}"
        );
    }
}
