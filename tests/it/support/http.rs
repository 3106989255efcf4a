//! The relay process's HTTP endpoint from a test: /health and /metrics over
//! plain HTTP/1.1, and one Prometheus sample read from the exposition.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over plain HTTP/1.1; returns the status code and the body.
/// `None` when nothing listens yet.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or_else(String::new, |(_, b)| b.to_string());
    Some((status, body))
}

/// The value of the Prometheus sample `name{labels}` (labels verbatim, e.g.
/// `kind="update"`), or 0 when absent.
pub fn metric_value(metrics: &str, name: &str, labels: &str) -> f64 {
    let series = if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{labels}}}")
    };
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            (key == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}
