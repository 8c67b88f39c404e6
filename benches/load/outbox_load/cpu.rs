//! CPU time from `/proc/<pid>/stat`: a process's user + system time, and PostgreSQL's as a
//! whole (the postmaster, every backend alive, and what the backends that exited used, which
//! the postmaster's "children" fields hold once it has reaped them).

use std::time::Duration;

/// Clock ticks per second of `/proc`'s times (`getconf CLK_TCK`; 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// The fields of `/proc/<pid>/stat` after the command name: (ppid, utime + stime,
/// cutime + cstime) in ticks.
fn stat(pid: u32) -> Option<(u32, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let ppid = u32::try_from(number(1)?).ok()?;
    Some((ppid, number(11)? + number(12)?, number(13)? + number(14)?))
}

fn ticks(ticks: u64) -> Duration {
    Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND)
}

/// One process's CPU time so far.
pub fn process(pid: u32) -> Duration {
    stat(pid).map_or(Duration::ZERO, |(_, own, _)| ticks(own))
}

/// A PostgreSQL server's CPU time so far: the postmaster's own and its reaped children's, and
/// every live child's.
pub fn postgres(postmaster: u32) -> Duration {
    let mut total = stat(postmaster).map_or(0, |(_, own, reaped)| own + reaped);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return ticks(total);
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((ppid, own, _)) = stat(pid) {
            if ppid == postmaster {
                total += own;
            }
        }
    }
    ticks(total)
}
