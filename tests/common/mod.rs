//! Shared pieces of the integration tests: a real upstream, the proxy, a client, and Redis.
#![allow(dead_code, unreachable_pub)]

pub mod answer;
pub mod binary;
pub mod client;
pub mod inbox_upstream;
pub mod poll;
pub mod proxy;
pub mod raw;
pub mod records;
pub mod redis;
pub mod redis_cluster;
pub mod redis_server;
pub mod signal;
pub mod temp;
pub mod tls;
pub mod upstream;
