//! Encryption at rest: a [`Store`] decorator that seals what a completed record says.
//!
//! A completed record's status, headers and body (all an operator or an attacker with a copy
//! of the store would want) are sealed with ChaCha20-Poly1305 under the current key, with a
//! fresh random nonce per record. The associated data is the name the record is stored under,
//! so a sealed record copied under another key fails to open instead of being replayed to the
//! wrong request. The inner store keeps an envelope, an ordinary completed record whose body is
//! `MAGIC ‖ nonce ‖ ciphertext` and whose status and headers say nothing; its fingerprint and
//! fencing token stay in clear, because the stores' fencing scripts compare the token prefix
//! and the fingerprint is only a digest. In-flight records carry nothing secret and pass as
//! they are. Inbox deliveries are sealed as well (`inbox.rs`).
//!
//! The client's key is hashed in every name the inner store sees
//! ([`ScopedKey::with_hashed_key`]), so a dump shows no raw idempotency key either. Records
//! written before encryption was turned on are under raw names and are simply not found.
//!
//! Opening tries the current key, then the old ones. A record that opens with none of them, or
//! is not an envelope at all, is [`StoreError::Corrupt`], which the proxy answers with
//! `503 store-unavailable`: never a panic, and never someone else's response.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use chacha20poly1305::aead::Generate;
use chacha20poly1305::Nonce;
use http::{HeaderMap, StatusCode};

use super::api::{Fenced, Removal, Removed, Reservation, Store, StoreError};
use super::inbox::Inbox;
use crate::model::{
    CompletedRecord, FencingToken, Fingerprint, Record, RecordError, ScopedKey, StoredBody,
};

mod inbox;
mod keys;
#[cfg(test)]
mod tests;

pub use keys::{SealingKey, SealingKeyError, SealingKeyErrorKind, SealingKeys};

/// Marks a sealed envelope, format 1.
const MAGIC: &[u8; 4] = b"IPS1";
const NONCE_LEN: usize = 12;
/// What the envelope says in clear where a record has its status; the real one is sealed.
const ENVELOPE_STATUS: StatusCode = StatusCode::OK;

/// Any store, with completed records sealed and client keys hashed.
pub struct SealedStore<S: ?Sized = dyn Store> {
    inner: Arc<S>,
    keys: SealingKeys,
}

impl<S: Store + ?Sized> SealedStore<S> {
    /// `inner`, with completed records sealed under `keys`.
    pub fn new(inner: Arc<S>, keys: SealingKeys) -> Self {
        Self { inner, keys }
    }

    /// Seals `record` for the store name `name`.
    fn seal(&self, name: &str, record: &CompletedRecord) -> Result<CompletedRecord, StoreError> {
        let plain = record.encode();
        Ok(CompletedRecord {
            fingerprint: record.fingerprint,
            token: record.token,
            created_at: record.created_at,
            status: ENVELOPE_STATUS,
            headers: HeaderMap::new(),
            body: StoredBody::Kept(self.seal_bytes(name, &plain)?),
        })
    }

    /// `MAGIC ‖ nonce ‖ ciphertext` of `plain` under the current key, bound to `name`.
    fn seal_bytes(&self, name: &str, plain: &[u8]) -> Result<Bytes, StoreError> {
        let nonce = Nonce::try_generate()
            .map_err(|e| StoreError::unavailable_from("no randomness for a nonce", e))?;
        let sealed = self
            .keys
            .current()
            .seal(&nonce, plain, name.as_bytes())
            .ok_or_else(|| StoreError::unavailable("the record is too large to seal"))?;
        let mut body = BytesMut::with_capacity(MAGIC.len() + NONCE_LEN + sealed.len());
        body.put_slice(MAGIC);
        body.put_slice(&nonce);
        body.put_slice(&sealed);
        Ok(body.freeze())
    }

    /// What [`seal_bytes`](Self::seal_bytes) sealed for `name`, with whichever key opens it.
    fn open_bytes(&self, name: &str, body: &[u8]) -> Result<Bytes, StoreError> {
        let corrupt = |why| StoreError::Corrupt(RecordError::new(why));
        let rest = body
            .strip_prefix(MAGIC)
            .ok_or_else(|| corrupt("record is not sealed"))?;
        if rest.len() < NONCE_LEN {
            return Err(corrupt("sealed record is truncated"));
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_from(nonce).map_err(|_| corrupt("sealed record is truncated"))?;
        let plain = self
            .keys
            .openers()
            .find_map(|key| key.open(&nonce, sealed, name.as_bytes()))
            .ok_or_else(|| corrupt("sealed record opens with no configured key"))?;
        Ok(Bytes::from(plain))
    }

    /// Opens an envelope read from the store name `name`.
    fn open(&self, name: &str, envelope: &CompletedRecord) -> Result<CompletedRecord, StoreError> {
        let corrupt = |why| StoreError::Corrupt(RecordError::new(why));
        let StoredBody::Kept(body) = &envelope.body else {
            return Err(corrupt("record is not sealed"));
        };
        match Record::decode(self.open_bytes(name, body)?)? {
            Record::Completed(r)
                if r.fingerprint == envelope.fingerprint && r.token == envelope.token =>
            {
                Ok(r)
            }
            _ => Err(corrupt("sealed record does not match its envelope")),
        }
    }

    fn open_reservation(
        &self,
        name: &str,
        reservation: Reservation,
    ) -> Result<Reservation, StoreError> {
        match reservation {
            Reservation::Completed(r) => self.open(name, &r).map(Reservation::Completed),
            other => Ok(other),
        }
    }
}

impl<S: ?Sized> fmt::Debug for SealedStore<S> {
    // The inner store's own Debug may be unavailable for `dyn Store`; the keys print as
    // references only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedStore")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<S: Store + ?Sized> Store for SealedStore<S> {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError> {
        let hidden = key.with_hashed_key();
        let reservation = self.inner.reserve(&hidden, fingerprint, lease).await?;
        self.open_reservation(hidden.storage_key(), reservation)
    }

    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError> {
        self.inner.renew(&key.with_hashed_key(), token, lease).await
    }

    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        let hidden = key.with_hashed_key();
        let envelope = self.seal(hidden.storage_key(), record)?;
        self.inner.complete(&hidden, &envelope, ttl).await
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        self.inner.release(&key.with_hashed_key(), token).await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        let hidden = key.with_hashed_key();
        match self.inner.get(&hidden).await? {
            Some((Record::Completed(r), left)) => {
                let opened = self.open(hidden.storage_key(), &r)?;
                Ok(Some((Record::Completed(opened), left)))
            }
            other => Ok(other),
        }
    }

    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        self.inner.remove(&key.with_hashed_key(), removal).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    fn inbox(&self) -> Option<&dyn Inbox> {
        self.inner.inbox()?;
        Some(self)
    }
}
