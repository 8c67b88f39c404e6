//! HTTP/1.1 over a bare socket, for tests that send what a client library would not, or that
//! watch a connection itself (whether it is answered, or closed).

use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::timeout;

/// A plain keep-alive `GET /a`, which the test upstream answers `201`.
pub(crate) const GET: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";

/// One response: its status and the whole text of head and body, or `None` when the proxy
/// closed the connection (or said nothing within `wait`).
pub(crate) async fn read_response(stream: &mut TcpStream, wait: Duration) -> Option<(u16, String)> {
    let mut bytes = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(text) = complete(&bytes) {
                return Some(text);
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let text = timeout(wait, read).await.ok()??;
    let status = text.get(9..12)?.parse().ok()?;
    Some((status, text))
}

/// Whether nothing has come back on `stream` yet, neither a byte nor its close: a look at the
/// socket itself, now, not a wait (tokio's own reads only see what its reactor has noticed).
pub(crate) fn unanswered(stream: &TcpStream) -> bool {
    let peeked = socket2::SockRef::from(stream).peek(&mut [MaybeUninit::new(0u8)]);
    matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// The text of one whole response, once `bytes` hold its head and as much body as its
/// `Content-Length` says.
fn complete(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    (body.len() >= length).then(|| text.to_string())
}
