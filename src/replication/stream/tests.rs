//! Unit tests of [`ReplicationStream`] against a scripted fake server on a
//! Unix socket pair: status updates, keepalive replies, timeouts, cancel
//! safety and error classification, without PostgreSQL.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::status::{MIN_STATUS_INTERVAL, read_timeout, status_interval};
use super::*;
use crate::pg::ErrorKind;
use crate::pg::socket::Socket;

const CONFIRMED: Lsn = Lsn(0x100);

impl ReplicationStream {
    /// A stream over an already started connection (a fake server in tests).
    fn started(
        socket: Socket,
        confirmed: Lsn,
        status_interval: Duration,
        read_timeout: Duration,
    ) -> Self {
        let now = Instant::now();
        ReplicationStream {
            socket: FramedSocket::new(socket),
            target: "test".into(),
            slot: "test_slot".into(),
            publication: "test_pub".into(),
            database: "test_db".into(),
            backend_pid: 0,
            slot_confirmed_flush: confirmed,
            identity: ServerIdentity {
                system_id: "7000000000000000001".into(),
                timeline: 1,
            },
            server_wal: confirmed,
            timeline_fork: None,
            outbox: None,
            confirmed,
            status_interval,
            read_timeout,
            next_status_at: now + status_interval,
            probe_sent_at: None,
            received_since_status: false,
            reported: confirmed,
            reported_at: now,
        }
    }
}

fn stream(status_interval: Duration, read_timeout: Duration) -> (ReplicationStream, UnixStream) {
    let (ours, server) = UnixStream::pair().unwrap();
    let stream =
        ReplicationStream::started(Socket::Unix(ours), CONFIRMED, status_interval, read_timeout);
    (stream, server)
}

fn quiet_stream() -> (ReplicationStream, UnixStream) {
    stream(Duration::from_secs(60), Duration::from_secs(60))
}

fn backend(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend(i32::try_from(body.len() + 4).unwrap().to_be_bytes());
    out.extend(body);
    out
}

fn keepalive(wal_end: u64, reply: bool) -> Vec<u8> {
    let mut body = BytesMut::new();
    body.put_u8(b'k');
    body.put_u64(wal_end);
    body.put_i64(0);
    body.put_u8(u8::from(reply));
    backend(b'd', &body)
}

fn xlogdata(start: u64, end: u64, data: &[u8]) -> Vec<u8> {
    let mut body = BytesMut::new();
    body.put_u8(b'w');
    body.put_u64(start);
    body.put_u64(end);
    body.put_i64(0);
    body.put_slice(data);
    backend(b'd', &body)
}

