//! What the layer tells whoever watches it: a [`RequestObserver`] hears of every request
//! ([`FinishedRequest`], with its [`Outcome`]); the counts and latencies go through the
//! `metrics` facade, whose names are in [`proxy`](crate::proxy).

pub use crate::error::Cause;
pub use crate::idempotency::{FinishedRequest, NoObserver, RequestObserver};
pub use crate::outcome::{Outcome, OUTCOMES};
