//! Real gRPC peers for the gRPC route tests: `tests/grpc/payments.proto` compiled at test time,
//! the Python grpcio upstream (`tests/grpc/server.py`) and client (`tests/grpc/client.py`).
//!
//! Without grpcio the tests say SKIPPED and pass, unless `REQUIRE_GRPC=1` (as CI sets it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde::Deserialize;
use serde_json::Value;

use super::tls::Pair;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc")
}

/// The generated Python modules of `payments.proto`, in a directory of this test's own.
pub(crate) struct Grpc {
    generated: PathBuf,
}

impl Grpc {
    /// The proto compiled for `test`; `None` (after saying SKIPPED) without grpcio.
    pub(crate) fn compile(test: &str) -> Option<Self> {
        let probe = Command::new("python3")
            .args(["-c", "import grpc, grpc_tools"])
            .output();
        if !probe.is_ok_and(|out| out.status.success()) {
            assert!(
                std::env::var("REQUIRE_GRPC").as_deref() != Ok("1"),
                "REQUIRE_GRPC=1 but python3 cannot import grpc and grpc_tools (pip install grpcio grpcio-tools)"
            );
            eprintln!(
                "\n*** SKIPPED: no grpcio for python3; the gRPC route tests did not run ***\n"
            );
            return None;
        }
        let generated = std::env::temp_dir().join(format!(
            "idempotency-proxy-grpc-{test}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&generated).unwrap();
        let out = Command::new("python3")
            .args(["-m", "grpc_tools.protoc"])
            .arg(format!("-I{}", fixtures().display()))
            .arg(format!("--python_out={}", generated.display()))
            .arg(format!("--grpc_python_out={}", generated.display()))
            .arg(fixtures().join("payments.proto"))
            .output()
            .unwrap();
        assert!(out.status.success(), "protoc: {out:?}");
        Some(Self { generated })
    }

    /// The upstream, over h2c, or over TLS with `tls`.
    pub(crate) fn upstream(&self, tls: Option<&Pair>) -> GrpcUpstream {
        self.upstream_on(0, tls)
    }

    /// The upstream on `port` (0: any free one).
    pub(crate) fn upstream_on(&self, port: u16, tls: Option<&Pair>) -> GrpcUpstream {
        let log = self.generated.join(format!("calls-{}.log", rand_suffix()));
        let mut command = Command::new("python3");
        command
            .arg(fixtures().join("server.py"))
            .arg(&self.generated)
            .arg(&log);
        if let Some(pair) = tls {
            command.args([&pair.cert, &pair.key]);
        }
        command.env("PORT", port.to_string());
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the upstream prints its port");
        GrpcUpstream { child, port, log }
    }

    /// Runs the calls of `calls` (see `client.py`) over one channel to `target`.
    /// The client runs beside the test's runtime, which serves the proxy meanwhile.
    pub(crate) async fn call(&self, target: &str, ca: Option<&str>, calls: Value) -> Vec<Call> {
        let plan = serde_json::json!({ "target": target, "ca": ca, "calls": calls });
        let out = tokio::process::Command::new("python3")
            .arg(fixtures().join("client.py"))
            .arg(&self.generated)
            .arg(plan.to_string())
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "client.py: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Grpc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.generated);
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The Payments upstream, killed when dropped.
pub(crate) struct GrpcUpstream {
    child: Child,
    pub(crate) port: u16,
    /// One line per call it ran: `<method> <idempotency-key>`.
    pub(crate) log: PathBuf,
}

impl GrpcUpstream {
    /// How many calls of `method` with `key` it ran.
    pub(crate) fn executions(&self, method: &str, key: &str) -> usize {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let line = format!("{method} {key}");
        text.lines().filter(|l| *l == line).count()
    }

    /// The line the upstream writes when it starts running a call.
    pub(crate) fn started(&self, key: &str) -> String {
        format!("CreatePayment {key}")
    }
}

impl Drop for GrpcUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one call came back with.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Call {
    /// The status, by name (`OK`, `ABORTED`, ...).
    pub(crate) code: String,
    pub(crate) details: String,
    pub(crate) initial: Vec<(String, String)>,
    pub(crate) trailing: Vec<(String, String)>,
    /// Each response message, hex.
    pub(crate) messages: Vec<String>,
}

impl Call {
    pub(crate) fn initial(&self, name: &str) -> Option<&str> {
        find(&self.initial, name)
    }

    pub(crate) fn trailing(&self, name: &str) -> Option<&str> {
        find(&self.trailing, name)
    }

    /// The metadata that says where the answer came from, not what it was: set per answer.
    pub(crate) fn without_per_answer(pairs: &[(String, String)]) -> Vec<(String, String)> {
        let per_answer = ["date", "idempotent-replayed"];
        let kept = pairs
            .iter()
            .filter(|(k, _)| !per_answer.contains(&k.as_str()));
        kept.cloned().collect()
    }
}

fn find<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}
