//! One attempt: the row's message published outside any transaction, within
//! `deliver_timeout`, its delivery judged, counted and logged, and handed to the marker. The
//! slots (the relay's and its destination's) are freed as soon as the destination has
//! answered, before the mark is written.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::marks::Mark;
use super::rooms::Slot;
use super::Shared;
use crate::destination::{build_message, Delivery, Message, Publisher};
use crate::metrics::AttemptReport;
use crate::row::ClaimedRow;
use crate::table::PayloadKind;
use crate::verdict::{judge, Verdict};

pub(super) async fn run(
    shared: Arc<Shared>,
    row: ClaimedRow,
    slot: Slot,
    marks: mpsc::UnboundedSender<Mark>,
    payload: PayloadKind,
) {
    let config = shared.outbox.config();
    let started = Instant::now();
    let (verdict, sent) = match unsendable_or_publisher(&shared, &row, payload) {
        Ok((message, publisher)) => {
            let delivery = publish(&**publisher, &message, config.deliver_timeout).await;
            slot.free(&shared.wake);
            let sample = idempotency_delivery::backoff::random_sample();
            let attempt = row.attempt_number();
            let verdict = judge(config, attempt, row.budget_age_now(), delivery, sample);
            (verdict, true)
        }
        Err(why) => {
            slot.free(&shared.wake);
            let verdict = Verdict::Dead {
                status: None,
                error: why,
            };
            (verdict, false)
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

/// The row's message and the publisher of its topic, or why it cannot be sent at all.
fn unsendable_or_publisher<'a>(
    shared: &'a Shared,
    row: &ClaimedRow,
    payload: PayloadKind,
) -> Result<(Message, &'a Arc<dyn Publisher>), String> {
    let config = shared.outbox.config();
    // The reason is the row's `last_error`: stored text.
    let message = build_message(payload, row).map_err(|why| why.to_string())?;
    let Some(publisher) = shared.destinations.for_topic(config, &row.topic) else {
        return Err(format!(
            "no destination for topic {:?}: it has no line in topics, and there is no deliver_to",
            row.topic
        ));
    };
    Ok((message, publisher))
}

/// Publishes `message` within `timeout`: what the destination said, or that it said nothing.
async fn publish(publisher: &dyn Publisher, message: &Message, timeout: Duration) -> Delivery {
    match tokio::time::timeout(timeout, publisher.publish(message)).await {
        Ok(delivery) => delivery,
        Err(_) => Delivery::failed(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}
