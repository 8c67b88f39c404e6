//! When the binary's log lines reach stderr: a warning, an error or a reload line is written
//! before the answer it explains goes out, so whoever reads the log after an answer finds its
//! reason there; access lines are written in batches, and a SIGTERM still writes out every one.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::binary::{exit_code, sigterm, start_with_admin};
use common::client::TestClient;
use common::raw::read_response;
use common::temp::TempPath;
use common::upstream::TestUpstream;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A request whose framing is ambiguous: refused with `400` and a warning.
const SMUGGLED: &[u8] =
    b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

/// The binary with its stderr in `log`, a config file at `config` and an admin listener.
async fn start(
    upstream: &TestUpstream,
    config: &TempPath,
    log: &TempPath,
) -> (tokio::process::Child, TestClient, TestClient) {
    std::fs::write(config.path(), "[defaults]\nrequire_key = false\n").unwrap();
    let file = std::fs::File::create(log.path()).unwrap();
    let stderr = || Stdio::from(file.try_clone().unwrap());
    start_with_admin(&upstream.url(), config.path(), stderr).await
}

/// How many lines of the log at `log` hold `text`, now.
fn lines_with(log: &TempPath, text: &str) -> usize {
    let log = std::fs::read_to_string(log.path()).unwrap();
    log.lines().filter(|line| line.contains(text)).count()
}

/// Asserts, right after an answer, that the log holds `lines` lines with `text`.
fn logged_already(log: &TempPath, text: &str, lines: usize) {
    let found = lines_with(log, text);
    assert_eq!(found, lines, "answered before {text:?} was logged");
}

#[tokio::test]
async fn a_warning_or_a_reload_line_is_written_before_its_answer() {
    let upstream = TestUpstream::start().await;
    let (config, log) = (TempPath::new("order.toml"), TempPath::new("order.log"));
    let (child, client, admin) = start(&upstream, &config, &log).await;
    for round in 1..=10 {
        std::fs::write(config.path(), "[defaults]\nttl = \"soon\"\n").unwrap();
        let refused = admin.send("POST", "/reload", &[], "").await;
        assert_eq!(refused.status, 400);
        logged_already(&log, "config reload refused", round);

        let mut stream = TcpStream::connect(client.addr()).await.unwrap();
        stream.write_all(SMUGGLED).await.unwrap();
        let answer = read_response(&mut stream, Duration::from_secs(30)).await;
        assert_eq!(answer.map(|(status, _)| status), Some(400));
        logged_already(&log, "refused an ambiguously framed request", round);

        std::fs::write(config.path(), "[defaults]\nrequire_key = false\n").unwrap();
        let applied = admin.send("POST", "/reload", &[], "").await;
        assert_eq!(applied.status, 200);
        logged_already(&log, "config reloaded", round);
    }
    sigterm(&child);
    assert_eq!(exit_code(child).await, Some(0));
}

#[tokio::test]
async fn a_sigterm_writes_out_every_access_line() {
    let upstream = TestUpstream::start().await;
    let (config, log) = (TempPath::new("drain.toml"), TempPath::new("drain.log"));
    let (child, client, _) = start(&upstream, &config, &log).await;
    for n in 0..50 {
        let answer = client
            .send("POST", "/v1/x", &[], format!("{{\"n\":{n}}}"))
            .await;
        assert_eq!(answer.status, 201);
    }
    // At once: the last lines are still waiting for the writer's next batch.
    sigterm(&child);
    assert_eq!(exit_code(child).await, Some(0));
    assert_eq!(lines_with(&log, " request route="), 50);
}
