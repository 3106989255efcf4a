//! A small HTTP/1.1 server for the tests of the client and its users: it
//! answers every request with one fixed answer, keeps connections open
//! between requests (unless the answer says `Connection: close`), counts
//! the connections it accepted and keeps each request, optionally behind
//! TLS.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openssl::ssl::{Ssl, SslAcceptor};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request line and headers, as sent.
    pub head: String,
    pub body: Vec<u8>,
    /// Which accepted connection carried it, from 1.
    pub connection: usize,
}

pub struct TestServer {
    pub port: u16,
    accepted: watch::Receiver<usize>,
    requests: Arc<Mutex<Vec<Seen>>>,
    count: watch::Receiver<usize>,
}

impl TestServer {
    /// Listens on 127.0.0.1; `answer` is the whole answer, "" never
    /// answers.
    pub async fn start(answer: &'static str) -> TestServer {
        TestServer::listen("127.0.0.1:0", answer, None).await
    }

    /// Listens on `addr`, with TLS when `tls` is given.
    pub async fn listen(addr: &str, answer: &'static str, tls: Option<SslAcceptor>) -> TestServer {
        let listener = TcpListener::bind(addr).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (accepted_tx, accepted) = watch::channel(0usize);
        let (count_tx, count) = watch::channel(0usize);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let count_tx = Arc::new(count_tx);
        tokio::spawn(async move {
            let mut n = 0;
            while let Ok((socket, _)) = listener.accept().await {
                n += 1;
                accepted_tx.send_replace(n);
                let (seen, count_tx) = (Arc::clone(&seen), Arc::clone(&count_tx));
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve(socket, n, answer, &seen, &count_tx).await,
                        Some(acceptor) => {
                            let ssl = Ssl::new(acceptor.context()).unwrap();
                            let mut stream = tokio_openssl::SslStream::new(ssl, socket).unwrap();
                            if std::pin::Pin::new(&mut stream).accept().await.is_ok() {
                                serve(stream, n, answer, &seen, &count_tx).await;
                            }
                        }
                    }
                });
            }
        });
        TestServer {
            port,
            accepted,
            requests,
            count,
        }
    }

    /// Connections accepted so far (a TLS one counts before its handshake).
    pub fn accepted(&self) -> usize {
        *self.accepted.borrow()
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.requests.lock().unwrap().clone()
    }

    /// The first `n` requests, once they arrived (within 10 s).
    pub async fn wait_for(&self, n: usize) -> Vec<Seen> {
        let mut count = self.count.clone();
        tokio::time::timeout(Duration::from_secs(10), count.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} requests within 10 s"))
            .unwrap();
        self.requests()[..n].to_vec()
    }
}

/// Reads requests off one connection and answers each.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    connection: usize,
    answer: &str,
    seen: &Mutex<Vec<Seen>>,
    count: &watch::Sender<usize>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let (head, length) = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                buf.drain(..end + 4);
                break (head, length);
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        while buf.len() < length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buf.drain(..length).collect();
        seen.lock().unwrap().push(Seen {
            head,
            body,
            connection,
        });
        count.send_modify(|c| *c += 1);
        if answer.is_empty() {
            continue; // never answers
        }
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        if answer
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n")
        {
            let _ = stream.shutdown().await;
            return;
        }
    }
}
