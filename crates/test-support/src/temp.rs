//! Files a test makes in the temp directory, removed when the test is done with them.

use std::path::{Path, PathBuf};

/// A path unique to one test in this process; whatever is at it is removed when dropped, and
/// so is what a file store keeps beside it (its log folder, `PATH-log`, and the previous
/// release's `PATH-wal`).
pub struct TempPath(PathBuf);

impl TempPath {
    /// A fresh path for `test`, with nothing at it yet.
    pub fn new(test: &str) -> Self {
        let name = format!("idempotency-proxy-{test}-{}", std::process::id());
        let path = Self(std::env::temp_dir().join(name));
        path.remove();
        path
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The `--store` value of a file store at this path.
    pub fn store_spec(&self) -> String {
        format!("file:{}", self.0.display())
    }
}

impl TempPath {
    fn remove(&self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(self.beside("-log"));
        let _ = std::fs::remove_file(self.beside("-wal"));
    }

    /// What a file store at this path keeps beside it.
    fn beside(&self, suffix: &str) -> PathBuf {
        let mut name = self.0.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        self.remove();
    }
}
