//! A raw HTTP/1.1 upstream that closes its idle keep-alive connections when the test says so,
//! never on a timer of its own, and records what became of each connection: for the tests of
//! the proxy's pooled upstream connections (docs/reference.md#upstream-connections), which so
//! depend on no guess of how fast the machine schedules.
//!
//! A close is a `FIN` (the upstream shuts its writing half), and [`ClosingUpstream::close_idle`]
//! returns once the proxy's kernel has taken it in: from then on the proxy can find the close
//! before it writes. The upstream goes on reading, so it sees what the proxy did next: closed
//! its side unused, or wrote a request into the close.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::poll;
use idempotency_test_support::tcp_state;

/// How the upstream answers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Behaviour {
    /// After this many answers on a connection, it reads the next request and hangs up without
    /// answering it.
    pub(crate) answers_per_connection: usize,
    /// The first this many requests are answered only once all of them have arrived, so that
    /// each has a connection of its own, however fast the proxy is.
    pub(crate) first_answered_together: usize,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            answers_per_connection: usize::MAX,
            first_answered_together: 1,
        }
    }
}

/// One connection, as the upstream saw it.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    /// Its ends: the upstream's, and the proxy's.
    ends: (SocketAddr, SocketAddr),
    /// The requests that came on it.
    pub(crate) requests: usize,
    /// Since just before its last answer was written, while it waits for the next request: no
    /// later than the proxy can have had the answer, so an idle time counted from here is never
    /// shorter than the proxy's.
    idle_since: Option<Instant>,
    /// When it was opened, the shortest idle time of another connection that was open and not
    /// closed by the upstream: one the proxy could have used instead.
    pub(crate) opened_beside_idle: Option<Duration>,
    /// Whether the test had the upstream close it.
    pub(crate) closed_by_upstream: bool,
    pub(crate) end: Option<End>,
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The proxy closed it while it was idle, after it had been idle this long (counted as
    /// [`Connection::idle_since`] says).
    ClosedByProxy { idle_for: Duration },
    /// The upstream closed it; the proxy then closed its side without writing on it.
    DroppedAfterClose,
    /// The upstream closed it; the proxy wrote on it anyway, a request sent into a close.
    WrittenAfterClose,
    /// The upstream read a request and hung up, as [`Behaviour::answers_per_connection`] asks.
    HungUp,
    /// Anything else: closed before its first request or mid-request, or a failed socket.
    Broken,
}

pub(crate) struct ClosingUpstream {
    pub(crate) url: String,
    shared: Arc<Shared>,
    close_orders: watch::Sender<u64>,
}

struct Shared {
    behaviour: Behaviour,
    /// Requests received, per `Idempotency-Key` ("" for none).
    executions: Mutex<HashMap<String, usize>>,
    /// Every connection accepted, in order.
    connections: Mutex<Vec<Connection>>,
    /// How many requests have arrived.
    arrived: watch::Sender<usize>,
}

/// How long a connection may take to end once it has been closed, on a loaded machine.
const SETTLING: Duration = Duration::from_secs(30);

impl ClosingUpstream {
    pub(crate) async fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared {
            behaviour,
            executions: Mutex::default(),
            connections: Mutex::default(),
            arrived: watch::channel(0).0,
        });
        let (close_orders, _) = watch::channel(0);
        let (accepting, orders) = (shared.clone(), close_orders.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let Some(id) = accepting.accepted(&stream) else {
                    continue;
                };
                let serving = Serving {
                    stream,
                    id,
                    shared: accepting.clone(),
                    orders: orders.subscribe(),
                };
                tokio::spawn(serving.run());
            }
        });
        Self {
            url,
            shared,
            close_orders,
        }
    }

    /// Requests received so far, per key.
    pub(crate) fn executions(&self) -> HashMap<String, usize> {
        locked(&self.shared.executions).clone()
    }

    /// Every connection accepted so far, as things stand.
    pub(crate) fn connections(&self) -> Vec<Connection> {
        locked(&self.shared.connections).clone()
    }

    /// Closes every connection open now, each once it is idle, and returns how many once the
    /// proxy's kernel has taken in each close.
    pub(crate) async fn close_idle(&self) -> usize {
        let open: Vec<_> = self
            .connections()
            .into_iter()
            .filter(|c| c.end.is_none() && !c.closed_by_upstream)
            .map(|c| c.ends)
            .collect();
        self.close_orders.send_modify(|order| *order += 1);
        for &(upstream, proxy) in &open {
            tcp_state::until_fin_received(upstream, proxy).await;
        }
        open.len()
    }

    /// Waits until every connection the upstream closed has ended, and returns all of them.
    pub(crate) async fn until_closes_settled(&self) -> Vec<Connection> {
        let settled = async || {
            let connections = self.connections();
            let pending = connections
                .iter()
                .any(|c| c.closed_by_upstream && c.end.is_none());
            (!pending).then_some(connections)
        };
        poll::until(SETTLING, "the proxy's answer to every close", settled).await
    }

    /// Waits until the proxy has closed an idle connection, and returns how long it had been
    /// idle.
    pub(crate) async fn until_closed_by_proxy(&self) -> Duration {
        let closed = async || {
            self.connections().iter().find_map(|c| match c.end {
                Some(End::ClosedByProxy { idle_for }) => Some(idle_for),
                _ => None,
            })
        };
        poll::until(SETTLING, "the proxy closing an idle connection", closed).await
    }
}

