//! Redis and Redis Cluster stores for [`idempotency_core`]: any number of proxy replicas (or
//! services using the layer) share one set of idempotency records and inbox queues.
//!
//! [`RedisStore::connect`] opens one Redis (`redis://` or `rediss://`);
//! [`RedisStore::connect_cluster`] a Redis Cluster from its seed nodes. Both implement
//! [`Store`](idempotency_core::Store) and its [`Inbox`](idempotency_core::backend::Inbox)
//! queues, with every operation one atomic round trip in Redis (`store.rs` says how).
//!
//! ```no_run
//! use std::sync::Arc;
//! use idempotency_core::{IdempotencyLayer, Policy};
//! use idempotency_redis_store::{RedisStore, DEFAULT_PREFIX};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379", DEFAULT_PREFIX).await?;
//! let policy = Policy::builder("payments").build()?;
//! let layer = IdempotencyLayer::new(Arc::new(store), policy);
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

mod cluster;
mod commands;
mod fenced;
mod held;
mod inbox;
mod per_thread;
mod scripts;
mod store;

pub use cluster::{ClusterLink, RedisClusterStore};
pub use per_thread::PerThread;
pub use store::{FenceCommand, FenceCommands, RedisConnection, RedisStore, DEFAULT_PREFIX};
