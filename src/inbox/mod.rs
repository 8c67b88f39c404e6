//! Inbox routes (docs/reference.md#inbox-routes): the delivery side. The request side (acknowledge, record and
//! queue in one store step) is the idempotency layer's (`idempotency/accept.rs`); here a worker
//! per inbox route (`worker.rs`, kept across reloads by `supervisor.rs`) claims due deliveries
//! from the store and attempts each (`attempt.rs`) until it is delivered or dead, backing off
//! between failures (`backoff.rs`) within the route's caps (`rate.rs`).

mod attempt;
mod backoff;
mod metrics;
pub mod policy;
mod rate;
mod stats;
mod supervisor;
mod worker;

pub use policy::DeliveryPolicy;
pub(crate) use stats::QueueStats;
pub(crate) use supervisor::Inboxes;
pub(crate) use worker::RouteInbox;
