//! Running what a page of the docs tells a reader to run, as a reader's shell would, and
//! comparing what it prints with what the page shows (`tests/it/tour.rs`, `tests/it/outbox_guide.rs`).

use tokio::process::Command;

/// Panics unless curl runs here: the pages' commands use it, and `.ci/run` installs it.
pub(crate) fn require_curl(what: &str) {
    let curl = std::process::Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|out| out.status.success()),
        "curl is needed to run {what} (.ci/run installs it)"
    );
}

/// `sh -c command`, with no HTTP proxy of the environment in the way.
pub(crate) fn sh(command: &str) -> Command {
    let mut sh = Command::new("sh");
    sh.args(["-c", command])
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY");
    sh
}

/// The lines worth comparing: trimmed (curl ends header lines with `\r`), none empty.
pub(crate) fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.trim().to_owned())
        .filter(|line| !line.is_empty())
        .collect()
}

/// Two lines that say the same: equal, or both a `date:` header, whose value is the time.
pub(crate) fn same_line(printed: &str, shown: &str) -> bool {
    let date = |line: &str| line.to_ascii_lowercase().starts_with("date:");
    printed == shown || (date(printed) && date(shown))
}

/// What the commands printed is what `page` shows, line by line.
pub(crate) fn assert_printed_as_shown(printed: &[String], shown: &[String], page: &str) {
    assert_eq!(
        printed.len(),
        shown.len(),
        "printed {printed:#?}, {page} shows {shown:#?}"
    );
    for (printed, shown) in printed.iter().zip(shown) {
        assert!(
            same_line(printed, shown),
            "printed {printed:?}, {page} shows {shown:?}"
        );
    }
}
