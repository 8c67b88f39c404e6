//! Files a test makes in the temp directory, removed when the test is done with them.

use std::path::{Path, PathBuf};

/// A path unique to one test in this process; whatever is at it is removed when dropped.
pub struct TempPath(PathBuf);

impl TempPath {
    /// A fresh path for `test`, with nothing at it yet.
    pub fn new(test: &str) -> Self {
        let name = format!("idempotency-proxy-{test}-{}", std::process::id());
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_file(&path);
        Self(path)
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

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
