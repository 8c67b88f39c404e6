//! Signing what the proxy sends, as Standard Webhooks (Svix among others) asks a sender to:
//! `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "id.timestamp.body">`, under a secret written `whsec_<base64 key>`. The receiving side's
//! check (the layer's `Verifier`) reads the secret the same way, through
//! [`standard_webhooks_key`].

use std::fmt;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::secret::Secret;

/// A secret that is not `whsec_` followed by the base64 of a key. Its text names the secret's
/// reference and never quotes the value (nor the decoder's complaint, which would quote a
/// byte of it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the secret in {reference} must be whsec_<base64>, as the sender shows it")]
pub struct WebhookKeyError {
    reference: String,
}

impl WebhookKeyError {
    /// The reference of the refused secret.
    pub fn reference(&self) -> &str {
        &self.reference
    }
}

/// The key of a Standard Webhooks secret: `whsec_` followed by the base64 of the key.
pub fn standard_webhooks_key(secret: &Secret) -> Result<Vec<u8>, WebhookKeyError> {
    let bad = || WebhookKeyError {
        reference: secret.reference().to_owned(),
    };
    let encoded = secret.expose().strip_prefix(b"whsec_").ok_or_else(bad)?;
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .filter(|key| !key.is_empty())
        .ok_or_else(bad)
}

/// Signs messages with one Standard Webhooks secret.
#[derive(Clone)]
pub struct WebhookSigner {
    reference: String,
    mac: Hmac<Sha256>,
}

impl WebhookSigner {
    /// A signer for `secret`, which must be `whsec_` followed by the base64 of the key.
    pub fn new(secret: &Secret) -> Result<Self, WebhookKeyError> {
        let key = standard_webhooks_key(secret)?;
        let mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length");
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
    /// use idempotency_delivery::signing::WebhookSigner;
    /// use idempotency_delivery::Secret;
    ///
    /// # let path = std::env::temp_dir().join(format!("signing-doc-{}", std::process::id()));
    /// # std::fs::write(&path, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    /// # let reference = format!("file:{}", path.display());
    /// // `reference` is "file:PATH" of a file holding whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw.
    /// let signer = WebhookSigner::new(&Secret::resolve(&reference).unwrap()).unwrap();
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
    use super::*;

    /// A secret read from a file of its own: the environment is shared by every test thread.
    fn secret(name: &str, value: &str) -> Secret {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::write(&path, value).unwrap();
        Secret::resolve(&format!("file:{}", path.display())).unwrap()
    }

    #[test]
    fn a_secret_not_in_the_whsec_form_is_refused_by_reference() {
        let plain = secret("signing-bad", "plain");
        let refused = WebhookSigner::new(&plain).unwrap_err();
        assert_eq!(refused.reference(), plain.reference());
        let text = refused.to_string();
        assert!(text.contains(plain.reference()), "{text}");
        assert!(!text.contains("plain"), "{text}");
        let not_base64 = secret("signing-not-base64", "whsec_*not*base64*");
        let refused = WebhookSigner::new(&not_base64).unwrap_err().to_string();
        assert!(!refused.contains('*'), "{refused}");
    }
}
