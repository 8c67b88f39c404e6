//! `max_connections` is the process's limit, whichever worker thread the kernel hands a
//! connection to: with 1, 2 and 4 workers, that many connections are served and the next waits
//! in the listen backlog until one of them closes, whether they open one after another or all
//! at once; a reload that raises or lowers the limit is kept to in the same way.
//!
//! The real binary, as only it runs several workers, each with a listener of its own on the
//! shared port.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::binary::{exit_code, sigterm, start_with_admin};
use common::client::TestClient;
use common::raw::{read_response, GET};
use common::temp::TempPath;
use common::upstream::TestUpstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// How long a served connection's answer may take on a busy machine.
const ANSWER: Duration = Duration::from_secs(5);
/// How long a client past the limit is watched to see that it is not served.
const WAITING: Duration = Duration::from_millis(300);

/// The binary with `workers` workers and at most `limit` connections, and its admin listener.
struct Capped {
    child: Child,
    client: TestClient,
    admin: TestClient,
    file: TempPath,
    upstream: String,
}

fn config_text(upstream: &str, workers: usize, limit: usize) -> String {
    format!("upstream = \"{upstream}\"\nworkers = {workers}\nmax_connections = {limit}\n")
}

async fn start(upstream: &TestUpstream, workers: usize, limit: usize) -> Capped {
    let file = TempPath::new(&format!("cap-{workers}-{limit}.toml"));
    std::fs::write(file.path(), config_text(&upstream.url(), workers, limit)).unwrap();
    let (child, client, admin) = start_with_admin(&upstream.url(), file.path(), Stdio::null).await;
    Capped {
        child,
        client,
        admin,
        file,
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

    async fn stop(self) {
        sigterm(&self.child);
        assert_eq!(exit_code(self.child).await, Some(0));
    }
}

/// Whether the request on `stream` is answered, within [`ANSWER`].
async fn answered(stream: &mut TcpStream) -> bool {
    read_response(stream, ANSWER)
        .await
        .is_some_and(|(status, _)| status == 201)
}

/// Whether `stream` is left waiting: neither answered nor closed for [`WAITING`].
async fn waits(stream: &mut TcpStream) -> bool {
    timeout(WAITING, stream.read(&mut [0u8; 1])).await.is_err()
}

#[tokio::test]
async fn connections_opened_one_after_another_are_capped_across_workers() {
    let upstream = TestUpstream::start().await;
    for workers in [1, 2, 4] {
        let proxy = start(&upstream, workers, 2).await;
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
                waits(&mut third).await,
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
        let proxy = start(&upstream, workers, 3).await;
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
        assert!(
            timeout(WAITING, served.recv()).await.is_err(),
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
    let proxy = start(&upstream, 2, 2).await;
    let (mut first, mut second) = (proxy.ask().await, proxy.ask().await);
    assert!(answered(&mut first).await && answered(&mut second).await);
    let mut third = proxy.ask().await;
    assert!(waits(&mut third).await, "served past the limit");
    proxy.reload_with(2, 3).await;
    assert!(answered(&mut third).await, "a raised limit lets it in");

    proxy.reload_with(2, 1).await;
    let mut fourth = proxy.ask().await;
    assert!(waits(&mut fourth).await, "served past a lowered limit");
    drop((first, second));
    assert!(
        waits(&mut fourth).await,
        "served while one connection is open, at a limit of one"
    );
    drop(third);
    assert!(answered(&mut fourth).await, "not served once all closed");
    let mut fifth = proxy.ask().await;
    assert!(waits(&mut fifth).await, "two served at a limit of one");
    drop(fourth);
    assert!(answered(&mut fifth).await);
    proxy.stop().await;
}
