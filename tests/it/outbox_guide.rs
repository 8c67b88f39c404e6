//! The worked example of `docs/outbox.md`, run as it is written: its shell lines (the binary in
//! place of `cargo run --release --`, the demo upstream compiled in here in place of
//! `cargo run --example upstream`), its SQL through `psql` on a private PostgreSQL, its config
//! files, and the `curl` commands of its last step, whose output must be what the page shows,
//! line by line (a `date:` header's value aside). Only the ports and the database's URL differ.
//! The DDL and the Rust it shows must be what `outbox-schema` prints and what the outbox
//! crate's README holds (whose doctests compile it).

use crate::common;

use crate::demo_upstream;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::binary::BIN;
use common::client::TestClient;
use common::console::{self, assert_printed_as_shown, require_curl, sh};
use common::inbox_upstream::free_addr;
use common::markdown::{read, Block, Page};
use common::poll;
use common::postgres_server::{binaries, shared_postgres};
use common::temp::TempPath;
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

const GUIDE: &str = "docs/outbox.md";
const WAIT: Duration = Duration::from_secs(30);

/// The blocks under `heading`, in order.
fn blocks(heading: &str) -> Vec<Block> {
    let blocks: Vec<Block> = Page::parse(&read(GUIDE))
        .blocks
        .into_iter()
        .filter(|block| block.heading == heading)
        .collect();
    assert!(!blocks.is_empty(), "{GUIDE}: no block under {heading:?}");
    blocks
}

/// The one block under `heading` whose info string is `info`.
fn block(heading: &str, info: &str) -> Block {
    let mut found = blocks(heading).into_iter().filter(|b| b.info == info);
    let block = found
        .next()
        .unwrap_or_else(|| panic!("{GUIDE}: no {info} block under {heading:?}"));
    assert!(
        found.next().is_none(),
        "{GUIDE}: two {info} blocks under {heading:?}"
    );
    block
}

/// A block's non-empty lines, trimmed.
fn lines(block: &Block) -> Vec<String> {
    let lines = block.lines.iter().map(|l| l.trim().to_owned());
    lines.filter(|l| !l.is_empty()).collect()
}

/// What a `cargo run --release -- FLAGS` line of the page runs: its flags.
fn binary_flags(line: &str) -> Vec<String> {
    let flags = line
        .strip_prefix("cargo run --release -- ")
        .unwrap_or_else(|| panic!("{GUIDE}: {line:?} does not run the binary"));
    flags.split_whitespace().map(str::to_owned).collect()
}

