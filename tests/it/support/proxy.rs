//! A TCP proxy that can make a peer unreachable *without* telling anyone:
//! the fault of a dead router, a frozen VM or a dropped firewall state, where
//! no RST and no FIN ever arrive and only a timeout can notice (the stalled
//! route to PostgreSQL in `service_faults`).
//!
//! [`StallProxy::start`] listens on `127.0.0.1:0` and forwards every accepted
//! connection to one upstream address. [`StallProxy::stall`] stops forwarding
//! in both directions, for current connections and for new ones, while every
//! socket stays open; [`StallProxy::resume`] lets bytes flow again (what was
//! held back is delivered then); [`StallProxy::cut`] closes every current
//! connection at once.
//!
//! Invariants: while stalled, no byte read from either side is written to the
//! other, and the proxy closes nothing by itself. It is byte-transparent, so
//! TLS passes through. Dropping the proxy closes the listener and every
//! connection.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Read size per forwarding step; small enough that a stall holds back at
/// most one buffer per direction in the proxy itself.
const FORWARD_BUFFER: usize = 16 * 1024;

pub struct StallProxy {
    addr: SocketAddr,
    /// Where new connections are forwarded (see [`StallProxy::redirect`]).
    upstream: watch::Sender<SocketAddr>,
    stalled: watch::Sender<bool>,
    /// Bumped by [`StallProxy::cut`]; a connection accepted under an older
    /// generation closes.
    generation: watch::Sender<u64>,
    accept: JoinHandle<()>,
}

impl StallProxy {
    /// Listens on an ephemeral loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        Self::start_at("127.0.0.1:0".parse().expect("address"), upstream).await
    }

    /// Listens on `listen` (a port a client was told about before anything
    /// listened there: a broker that comes up late) and forwards to
    /// `upstream`.
    pub async fn start_at(listen: SocketAddr, upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(listen).await.expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (stalled, _) = watch::channel(false);
        let (generation, _) = watch::channel(0u64);
        let (upstream, _) = watch::channel(upstream);
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream.subscribe(),
            stalled.subscribe(),
            generation.subscribe(),
        ));
        Self {
            addr,
            upstream,
            stalled,
            generation,
            accept,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding in both directions, on current and new connections,
    /// keeping every socket open.
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Forwards again, held-back bytes first.
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Closes every connection open now; later ones are forwarded as usual.
    pub fn cut(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Forwards new connections to `upstream` from now on and closes the
    /// current ones: a DNS name or virtual IP moved to another server.
    pub fn redirect(&self, upstream: SocketAddr) {
        self.upstream.send_replace(upstream);
        self.cut();
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        // Dropping the accept task drops its JoinSet, which aborts every
        // connection task and so closes their sockets.
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: watch::Receiver<SocketAddr>,
    stalled: watch::Receiver<bool>,
    generation: watch::Receiver<u64>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let born = *generation.borrow();
                let target = *upstream.borrow();
                connections.spawn(serve(client, target, stalled.clone(), generation.clone(), born));
            }
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Forwards one connection until either side closes, or a cut.
async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    stalled: watch::Receiver<bool>,
    mut generation: watch::Receiver<u64>,
    born: u64,
) {
    let forward = async {
        // A connection accepted during a stall must stall too: not even the
        // upstream connect happens until resumed, so the client's handshake
        // hangs exactly as behind a dead route.
        wait_flowing(&mut stalled.clone()).await;
        let Ok(server) = TcpStream::connect(upstream).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        // Either direction ending (EOF or error) ends the connection: both
        // sockets are dropped, as a stateless forwarder would.
        tokio::select! {
            _ = pump(client_read, server_write, stalled.clone()) => {}
            _ = pump(server_read, client_write, stalled.clone()) => {}
        }
    };
    tokio::select! {
        _ = generation.wait_for(|g| *g != born) => {}
        () = forward => {}
    }
}

/// Copies `from` to `to`, holding bytes back while stalled.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut buf = vec![0u8; FORWARD_BUFFER];
    loop {
        wait_flowing(&mut stalled).await;
        let read = from.read(&mut buf).await;
        // A stall that began while this read was pending holds back what it
        // returned: bytes, and also an EOF or error, which would otherwise
        // close the other side and leak the peer's FIN through the stall.
        wait_flowing(&mut stalled).await;
        match read? {
            0 => return Ok(()),
            n => to.write_all(&buf[..n]).await?,
        }
    }
}

/// Returns once not stalled. A dropped proxy never resumes: wait forever
/// (the task is aborted with it).
async fn wait_flowing(stalled: &mut watch::Receiver<bool>) {
    if stalled.wait_for(|s| !*s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The stalling proxy does what the stalled-route test relies on: while
/// stalled, bytes are held back in both directions and a peer's close does
/// not leak through (no FIN, no RST); a connection opened during the stall
/// stalls too; resume delivers what was held; cut closes. Needs no shared
/// service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stall_proxy_holds_bytes_and_closes_without_leaking() {
    use std::time::Duration;
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = StallProxy::start(upstream.local_addr().unwrap()).await;
    let short = Duration::from_millis(300);
    let long = Duration::from_secs(5);
    let mut buf = [0u8; 16];

    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    let (mut server, _) = upstream.accept().await.unwrap();
    client.write_all(b"ping").await.unwrap();
    server.read_exact(&mut buf[..4]).await.unwrap();
    assert_eq!(&buf[..4], b"ping");

    proxy.stall();
    server.write_all(b"pong").await.unwrap();
    // The server goes away during the stall: the client must not see it.
    drop(server);
    assert!(
        tokio::time::timeout(short, client.read(&mut buf))
            .await
            .is_err(),
        "nothing, not even EOF, passes a stall"
    );
    let _late = TcpStream::connect(proxy.addr()).await.unwrap();
    assert!(
        tokio::time::timeout(short, upstream.accept())
            .await
            .is_err(),
        "a connection opened during a stall does not reach the upstream"
    );

    proxy.resume();
    tokio::time::timeout(long, client.read_exact(&mut buf[..4]))
        .await
        .expect("held bytes arrive on resume")
        .unwrap();
    assert_eq!(&buf[..4], b"pong");
    let eof = tokio::time::timeout(long, client.read(&mut buf))
        .await
        .expect("the held close arrives after the bytes");
    assert!(matches!(eof, Ok(0) | Err(_)), "{eof:?}");
    tokio::time::timeout(long, upstream.accept())
        .await
        .expect("the stalled connection proceeds on resume")
        .unwrap();

    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    let (_server, _) = upstream.accept().await.unwrap();
    proxy.cut();
    let closed = tokio::time::timeout(long, client.read(&mut buf))
        .await
        .expect("cut closes current connections");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
}
