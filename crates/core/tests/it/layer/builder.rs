//! Building a layer: a policy is checked once, when it is built, in the same words whoever
//! builds it; the layer then cannot be refused, and a setting only the proxy can serve is
//! refused at build time, not at the first request.

use std::sync::Arc;

use idempotency_core::backend::RouteName;
use idempotency_core::policy::RouteMode;
use idempotency_core::proxy::InboxHook;
use idempotency_core::{IdempotencyLayer, Policy};
use tokio::sync::Notify;

use super::harness::memory;

#[test]
fn a_route_name_and_a_value_are_refused_by_the_one_fallible_step() {
    let refused = Policy::builder("pay ments").build().unwrap_err();
    assert_eq!(refused.key(), "name");
    assert!(refused.reason().contains("1 to 64 characters"), "{refused}");
    let zero = Policy::builder("payments")
        .with_lease(std::time::Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(zero.key(), "lease");
}

#[test]
#[should_panic(expected = "use mode = proxy")]
fn an_inbox_policy_cannot_be_served_by_a_layer_that_cannot_deliver() {
    let mut policy = Policy::builder("payments").build().unwrap();
    policy.mode = RouteMode::Inbox;
    let _ = IdempotencyLayer::new(memory(), policy);
}

#[test]
fn an_inbox_policy_with_the_proxys_hook_builds() {
    let mut policy = Policy::builder("payments").build().unwrap();
    policy.mode = RouteMode::Inbox;
    let route = RouteName::new("payments").unwrap();
    let hook = InboxHook::new(&route, Arc::new(Notify::new()), |parts| {
        parts.headers.clone()
    });
    let layer = IdempotencyLayer::builder(memory(), policy)
        .with_inbox(hook)
        .build();
    assert_eq!(layer.policy().mode, RouteMode::Inbox);
}

#[test]
#[should_panic(expected = "\"lease\"")]
fn a_policy_changed_after_building_is_checked_again_by_the_layer() {
    let mut policy = Policy::builder("payments").build().unwrap();
    policy.lease = std::time::Duration::ZERO;
    let _ = IdempotencyLayer::new(memory(), policy);
}
