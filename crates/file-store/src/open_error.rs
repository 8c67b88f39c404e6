//! Why the store could not be opened, in words an operator can act on, with the error of the
//! file system or of redb behind them kept as the source; it becomes
//! [`StoreError::Open`](idempotency_core::StoreError::Open) naming the store file.

use std::path::Path;

use idempotency_core::{BoxError, StoreError};

/// A refusal to open: what the store says, and what it was told.
#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub(crate) struct OpenError {
    context: String,
    #[source]
    source: Option<BoxError>,
}

impl OpenError {
    /// A refusal the store decides on itself (a layout of a later release, a missing folder).
    pub(crate) fn new(context: impl Into<String>) -> Self {
        Self {
            context: context.into(),
            source: None,
        }
    }

    /// `context`, caused by `source`.
    pub(crate) fn because(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// The store's error, naming the store file at `path`.
    pub(crate) fn at(self, path: &Path) -> StoreError {
        let context = format!("file store {}: {}", path.display(), self.context);
        match self.source {
            Some(source) => StoreError::open_from(context, source),
            None => StoreError::open(context),
        }
    }
}
