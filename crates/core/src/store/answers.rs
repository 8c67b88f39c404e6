//! What every store operation answers besides its result: how it failed ([`StoreError`]),
//! and whether a fenced write found its holder still current ([`Fenced`]). Both the record
//! contract (`api.rs`) and the inbox contract (`inbox.rs`) answer with them.

use std::time::Duration;

use crate::model::RecordError;

/// What can go wrong talking to a store. None of it reaches a client beyond `store-unavailable`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached, or failed the operation.
    #[error("store unreachable: {0}")]
    Unavailable(String),
    /// The store did not answer within the operation time-out.
    #[error("store operation timed out after {0:?}")]
    Timeout(Duration),
    /// A stored record could not be decoded (or opened): it is never replayed.
    #[error(transparent)]
    Corrupt(#[from] RecordError),
    /// The store could not be opened at start-up.
    #[error("cannot open store: {0}")]
    Open(String),
    /// A fresh reservation must wait this long: after a machine crash the store may have lost
    /// reservations whose upstream calls are still running.
    #[error("store is waiting out the lease of reservations a machine crash may have lost; retry in {0:?}")]
    Recovering(Duration),
}

/// Whether a fenced write (`complete`, `renew`, `release`) found its reservation still current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The write was applied.
    Applied,
    /// The lease ran out and the key was freed or taken over; nothing was written.
    LeaseLost,
}
