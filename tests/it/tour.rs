//! The README's one-minute tour, run as it is written: the demo upstream it starts
//! (`examples/upstream.rs`, compiled in here), the proxy binary with the README's flags, and
//! every `curl` command of the tour run by `sh` against them. What they print must be what the
//! README shows, line by line (a `date:` header's value aside), so the tour cannot drift from
//! what the proxy does.

use crate::common;

use crate::demo_upstream;

use std::process::Stdio;
use std::time::Duration;

use common::binary::start_binary;
use common::client::TestClient;
use common::console::{assert_printed_as_shown, lines, require_curl, sh};
use common::inbox_upstream::free_addr;
use common::markdown::{read, Block, Page};
use idempotency_test_support::poll;
use tokio::net::TcpListener;
use tokio::process::Child;

const TOUR: &str = "A one-minute tour";
/// Where the README's commands reach the proxy.
const README_PROXY: &str = "localhost:8080";

/// The tour's blocks: how to start things (`sh`), and the commands with what they print
/// (`console`).
fn tour() -> (Block, Block) {
    let blocks = Page::parse(&read("README.md")).blocks;
    let mut tour = blocks.into_iter().filter(|block| block.heading == TOUR);
    let start = tour.next().expect("the tour starts things in a block");
    let console = tour
        .next()
        .expect("the tour's commands are in a second block");
    assert_eq!(
        (start.info.as_str(), console.info.as_str()),
        ("sh", "console")
    );
    (start, console)
}

/// The flags the tour gives the proxy after `--`, without `--upstream` (the test's own
/// upstream takes its place), having checked that it names the demo upstream's address.
fn proxy_flags(start: &Block) -> Vec<String> {
    assert!(
        start
            .lines
            .iter()
            .any(|l| l.trim() == "cargo run --example upstream"),
        "the tour no longer starts the demo upstream: {start:?}"
    );
    let run = start
        .lines
        .iter()
        .find_map(|line| line.trim().strip_prefix("cargo run --release -- "))
        .expect("the tour runs the proxy");
    let mut words = run.split_whitespace().map(str::to_owned);
    let mut flags = Vec::new();
    while let Some(word) = words.next() {
        if word == "--upstream" {
            let upstream = words.next().unwrap();
            assert_eq!(upstream, format!("http://{}", demo_upstream::DEFAULT_ADDR));
        } else {
            flags.push(word);
        }
    }
    flags
}

/// `sh -c command`, printing into a pipe.
fn shell(command: &str) -> Child {
    sh(command)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("sh runs")
}

async fn printed(child: Child) -> Vec<String> {
    let output = child.wait_with_output().await.unwrap();
    assert!(output.status.success(), "{output:?}");
    lines(&String::from_utf8(output.stdout).unwrap())
}

/// Waits until the proxy holds `key` in flight, as the admin endpoint shows it: the command run
/// in the background has reached the upstream, so the next one is its duplicate.
async fn until_in_flight(admin: &TestClient, key: &str) {
    let path = format!("/keys/default/{key}");
    let in_flight = async || {
        let record = admin.send("GET", &path, &[], "").await;
        record.status == 200 && record.json()["state"] == "in_flight"
    };
    poll::until(
        Duration::from_secs(30),
        format!("{key} in flight"),
        in_flight,
    )
    .await;
}

/// The key a tour command sends (`-H 'Idempotency-Key: KEY'`).
fn key_of(command: &str) -> &str {
    let rest = command
        .split("Idempotency-Key: ")
        .nth(1)
        .expect("a keyed command");
    rest.split('\'').next().unwrap()
}

#[tokio::test]
async fn the_readme_tour_prints_what_the_readme_shows() {
    require_curl("the README's tour");
    let (start, console) = tour();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(demo_upstream::serve(listener));
    let admin_addr = free_addr();
    let mut flags = proxy_flags(&start);
    flags.extend(["--admin-listen".to_owned(), admin_addr.to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (_proxy, client) = start_binary(&upstream, &flags).await;
    let admin = TestClient::new(admin_addr);

    let proxy = client.addr().to_string();
    let (mut shown, mut got, mut background) = (Vec::new(), Vec::new(), Vec::new());
    for line in &console.lines {
        let Some(command) = line.strip_prefix("$ ") else {
            shown.extend(lines(line));
            continue;
        };
        let command = command.replace(README_PROXY, &proxy);
        match command.strip_suffix(" &") {
            Some(command) => {
                background.push(shell(command));
                until_in_flight(&admin, key_of(command)).await;
            }
            None => got.extend(printed(shell(&command)).await),
        }
    }
    for child in background {
        got.extend(printed(child).await);
    }

    // A status ends a `-w ' %{http_code}'` line, or is the second word of a `-i` status line.
    let statuses = |lines: &[String]| {
        let status = |line: &String| match line.strip_prefix("HTTP/") {
            Some(rest) => rest.split(' ').nth(1)?.parse::<u16>().ok(),
            None => line.rsplit(' ').next()?.parse::<u16>().ok(),
        };
        let codes = lines.iter().filter_map(status);
        codes
            .filter(|code| (200..600).contains(code))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        statuses(&got),
        statuses(&shown),
        "statuses: printed {got:#?}"
    );
    assert_printed_as_shown(&got, &shown, "the README");
}