/// `sh -c command` in `dir`, with `env`, and with PostgreSQL's programs on the path; what it
/// printed, having checked that it succeeded.
async fn shell(command: &str, dir: &Path, env: &[(&str, &str)]) -> String {
    let path = match binaries() {
        Some(bin) => format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        None => std::env::var("PATH").unwrap(),
    };
    let output = sh(command)
        .current_dir(dir)
        .env("PATH", path)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("sh runs");
    assert!(output.status.success(), "{command}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// The binary with `flags`, in `dir`, with `env`, its log in `log`.
fn spawn(flags: &[String], dir: &Path, env: &[(&str, &str)], log: &TempPath) -> Child {
    Command::new(BIN)
        .args(flags)
        .current_dir(dir)
        .envs(env.iter().copied())
        .stderr(std::fs::File::create(log.path()).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts")
}

async fn until_listening(addr: SocketAddr, what: &str, log: &TempPath) {
    let listening = async || tokio::net::TcpStream::connect(addr).await.is_ok();
    let waited = tokio::time::timeout(WAIT, poll::until(WAIT, what, listening)).await;
    let log = std::fs::read_to_string(log.path()).unwrap_or_default();
    assert!(waited.is_ok(), "{what}: {log}");
}

#[tokio::test]
async fn the_outbox_guide_runs_as_written() {
    require_curl(GUIDE);
    let Some(server) = shared_postgres() else {
        return;
    };
    let database = server.fresh_database();
    // The page's config files are written where its commands name them, in a directory of the
    // test's own: `proxy.toml` and `relay.toml` stand for these files' paths.
    let dir = std::env::temp_dir();
    let dir = dir.as_path();
    let (proxy_file, relay_file) = (
        TempPath::new("outbox-guide-proxy.toml"),
        TempPath::new("outbox-guide-relay.toml"),
    );
    let config_file = |flag: String| {
        flag.replace("proxy.toml", &proxy_file.path().display().to_string())
            .replace("relay.toml", &relay_file.path().display().to_string())
    };
    let bin = format!("'{BIN}'");
    let database_env = [("OUTBOX_DATABASE_URL", database.as_str())];

    // 1. The table: the commands, then the DDL shown is what they printed.
    let table = lines(&block("1. The table", "sh"));
    assert!(table[0].starts_with("export OUTBOX_DATABASE_URL=postgres://"));
    let schema = table[1].replace("cargo run --release --", &bin);
    assert!(schema.contains("outbox-schema") && schema.contains("| psql"));
    shell(&schema, dir, &database_env).await;
    let printed = shell(
        &format!("{bin} outbox-schema --notify-channel outbox"),
        dir,
        &[],
    )
    .await;
    let shown = block("1. The table", "sql").lines.join("\n");
    assert!(
        printed.contains(&shown),
        "{GUIDE} shows DDL that outbox-schema does not print"
    );

    // 2. The receiver (the demo upstream), and the proxy in front of it.
    let receiver = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receiver_addr = receiver.local_addr().unwrap().to_string();
    tokio::spawn(demo_upstream::serve(receiver));
    let proxy_toml = lines(&block(
        "2. The receiver, and this proxy in front of it",
        "toml",
    ));
    assert!(proxy_toml
        .iter()
        .any(|l| l.contains(demo_upstream::DEFAULT_ADDR)));
    let proxy_toml = proxy_toml
        .join("\n")
        .replace(demo_upstream::DEFAULT_ADDR, &receiver_addr);
    std::fs::write(proxy_file.path(), proxy_toml).unwrap();
    let start = lines(&block(
        "2. The receiver, and this proxy in front of it",
        "sh",
    ));
    assert_eq!(start[0], "cargo run --example upstream");
    let proxy_addr = free_addr();
    let mut flags: Vec<String> = binary_flags(&start[1])
        .into_iter()
        .map(config_file)
        .collect();
    flags.extend(["--listen".to_owned(), proxy_addr.to_string()]);
    let proxy_log = TempPath::new("outbox-guide-proxy.log");
    let _proxy = spawn(&flags, dir, &[], &proxy_log);
    until_listening(proxy_addr, "the proxy", &proxy_log).await;

    // 3. The relay, sending to the proxy, with its admin listener elsewhere than 9090.
    let relay_toml = block("3. The relay", "toml").lines.join("\n");
    let relay_toml = relay_toml.replace("127.0.0.1:8080", &proxy_addr.to_string());
    std::fs::write(relay_file.path(), relay_toml).unwrap();
    let start = lines(&block("3. The relay", "sh"));
    let secret = start[0]
        .strip_prefix("export OUTBOX_SIGNING_SECRET=")
        .expect("the secret is exported first");
    let admin_addr = free_addr();
    let flags: Vec<String> = binary_flags(&start[1])
        .into_iter()
        .map(|flag| config_file(flag.replace("127.0.0.1:9090", &admin_addr.to_string())))
        .collect();
    let relay_env = [database_env[0], ("OUTBOX_SIGNING_SECRET", secret)];
    let relay_log = TempPath::new("outbox-guide-relay.log");
    let _relay = spawn(&flags, dir, &relay_env, &relay_log);
    until_listening(admin_addr, "the relay's admin listener", &relay_log).await;
    let admin = TestClient::new(admin_addr);
    poll::until(WAIT, "the relay ready", async || {
        admin.send("GET", "/readyz", &[], "").await.status == 200
    })
    .await;

    // 4. The application's transaction, in psql; the Rust is the crate README's.
    let transaction = block("4. The application's transaction", "sql")
        .lines
        .join("\n");
    let sql = TempPath::new("outbox-guide.sql");
    std::fs::write(sql.path(), transaction).unwrap();
    let psql = format!(
        "psql -q -v ON_ERROR_STOP=1 \"$OUTBOX_DATABASE_URL\" -f '{}'",
        sql.path().display()
    );
    shell(&psql, dir, &database_env).await;
    let rust = block("4. The application's transaction", "rust,no_run")
        .lines
        .join("\n");
    assert!(
        read("crates/outbox/README.md").contains(&rust),
        "{GUIDE}'s Rust is not the outbox crate's README's, which its doctests compile"
    );

    // The signature check the page suggests for the proxy's route is one `--check` takes.
    let verify = lines(&block("What the receiver sees", "toml")).join("\n");
    let verified = format!(
        "{}\n{verify}\n",
        std::fs::read_to_string(proxy_file.path()).unwrap()
    );
    let check_file = TempPath::new("outbox-guide-verify.toml");
    std::fs::write(check_file.path(), verified).unwrap();
    let check = format!("{bin} --config '{}' --check", check_file.path().display());
    let secret_env = [("OUTBOX_SIGNING_SECRET", secret)];
    assert!(shell(&check, dir, &secret_env)
        .await
        .contains("standard-webhooks"));

    // 5. Once the relay has delivered, the commands print what the page shows.
    poll::until(WAIT, "the event delivered", async || {
        let counts = admin.send("GET", "/outbox/payments", &[], "").await;
        counts.status == 200 && counts.json()["delivered_last_hour"] == 1
    })
    .await;
    let (mut shown, mut got) = (Vec::new(), Vec::new());
    for line in lines(&block("5. See it", "console")) {
        let Some(command) = line.strip_prefix("$ ") else {
            shown.push(line);
            continue;
        };
        let command = command
            .replace("localhost:9090", &admin_addr.to_string())
            .replace("localhost:8080", &proxy_addr.to_string());
        got.extend(console::lines(&shell(&command, dir, &[]).await));
    }
    assert_printed_as_shown(&got, &shown, GUIDE);
}
