//! Reaching the Redis the tests run against.
//!
//! `REDIS_URL` names it (default `redis://127.0.0.1:6379`). When it cannot be reached a test
//! prints `SKIPPED` and returns early, unless `REQUIRE_REDIS=1`, which turns that into a failure
//! so CI cannot pass by skipping. The Valkey counterpart of that shared Redis is a private
//! Valkey per test binary (`redis_server::shared_valkey`); `shared_url` and `store_on` pick
//! between the two.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idempotency_redis_store::RedisStore;
use redis::aio::MultiplexedConnection;
use redis::ConnectionAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::redis_server::{shared_valkey, Server};

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The Redis the tests share: `REDIS_URL`, or 127.0.0.1:6379.
pub fn url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A key prefix no other test, and no earlier run, shares.
pub fn unique_prefix(test: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "idempotency-proxy-test:{test}:{}:{nanos}:{n}:",
        std::process::id()
    )
}

/// A plain connection for writing and inspecting keys behind the store's back, or `None`
/// (after saying so) when there is no Redis and it is not required.
pub async fn connection() -> Option<MultiplexedConnection> {
    let url = url();
    match try_connect(&url).await {
        Ok(conn) => Some(conn),
        Err(why) => skip(&format!("no Redis at {url} ({why})")),
    }
}

/// A test that cannot run here: a failure under `REQUIRE_REDIS=1`, else a loud `SKIPPED`.
pub fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("REQUIRE_REDIS").as_deref() == Ok("1") {
        panic!("REQUIRE_REDIS=1 but {why}");
    }
    // Straight to the process's stderr: the test harness captures `eprintln!` of passing
    // tests, and a skip must not pass unnoticed.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {why}; set REDIS_URL, or REQUIRE_REDIS=1 to fail"
    );
    None
}

async fn try_connect(url: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let attempt = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok::<_, redis::RedisError>(conn)
    };
    match tokio::time::timeout(Duration::from_secs(3), attempt).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("no answer to PING within 3s".to_owned()),
    }
}

/// A plain connection to the server at `url`, which is known to be up.
pub async fn connection_to(url: &str) -> MultiplexedConnection {
    try_connect(url)
        .await
        .unwrap_or_else(|why| panic!("no connection to {url}: {why}"))
}

/// The server a test binary shares for `server`: the Redis at `REDIS_URL`, or the binary's
/// private Valkey; `None` when skipping.
pub async fn shared_url(server: Server) -> Option<String> {
    match server {
        Server::Redis => {
            connection().await?;
            Some(url())
        }
        Server::Valkey => {
            let valkey = tokio::task::spawn_blocking(shared_valkey).await.unwrap()?;
            Some(valkey.url())
        }
    }
}

/// A store on the server `server` shares, under a fresh prefix, with the prefix.
pub async fn store_on(server: Server, test: &str) -> Option<(RedisStore, String)> {
    let url = shared_url(server).await?;
    let prefix = unique_prefix(test);
    let store = RedisStore::connect(&url, &prefix)
        .await
        .unwrap_or_else(|e| panic!("{url} answered PING but the store cannot connect: {e}"));
    Some((store, prefix))
}

/// A store under a fresh prefix, with the prefix, or `None` when Redis is absent.
pub async fn store_with_prefix(test: &str) -> Option<(RedisStore, String)> {
    store_on(Server::Redis, test).await
}

/// A Redis store under a prefix of the test's own; `None` (skipped) without a Redis.
pub async fn store(test: &str) -> Option<RedisStore> {
    Some(store_with_prefix(test).await?.0)
}

/// A TCP relay in front of the test Redis that can be made to stop answering, to stand in for
/// a Redis that hangs.
pub struct Relay {
    /// The test Redis's URL with the relay's address in place of the server's.
    pub url: String,
    frozen: Arc<AtomicBool>,
}

impl Relay {
    /// Starts a relay, or `None` (after saying so, or failing under `REQUIRE_REDIS=1`) when
    /// there is no Redis, or its URL is not a plain `host:port` a relay can stand in for.
    pub async fn start() -> Option<Relay> {
        connection().await?;
        let url = url();
        let client = redis::Client::open(url.as_str()).ok()?;
        let addr = client.get_connection_info().addr().clone();
        let ConnectionAddr::Tcp(host, port) = addr else {
            return skip(&format!("a relay needs a TCP Redis URL, not {addr:?}"));
        };
        let target = format!("{host}:{port}");
        if !url.contains(&target) {
            return skip(&format!(
                "a relay needs REDIS_URL to name {target} as written"
            ));
        }
        Some(Relay::in_front_of(&url, &target).await)
    }

    /// A relay to the Redis at `target` (`host:port`), which `url` names.
    pub async fn in_front_of(url: &str, target: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_addr = listener.local_addr().unwrap().to_string();
        let frozen = Arc::new(AtomicBool::new(false));
        tokio::spawn(accept(listener, target.to_owned(), frozen.clone()));
        let url = url.replacen(target, &relay_addr, 1);
        Relay { url, frozen }
    }

    /// From now on requests still reach Redis, but no answer comes back.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }
}

async fn accept(listener: TcpListener, target: String, frozen: Arc<AtomicBool>) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(&target).await else {
            continue;
        };
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let never = Arc::new(AtomicBool::new(false));
        tokio::spawn(pipe(client_read, server_write, never));
        tokio::spawn(pipe(server_read, client_write, frozen.clone()));
    }
}

/// Copies bytes until either side closes; while `frozen`, what is read is dropped.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, frozen: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        if !frozen.load(Ordering::SeqCst) && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
