//! The upstream the proxies forward to: it records every operation it runs, and misbehaves
//! when the nemesis says so.
//!
//! It speaks just enough HTTP/1.1 over raw sockets to reset a connection right after reading a
//! request, which a framework would not let it do. Each proxy has a port of its own, so every
//! run is recorded with the proxy it came through. A run is recorded before anything is
//! answered: a reset or a 500 comes after the operation ran; a 503 means it did not run, and
//! nothing is recorded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::history::{self, Execution, Journal};
use crate::rng::Rng;

/// What the upstream does, for a share of the requests, while a fault lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Misbehaviour {
    None,
    /// Answers after a delay drawn from the range, some past the proxy's `upstream_timeout`.
    Slow(Duration, Duration),
    Reset,
    Fail500,
    Refuse503,
}

pub struct Upstream {
    now: Mutex<(Misbehaviour, f64)>,
    rng: Mutex<Rng>,
    next_exec: AtomicU64,
    journal: Journal<Execution>,
}

impl Upstream {
    pub fn new(seed: u64, journal: Journal<Execution>) -> Arc<Self> {
        Arc::new(Self {
            now: Mutex::new((Misbehaviour::None, 0.0)),
            rng: Mutex::new(Rng::stream(seed, 0x0095_7EA3)),
            next_exec: AtomicU64::new(1),
            journal,
        })
    }

    /// From now on, `share` of the requests get `misbehaviour`.
    pub fn set(&self, misbehaviour: Misbehaviour, share: f64) {
        *self.now.lock().unwrap() = (misbehaviour, share);
    }

    pub fn flush(&self) {
        self.journal.flush();
    }

    /// Listens on one free loopback port per proxy; returns the ports, proxy `i` on `ports[i]`.
    pub async fn start(self: &Arc<Self>, proxies: usize) -> std::io::Result<Vec<u16>> {
        let mut ports = Vec::new();
        for via in 0..proxies {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            ports.push(listener.local_addr()?.port());
            let upstream = self.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(upstream.clone().serve(stream, via));
                }
            });
        }
        Ok(ports)
    }

    fn draw(&self) -> Misbehaviour {
        let (misbehaviour, share) = *self.now.lock().unwrap();
        if misbehaviour != Misbehaviour::None && self.rng.lock().unwrap().chance(share) {
            misbehaviour
        } else {
            Misbehaviour::None
        }
    }

    /// Serves one keep-alive connection until the proxy closes it or a request resets it.
    async fn serve(self: Arc<Self>, mut stream: TcpStream, via: usize) {
        let _ = stream.set_nodelay(true);
        let mut buffer = Vec::new();
        while let Some(request) = read_request(&mut stream, &mut buffer).await {
            let answer = match self.draw() {
                Misbehaviour::Refuse503 => respond(503, br#"{"error":"busy, not run"}"#),
                Misbehaviour::None => respond(201, &self.run(&request, via, "ok")),
                Misbehaviour::Fail500 => respond(500, &self.run(&request, via, "fail500")),
                Misbehaviour::Reset => {
                    self.run(&request, via, "reset");
                    // A zero linger turns the close into a reset: the proxy sees the
                    // connection break after its request was read.
                    let _ = stream.set_zero_linger();
                    return;
                }
                Misbehaviour::Slow(low, high) => {
                    let body = self.run(&request, via, "slow");
                    let delay = self.rng.lock().unwrap().between(low, high);
                    tokio::time::sleep(delay).await;
                    respond(201, &body)
                }
            };
            if stream.write_all(&answer).await.is_err() {
                return;
            }
        }
    }

    /// Records a run and returns the answer's body, which names the run.
    fn run(&self, request: &Request, via: usize, mode: &str) -> Vec<u8> {
        let exec = self.next_exec.fetch_add(1, Ordering::Relaxed);
        self.journal.write(&Execution {
            t: history::now(),
            exec,
            key: request.key.clone(),
            body: history::digest(&request.body),
            via,
            mode: mode.to_owned(),
        });
        format!(r#"{{"exec":{exec},"key":"{}","via":{via}}}"#, request.key).into_bytes()
    }
}

struct Request {
    key: String,
    body: Vec<u8>,
}

/// Reads one request (head and `Content-Length` body); `None` when the connection ends or
/// sends something this upstream does not understand.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Request> {
    loop {
        if let Some(end) = find_head_end(buffer) {
            let (key, length) = parse_head(&buffer[..end])?;
            while buffer.len() < end + length {
                read_more(stream, buffer).await?;
            }
            let body = buffer[end..end + length].to_vec();
            buffer.drain(..end + length);
            return Some(Request { key, body });
        }
        read_more(stream, buffer).await?;
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}

fn find_head_end(buffer: &[u8]) -> Option<usize> {
    buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

/// The idempotency key and the body length of a request head.
fn parse_head(head: &[u8]) -> Option<(String, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    request.parse(head).ok()?;
    let value = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
    };
    let key = value("idempotency-key").unwrap_or("-").to_owned();
    let length = value("content-length").map_or(Some(0), |v| v.trim().parse().ok())?;
    Some((key, length))
}

fn respond(status: u16, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        201 => "Created",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let mut answer = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body);
    answer
}
