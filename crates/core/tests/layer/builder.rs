//! Building a layer: a policy is checked once, in the same words whoever builds it, and a
//! setting only the proxy can serve is refused with a reason, not at the first request.

use std::sync::Arc;

use idempotency_core::idempotency::policy::RouteMode;
use idempotency_core::idempotency::InboxHook;
use idempotency_core::model::RouteName;
use idempotency_core::{IdempotencyLayer, Policy};
use tokio::sync::Notify;

use crate::harness::memory;

fn route() -> RouteName {
    RouteName::new("payments").unwrap()
}

#[test]
fn an_inbox_policy_is_refused_by_a_layer_that_cannot_deliver() {
    let policy = Policy::builder(route())
        .with_mode(RouteMode::Inbox)
        .build()
        .expect("an inbox policy is a valid policy");
    let refused = IdempotencyLayer::new(memory(), policy.clone()).unwrap_err();
    assert_eq!(refused.key(), "mode");
    assert!(refused.reason().contains("use mode = proxy"), "{refused}");

    // With the proxy's delivery hook and a store that keeps queues, the same policy builds.
    let hook = InboxHook::new(&route(), Arc::new(Notify::new()), |parts| {
        parts.headers.clone()
    });
    let layer = IdempotencyLayer::builder(memory(), policy)
        .with_inbox(hook)
        .build();
    assert!(layer.is_ok());
}

#[test]
fn a_policy_changed_after_building_is_checked_again_by_the_layer() {
    let mut policy = Policy::builder(route()).build().unwrap();
    policy.lease = std::time::Duration::ZERO;
    let refused = IdempotencyLayer::new(memory(), policy).unwrap_err();
    assert_eq!(refused.key(), "lease");
}
