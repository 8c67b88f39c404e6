//! The network path: what a client's request goes through on its way to the upstream and back.
//!
//! [`server`] accepts connections within the configured limits and drains them on shutdown;
//! [`framing`] refuses requests whose body length could be read two ways; [`router`] picks
//! the route (and with it the idempotency layer's stack) for a request; [`upstream`] is the
//! client that forwards it. The config and the stores never import from here.

pub(crate) mod framing;
pub(crate) mod router;
pub(crate) mod server;
pub(crate) mod upstream;
