//! A private PostgreSQL for a campaign (`--store postgres`): `initdb` in a directory of the run,
//! PostgreSQL's durable defaults (`fsync`, `synchronous_commit`), trust authentication on
//! loopback. When the campaign runs as root, `initdb` and `postgres` run as the `postgres` user
//! (through `setpriv`, which execs, so the PID is the postmaster's own), as PostgreSQL refuses
//! to run as root.
//!
//! A store kill stops it with SIGQUIT (`pg_ctl stop -m immediate`: every process quits at once,
//! as after a crash, and the next start replays the WAL), not SIGKILL: a postmaster killed
//! alone leaves its backends holding the shared memory, and no new one could start until they
//! noticed.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory of PostgreSQL's programs: `POSTGRES_BIN`, else the newest of Debian's.
pub fn binaries() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("POSTGRES_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("no PostgreSQL in /usr/lib/postgresql ({e}); set POSTGRES_BIN"))?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no PostgreSQL in /usr/lib/postgresql; set POSTGRES_BIN".to_owned())
}

/// Makes a cluster in `dir`, owned by the user the server runs as (who may then pass through
/// the run directory above it, which `mktemp -d` made for root alone).
pub fn init(bin: &Path, dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if root() {
        if let Some(run) = dir.parent() {
            let open = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(run, open).map_err(|e| format!("{}: {e}", run.display()))?;
        }
        let owned = Command::new("chown")
            .arg("postgres:postgres")
            .arg(dir)
            .status();
        if !owned.is_ok_and(|s| s.success()) {
            return Err(format!("chown postgres {} failed", dir.display()));
        }
    }
    let (program, mut args) = as_server_user(&bin.join("initdb"));
    args.extend(["-D".to_owned(), dir.display().to_string()]);
    args.extend(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"].map(String::from));
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run initdb: {e}"))?;
    if !output.status.success() {
        let why = String::from_utf8_lossy(&output.stderr);
        return Err(format!("initdb {} failed: {why}", dir.display()));
    }
    Ok(())
}

/// The program and arguments that run the postmaster on `port` over `dir`.
pub fn server_command(bin: &Path, dir: &Path, port: u16) -> (PathBuf, Vec<String>) {
    let (program, mut args) = as_server_user(&bin.join("postgres"));
    args.extend(["-D".to_owned(), dir.display().to_string()]);
    args.extend(["-p".to_owned(), port.to_string()]);
    for setting in [
        "listen_addresses=127.0.0.1".to_owned(),
        format!("unix_socket_directories={}", dir.display()),
        "max_connections=200".to_owned(),
    ] {
        args.extend(["-c".to_owned(), setting]);
    }
    (program, args)
}

/// `program`, run as the `postgres` user when this process is root.
fn as_server_user(program: &Path) -> (PathBuf, Vec<String>) {
    if !root() {
        return (program.to_owned(), Vec::new());
    }
    let args = ["--reuid=postgres", "--regid=postgres", "--init-groups"].map(String::from);
    let mut args = args.to_vec();
    args.push(program.display().to_string());
    (PathBuf::from("setpriv"), args)
}

fn root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}
