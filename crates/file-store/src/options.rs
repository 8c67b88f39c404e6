//! How a file store is opened, beyond its path: the machine's boot as the store tells it (a
//! test stands for a restart of the machine by giving another), and the size of its log's
//! segments.

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// How a file store is opened, beyond its path.
#[derive(Debug, Clone, Default)]
pub struct FileStoreOptions {
    boot_id: Option<String>,
    segment_bytes: Option<u64>,
}

/// The size at which the log moves on to a new segment: large enough that a segment's
/// creation (two syncs) is rare, small enough that retiring one is a short read.
pub const SEGMENT_BYTES: u64 = 64 << 20;

impl FileStoreOptions {
    /// Moves the log on to a new segment once one holds `bytes` (default [`SEGMENT_BYTES`]):
    /// smaller segments are retired sooner after their records expire, at one more file each.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = Some(bytes);
        self
    }

    pub(super) fn segment_limit(&self) -> u64 {
        self.segment_bytes.unwrap_or(SEGMENT_BYTES)
    }

    /// Takes `boot_id` for the machine's boot instead of reading it from the system: a test
    /// stands for a restart of the machine by giving another.
    pub fn boot_id(mut self, boot_id: impl Into<String>) -> Self {
        self.boot_id = Some(boot_id.into());
        self
    }

    /// The boot this start happens on, if it can be told.
    pub(super) fn current_boot(&self) -> Option<String> {
        self.boot_id.clone().or_else(|| {
            let read = std::fs::read_to_string(BOOT_ID).ok()?;
            Some(read.trim().to_owned()).filter(|id| !id.is_empty())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_boot_id_stands_for_the_systems() {
        let options = FileStoreOptions::default().boot_id("test-boot");
        assert_eq!(options.current_boot().as_deref(), Some("test-boot"));
        assert_eq!(options.segment_limit(), SEGMENT_BYTES);
        assert_eq!(options.segment_bytes(4096).segment_limit(), 4096);
    }
}
