//! Shared pieces of the proxy's integration tests: a real upstream, the proxy (in-process or
//! as its binary), TLS material. The HTTP client, stored records, temporary files and private
//! Redis servers come from the workspace's test-support crate, which the store crates' tests
//! use too.

pub(crate) mod binary;
pub(crate) mod broker_guide;
pub(crate) mod closing_upstream;
pub(crate) mod console;
pub(crate) mod grpc;
pub(crate) mod inbox_upstream;
pub(crate) mod logs;
pub(crate) mod markdown;
pub(crate) mod outbox;
pub(crate) mod proxy;
pub(crate) mod raw;
pub(crate) mod tls;
pub(crate) mod upstream;

pub(crate) use idempotency_test_support::{
    answer, client, poll, postgres_server, receiver, records, redis, redis_cluster, redis_server,
    signal, temp,
};
