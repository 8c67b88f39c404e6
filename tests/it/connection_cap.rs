//! `max_connections` is the process's limit, whichever worker thread the kernel hands a
//! connection to: with 1, 2 and 4 workers, that many connections are served and the next waits
//! in the listen backlog until one of them closes, whether they open one after another or all
//! at once; a reload that raises or lowers the limit is kept to in the same way.
//!
//! The real binary, as only it runs several workers, each with a listener of its own on the
//! shared port.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::binary::{exit_code, sigterm, start_with_admin_env};
use common::client::TestClient;
use common::logs::slot_wait;
use common::poll;
use common::raw::{read_response, unanswered, GET};
use common::temp::TempPath;
use common::upstream::TestUpstream;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// How long a served connection's answer may take on a busy machine.
const ANSWER: Duration = Duration::from_secs(30);
/// The proxy's lines at `debug` where a client waits for a slot, the rest at `info`.
const LOG_FILTER: &str = "info,idempotency_proxy::server=debug";

/// The binary with `workers` workers and at most `limit` connections, its admin listener, and
/// its log.
struct Capped {
    child: Child,
    client: TestClient,
    admin: TestClient,
    file: TempPath,
    log: TempPath,
    upstream: String,
}

fn config_text(upstream: &str, workers: usize, limit: usize) -> String {
    format!("upstream = \"{upstream}\"\nworkers = {workers}\nmax_connections = {limit}\n")
}

/// The binary for `test` (its files are named after it, as tests run at once).
async fn start(upstream: &TestUpstream, test: &str, workers: usize, limit: usize) -> Capped {
    let name = format!("cap-{test}-{workers}-{limit}");
    let file = TempPath::new(&format!("{name}.toml"));
    let log = TempPath::new(&format!("{name}.log"));
    std::fs::write(file.path(), config_text(&upstream.url(), workers, limit)).unwrap();
    let written = std::fs::File::create(log.path()).unwrap();
    let stderr = || Stdio::from(written.try_clone().unwrap());
    let env = [("RUST_LOG", LOG_FILTER)];
    let (child, client, admin) =
        start_with_admin_env(&upstream.url(), file.path(), stderr, &env).await;
    Capped {
        child,
        client,
        admin,
        file,
        log,
        upstream: upstream.url(),
    }
}

impl Capped {
    /// A new connection with one request sent on it.
    async fn ask(&self) -> TcpStream {
        let mut stream = TcpStream::connect(self.client.addr()).await.unwrap();
        stream.write_all(GET).await.unwrap();
        stream
    }

    /// Reloads the config with another limit.
    async fn reload_with(&self, workers: usize, limit: usize) {
        let text = config_text(&self.upstream, workers, limit);
        std::fs::write(self.file.path(), text).unwrap();
        let answer = self.admin.send("POST", "/reload", &[], "").await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }

    /// How many times the proxy has logged a client held back with `open` connections served;
    /// only the client of `stream`, when given (each line names the client's address, so
    /// other clients' lines never count).
    fn held_back(&self, open: usize, client: Option<&TcpStream>) -> usize {
        let log = std::fs::read_to_string(self.log.path()).unwrap();
        let line = slot_wait(open);
        let peer = client.map(client_of);
        let of_client = |l: &str| match &peer {
            Some(peer) => l.split_whitespace().any(|field| field == peer),
            None => true,
        };
        log.lines()
            .filter(|l| l.contains(&line) && of_client(l))
            .count()
    }

    /// Whether `stream` is left waiting: once the proxy has logged its client held back with
    /// `open` connections served, it has neither been answered nor closed. The line is the
    /// sign that the proxy looked at the limit for it: it would have been served by then,
    /// were the limit not kept.
    async fn waits(&self, stream: &TcpStream, open: usize) -> bool {
        let logged = async || self.held_back(open, Some(stream)) > 0;
        let what = format!("the client held back with {open} open");
        poll::until(ANSWER, what, logged).await;
        unanswered(stream)
    }

    async fn stop(self) {
        sigterm(&self.child);
        assert_eq!(exit_code(self.child).await, Some(0));
    }
}

