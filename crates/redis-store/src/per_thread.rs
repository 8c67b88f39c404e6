//! One Redis connection per thread that uses the store.
//!
//! A multiplexed Redis connection is driven by a task on the runtime it was made on. The proxy
//! serves clients on several threads, each with a runtime of its own; had they shared one
//! connection, every store call would hop to the thread driving it and back, two wake-ups per
//! call. So each thread gets a connection of its own, made on first use (by the call that finds
//! none) and driven by that thread's runtime.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

type Connecting<C> = Pin<Box<dyn Future<Output = RedisResult<C>> + Send>>;

/// Makes a new connection, on the runtime of the thread that awaits it.
pub(crate) type Connect<C> = Arc<dyn Fn() -> Connecting<C> + Send + Sync>;

/// A connection per thread, all to the same Redis (or cluster).
#[derive(Clone)]
pub struct PerThread<C> {
    /// Tells this store's connections from another's in a thread's map.
    id: usize,
    connect: Connect<C>,
}

thread_local! {
    /// This thread's connection of each store, by the store's id.
    static CONNECTIONS: RefCell<HashMap<usize, Box<dyn Any>>> = RefCell::default();
}

impl<C: ConnectionLike + Clone + Send + 'static> PerThread<C> {
    /// `first`, made on this thread, is its connection; other threads make theirs with
    /// `connect`.
    pub(crate) fn new(first: C, connect: Connect<C>) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let this = Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            connect,
        };
        this.keep(first);
        this
    }

    fn mine(&self) -> Option<C> {
        CONNECTIONS.with(|all| {
            let all = all.borrow();
            all.get(&self.id)
                .and_then(|conn| conn.downcast_ref::<C>())
                .cloned()
        })
    }

    fn keep(&self, conn: C) {
        CONNECTIONS.with(|all| all.borrow_mut().insert(self.id, Box::new(conn)));
    }

    /// This thread's connection, made now if it has none.
    async fn current(&self) -> RedisResult<C> {
        if let Some(conn) = self.mine() {
            return Ok(conn);
        }
        let conn = (self.connect)().await?;
        self.keep(conn.clone());
        Ok(conn)
    }
}

impl<C: ConnectionLike + Clone + Send + 'static> ConnectionLike for PerThread<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move { self.current().await?.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.current().await?;
            conn.req_packed_commands(pipeline, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        self.mine().map_or(0, |conn| conn.get_db())
    }
}
