//! Telling, from a new connection's first bytes, which protocol its client speaks.

use std::time::Duration;

use tokio::net::TcpStream;

/// The protocol a client speaks, told by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    Http1,
    /// h2c with prior knowledge: the connection opens with the HTTP/2 preface.
    Http2,
}

/// Waits, at most `timeout`, until the client has sent enough to tell HTTP/1 from HTTP/2 (or has
/// closed, left to hyper as HTTP/1). hyper-util reads those bytes with no time-out of its own,
/// and hyper's header time-out starts only after them: without this a client that connects and
/// stays silent would hold its connection slot for ever.
pub(super) async fn opening(stream: &TcpStream, timeout: Duration) -> Option<Protocol> {
    const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let decided = async {
        let mut seen = [0u8; 24];
        loop {
            let n = stream.peek(&mut seen).await?;
            if n == seen.len() && seen == *H2_PREFACE {
                return Ok::<_, std::io::Error>(Protocol::Http2);
            }
            if n == 0 || n == seen.len() || seen[..n] != H2_PREFACE[..n] {
                return Ok(Protocol::Http1);
            }
            // A prefix of the HTTP/2 preface: the rest is on its way.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(timeout, decided).await.ok()?.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// The protocol told for a client that sends `pieces`, a moment apart.
    async fn told(pieces: &[&[u8]], timeout: Duration) -> Option<Protocol> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let pieces: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
        let sending = tokio::spawn(async move {
            for piece in pieces {
                client.write_all(&piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            client
        });
        let protocol = opening(&server, timeout).await;
        drop(sending.await.unwrap());
        protocol
    }

    /// A time-out the cases that are told never reach, however loaded the machine.
    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_request_line_is_http1_from_its_first_byte() {
        assert_eq!(told(&[b"G"], LONG).await, Some(Protocol::Http1));
    }

    #[tokio::test]
    async fn the_preface_is_http2_even_in_pieces() {
        let preface: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let (first, rest) = preface.split_at(10);
        assert_eq!(told(&[first, rest], LONG).await, Some(Protocol::Http2));
    }

    #[tokio::test]
    async fn a_line_that_only_starts_like_the_preface_is_http1() {
        assert_eq!(
            told(&[b"PRI * HTTP/1.1\r\n"], LONG).await,
            Some(Protocol::Http1)
        );
    }

    #[tokio::test]
    async fn silence_and_a_stalled_preface_are_not_told() {
        let short = Duration::from_millis(200);
        assert_eq!(told(&[], short).await, None);
        assert_eq!(told(&[b"PRI * HTTP/2"], short).await, None);
    }

    #[tokio::test]
    async fn a_client_that_closes_is_left_to_hyper_as_http1() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        drop(client);
        assert_eq!(opening(&server, LONG).await, Some(Protocol::Http1));
    }
}