fn error_response(code: &str, message: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (field, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code),
        (b'M', message),
    ] {
        body.push(field);
        body.extend(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    backend(b'E', &body)
}

/// Reads one frontend message: (tag, body).
async fn read_frontend(server: &mut UnixStream) -> (u8, Vec<u8>) {
    let tag = server.read_u8().await.unwrap();
    let len = server.read_i32().await.unwrap();
    let mut body = vec![0; usize::try_from(len - 4).unwrap()];
    server.read_exact(&mut body).await.unwrap();
    (tag, body)
}

/// Reads a status update: (write, flush, apply, reply_requested).
async fn read_status(server: &mut UnixStream) -> (Lsn, Lsn, Lsn, bool) {
    let (tag, body) = read_frontend(server).await;
    assert_eq!(
        (tag, body.first()),
        (b'd', Some(&b'r')),
        "a CopyData status update"
    );
    assert_eq!(body.len(), 34);
    let lsn = |i: usize| Lsn(u64::from_be_bytes(body[i..i + 8].try_into().unwrap()));
    (lsn(1), lsn(9), lsn(17), body[33] == 1)
}

#[tokio::test]
async fn keepalive_asking_for_a_reply_is_answered_with_the_confirmed_lsn_not_wal_end() {
    let (mut stream, mut server) = quiet_stream();
    server.write_all(&keepalive(0x9000, true)).await.unwrap();
    let item = stream.next().await.unwrap();
    assert_eq!(
        item,
        StreamItem::Keepalive {
            wal_end: Lsn(0x9000)
        }
    );
    let (write, flush, apply, reply) = read_status(&mut server).await;
    assert_eq!(
        (write, flush, apply, reply),
        (CONFIRMED, CONFIRMED, CONFIRMED, false)
    );
    assert_eq!(
        stream.confirmed(),
        CONFIRMED,
        "a keepalive confirms nothing by itself"
    );
}

#[tokio::test]
async fn confirm_is_monotonic_and_carried_by_the_next_update() {
    let (mut stream, mut server) = quiet_stream();
    stream.confirm(Lsn(0x300));
    stream.confirm(Lsn(0x200));
    assert_eq!(stream.confirmed(), Lsn(0x300));
    stream.send_status(true).await.unwrap();
    assert_eq!(
        read_status(&mut server).await,
        (Lsn(0x300), Lsn(0x300), Lsn(0x300), true)
    );
}

#[tokio::test]
async fn quiet_server_gets_a_periodic_update_that_asks_for_a_reply() {
    let (mut stream, mut server) = stream(Duration::from_millis(100), Duration::from_secs(60));
    let started = Instant::now();
    let next = tokio::spawn(async move { (stream.next().await, stream) });
    let (.., reply) = tokio::time::timeout(Duration::from_secs(2), read_status(&mut server))
        .await
        .expect("a status update within the interval");
    assert!(
        reply,
        "nothing arrived since the last update: probe for liveness"
    );
    assert!(started.elapsed() >= Duration::from_millis(90));
    server.write_all(&xlogdata(1, 2, b"B")).await.unwrap();
    let (item, _stream) = next.await.unwrap();
    assert!(matches!(item.unwrap(), StreamItem::XLogData { .. }));
}

#[tokio::test]
async fn silent_server_is_a_transient_read_timeout() {
    let (mut stream, _server) = stream(Duration::from_millis(100), Duration::from_millis(300));
    let started = Instant::now();
    let err = stream.next().await.unwrap_err();
    assert!(matches!(err, PgError::ReadTimeout { .. }), "{err}");
    assert_eq!(err.kind(), ErrorKind::Transient);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_caller_that_paused_reading_is_not_a_read_timeout() {
    let (mut stream, mut server) = stream(Duration::from_millis(100), Duration::from_millis(300));
    stream.send_status(true).await.unwrap();
    read_status(&mut server).await;
    server.write_all(&keepalive(0x50, false)).await.unwrap();
    // The caller is busy for longer than the read timeout; the answer waits
    // in the socket and must be read, not reported as silence.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        stream.next().await.unwrap(),
        StreamItem::Keepalive { wal_end: Lsn(0x50) }
    );
}

#[tokio::test]
async fn cancelled_next_loses_no_message() {
    let (mut stream, mut server) = quiet_stream();
    let frame = xlogdata(0x10, 0x20, b"payload-bytes");
    server.write_all(&frame[..11]).await.unwrap();
    for _ in 0..3 {
        let cancelled = tokio::time::timeout(Duration::from_millis(20), stream.next()).await;
        assert!(
            cancelled.is_err(),
            "incomplete frame: next() must still be waiting"
        );
    }
    server.write_all(&frame[11..]).await.unwrap();
    server.write_all(&keepalive(0x30, false)).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap(),
        StreamItem::XLogData {
            wal_start: Lsn(0x10),
            wal_end: Lsn(0x20),
            data: bytes::Bytes::from_static(b"payload-bytes"),
        }
    );
    assert_eq!(
        stream.next().await.unwrap(),
        StreamItem::Keepalive { wal_end: Lsn(0x30) }
    );
}

#[tokio::test]
async fn server_errors_are_classified() {
    let cases = [
        (
            "57P01",
            "terminating connection due to administrator command",
            ErrorKind::Transient,
        ),
        (
            "42704",
            "publication \"test_pub\" does not exist",
            ErrorKind::Fatal,
        ),
        (
            "55006",
            "replication slot \"test_slot\" is active for PID 77",
            ErrorKind::SlotBusy,
        ),
    ];
    for (code, message, kind) in cases {
        let (mut stream, mut server) = quiet_stream();
        server
            .write_all(&error_response(code, message))
            .await
            .unwrap();
        let err = stream.next().await.unwrap_err();
        assert_eq!(err.kind(), kind, "{err}");
        if code == "42704" {
            assert!(matches!(err, PgError::PublicationMissing { .. }), "{err}");
        }
        if code == "55006" {
            assert!(
                matches!(
                    err,
                    PgError::SlotInUse {
                        active_pid: Some(77),
                        ..
                    }
                ),
                "{err}"
            );
        }
    }
    let (mut stream, server) = quiet_stream();
    drop(server);
    let err = stream.next().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
}

/// Each SQLSTATE the stream gives a meaning to, and the same code with
/// another message where PostgreSQL reuses it.
#[tokio::test]
async fn server_errors_map_to_the_object_they_name() {
    type Expected = fn(&PgError) -> bool;
    let cases: [(&str, &str, Expected); 6] = [
        ("42704", "publication \"test_pub\" does not exist", |e| {
            matches!(e, PgError::PublicationMissing { .. })
        }),
        (
            "42704",
            "replication slot \"test_slot\" does not exist",
            |e| matches!(e, PgError::SlotMissing { .. }),
        ),
        (
            "55006",
            "replication slot \"test_slot\" is active for PID 77",
            |e| {
                matches!(
                    e,
                    PgError::SlotInUse {
                        active_pid: Some(77),
                        ..
                    }
                )
            },
        ),
        (
            "55000",
            "cannot read from logical replication slot \"test_slot\": it has been invalidated",
            |e| matches!(e, PgError::SlotInvalidated { .. }),
        ),
        (
            "55000",
            "logical decoding requires wal_level >= logical",
            |e| matches!(e, PgError::Server { .. }),
        ),
        (
            "57P01",
            "terminating connection due to administrator command",
            |e| matches!(e, PgError::Server { .. }),
        ),
    ];
    for (code, message, expected) in cases {
        let (mut stream, mut server) = quiet_stream();
        server
            .write_all(&error_response(code, message))
            .await
            .unwrap();
        let err = stream.next().await.unwrap_err();
        assert!(expected(&err), "{code} {message}: {err:?}");
    }
}

