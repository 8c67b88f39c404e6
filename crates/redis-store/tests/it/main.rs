//! The Redis store's integration tests, one binary for all of them: the store and inbox suites
//! over Redis, Redis Cluster and Valkey, what the store leaves in the server, and how its
//! fenced writes go out.

mod fencing;
mod redis_inbox_layout;
mod redis_store;
mod suite;
