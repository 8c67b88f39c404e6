//! One attempt: the row's request sent outside any transaction, within `deliver_timeout`, its
//! outcome judged, counted and logged, and handed to the marker. The slot is freed as soon as
//! the answer is in, before the mark is written.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::Request;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::marks::Mark;
use super::Shared;
use crate::metrics::AttemptReport;
use crate::request;
use crate::row::ClaimedRow;
use crate::table::PayloadKind;
use crate::transport::Transport;
use crate::verdict::{judge, Outcome, Verdict};

pub(super) async fn run(
    shared: Arc<Shared>,
    row: ClaimedRow,
    slot: OwnedSemaphorePermit,
    marks: mpsc::UnboundedSender<Mark>,
    payload: PayloadKind,
) {
    let config = shared.outbox.config();
    let started = Instant::now();
    let (verdict, sent) = match request::build(config, payload, &row, SystemTime::now()) {
        Ok(request) => {
            let outcome = send(&*shared.transport, request, config.deliver_timeout).await;
            drop(slot);
            let sample = idempotency_delivery::backoff::random_sample();
            let verdict = judge(
                config,
                row.attempt_number(),
                row.budget_age_now(),
                outcome,
                sample,
                SystemTime::now(),
            );
            (verdict, true)
        }
        Err(why) => {
            drop(slot);
            (
                Verdict::Dead {
                    status: None,
                    error: why,
                },
                false,
            )
        }
    };
    let report = AttemptReport {
        id: &row.id,
        topic: &row.topic,
        aggregate: row.aggregate_id.as_deref(),
        attempt: row.attempt_number(),
        verdict: &verdict,
        elapsed: started.elapsed(),
    };
    shared.metrics.attempted(&report, row.age_now());
    // The marker outlives every attempt (it ends when the last sender is gone).
    let _ = marks.send(Mark::of(&row, verdict, sent));
}

/// Sends `request` within `timeout`: the answer's status and headers, or why there is none.
async fn send(transport: &dyn Transport, request: Request<Bytes>, timeout: Duration) -> Outcome {
    match tokio::time::timeout(timeout, transport.send(request)).await {
        Ok(Ok(response)) => {
            let (parts, ()) = response.into_parts();
            Ok((parts.status, parts.headers))
        }
        Ok(Err(e)) => Err(format!("the receiver could not be reached: {}", chain(&*e))),
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

/// An error and its causes, as one line.
fn chain(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !line.contains(&cause_text) {
            line.push_str(": ");
            line.push_str(&cause_text);
        }
        source = cause.source();
    }
    line
}
