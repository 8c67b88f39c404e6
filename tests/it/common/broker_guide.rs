//! Running the examples of `docs/brokers.md` as a reader runs them: its `sh` blocks through
//! `sh` (the Python they hand `python3`, on nats-py; `rabbitmqadmin`, through RabbitMQ's
//! management plugin), its config blocks as the proxy's config, with only the page's addresses
//! swapped for the test's private servers (`tests/it/brokers_guide.rs`,
//! `tests/it/brokers_guide_outbox.rs`).

use std::process::Stdio;

use super::console::sh;
use super::markdown::{read, Block, Page};
use idempotency_test_support::{nats_server, rabbitmq};

pub(crate) const GUIDE: &str = "docs/brokers.md";
/// The NATS server the page's commands and configs name.
pub(crate) const PAGE_NATS: &str = "nats://127.0.0.1:4222";
/// The service the page's consumers deliver to.
pub(crate) const PAGE_UPSTREAM: &str = "http://127.0.0.1:9000";
/// The RabbitMQ the page's consumer reads from: the virtual host `/`.
pub(crate) const PAGE_AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// The one line of the page's `sh` blocks that installs rather than runs: `.ci/setup` installs
/// the same package, and [`nats_py`] checks that it is there.
const INSTALL: &str = "pip install nats-py";

/// The blocks under `heading` whose info string is `info`, in order; at least one.
pub(crate) fn blocks(heading: &str, info: &str) -> Vec<Block> {
    let blocks: Vec<Block> = Page::parse(&read(GUIDE))
        .blocks
        .into_iter()
        .filter(|block| block.heading == heading && block.info == info)
        .collect();
    assert!(
        !blocks.is_empty(),
        "{GUIDE}: no {info} block under {heading:?}"
    );
    blocks
}

/// The one block under `heading` whose info string is `info`.
pub(crate) fn block(heading: &str, info: &str) -> Block {
    let mut found = blocks(heading, info);
    assert_eq!(found.len(), 1, "{GUIDE}: {info} blocks under {heading:?}");
    found.remove(0)
}

/// A block's text with each `(from, to)` swapped, having checked that it holds every `from`.
pub(crate) fn swapped(block: &Block, swaps: &[(&str, &str)]) -> String {
    let mut text = block.lines.join("\n");
    for (from, to) in swaps {
        assert!(
            text.contains(from),
            "{GUIDE}: the block under {:?} no longer names {from:?}",
            block.heading
        );
        text = text.replace(from, to);
    }
    text
}

/// The swap that aims the page's `rabbitmqadmin` commands at `vhost` instead of `/`.
pub(crate) fn in_vhost(vhost: &str) -> (&'static str, String) {
    ("rabbitmqadmin ", format!("rabbitmqadmin --vhost={vhost} "))
}

/// Runs an `sh` block as written, with `swaps`; what it printed. Its `pip install nats-py` line
/// is not run (the package is there, [`nats_py`] says).
pub(crate) async fn run(block: &Block, swaps: &[(&str, &str)]) -> String {
    let mut block = block.clone();
    block.lines.retain(|line| line.trim() != INSTALL);
    let script = swapped(&block, swaps);
    let output = sh(&script)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("sh runs");
    assert!(output.status.success(), "{script}\n{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// `Some` when `python3` has nats-py, which the page's JetStream setup needs; else a skip, or a
/// failure under `REQUIRE_NATS=1` (`.ci/setup` installs it).
pub(crate) fn nats_py() -> Option<()> {
    let import = std::process::Command::new("python3")
        .args(["-c", "import nats.js"])
        .output();
    match import {
        Ok(output) if output.status.success() => Some(()),
        _ => nats_server::skip("python3 cannot import nats-py (pip install nats-py)"),
    }
}

/// `Some` when `rabbitmqadmin` reaches RabbitMQ's management plugin; else a skip, or a failure
/// under `REQUIRE_RABBITMQ=1` (`.ci/setup` enables the plugin).
pub(crate) fn rabbitmqadmin() -> Option<()> {
    let listed = std::process::Command::new("rabbitmqadmin")
        .args(["list", "vhosts"])
        .output();
    match listed {
        Ok(output) if output.status.success() => Some(()),
        other => rabbitmq::skip(&format!(
            "rabbitmqadmin cannot reach the management plugin ({other:?})"
        )),
    }
}

/// The `Name: value` lines of a `text` block.
pub(crate) fn shown_headers(block: &Block) -> Vec<(String, String)> {
    let lines = block.lines.iter().filter(|line| !line.trim().is_empty());
    lines
        .map(|line| {
            let (name, value) = line
                .split_once(": ")
                .unwrap_or_else(|| panic!("{GUIDE}: {line:?} is not a header"));
            (name.to_owned(), value.to_owned())
        })
        .collect()
}
