//! The transport under a [`super::PgClient`]: the relay's socket, watched
//! during authentication.
//!
//! Role: tokio-postgres runs the SCRAM exchange, but a refusal only comes
//! back as the server's ErrorResponse. Whether it refused a *bound*
//! exchange (a TLS man in the middle: PostgreSQL's "SCRAM channel binding
//! check failed", SQLSTATE 28000, the same code as "no pg_hba.conf entry")
//! depends on how far authentication got: after the server asked for SASL
//! and before its final message. [`Transport`] notes that from the
//! authentication requests (`R` messages) the server sends, so the refusal
//! is classified by the protocol state, as on the replication connection,
//! not by the text of a message the server may send in another language.
//!
//! Invariant: only message headers and the request codes of `R` messages
//! are read; nothing is kept, and watching stops at AuthenticationOk (or at
//! anything unexpected), so the session's later traffic passes untouched.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::pg::socket::Socket;

/// The server asked for SASL (AuthenticationSASL).
pub const SASL_ASKED: u8 = 1;
/// The server sent its SCRAM proof (AuthenticationSASLFinal): it had
/// checked the binding data by then.
pub const SASL_FINAL: u8 = 2;
/// AuthenticationOk.
pub const AUTH_OK: u8 = 4;

/// What the server has asked so far, shared with the connect.
pub type Seen = Arc<AtomicU8>;

/// The socket, and the watch on it until authentication is over.
pub struct Transport {
    socket: Socket,
    watch: Option<Watch>,
}

impl Transport {
    pub fn new(socket: Socket) -> (Transport, Seen) {
        let seen = Seen::default();
        let watch = Watch {
            seen: seen.clone(),
            ..Watch::default()
        };
        (
            Transport {
                socket,
                watch: Some(watch),
            },
            seen,
        )
    }
}

/// Splits the server's bytes into messages, reading headers and the
/// request code of `R` messages only.
#[derive(Default)]
struct Watch {
    seen: Seen,
    header: [u8; 5],
    header_len: usize,
    /// Body bytes of the current message still to come.
    left: usize,
    code: [u8; 4],
    code_len: usize,
}

impl Watch {
    /// Takes bytes the server sent; `false` once watching is over.
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while let Some((&byte, rest)) = bytes.split_first() {
            if self.header_len < 5 {
                self.header[self.header_len] = byte;
                self.header_len += 1;
                bytes = rest;
                if self.header_len == 5 {
                    let len = i32::from_be_bytes([
                        self.header[1],
                        self.header[2],
                        self.header[3],
                        self.header[4],
                    ]);
                    let Some(body) = usize::try_from(len).ok().and_then(|l| l.checked_sub(4))
                    else {
                        return false;
                    };
                    self.left = body;
                    self.code_len = 0;
                    if body == 0 && !self.message_done() {
                        return false;
                    }
                }
            } else if self.header[0] == b'R' && self.code_len < 4 {
                self.code[self.code_len] = byte;
                self.code_len += 1;
                self.left -= 1;
                bytes = rest;
                if self.code_len == 4 && !self.request(u32::from_be_bytes(self.code)) {
                    return false;
                }
                if self.left == 0 && !self.message_done() {
                    return false;
                }
            } else {
                let skip = self.left.min(bytes.len());
                self.left -= skip;
                bytes = &bytes[skip..];
                if self.left == 0 && !self.message_done() {
                    return false;
                }
            }
        }
        true
    }

    /// A whole message went by; `false` when it ends the watch.
    fn message_done(&mut self) -> bool {
        self.header_len = 0;
        // Past authentication (ReadyForQuery), or refused (ErrorResponse):
        // nothing more to learn.
        !matches!(self.header[0], b'Z' | b'E')
    }

    /// An authentication request; `false` once authentication is over.
    fn request(&self, code: u32) -> bool {
        let flag = match code {
            0 => AUTH_OK,
            10 => SASL_ASKED,
            12 => SASL_FINAL,
            _ => return true,
        };
        self.seen.fetch_or(flag, Ordering::Relaxed);
        flag != AUTH_OK
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.socket).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(watch)) = (&polled, &mut this.watch)
            && !watch.feed(&buf.filled()[before..])
        {
            this.watch = None;
        }
        polled
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn auth(code: u32, rest: &[u8]) -> Vec<u8> {
        let mut body = code.to_be_bytes().to_vec();
        body.extend_from_slice(rest);
        message(b'R', &body)
    }

    /// Feeds `bytes` in pieces of `step`; what was seen, and whether the
    /// watch was still on at the end.
    fn watch(bytes: &[u8], step: usize) -> (u8, bool) {
        let mut watch = Watch::default();
        let mut on = true;
        for piece in bytes.chunks(step) {
            if !watch.feed(piece) {
                on = false;
                break;
            }
        }
        (watch.seen.load(Ordering::Relaxed), on)
    }

    #[test]
    fn a_refused_bound_exchange_is_seen_between_sasl_and_its_final_message() {
        let mut refused = auth(10, b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        refused.extend(auth(11, b"r=nonce,s=salt,i=4096"));
        refused.extend(message(b'E', b"SFATAL\0C28000\0Mx\0\0"));
        for step in [1, 3, 7, refused.len()] {
            assert_eq!(watch(&refused, step), (SASL_ASKED, false), "step {step}");
        }
    }

    #[test]
    fn a_completed_exchange_ends_the_watch_at_authentication_ok() {
        let mut done = auth(10, b"SCRAM-SHA-256\0\0");
        done.extend(auth(11, b"r=n"));
        done.extend(auth(12, b"v=proof"));
        done.extend(auth(0, b""));
        done.extend(message(b'S', b"server_version\x0015\0"));
        for step in [1, 2, 5, done.len()] {
            let (seen, on) = watch(&done, step);
            assert_eq!(seen, SASL_ASKED | SASL_FINAL | AUTH_OK, "step {step}");
            assert!(!on);
        }
        // Before SASL: a refusal such as "no pg_hba.conf entry".
        let early = message(b'E', b"SFATAL\0C28000\0Mno entry\0\0");
        assert_eq!(watch(&early, 4), (0, false));
        // A length below 4 is not a message: stop reading.
        assert_eq!(watch(&[b'R', 0, 0, 0, 2, 0, 0], 1), (0, false));
    }
}
