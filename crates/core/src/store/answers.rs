//! What every store operation answers besides its result: how it failed ([`StoreError`]),
//! and whether a fenced write found its holder still current ([`Fenced`]). Both the record
//! contract (`api.rs`) and the inbox contract (`inbox.rs`) answer with them.

use std::borrow::Cow;
use std::time::Duration;

use crate::error::BoxError;
use crate::model::RecordError;

/// What can go wrong talking to a store. None of it reaches a client beyond `store-unavailable`.
///
/// An error from the store's client or the system stays the [`source`](std::error::Error::source)
/// of the store's own words: the log line names both, and code can still look at the cause.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached, or failed the operation.
    #[error("store unreachable: {context}")]
    Unavailable {
        /// What failed, in the store's words.
        context: Cow<'static, str>,
        /// The client's or the system's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The store did not answer within the operation time-out.
    #[error("store operation timed out after {0:?}")]
    Timeout(Duration),
    /// A stored record could not be decoded (or opened): it is never replayed.
    #[error(transparent)]
    Corrupt(#[from] RecordError),
    /// The store could not be opened at start-up.
    #[error("cannot open store: {context}")]
    Open {
        /// What could not be opened or used, in the store's words.
        context: Cow<'static, str>,
        /// The client's or the system's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A fresh reservation must wait this long: after a machine crash the store may have lost
    /// reservations whose upstream calls are still running.
    #[error("store is waiting out the lease of reservations a machine crash may have lost; retry in {0:?}")]
    Recovering(Duration),
}

impl StoreError {
    /// [`Unavailable`](Self::Unavailable) with no cause beyond `context`.
    pub fn unavailable(context: impl Into<Cow<'static, str>>) -> Self {
        Self::Unavailable {
            context: context.into(),
            source: None,
        }
    }

    /// [`Unavailable`](Self::Unavailable), caused by `source`.
    pub fn unavailable_from(
        context: impl Into<Cow<'static, str>>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Unavailable {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// [`Open`](Self::Open) with no cause beyond `context`.
    pub fn open(context: impl Into<Cow<'static, str>>) -> Self {
        Self::Open {
            context: context.into(),
            source: None,
        }
    }

    /// [`Open`](Self::Open), caused by `source`.
    pub fn open_from(context: impl Into<Cow<'static, str>>, source: impl Into<BoxError>) -> Self {
        Self::Open {
            context: context.into(),
            source: Some(source.into()),
        }
    }
}

/// Whether a fenced write (`complete`, `renew`, `release`) found its reservation still current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The write was applied.
    Applied,
    /// The lease ran out and the key was freed or taken over; nothing was written.
    LeaseLost,
}
