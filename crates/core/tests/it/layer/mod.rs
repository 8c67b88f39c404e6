//! The idempotency layer in process, without sockets: `tower::ServiceExt::oneshot` over a
//! counting inner service, `tower-test` mocks where the test must hold the first request open,
//! and tokio's paused clock for leases, time-outs and TTLs, so the order of events is set by
//! the test and never by how fast the machine is.

mod builder;
mod harness;
mod leases;
mod outcomes;
mod steps;
