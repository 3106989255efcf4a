//! The byte pipe under every PostgreSQL connection: TCP, TLS over TCP, or a
//! Unix socket, with a read buffer split into backend frames and a write
//! buffer of encoded frontend messages.
//!
//! Role: [`open`] connects to an endpoint (TLS negotiated per `sslmode`);
//! all socket I/O of the connection then goes through
//! [`FramedSocket`]; everything above it works on whole frames.
//!
//! Invariants (what makes [`crate::replication::ReplicationStream::next`]
//! cancel-safe):
//! * bytes read live in `read_buf` until a complete frame is split off, so a
//!   read cancelled at an `.await` loses nothing;
//! * bytes to write live in `write_buf` and are removed only once the socket
//!   took them, so a cancelled write resumes where it stopped;
//! * a frame is split off only synchronously ([`FramedSocket::try_frame`]),
//!   never across an `.await`.
//!
//! Frames are split zero-copy: `split_to(..)` hands out the bytes of the read
//! buffer itself; CopyData payloads reach the decoder as slices of it.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::conninfo::{Endpoint, TlsSettings};
use super::error::PgError;
use super::tls::{self, Negotiated, TlsStream};

/// Room made in the read buffer before each read: large enough that a busy
/// stream of ~100–800-byte XLogData frames costs one syscall per many frames.
const READ_CHUNK: usize = 64 * 1024;

/// PostgreSQL never sends a message larger than 1 GB (`MaxAllocSize`) plus
/// headers; a larger length prefix means a corrupt stream, and must not make
/// us reserve that much memory.
const MAX_FRAME_LEN: usize = (1 << 30) + 1024;

