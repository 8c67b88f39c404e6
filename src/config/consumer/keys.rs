//! The `[[consumers]]` table as written: raw serde structs, before any validation.

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// One `[[consumers]]` table (docs/reference.md#consumer-keys): a broker's messages delivered
/// to an upstream through the idempotency layer, as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct ConsumerTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) name: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) source: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) stream: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) durable: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) filter_subject: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) queue: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) upstream: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) path: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) method: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) key_from: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) deliver_concurrency: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) deliver_timeout: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) deliver_success: Option<Spanned<Vec<i64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) retry_initial: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) retry_max: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) max_attempts: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) dead_letter: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) ttl: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::config) lease: Option<Spanned<String>>,
}
