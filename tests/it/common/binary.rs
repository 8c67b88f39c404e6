//! The real `idempotency-proxy` binary, started as a child process on a free loopback port.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::client::TestClient;
use super::poll;
use super::signal;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_idempotency-proxy");

/// The binary in front of `upstream`, once it accepts connections; its log is discarded.
pub(crate) async fn start_binary(
    upstream: &str,
    extra: &[&str],
) -> (tokio::process::Child, TestClient) {
    start_binary_logging(upstream, extra, Stdio::null).await
}

/// Like [`start_binary`], with the log going to `stderr`.
///
/// The port is one the kernel had free a moment before; another test may be given it too. The
/// proxy that binds it second stops ("address in use"), and is started again on another port.
pub(crate) async fn start_binary_logging(
    upstream: &str,
    extra: &[&str],
    stderr: impl Fn() -> Stdio,
) -> (tokio::process::Child, TestClient) {
    start_binary_with_env(upstream, extra, stderr, &[]).await
}

/// Like [`start_binary_logging`], with `env` added to the process's environment (`RUST_LOG`,
/// say).
pub(crate) async fn start_binary_with_env(
    upstream: &str,
    extra: &[&str],
    stderr: impl Fn() -> Stdio,
    env: &[(&str, &str)],
) -> (tokio::process::Child, TestClient) {
    for _ in 0..3 {
        if let Some(started) = try_start(upstream, extra, stderr(), env).await {
            return started;
        }
    }
    panic!("the proxy did not start on any of three free ports");
}

async fn try_start(
    upstream: &str,
    extra: &[&str],
    stderr: Stdio,
    env: &[(&str, &str)],
) -> Option<(tokio::process::Child, TestClient)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = tokio::process::Command::new(BIN)
        .args(["--upstream", upstream, "--listen", &listen])
        .args(extra)
        .envs(env.iter().copied())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Listening, or gone: `Some(false)` when the process ended first.
    let started = async || {
        if child.try_wait().unwrap().is_some() {
            return Some(false);
        }
        let connected = tokio::net::TcpStream::connect(&listen).await.is_ok();
        connected.then_some(true)
    };
    let what = format!("the proxy listening on {listen}");
    let listening = poll::until(Duration::from_secs(30), what, started).await;
    listening.then(|| (child, TestClient::new(listen.parse().unwrap())))
}

/// The binary in front of `upstream` with the config file at `config`, the memory store and
/// an admin listener on a free port; its log goes to `stderr`. Returns the process, a client
/// of the proxy and one of the admin listener.
pub(crate) async fn start_with_admin(
    upstream: &str,
    config: &Path,
    stderr: impl Fn() -> Stdio,
) -> (tokio::process::Child, TestClient, TestClient) {
    start_with_admin_env(upstream, config, stderr, &[]).await
}

/// Like [`start_with_admin`], with `env` added to the process's environment.
pub(crate) async fn start_with_admin_env(
    upstream: &str,
    config: &Path,
    stderr: impl Fn() -> Stdio,
    env: &[(&str, &str)],
) -> (tokio::process::Child, TestClient, TestClient) {
    start_with_admin_on(upstream, config, "memory", stderr, env).await
}

/// Like [`start_with_admin_env`], on the store `store` (a `--store` value).
pub(crate) async fn start_with_admin_on(
    upstream: &str,
    config: &Path,
    store: &str,
    stderr: impl Fn() -> Stdio,
    env: &[(&str, &str)],
) -> (tokio::process::Child, TestClient, TestClient) {
    let admin_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (config, admin) = (config.display().to_string(), admin_addr.to_string());
    let flags = [
        "--config",
        &config,
        "--store",
        store,
        "--admin-listen",
        &admin,
    ];
    let (child, client) = start_binary_with_env(upstream, &flags, stderr, env).await;
    (child, client, TestClient::new(admin_addr))
}

pub(crate) fn sigterm(child: &tokio::process::Child) {
    signal::send(child.id().expect("the proxy is running"), "TERM");
}

pub(crate) fn sigkill(child: &tokio::process::Child) {
    signal::send(child.id().expect("the proxy is running"), "KILL");
}

/// The exit code, waiting at most 30s for the process to end.
pub(crate) async fn exit_code(mut child: tokio::process::Child) -> Option<i32> {
    let waited = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    waited.expect("the proxy exits").unwrap().code()
}
