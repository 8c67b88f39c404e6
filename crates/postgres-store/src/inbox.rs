//! Inbox queues in Postgres (docs/reference.md#inbox-routes): the [`Inbox`] operations of the
//! Postgres store, each one statement over `idempotency_deliveries` (`statements.rs`).
//!
//! A delivery is a row keyed by route and id. `due` is when it may next be attempted; a claim
//! takes due rows nobody else is claiming (`FOR UPDATE SKIP LOCKED`, so replicas claiming at
//! once never wait for each other or take the same row), pushes `due` a lease ahead and
//! stamps a fresh token, so a claim whose replica died is simply due again when its lease
//! ends. A settlement names that token, so a replica whose lease ran out and whose delivery was
//! claimed again writes nothing. `leased_until` marks the claimed ones, for the counts.
//!
//! An acceptance records the acknowledgement and queues the delivery in one statement, so in
//! one transaction: acknowledged means both are committed, or neither is there.

use idempotency_core::proxy::ErrorChain;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use http::StatusCode;
use idempotency_core::backend::{
    unix_millis, AttemptFailure, CompletedRecord, Delivery, DeliveryId, FencingToken, InboxQueues,
    Record, RecordError, RouteName, ScopedKey, MAX_ERROR_LEN,
};
use idempotency_core::{
    backend::{Acceptance, Claim, Fenced, Inbox, Settlement},
    StoreError,
};
use idempotency_postgres::tokio_postgres::types::ToSql;
use idempotency_postgres::tokio_postgres::Row;

use crate::store::{columns, seconds, token_column, PostgresStore};

#[async_trait]
impl Inbox for PostgresStore {
    async fn accept(
        &self,
        key: &ScopedKey,
        ack: &CompletedRecord,
        delivery: &Delivery,
        ttl: Duration,
    ) -> Result<Acceptance, StoreError> {
        let (scope, name) = columns(key);
        let (held, life, value) = (token_column(ack.token), seconds(ttl), ack.encode());
        let (route, id, encoded) = (
            key.route().as_str(),
            &delivery.id.as_bytes()[..],
            delivery.encode(),
        );
        let arrived = millis(delivery.received_at);
        let attempts = i32::try_from(delivery.attempts).unwrap_or(i32::MAX);
        let status = i32::from(delivery.last_status.map_or(0, |s| s.as_u16()));
        let error = cut(delivery.last_error.as_deref());
        let params: [&(dyn ToSql + Sync); 12] = [
            &scope,
            &name,
            &held,
            &&value[..],
            &life,
            &route,
            &id,
            &&encoded[..],
            &arrived,
            &attempts,
            &status,
            &error,
        ];
        for _ in 0..4 {
            let row = self.query_one(&self.sql().accept, &params).await?;
            if row.get::<_, bool>(1) {
                return Ok(Acceptance::Queued);
            }
            if let Some(existing) = row.get::<_, Option<Vec<u8>>>(0) {
                return Ok(Acceptance::Existing(Record::decode(Bytes::from(existing))?));
            }
        }
        Err(StoreError::unavailable(
            "an acceptance kept losing races for its key",
        ))
    }

    async fn claim(
        &self,
        queue: &RouteName,
        now: SystemTime,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let token = FencingToken::generate();
        let (held, until) = (token_column(token), millis(now + lease));
        let (now, max) = (millis(now), i64::try_from(max).unwrap_or(i64::MAX));
        let params: [&(dyn ToSql + Sync); 5] = [&queue.as_str(), &now, &max, &until, &held];
        let mut rows = self.query(&self.sql().claim, &params).await?;
        // An UPDATE answers its rows in no particular order: earliest due first, as promised.
        rows.sort_by_key(|row| row.get::<_, i64>(5));
        let mut claims = Vec::with_capacity(rows.len());
        for row in &rows {
            match delivery(row) {
                Ok(delivery) => claims.push(Claim { delivery, token }),
                Err(e) => self.bury(queue, row.get(0), token, &e).await,
            }
        }
        Ok(claims)
    }

    async fn settle(
        &self,
        queue: &RouteName,
        claim: &Claim,
        settlement: &Settlement,
    ) -> Result<Fenced, StoreError> {
        let id = &claim.delivery.id.as_bytes()[..];
        self.settle_row(queue, id, claim.token, settlement).await
    }

    async fn queues(&self, queue: &RouteName, now: SystemTime) -> Result<InboxQueues, StoreError> {
        let now_ms = millis(now);
        let row = self
            .query_one(&self.sql().queues, &[&queue.as_str(), &now_ms])
            .await?;
        let count = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
        let (live, in_flight, dead) = (count(0), count(1), count(2));
        let oldest = row.get::<_, Option<i64>>(3).unwrap_or(now_ms);
        Ok(InboxQueues {
            pending: live.saturating_sub(in_flight),
            in_flight,
            dead,
            oldest_pending: Duration::from_millis(u64::try_from(now_ms - oldest).unwrap_or(0)),
        })
    }

