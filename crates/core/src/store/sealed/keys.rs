//! The keys records are sealed with: one current key, which seals and opens, and any number of
//! old keys, which only open, so keys can be rotated without losing the records of the last
//! `ttl`.
//!
//! A key is 32 random bytes, written in its secret (`env:NAME` or `file:PATH`) either as 64 hex
//! characters or as standard base64 (44 characters with padding), e.g. from
//! `openssl rand -hex 32` or `openssl rand -base64 32`. The two are told apart by length.

use std::fmt;

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

use idempotency_delivery::Secret;

/// The length of a sealing key in bytes.
pub(super) const KEY_LEN: usize = 32;

/// A secret that cannot be a sealing key. Its text names the secret's reference, never a byte
/// of its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the key in {reference} {kind}")]
pub struct SealingKeyError {
    reference: String,
    kind: SealingKeyErrorKind,
}

/// What is wrong with a sealing key's secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealingKeyErrorKind {
    /// Its bytes are not UTF-8 text.
    #[error("is not text")]
    NotText,
    /// Not 32 bytes as 64 hex characters or as base64.
    #[error("must be 32 bytes, as 64 hex characters or base64 (openssl rand -hex 32)")]
    NotAKey,
}

impl SealingKeyError {
    /// The reference of the refused secret (`env:NAME` or `file:PATH`).
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// What is wrong with it.
    pub fn kind(&self) -> SealingKeyErrorKind {
        self.kind
    }
}

/// One key, and the reference it was read from (the only part that is ever printed).
#[derive(Clone)]
pub struct SealingKey {
    reference: String,
    cipher: ChaCha20Poly1305,
}

impl SealingKey {
    /// Reads a key from a resolved secret. The reason for a refusal never quotes the secret.
    pub fn from_secret(secret: &Secret) -> Result<Self, SealingKeyError> {
        let refused = |kind| SealingKeyError {
            reference: secret.reference().to_owned(),
            kind,
        };
        let text = std::str::from_utf8(secret.expose())
            .map_err(|_| refused(SealingKeyErrorKind::NotText))?
            .trim();
        let bytes = if text.len() == 2 * KEY_LEN {
            hex::decode(text).ok()
        } else {
            base64::engine::general_purpose::STANDARD.decode(text).ok()
        };
        let key = bytes.and_then(|b| Key::try_from(b.as_slice()).ok());
        let key = key.ok_or_else(|| refused(SealingKeyErrorKind::NotAKey))?;
        Ok(Self::from_key(secret.reference(), &key))
    }

    fn from_key(reference: &str, key: &Key) -> Self {
        Self {
            reference: reference.to_owned(),
            cipher: ChaCha20Poly1305::new(key),
        }
    }

    /// Where the key was read from (`env:NAME` or `file:PATH`), the only part ever printed.
    pub fn reference(&self) -> &str {
        &self.reference
    }

    pub(super) fn seal(&self, nonce: &Nonce, msg: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        self.cipher.encrypt(nonce, Payload { msg, aad }).ok()
    }

    pub(super) fn open(&self, nonce: &Nonce, msg: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        self.cipher.decrypt(nonce, Payload { msg, aad }).ok()
    }
}

impl fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SealingKey({})", self.reference)
    }
}

/// The current key and the old ones, in the order they are tried.
#[derive(Debug, Clone)]
pub struct SealingKeys {
    current: SealingKey,
    old: Vec<SealingKey>,
}

impl SealingKeys {
    /// `current` seals and opens; `old` keys only open.
    pub fn new(current: SealingKey, old: Vec<SealingKey>) -> Self {
        Self { current, old }
    }

    /// The key new records are sealed with.
    pub fn current(&self) -> &SealingKey {
        &self.current
    }

    /// Keys that still open records sealed before a rotation.
    pub fn old(&self) -> &[SealingKey] {
        &self.old
    }

    /// Every key that may open a record: the current one first, as most records are under it.
    pub(super) fn openers(&self) -> impl Iterator<Item = &SealingKey> {
        std::iter::once(&self.current).chain(&self.old)
    }
}

#[cfg(test)]
pub(super) fn test_key(byte: u8) -> SealingKey {
    SealingKey::from_key("test", &Key::from([byte; KEY_LEN]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret_file(name: &str, text: &str) -> Secret {
        let path = std::env::temp_dir().join(format!(
            "idempotency-proxy-key-{name}-{}",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap();
        let secret = Secret::resolve(&format!("file:{}", path.display())).unwrap();
        std::fs::remove_file(path).unwrap();
        secret
    }

    #[test]
    fn reads_hex_and_base64_and_refuses_other_lengths() {
        let hex_key = secret_file("hex", &format!("{}\n", "ab".repeat(32)));
        let b64_key = secret_file("b64", "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=");
        let (a, b) = (
            SealingKey::from_secret(&hex_key).unwrap(),
            SealingKey::from_secret(&b64_key).unwrap(),
        );
        // Both spell 32 bytes of 0xab, so what one seals the other opens.
        let nonce = Nonce::default();
        let sealed = a.seal(&nonce, b"record", b"key").unwrap();
        assert_eq!(b.open(&nonce, &sealed, b"key").unwrap(), b"record");
        for bad in ["ab".repeat(31), "zz".repeat(32), "c2hvcnQ=".into()] {
            let err = SealingKey::from_secret(&secret_file("bad", &bad)).unwrap_err();
            assert_eq!(err.kind(), SealingKeyErrorKind::NotAKey);
            assert!(!err.to_string().contains(&bad), "{err}");
        }
        assert!(!format!("{a:?}").contains("ab"));
    }
}
