//! The Redis store on Redis Cluster (`redis+cluster://HOST:PORT[,HOST:PORT...]`).
//!
//! Only the connection differs from a single Redis: the operations and scripts are the same
//! (`redis.rs`, `redis_scripts.rs`). Every record is one key, so every operation touches one slot
//! and runs on the master that owns it. The cluster client learns the slot map from any seed
//! node, keeps one multiplexed connection per master, follows `MOVED` and `ASK` redirections and
//! refreshes the map when the cluster changes, so a resharded or failed-over key is found again.
//!
//! While a master is down, only the keys in its slots fail (`store-unavailable`, or a fail-open
//! forward); the other masters keep answering. `ping` asks every master, so a health check says
//! whether the whole cluster answers.

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::Client;

use super::api::StoreError;
use super::redis::{redact, RedisStore, CONNECTION_TIMEOUT, CONNECT_TIMEOUT, RESPONSE_TIMEOUT};

/// A store on a Redis Cluster.
pub type RedisClusterStore = RedisStore<ClusterConnection>;

impl RedisStore<ClusterConnection> {
    /// Connects to the cluster that `nodes` (`redis://HOST:PORT` seed URLs; one reachable node is
    /// enough) belong to; every key the store writes starts with `prefix`. Fails with
    /// `Unavailable` or `Timeout` when no seed answers with a slot map within a few seconds, and
    /// with `Open` when the URLs are not valid (or disagree on credentials).
    pub async fn connect_cluster(nodes: &[String], prefix: &str) -> Result<Self, StoreError> {
        let client = ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(CONNECTION_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .build()
            .map_err(|e| {
                let message = format!("invalid Redis Cluster nodes: {e}");
                StoreError::Open(redact_all(nodes, message))
            })?;
        let conn = match tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_connection()).await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                let message = format!("cannot connect to Redis Cluster: {e}");
                return Err(StoreError::Unavailable(redact_all(nodes, message)));
            }
            Err(_) => return Err(StoreError::Timeout(CONNECT_TIMEOUT)),
        };
        Ok(Self::with_connection(conn, prefix, "cluster"))
    }
}

/// Removes every node URL's password, as written and as decoded, from a message.
fn redact_all(nodes: &[String], message: String) -> String {
    nodes.iter().fold(message, |message, url| {
        let decoded = Client::open(url.as_str()).ok().and_then(|client| {
            let settings = client.get_connection_info().redis_settings();
            settings.password().map(str::to_owned)
        });
        redact(url, decoded.as_deref(), message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_password_is_redacted() {
        let nodes = ["redis://:first%21pw@a:1", "redis://u:second@b:2"].map(String::from);
        let message = "auth failed for first%21pw, first!pw and second".to_owned();
        let redacted = redact_all(&nodes, message);
        assert_eq!(redacted, "auth failed for ***, *** and ***");
    }

    #[tokio::test]
    async fn an_unreachable_cluster_fails_without_the_password() {
        let nodes = ["redis://:s3cret-pw@127.0.0.1:1".to_owned()];
        match RedisStore::connect_cluster(&nodes, "x:").await {
            Err(StoreError::Unavailable(message)) => {
                assert!(!message.contains("s3cret-pw"), "{message}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}
