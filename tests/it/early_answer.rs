//! Upstreams that answer before reading a request's body (nginx's `return`, many early errors):
//! the proxy still sends the rest of the body, so the client's connection stays usable.

use crate::common;

use std::net::SocketAddr;

use common::proxy::TestProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BODY_LEN: usize = 64 * 1024;

/// An upstream that writes its answer as soon as it has a request's head, then reads the body.
async fn answering_early() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer_each(stream));
        }
    });
    addr
}

async fn answer_each(mut stream: TcpStream) {
    let mut buffer = Vec::new();
    while let Some(length) = head(&mut stream, &mut buffer).await {
        let answer = "HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok";
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        if !consume(&mut stream, &mut buffer, length).await {
            return;
        }
    }
}

/// Reads up to the end of a request head, leaving what follows in `buffer`; its body's length.
async fn head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            buffer.drain(..end + 4);
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |n| n.trim().parse().unwrap());
            return Some(length);
        }
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads and drops `length` bytes, starting with those already in `buffer`.
async fn consume(stream: &mut TcpStream, buffer: &mut Vec<u8>, mut length: usize) -> bool {
    let taken = length.min(buffer.len());
    buffer.drain(..taken);
    length -= taken;
    let mut chunk = [0u8; 16 * 1024];
    while length > 0 {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) if n <= length => length -= n,
            Ok(n) => {
                buffer.extend_from_slice(&chunk[length..n]);
                length = 0;
            }
        }
    }
    true
}

/// One POST on the client's connection, keyed or not; the answer's status line and body.
async fn post(client: &mut TcpStream, key: Option<&str>) -> (String, Vec<u8>) {
    let key = key.map_or(String::new(), |k| format!("idempotency-key: {k}\r\n"));
    let head =
        format!("POST /v1/upload HTTP/1.1\r\nhost: t\r\n{key}content-length: {BODY_LEN}\r\n\r\n");
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&vec![b'x'; BODY_LEN]).await.unwrap();
    let mut buffer = Vec::new();
    let length = head_of_answer(client, &mut buffer).await;
    let status = String::from_utf8_lossy(&buffer)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    let mut body = vec![0u8; length];
    client
        .read_exact(&mut body)
        .await
        .expect("the whole answer");
    (status, body)
}

async fn head_of_answer(client: &mut TcpStream, buffer: &mut Vec<u8>) -> usize {
    let mut byte = [0u8; 1];
    while !buffer.ends_with(b"\r\n\r\n") {
        let n = client.read(&mut byte).await.unwrap();
        assert_eq!(n, 1, "the proxy closed the client's connection");
        buffer.push(byte[0]);
    }
    let head = String::from_utf8_lossy(buffer).to_ascii_lowercase();
    head.lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connection_outlives_upstreams_that_answer_before_reading_the_body() {
    let upstream = answering_early().await;
    let proxy = TestProxy::in_front_of(&format!("http://{upstream}"), "").await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    for i in 0..200 {
        let key = format!("upload-{i}");
        let key = (i % 2 == 0).then_some(key.as_str());
        let (status, body) = post(&mut client, key).await;
        assert!(status.contains(" 201 "), "request {i}: {status}");
        assert_eq!(body, b"ok", "request {i}");
    }
}
