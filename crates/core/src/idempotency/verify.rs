//! Signed webhooks: checking a delivery's HMAC-SHA256 signature before its key is reserved.
//!
//! Three schemes, as their senders document them:
//! - `github`: `X-Hub-Signature-256: sha256=<hex HMAC of the body>`.
//! - `stripe`: `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC of "t.body">[,v1=…]`; any `v1`
//!   may match, and `t` must be within the tolerance of now.
//! - `standard-webhooks` (Svix among others): `webhook-id`, `webhook-timestamp` and
//!   `webhook-signature: v1,<base64 HMAC of "id.timestamp.body">[ v1,…]`, with the secret given
//!   as `whsec_<base64 key>`; any `v1` may match, and the timestamp must be within tolerance.
//!
//! Every comparison goes through `Mac::verify_slice`, which takes the same time wherever the
//! candidate differs, so a forger learns nothing from how fast a guess is refused.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use idempotency_delivery::signing::{standard_webhooks_key, WebhookKeyError};
use idempotency_delivery::Secret;

type HmacSha256 = Hmac<Sha256>;

/// How far a signed timestamp may be from now when the route does not say.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// Which sender's signature format a route checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// GitHub's `X-Hub-Signature-256`.
    Github,
    /// Stripe's `Stripe-Signature`, with a timestamp.
    Stripe,
    /// Standard Webhooks (Svix): `webhook-id`, `webhook-timestamp`, `webhook-signature`.
    StandardWebhooks,
}

/// Why a delivery was refused; the text reaches the sender in the problem's `detail`, so it
/// names what was wrong without echoing anything computed from the secret.
pub type Refusal = &'static str;

/// Why a route's signature check cannot be built from its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifierError {
    /// A `github` route given a `tolerance`: GitHub signs no timestamp.
    #[error("github signatures carry no timestamp; remove tolerance")]
    ToleranceWithoutTimestamp,
    /// A `standard-webhooks` secret that is not `whsec_<base64>`.
    #[error(transparent)]
    Key(#[from] WebhookKeyError),
}

/// A route's signature check: the scheme, its secret, and the timestamp tolerance.
#[derive(Clone)]
pub struct Verifier {
    scheme: Scheme,
    secret: Secret,
    /// The HMAC key: the secret's bytes, or for Standard Webhooks the key its base64 encodes.
    mac: HmacSha256,
    tolerance: Duration,
}

impl Verifier {
    /// Checks that the secret suits the scheme. `tolerance` is for schemes with a timestamp
    /// (default five minutes); GitHub signs none, so giving one there is a mistake.
    pub fn new(
        scheme: Scheme,
        secret: Secret,
        tolerance: Option<Duration>,
    ) -> Result<Self, VerifierError> {
        if scheme == Scheme::Github && tolerance.is_some() {
            return Err(VerifierError::ToleranceWithoutTimestamp);
        }
        let key = match scheme {
            Scheme::StandardWebhooks => standard_webhooks_key(&secret)?,
            Scheme::Github | Scheme::Stripe => secret.expose().to_vec(),
        };
        let mac = HmacSha256::new_from_slice(&key).expect("HMAC takes a key of any length");
        Ok(Self {
            scheme,
            secret,
            mac,
            tolerance: tolerance.unwrap_or(DEFAULT_TOLERANCE),
        })
    }

    /// The signature format checked.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The shared secret signatures are made with.
    pub fn secret(&self) -> &Secret {
        &self.secret
    }

    /// The timestamp tolerance, for the schemes that sign a timestamp.
    pub fn tolerance(&self) -> Option<Duration> {
        (self.scheme != Scheme::Github).then_some(self.tolerance)
    }

    /// Accepts a delivery whose headers carry a valid signature of `body` at time `now`.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Refusal> {
        match self.scheme {
            Scheme::Github => self.github(headers, body),
            Scheme::Stripe => self.stripe(headers, body, now),
            Scheme::StandardWebhooks => self.standard_webhooks(headers, body, now),
        }
    }

    fn github(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), Refusal> {
        let value = single(headers, "x-hub-signature-256")?;
        let signature = value
            .strip_prefix("sha256=")
            .and_then(|h| hex::decode(h).ok())
            .ok_or("X-Hub-Signature-256 is not sha256=<hex>")?;
        self.check(&[body], [signature])
    }

    fn stripe(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Refusal> {
        let value = single(headers, "stripe-signature")?;
        let mut timestamp = None;
        let mut signatures = Vec::new();
        for (name, field) in value.split(',').filter_map(|item| item.split_once('=')) {
            match name.trim() {
                "t" => timestamp = Some(field.trim()),
                "v1" => signatures.extend(hex::decode(field.trim()).ok()),
                _ => {}
            }
        }
        let timestamp = timestamp.ok_or("Stripe-Signature has no timestamp")?;
        self.fresh(timestamp, now)?;
        self.check(&[timestamp.as_bytes(), b".", body], signatures)
    }

    fn standard_webhooks(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), Refusal> {
        let id = single(headers, "webhook-id")?;
        let timestamp = single(headers, "webhook-timestamp")?;
        self.fresh(timestamp, now)?;
        let base64 = base64::engine::general_purpose::STANDARD;
        let signatures = single(headers, "webhook-signature")?
            .split_whitespace()
            .filter_map(|s| s.strip_prefix("v1,"))
            .filter_map(|s| base64.decode(s).ok());
        let content = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
        self.check(&content, signatures)
    }

    /// Refuses a timestamp (unix seconds) further than the tolerance from now, either way:
    /// an old one may be a replayed capture, one from the future a forged clock.
    fn fresh(&self, timestamp: &str, now: SystemTime) -> Result<(), Refusal> {
        let signed = timestamp
            .parse::<u64>()
            .map_err(|_| "the signature timestamp is not a number")?;
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if now.abs_diff(signed) > self.tolerance.as_secs() {
            return Err("the signature timestamp is outside the tolerance");
        }
        Ok(())
    }

    /// Accepts if any candidate is the HMAC of the concatenated `parts`.
    fn check(
        &self,
        parts: &[&[u8]],
        candidates: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<(), Refusal> {
        let mut mac = self.mac.clone();
        for part in parts {
            mac.update(part);
        }
        let matched = candidates
            .into_iter()
            .any(|candidate| mac.clone().verify_slice(&candidate).is_ok());
        matched.then_some(()).ok_or("the signature does not match")
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field("secret", &self.secret)
            .field("tolerance", &self.tolerance())
            .finish()
    }
}

/// The one value of a signature header; a missing, repeated or non-text one is refused.
fn single<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, Refusal> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().map_err(|_| "a signature header is not text"),
        (None, _) => Err("a signature header is missing"),
        (Some(_), Some(_)) => Err("a signature header is repeated"),
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
