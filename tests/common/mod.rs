//! Shared pieces of the proxy's integration tests: a real upstream, the proxy (in-process or
//! as its binary), TLS material. The HTTP client, stored records, temporary files and private
//! Redis servers come from the workspace's test-support crate, which the store crates' tests
//! use too.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod binary;
pub mod grpc;
pub mod inbox_upstream;
pub mod logs;
pub mod markdown;
pub mod outbox;
pub mod proxy;
pub mod raw;
pub mod tls;
pub mod upstream;

pub use idempotency_test_support::{
    answer, client, poll, postgres_server, receiver, records, redis, redis_cluster, redis_server,
    signal, temp,
};