/// `peer=ADDRESS` of the client of `stream`, as the proxy's line names it.
fn client_of(stream: &TcpStream) -> String {
    format!("peer={}", stream.local_addr().unwrap())
}

/// Whether the request on `stream` is answered, within [`ANSWER`].
async fn answered(stream: &mut TcpStream) -> bool {
    read_response(stream, ANSWER)
        .await
        .is_some_and(|(status, _)| status == 201)
}

#[tokio::test]
async fn connections_opened_one_after_another_are_capped_across_workers() {
    let upstream = TestUpstream::start().await;
    for workers in [1, 2, 4] {
        let proxy = start(&upstream, "one-by-one", workers, 2).await;
        // Each worker has a listen queue of its own, and which one a client lands in is the
        // kernel's choice: several rounds give every worker its turn.
        for round in 0..4 {
            let mut open = Vec::new();
            for n in 0..2 {
                let mut stream = proxy.ask().await;
                assert!(
                    answered(&mut stream).await,
                    "{workers} workers, round {round}: connection {n} of 2 not served"
                );
                open.push(stream);
            }
            let mut third = proxy.ask().await;
            assert!(
                proxy.waits(&third, 2).await,
                "{workers} workers, round {round}: served past the limit"
            );
            drop(open.remove(0));
            assert!(
                answered(&mut third).await,
                "{workers} workers, round {round}: not served once a connection closed"
            );
        }
        proxy.stop().await;
    }
}

#[tokio::test]
async fn connections_opened_at_once_are_capped_across_workers() {
    let upstream = TestUpstream::start().await;
    for workers in [1, 2, 4] {
        let proxy = start(&upstream, "at-once", workers, 3).await;
        let (served_tx, mut served) = mpsc::unbounded_channel();
        for _ in 0..4 {
            let (addr, served_tx) = (proxy.client.addr(), served_tx.clone());
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                stream.write_all(GET).await.unwrap();
                if read_response(&mut stream, Duration::from_secs(30))
                    .await
                    .is_some()
                {
                    let _ = served_tx.send(stream);
                }
            });
        }
        let mut open = Vec::new();
        for n in 0..3 {
            let stream = timeout(ANSWER, served.recv()).await;
            let stream =
                stream.unwrap_or_else(|_| panic!("{workers} workers: only {n} of 3 served"));
            open.push(stream.unwrap());
        }
        // A line for the fourth comes once the proxy held it back at the limit.
        let held = async || proxy.held_back(3, None) > 0;
        poll::until(ANSWER, "the fourth held back", held).await;
        assert!(
            served.try_recv().is_err(),
            "{workers} workers: four served at once"
        );
        drop(open.remove(0));
        assert!(
            timeout(ANSWER, served.recv()).await.is_ok(),
            "{workers} workers: the fourth not served once a connection closed"
        );
        proxy.stop().await;
    }
}

#[tokio::test]
async fn a_reload_that_raises_or_lowers_the_limit_is_kept_to_across_workers() {
    let upstream = TestUpstream::start().await;
    let proxy = start(&upstream, "reload", 2, 2).await;
    let (mut first, mut second) = (proxy.ask().await, proxy.ask().await);
    assert!(answered(&mut first).await && answered(&mut second).await);
    let mut third = proxy.ask().await;
    assert!(proxy.waits(&third, 2).await, "served past the limit");
    proxy.reload_with(2, 3).await;
    assert!(answered(&mut third).await, "a raised limit lets it in");

    proxy.reload_with(2, 1).await;
    let mut fourth = proxy.ask().await;
    assert!(proxy.waits(&fourth, 3).await, "served past a lowered limit");
    // Each close wakes the worker holding the fourth, which looks at the limit again: held
    // back with one open, it has looked after both closes.
    drop((first, second));
    assert!(
        proxy.waits(&fourth, 1).await,
        "served while one connection is open, at a limit of one"
    );
    drop(third);
    assert!(answered(&mut fourth).await, "not served once all closed");
    let mut fifth = proxy.ask().await;
    assert!(proxy.waits(&fifth, 1).await, "two served at a limit of one");
    drop(fourth);
    assert!(answered(&mut fifth).await);
    proxy.stop().await;
}