#[tokio::test]
async fn command_complete_without_copy_done_is_a_transient_end_of_stream() {
    // What a walsender sends when PostgreSQL shuts down in fast mode.
    let (mut stream, mut server) = quiet_stream();
    server.write_all(&backend(b'C', b"COPY 0\0")).await.unwrap();
    let err = stream.next().await.unwrap_err();
    assert!(matches!(err, PgError::StreamEnded { .. }), "{err}");
    assert_eq!(err.kind(), ErrorKind::Transient);
}

#[tokio::test]
async fn garbage_is_a_fatal_protocol_error() {
    let (mut stream, mut server) = quiet_stream();
    server.write_all(&backend(b'd', b"zzz")).await.unwrap();
    let err = stream.next().await.unwrap_err();
    assert!(matches!(err, PgError::Decode { .. }), "{err}");
    assert_eq!(err.kind(), ErrorKind::Fatal);
}

#[tokio::test]
async fn shutdown_sends_final_status_and_copy_done_then_terminates() {
    let (mut stream, mut server) = quiet_stream();
    stream.confirm(Lsn(0x4242));
    let server_side = tokio::spawn(async move {
        assert_eq!(read_status(&mut server).await.1, Lsn(0x4242));
        assert_eq!(read_frontend(&mut server).await.0, b'c', "CopyDone");
        // Data still in flight, then the server's end of the stream.
        let mut reply = xlogdata(1, 2, b"late");
        reply.extend(backend(b'c', b""));
        reply.extend(backend(b'C', b"COPY 0\0"));
        reply.extend(backend(b'Z', b"I"));
        server.write_all(&reply).await.unwrap();
        assert_eq!(read_frontend(&mut server).await.0, b'X', "Terminate");
    });
    stream.shutdown().await.unwrap();
    server_side.await.unwrap();
}

#[test]
fn status_interval_is_bounded_by_half_the_sender_timeout() {
    let s = Duration::from_secs;
    assert_eq!(status_interval(s(10), Some(s(60))), s(10));
    assert_eq!(status_interval(s(10), Some(s(8))), s(4));
    assert_eq!(status_interval(s(10), None), s(10));
    assert_eq!(status_interval(Duration::ZERO, None), MIN_STATUS_INTERVAL);
    assert_eq!(read_timeout(s(10), Some(s(60))), s(60));
    assert_eq!(read_timeout(s(10), None), s(60));
}

#[tokio::test]
async fn an_advanced_confirmation_is_reported_promptly_not_at_the_next_interval() {
    // A kill -9 re-sends everything above the last *reported* position: a
    // confirmation that waits for a 60 s interval widens that window.
    let (mut stream, mut server) = quiet_stream();
    stream.confirm(Lsn(0x200));
    let started = Instant::now();
    let next = tokio::spawn(async move { (stream.next().await, stream) });
    let (_, flush, _, reply) =
        tokio::time::timeout(Duration::from_secs(2), read_status(&mut server))
            .await
            .expect("the new confirmed position is reported within about 100 ms");
    assert_eq!(flush, Lsn(0x200));
    assert!(!reply, "a report of progress is not a liveness probe");
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    server.write_all(&keepalive(0x300, false)).await.unwrap();
    let (item, _stream) = next.await.unwrap();
    assert!(matches!(item.unwrap(), StreamItem::Keepalive { .. }));
}

#[tokio::test]
async fn progress_reports_are_coalesced_and_absent_when_nothing_moved() {
    let (mut stream, mut server) = quiet_stream();
    // Nothing moved: no update at all for a while (the interval is 60 s).
    let quiet = tokio::time::timeout(Duration::from_millis(400), stream.next()).await;
    assert!(quiet.is_err(), "next() had nothing to return");
    let mut probe = [0u8; 1];
    let silent = server.try_read(&mut probe);
    assert!(
        matches!(&silent, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "no status update when nothing moved: {silent:?}"
    );

    // The position moves every 5 ms for 600 ms while the caller keeps
    // reading: at most one update per 100 ms goes out, the last carrying the
    // last position.
    let started = Instant::now();
    let mut lsn = 0x1000;
    while started.elapsed() < Duration::from_millis(600) {
        lsn += 0x10;
        stream.confirm(Lsn(lsn));
        let _ = tokio::time::timeout(Duration::from_millis(5), stream.next()).await;
    }
    let _ = tokio::time::timeout(Duration::from_millis(250), stream.next()).await;
    let mut updates = Vec::new();
    while let Ok((_, flush, _, _)) =
        tokio::time::timeout(Duration::from_millis(100), read_status(&mut server)).await
    {
        updates.push(flush);
    }
    assert!(
        (2..=9).contains(&updates.len()),
        "about one update per 100 ms over 600-850 ms, got {}: {updates:?}",
        updates.len()
    );
    assert_eq!(
        updates.last(),
        Some(&Lsn(lsn)),
        "the last position is reported"
    );
    assert!(updates.windows(2).all(|w| w[0] < w[1]), "{updates:?}");
}