impl Shared {
    /// Records a new connection; `None` if its addresses cannot be read (it is already gone).
    fn accepted(&self, stream: &TcpStream) -> Option<usize> {
        let ends = (stream.local_addr().ok()?, stream.peer_addr().ok()?);
        let mut connections = locked(&self.connections);
        let opened_beside_idle = connections
            .iter()
            .filter(|c| c.end.is_none() && !c.closed_by_upstream)
            .filter_map(|c| c.idle_since.map(|since| since.elapsed()))
            .min();
        connections.push(Connection {
            ends,
            requests: 0,
            idle_since: None,
            opened_beside_idle,
            closed_by_upstream: false,
            end: None,
        });
        Some(connections.len() - 1)
    }

    fn update<T>(&self, id: usize, change: impl FnOnce(&mut Connection) -> T) -> T {
        change(&mut locked(&self.connections)[id])
    }

    /// Counts a request for `key`; returns which execution of it this is.
    fn executed(&self, key: String) -> usize {
        let mut executions = locked(&self.executions);
        let count = executions.entry(key).or_insert(0);
        *count += 1;
        *count
    }

    /// Counts the request's arrival, and waits until the first ones have all arrived.
    async fn gathered(&self) {
        self.arrived.send_modify(|arrived| *arrived += 1);
        let together = self.behaviour.first_answered_together;
        let mut arrived = self.arrived.subscribe();
        // The sender lives as long as `self`.
        let _ = arrived.wait_for(|&arrived| arrived >= together).await;
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One connection being served.
struct Serving {
    stream: TcpStream,
    id: usize,
    shared: Arc<Shared>,
    orders: watch::Receiver<u64>,
}

impl Serving {
    async fn run(mut self) {
        let end = self.serve().await;
        self.shared.update(self.id, |c| c.end = Some(end));
    }

    async fn serve(&mut self) -> End {
        let mut buf = Vec::new();
        let mut answered = 0;
        loop {
            if buf.is_empty() {
                tokio::select! {
                    more = read_more(&mut self.stream, &mut buf) => {
                        if more.is_none() {
                            return self.closed_by_proxy();
                        }
                    }
                    _ = self.orders.changed() => return self.close().await,
                }
            }
            self.shared.update(self.id, |c| c.idle_since = None);
            let Some(key) = read_request(&mut self.stream, &mut buf).await else {
                return End::Broken;
            };
            let execution = self.shared.executed(key);
            self.shared.update(self.id, |c| c.requests += 1);
            if answered >= self.shared.behaviour.answers_per_connection {
                return End::HungUp;
            }
            self.shared.gathered().await;
            let now = Some(Instant::now());
            self.shared.update(self.id, |c| c.idle_since = now);
            if self.stream.write_all(&answer(execution)).await.is_err() {
                return End::Broken;
            }
            answered += 1;
        }
    }

    fn closed_by_proxy(&self) -> End {
        let idle_since = self.shared.update(self.id, |c| c.idle_since);
        match idle_since {
            Some(since) => End::ClosedByProxy {
                idle_for: since.elapsed(),
            },
            None => End::Broken,
        }
    }

    /// Sends the `FIN`, then reads on to see what the proxy does.
    async fn close(&mut self) -> End {
        self.shared.update(self.id, |c| c.closed_by_upstream = true);
        if self.stream.shutdown().await.is_err() {
            return End::Broken;
        }
        match read_more(&mut self.stream, &mut Vec::new()).await {
            None => End::DroppedAfterClose,
            Some(_) => End::WrittenAfterClose,
        }
    }
}

fn answer(execution: usize) -> Vec<u8> {
    let body = format!("{{\"execution\":{execution}}}");
    let head = format!(
        "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    (head + &body).into_bytes()
}

/// Reads into `buf`; `None` at the end of the stream or on an error.
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(n)
        }
    }
}

/// Reads one whole request (head and `Content-Length` body) off the front of `buf`, reading
/// more as needed; returns its `Idempotency-Key` ("" if none).
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(head_len) = request.parse(buf).ok()? {
            let header = |name: &str| {
                request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned())
            };
            let body_len: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
            let key = header("idempotency-key").unwrap_or_default();
            while buf.len() < head_len + body_len {
                read_more(stream, buf).await?;
            }
            buf.drain(..head_len + body_len);
            return Some(key);
        }
        read_more(stream, buf).await?;
    }
}
