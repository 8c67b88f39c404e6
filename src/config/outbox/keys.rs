//! The `[[outboxes]]` table as written: raw serde structs, before any validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// One `[[outboxes]]` table (docs/reference.md#outbox-keys): an outbox relay, as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct OutboxTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) name: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) database: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) table: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) deliver_to: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) topics: Option<Spanned<BTreeMap<String, String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) nats_subject_prefix: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) amqp_exchange: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) method: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) signing_secret: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) poll_interval: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) notify_channel: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) deliver_concurrency: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) destination_concurrency: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) deliver_timeout: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) retry_initial: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) retry_max: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) max_attempts: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) max_age: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) lease: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) on_dead: Option<Spanned<OnDeadChoice>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) keep_delivered: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) upstream_ca: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) upstream_client_cert: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) upstream_client_key: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) keep_dead: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) database_ca: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) pool_size: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) statement_timeout: Option<Spanned<String>>,
}

/// `on_dead`: what later rows of an aggregate do while an earlier one is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub(in crate::config) enum OnDeadChoice {
    Skip,
    Block,
}