    async fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<Vec<Delivery>, StoreError> {
        let after: Vec<u8> = after.map_or_else(Vec::new, |id| id.as_bytes().to_vec());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query(&self.sql().dead, &[&queue.as_str(), &after, &limit])
            .await?;
        rows.iter().map(delivery).collect()
    }

    async fn retry_dead(
        &self,
        queue: &RouteName,
        id: DeliveryId,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        let (id, now) = (&id.as_bytes()[..], millis(now));
        let changed = self
            .execute(&self.sql().retry_dead, &[&queue.as_str(), &id, &now])
            .await?;
        Ok(changed > 0)
    }

    async fn remove_dead(&self, queue: &RouteName, id: DeliveryId) -> Result<bool, StoreError> {
        let id = &id.as_bytes()[..];
        let changed = self
            .execute(&self.sql().remove_dead, &[&queue.as_str(), &id])
            .await?;
        Ok(changed > 0)
    }
}

impl PostgresStore {
    /// Settles the claim `token` of delivery `id`.
    async fn settle_row(
        &self,
        queue: &RouteName,
        id: &[u8],
        token: FencingToken,
        settlement: &Settlement,
    ) -> Result<Fenced, StoreError> {
        let (route, held) = (queue.as_str(), token_column(token));
        let changed = match settlement {
            Settlement::Delivered => {
                self.execute(&self.sql().delivered, &[&route, &id, &held])
                    .await?
            }
            Settlement::Retry { due, failure } => {
                let (status, error) = failure_columns(failure);
                let due = millis(*due);
                let params: [&(dyn ToSql + Sync); 6] = [&route, &id, &held, &due, &status, &error];
                self.execute(&self.sql().retry, &params).await?
            }
            Settlement::Dead { failure } => {
                let (status, error) = failure_columns(failure);
                let params: [&(dyn ToSql + Sync); 5] = [&route, &id, &held, &status, &error];
                self.execute(&self.sql().bury, &params).await?
            }
        };
        Ok(if changed > 0 {
            Fenced::Applied
        } else {
            Fenced::LeaseLost
        })
    }

    /// Makes a claimed delivery that cannot be decoded dead at once, with the reason as its
    /// last error: it stays counted and removable, and never blocks a claim again. Should
    /// that fail too, it is claimed (and buried) again after its lease.
    async fn bury(&self, queue: &RouteName, id: Vec<u8>, token: FencingToken, error: &StoreError) {
        tracing::warn!(route = %queue, error = %ErrorChain(error), "inbox: a stored delivery cannot be decoded; it is dead");
        let failure = AttemptFailure {
            status: None,
            error: Some(format!("cannot be decoded: {error}")),
        };
        let dead = Settlement::Dead { failure };
        if let Err(e) = self.settle_row(queue, &id, token, &dead).await {
            tracing::warn!(route = %queue, error = %ErrorChain(&e), "inbox: an undecodable delivery could not be made dead yet");
        }
    }
}

/// A delivery from its stored encoding, with the attempt state kept beside it. Columns: id,
/// encoding, attempts, last status, last error.
fn delivery(row: &Row) -> Result<Delivery, StoreError> {
    let mut delivery = Delivery::decode(Bytes::from(row.get::<_, Vec<u8>>(1)))?;
    if delivery.id.as_bytes()[..] != row.get::<_, Vec<u8>>(0)[..] {
        return Err(RecordError::new("a stored delivery does not match its id").into());
    }
    delivery.attempts = u32::try_from(row.get::<_, i32>(2)).unwrap_or(0);
    delivery.last_status = u16::try_from(row.get::<_, i32>(3))
        .ok()
        .and_then(|code| StatusCode::from_u16(code).ok());
    delivery.last_error = row.get(4);
    Ok(delivery)
}

fn failure_columns(failure: &AttemptFailure) -> (i32, Option<String>) {
    let status = i32::from(failure.status.map_or(0, |s| s.as_u16()));
    (status, cut(failure.error.as_deref()))
}

/// An error as stored: cut as the delivery encoding cuts it, so what an attempt stores stays
/// small.
fn cut(error: Option<&str>) -> Option<String> {
    let text = error?;
    let mut end = text.len().min(MAX_ERROR_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].to_owned())
}

fn millis(at: SystemTime) -> i64 {
    i64::try_from(unix_millis(at)).unwrap_or(i64::MAX)
}