/// The transport. Each variant is `Unpin`, so polling needs no pin projection.
pub enum Socket {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Unix(UnixStream),
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_flush(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Socket::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Socket::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Opens the transport to one endpoint. libpq ignores `sslmode` on Unix
/// sockets, and so do we.
pub async fn open(
    endpoint: &Endpoint,
    tls_settings: &TlsSettings,
    target: &str,
) -> Result<Socket, PgError> {
    let connect_error = |source| PgError::Connect {
        target: target.to_owned(),
        source,
    };
    match endpoint {
        Endpoint::Unix { socket } => Ok(Socket::Unix(
            UnixStream::connect(socket).await.map_err(connect_error)?,
        )),
        Endpoint::Tcp { host, addr, port } => {
            let tcp = match (addr, host) {
                (Some(addr), _) => TcpStream::connect((*addr, *port)).await,
                (None, Some(host)) => TcpStream::connect((host.as_str(), *port)).await,
                (None, None) => Err(std::io::ErrorKind::InvalidInput.into()),
            }
            .map_err(connect_error)?;
            // Status updates are tiny and must not wait for Nagle.
            tcp.set_nodelay(true).map_err(connect_error)?;
            let server_name = endpoint.server_name().unwrap_or_default();
            Ok(
                match tls::establish(tcp, tls_settings, &server_name, target).await? {
                    Negotiated::Plain(tcp) => Socket::Tcp(tcp),
                    Negotiated::Tls(stream) => Socket::Tls(stream),
                },
            )
        }
    }
}

/// One backend message: its tag and the whole frame (tag and length
/// included, as `postgres_protocol::message::backend::Message::parse` wants).
pub struct Frame {
    pub tag: u8,
    pub bytes: BytesMut,
}

impl Frame {
    /// The message body after the 5-byte header.
    pub fn into_body(mut self) -> bytes::Bytes {
        self.bytes.advance(5);
        self.bytes.freeze()
    }
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    /// Orderly EOF from the server.
    Closed,
    /// A length prefix below 4 or above [`MAX_FRAME_LEN`].
    BadLength(i64),
}

pub struct FramedSocket {
    socket: Socket,
    read_buf: BytesMut,
    write_buf: BytesMut,
}

impl FramedSocket {
    pub fn new(socket: Socket) -> Self {
        FramedSocket {
            socket,
            read_buf: BytesMut::with_capacity(READ_CHUNK),
            write_buf: BytesMut::with_capacity(256),
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self.socket, Socket::Tls(_))
    }

    /// The `tls-server-end-point` channel binding data of the connection, or
    /// why there is none; `None` without TLS.
    pub fn tls_server_end_point(&self) -> Option<Result<Vec<u8>, String>> {
        match &self.socket {
            Socket::Tls(stream) => Some(stream.server_end_point()),
            Socket::Tcp(_) | Socket::Unix(_) => None,
        }
    }

    /// The buffer frontend messages are encoded into; sent by
    /// [`FramedSocket::flush`] or while waiting in [`FramedSocket::fill`].
    pub fn write_buf(&mut self) -> &mut BytesMut {
        &mut self.write_buf
    }

    /// Whether the read buffer holds anything: a whole frame a reader
    /// would take without waiting, or the start of one whose rest the
    /// peer is still sending (a read that ends inside a frame says more is
    /// on its way, not that the peer went quiet).
    pub fn bytes_buffered(&self) -> bool {
        !self.read_buf.is_empty()
    }

    /// Splits the next complete frame off the read buffer, if there is one.
    /// Synchronous, so it cannot be cancelled halfway.
    pub fn try_frame(&mut self) -> Result<Option<Frame>, ReadError> {
        let Some(header) = self.read_buf.get(..5) else {
            return Ok(None);
        };
        let tag = header[0];
        let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let frame_len = usize::try_from(len)
            .ok()
            .filter(|len| (4..=MAX_FRAME_LEN).contains(len))
            .ok_or(ReadError::BadLength(i64::from(len)))?
            + 1;
        if self.read_buf.len() < frame_len {
            // Reserve the whole frame at once so a large message is read
            // without repeated reallocation.
            self.read_buf.reserve(frame_len - self.read_buf.len());
            return Ok(None);
        }
        Ok(Some(Frame {
            tag,
            bytes: self.read_buf.split_to(frame_len),
        }))
    }

    /// Waits for a complete frame. Cancel-safe.
    pub async fn read_frame(&mut self) -> Result<Frame, ReadError> {
        loop {
            if let Some(frame) = self.try_frame()? {
                return Ok(frame);
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes into the read buffer, sending pending writes while it
    /// waits. Cancel-safe: a cancelled call has either read nothing or put
    /// what it read into the buffer, and `write_buf` only loses what the
    /// socket accepted.
    pub async fn fill(&mut self) -> Result<(), ReadError> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }

    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ReadError>> {
        // Writing first and not waiting for it: the server always drains its
        // input while it streams, and a status update must not wait behind
        // incoming data (nor the other way round).
        if let Poll::Ready(Err(e)) = self.poll_flush_writes(cx) {
            return Poll::Ready(Err(ReadError::Io(e)));
        }
        // A TLS read returns at most one record, and the walsender flushes
        // (one small record) after nearly every message; so over TLS keep
        // reading while records are ready, up to READ_CHUNK, to hand up a
        // batch of frames per wake-up as plain TCP does with one read.
        let greedy = matches!(self.socket, Socket::Tls(_));
        let mut total = 0;
        loop {
            if self.read_buf.capacity() - self.read_buf.len() < READ_CHUNK / 4 {
                if total > 0 {
                    break;
                }
                self.read_buf.reserve(READ_CHUNK);
            }
            // `read_buf` (the tokio future) keeps no state between polls, so
            // a fresh one per poll is equivalent to polling one repeatedly.
            let read = pin!(self.socket.read_buf(&mut self.read_buf));
            match read.poll(cx) {
                Poll::Ready(Ok(0)) if total == 0 => return Poll::Ready(Err(ReadError::Closed)),
                Poll::Ready(Err(e)) if total == 0 => return Poll::Ready(Err(ReadError::Io(e))),
                Poll::Pending if total == 0 => return Poll::Pending,
                Poll::Ready(Ok(n)) if n > 0 => total += n,
                // EOF or an error after some data: hand the data up first; the
                // condition shows again on the next read.
                _ => break,
            }
            if !greedy || total >= READ_CHUNK {
                break;
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_flush_writes(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.write_buf.is_empty() {
            match Pin::new(&mut self.socket).poll_write(cx, &self.write_buf) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => self.write_buf.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    /// Sends everything in the write buffer. Cancel-safe.
    pub async fn flush(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_flush_writes(cx)).await
    }

    /// Sends what the socket accepts right now without waiting; the rest goes
    /// out with the next [`FramedSocket::fill`] or [`FramedSocket::flush`].
    pub fn flush_now(&mut self) -> io::Result<()> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.poll_flush_writes(&mut cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Ok(()),
        }
    }

    /// Best-effort close (TLS close_notify, TCP FIN).
    pub async fn close(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| Pin::new(&mut self.socket).poll_shutdown(cx)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn pair() -> (FramedSocket, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        (FramedSocket::new(Socket::Unix(a)), b)
    }

    #[tokio::test]
    async fn frames_split_across_reads_are_reassembled_and_zero_copy() {
        let (mut framed, mut peer) = pair().await;
        let mut wire = vec![b'd', 0, 0, 0, 7, b'a', b'b', b'c'];
        wire.extend([b'Z', 0, 0, 0, 5, b'I']);
        peer.write_all(&wire[..3]).await.unwrap();
        let read = tokio::spawn(async move {
            let first = framed.read_frame().await.unwrap();
            let second = framed.read_frame().await.unwrap();
            (first.tag, first.into_body(), second.tag)
        });
        tokio::task::yield_now().await;
        peer.write_all(&wire[3..]).await.unwrap();
        let (tag, body, second) = read.await.unwrap();
        assert_eq!((tag, &body[..], second), (b'd', &b"abc"[..], b'Z'));
    }

    #[tokio::test]
    async fn cancelled_reads_lose_no_bytes() {
        let (mut framed, mut peer) = pair().await;
        peer.write_all(&[b'd', 0, 0, 0, 6]).await.unwrap();
        // Each timeout cancels a read_frame that has consumed part of the frame.
        for _ in 0..3 {
            let r = tokio::time::timeout(std::time::Duration::from_millis(20), framed.read_frame())
                .await;
            assert!(r.is_err(), "the frame is incomplete");
        }
        peer.write_all(b"xy").await.unwrap();
        let frame = framed.read_frame().await.unwrap();
        assert_eq!(&frame.into_body()[..], b"xy");
    }

    #[tokio::test]
    async fn bad_lengths_and_eof_are_errors() {
        let (mut framed, mut peer) = pair().await;
        peer.write_all(&[b'd', 0, 0, 0, 3]).await.unwrap();
        assert!(matches!(
            framed.read_frame().await,
            Err(ReadError::BadLength(3))
        ));
        let (mut framed, mut peer) = pair().await;
        peer.write_all(&[b'd', 0xff, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        assert!(matches!(
            framed.read_frame().await,
            Err(ReadError::BadLength(-1))
        ));
        let (mut framed, peer) = pair().await;
        drop(peer);
        assert!(matches!(framed.read_frame().await, Err(ReadError::Closed)));
    }

    /// What a reader learns without waiting: whether anything of the
    /// peer's is buffered, a part of a frame included (its rest is on its
    /// way); nothing once every byte read was taken.
    #[tokio::test]
    async fn a_part_of_a_frame_counts_as_buffered_until_taken() {
        let (mut framed, mut peer) = pair().await;
        assert!(!framed.bytes_buffered(), "nothing read");
        peer.write_all(&[b'd', 0, 0, 0, 6, b'x']).await.unwrap();
        framed.fill().await.unwrap();
        assert!(framed.bytes_buffered(), "a part of a frame");
        assert!(framed.try_frame().unwrap().is_none(), "not whole yet");
        peer.write_all(&[b'y', b'Z', 0, 0]).await.unwrap();
        while framed.read_buf.len() < 10 {
            framed.fill().await.unwrap();
        }
        assert_eq!(&framed.try_frame().unwrap().unwrap().into_body()[..], b"xy");
        assert!(
            framed.bytes_buffered(),
            "the next frame's header is not whole, but it has begun"
        );
        peer.write_all(&[0, 4]).await.unwrap();
        while framed.read_buf.len() < 5 {
            framed.fill().await.unwrap();
        }
        assert_eq!(framed.try_frame().unwrap().unwrap().tag, b'Z');
        assert!(!framed.bytes_buffered(), "every byte read was taken");
    }

    #[tokio::test]
    async fn writes_go_out_while_waiting_to_read() {
        let (mut framed, mut peer) = pair().await;
        framed.write_buf().extend_from_slice(b"hello");
        let reader = tokio::spawn(async move { framed.read_frame().await.map(|f| f.tag) });
        let mut got = [0u8; 5];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        peer.write_all(&[b'c', 0, 0, 0, 4]).await.unwrap();
        assert_eq!(reader.await.unwrap().unwrap(), b'c');
    }
}
