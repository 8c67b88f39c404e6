//! Inbox routes and the rest of the proxy: a reload turns a route into an inbox and back,
//! its delivery worker following, keeps the `deliver_rate` pace of the attempts sent before
//! it, and is refused on a store that keeps no inbox queues; and with encryption at rest the
//! store holds no stored request, and no raw key, in clear.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::inbox_upstream::{free_addr, InboxUpstream};
use common::proxy::TestProxy;
use common::temp::TempPath;
use idempotency_core::backend::{
    CompletedRecord, FencingToken, Fingerprint, Record, RouteName, ScopedKey,
};
use idempotency_proxy::store::{
    Fenced, MemoryStore, Removal, Removed, Reservation, Store, StoreError,
};

const WAIT: Duration = Duration::from_secs(20);

fn route(upstream: &str, mode: &str) -> String {
    format!(
        "[[routes]]\nname = \"hooks\"\npath_prefix = \"/hooks/\"\nupstream = \"{upstream}\"\nmode = \"{mode}\"\n"
    )
}

#[tokio::test]
async fn a_reload_turns_a_route_into_an_inbox_and_back() {
    let upstream = InboxUpstream::start().await;
    upstream.answer(201);
    let file = TempPath::new("inbox-reload.toml");
    std::fs::write(file.path(), route(&upstream.url(), "proxy")).unwrap();
    let (proxy, _) = TestProxy::from_file(file.path(), Arc::new(MemoryStore::new())).await;
    let forwarded = proxy.client.post("/hooks/a", "before", "{}").await;
    assert_eq!(forwarded.status, 201, "a proxy route forwards");
    assert_eq!(
        proxy
            .admin
            .send("GET", "/inbox/hooks", &[], "")
            .await
            .status,
        404
    );

    std::fs::write(file.path(), route(&upstream.url(), "inbox")).unwrap();
    assert_eq!(
        proxy.admin.send("POST", "/reload", &[], "").await.status,
        200
    );
    let accepted = proxy.client.post("/hooks/a", "during", "{}").await;
    assert_eq!(accepted.status, 202, "the inbox acknowledges");
    upstream
        .until(WAIT, "the delivery", |u| u.arrivals("during").len() == 1)
        .await;
    assert_eq!(
        proxy
            .admin
            .send("GET", "/inbox/hooks", &[], "")
            .await
            .status,
        200
    );

    std::fs::write(file.path(), route(&upstream.url(), "proxy")).unwrap();
    assert_eq!(
        proxy.admin.send("POST", "/reload", &[], "").await.status,
        200
    );
    assert_eq!(
        proxy.client.post("/hooks/a", "after", "{}").await.status,
        201
    );
    assert_eq!(
        proxy
            .admin
            .send("GET", "/inbox/hooks", &[], "")
            .await
            .status,
        404
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_reload_keeps_the_pace_of_the_attempts_sent_before_it() {
    let upstream = InboxUpstream::start().await;
    let file = TempPath::new("inbox-rate.toml");
    let config = |timeout: &str| {
        let route = route(&upstream.url(), "inbox");
        format!("{route}deliver_rate = 5\ndeliver_timeout = \"{timeout}\"\n")
    };
    std::fs::write(file.path(), config("10s")).unwrap();
    let (proxy, _) = TestProxy::from_file(file.path(), Arc::new(MemoryStore::new())).await;
    for n in 0..10 {
        let key = format!("rate-{n}");
        assert_eq!(
            proxy.client.post_owned("/hooks/a", &key, "{}").await.status,
            202
        );
    }
    upstream
        .until(WAIT, "five attempts", |u| u.keys() >= 5)
        .await;
    // Another policy for the route, the same rate: the next attempt is spaced from the last
    // one sent before the reload.
    std::fs::write(file.path(), config("20s")).unwrap();
    let reloaded = proxy.admin.send("POST", "/reload", &[], "").await;
    assert_eq!(reloaded.status, 200, "{reloaded:?}");
    upstream.until(WAIT, "every key", |u| u.keys() == 10).await;
    upstream.assert_paced(5);
    proxy.shutdown().await;
}

#[tokio::test]
async fn sealed_deliveries_show_neither_the_request_nor_the_key() {
    let key = TempPath::new("inbox-sealed.key");
    std::fs::write(key.path(), "5a".repeat(32)).unwrap();
    let down = format!("http://{}", free_addr());
    let toml = format!(
        "encryption_key = \"file:{}\"\n{}",
        key.path().display(),
        route(&down, "inbox")
    );
    let raw = Arc::new(MemoryStore::new());
    let proxy = TestProxy::start(&toml, raw.clone()).await;
    let answer = proxy
        .client
        .post("/hooks/a", "evt-secret-key", "{\"card\":\"4242\"}")
        .await;
    assert_eq!(answer.status, 202);
    // Whatever the worker holds, a claim far enough ahead takes it from the raw store.
    let inbox = raw.inbox().unwrap();
    let later = SystemTime::now() + Duration::from_secs(3600);
    let hooks = RouteName::new("hooks").unwrap();
    let claims = inbox
        .claim(&hooks, later, 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
    let stored = &claims[0].delivery;
    assert_ne!(stored.key.key().as_str(), "evt-secret-key");
    assert!(!stored.request.body.windows(4).any(|w| w == b"4242"));
    assert!(stored.request.headers.is_empty());
    proxy.shutdown().await;
}

/// A store that keeps records but no inbox queues.
#[derive(Debug, Default)]
struct RecordsOnly(MemoryStore);

#[async_trait::async_trait]
impl Store for RecordsOnly {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fp: Fingerprint,
        lease: Duration,
    ) -> Stored<Reservation> {
        self.0.reserve(key, fp, lease).await
    }
    async fn renew(&self, key: &ScopedKey, token: FencingToken, lease: Duration) -> Stored<Fenced> {
        self.0.renew(key, token, lease).await
    }
    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Stored<Fenced> {
        self.0.complete(key, record, ttl).await
    }
    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Stored<Fenced> {
        self.0.release(key, token).await
    }
    async fn get(&self, key: &ScopedKey) -> Stored<Option<(Record, Duration)>> {
        self.0.get(key).await
    }
    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Stored<Removed> {
        self.0.remove(key, removal).await
    }
    async fn ping(&self) -> Stored<()> {
        self.0.ping().await
    }
}

type Stored<T> = Result<T, StoreError>;

#[tokio::test]
async fn a_reload_to_an_inbox_route_is_refused_on_a_store_without_queues() {
    let upstream = InboxUpstream::start().await;
    upstream.answer(201);
    let file = TempPath::new("inbox-refused.toml");
    std::fs::write(file.path(), route(&upstream.url(), "proxy")).unwrap();
    let (proxy, _) = TestProxy::from_file(file.path(), Arc::new(RecordsOnly::default())).await;
    std::fs::write(file.path(), route(&upstream.url(), "inbox")).unwrap();
    let refused = proxy.admin.send("POST", "/reload", &[], "").await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.problem_type(), "bad-config");
    let detail = refused.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("inbox routes need a store that supports them"),
        "{detail}"
    );
    let still = proxy.client.post("/hooks/a", "k", "{}").await;
    assert_eq!(still.status, 201, "the running config stays: {still:?}");
    proxy.shutdown().await;
}
