//! Signals to the processes a test started, by PID, through `kill(1)`: how a test stops,
//! crashes, reloads, pauses or resumes a proxy or a Redis server.

use std::process::Command;

/// Sends `signal` (by name: `TERM`, `KILL`, `HUP`, `STOP`, `CONT`) to the process `pid`.
pub fn send(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap_or_else(|e| panic!("cannot run kill -{signal}: {e}"));
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}
