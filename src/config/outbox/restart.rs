//! What a reload may not change of the outboxes: any of them, as each relay holds its
//! database, its leases and its drain from the start.

use crate::config::file::RawFile;
use crate::config::settings::Settings;

/// The outboxes as `--check` prints them, and their names.
pub(in crate::config) fn outboxes(settings: &Settings) -> (String, String) {
    let tables = crate::config::outbox::print(&settings.outboxes);
    let printed = toml::to_string(&RawFile {
        outboxes: tables,
        ..RawFile::default()
    });
    let names: Vec<&str> = settings
        .outboxes
        .iter()
        .map(|o| o.relay.name.as_str())
        .collect();
    (
        printed.unwrap_or_default(),
        format!("[{}]", names.join(", ")),
    )
}
