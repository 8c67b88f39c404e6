//! Signing what the proxy sends, as Standard Webhooks (Svix among others) asks a sender to:
//! `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "id.timestamp.body">`, under a secret written `whsec_<base64 key>`. The receiving side's
//! check is [`Verifier`](crate::idempotency::verify::Verifier); both read the secret the same way.

use std::fmt;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::idempotency::verify::standard_webhooks_key;
use crate::secret::Secret;

/// Signs messages with one Standard Webhooks secret.
#[derive(Clone)]
pub struct WebhookSigner {
    reference: String,
    mac: Hmac<Sha256>,
}

impl WebhookSigner {
    /// A signer for `secret`, which must be `whsec_` followed by the base64 of the key.
    pub fn new(secret: &Secret) -> Result<Self, String> {
        let key = standard_webhooks_key(secret)?;
        let mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|e| e.to_string())?;
        Ok(Self {
            reference: secret.reference().to_owned(),
            mac,
        })
    }

    /// Where the secret came from (`env:NAME` or `file:PATH`), safe to print.
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// The `webhook-signature` value for message `id`, sent at `timestamp` (unix seconds, as
    /// `webhook-timestamp` carries it), with `body`.
    ///
    /// The published example of Standard Webhooks:
    ///
    /// ```
    /// use idempotency_core::proxy::WebhookSigner;
    /// use idempotency_core::Secret;
    ///
    /// std::env::set_var("SIGNING_DOC", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    /// let signer = WebhookSigner::new(&Secret::resolve("env:SIGNING_DOC").unwrap()).unwrap();
    /// let signature = signer.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
    /// assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    /// ```
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut mac = self.mac.clone();
        let mut seconds = itoa::Buffer::new();
        for part in [
            id.as_bytes(),
            b".",
            seconds.format(timestamp).as_bytes(),
            b".",
            body,
        ] {
            mac.update(part);
        }
        let digest = mac.finalize().into_bytes();
        format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(digest)
        )
    }
}

impl fmt::Debug for WebhookSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookSigner({})", self.reference)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use http::{HeaderMap, HeaderValue};

    use super::*;
    use crate::idempotency::verify::{Scheme, Verifier};

    fn secret(name: &str, value: &str) -> Secret {
        std::env::set_var(name, value);
        Secret::resolve(&format!("env:{name}")).unwrap()
    }

    #[test]
    fn what_it_signs_the_receiving_check_accepts() {
        let secret = secret(
            "SIGNING_ROUND_TRIP",
            "whsec_c2VjcmV0LWtleS1vZi10aGUtc2VuZGVy",
        );
        let signer = WebhookSigner::new(&secret).unwrap();
        let verifier = Verifier::new(Scheme::StandardWebhooks, secret, None).unwrap();
        let now = SystemTime::now();
        let seconds = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", HeaderValue::from_static("evt_1"));
        headers.insert("webhook-timestamp", HeaderValue::from(seconds));
        let signature = signer.sign("evt_1", seconds, b"{}");
        headers.insert("webhook-signature", signature.parse().unwrap());
        assert_eq!(verifier.verify(&headers, b"{}", now), Ok(()));
        assert!(verifier.verify(&headers, b"{ }", now).is_err());
        let later = now + Duration::from_secs(3600);
        assert!(verifier.verify(&headers, b"{}", later).is_err(), "stale");
    }

    #[test]
    fn a_secret_not_in_the_whsec_form_is_refused_by_reference() {
        let refused = WebhookSigner::new(&secret("SIGNING_BAD", "plain")).unwrap_err();
        assert!(refused.contains("env:SIGNING_BAD"), "{refused}");
        assert!(!refused.contains("plain"), "{refused}");
    }
}
