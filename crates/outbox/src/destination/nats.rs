//! JetStream destinations (`nats://`, `tls://`): each attempt publishes the payload to
//! `nats_subject_prefix` + topic with `Nats-Msg-Id: <id>`, so the stream's duplicate window
//! drops a second copy of a row sent again, and the row is delivered only once the stream has
//! acknowledged it.
//!
//! The publish's first await only hands the message to the connection; the acknowledgement's
//! own future, awaited second, says what the stream did. `duplicate: true` means the stream
//! already holds the message: delivered. No stream for the subject, no responders, a timeout
//! or a lost connection: failed, sent again later. A payload larger than the server takes: dead
//! at once, as no retry can make it fit.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::context::{Context, PublishErrorKind};
use async_nats::{ConnectOptions, HeaderMap};
use async_trait::async_trait;
use http::Uri;
use tokio::sync::OnceCell;

use super::{redacted, Delivery, DestinationKind, Message, Publisher};
use crate::config::OutboxConfig;

/// Publishes to the JetStream streams of one NATS server (or cluster), connecting at the first
/// publish and reconnecting by itself.
pub struct JetStreamPublisher {
    /// The URL as given (with its credentials); never shown.
    url: String,
    subject_prefix: String,
    timeout: Duration,
    context: OnceCell<Context>,
}

impl std::fmt::Debug for JetStreamPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url: Option<Uri> = self.url.parse().ok();
        f.debug_struct("JetStreamPublisher")
            .field("url", &url.as_ref().map(redacted))
            .field("subject_prefix", &self.subject_prefix)
            .finish_non_exhaustive()
    }
}

impl JetStreamPublisher {
    /// Publishes to the server at `url`, on `subject_prefix` + topic; an acknowledgement not
    /// in within `timeout` fails the attempt.
    pub fn new(url: &Uri, subject_prefix: &str, timeout: Duration) -> Self {
        Self {
            url: url.to_string(),
            subject_prefix: subject_prefix.to_owned(),
            timeout,
            context: OnceCell::new(),
        }
    }

    /// The JetStream context, connecting the first time (a server that cannot be reached
    /// fails the attempt, and the next one connects again). Once connected the client
    /// reconnects by itself; a publish while it is away fails and is tried again.
    async fn context(&self) -> Result<&Context, String> {
        self.context
            .get_or_try_init(|| async {
                let client = ConnectOptions::new()
                    .connection_timeout(self.timeout)
                    .connect(self.url.as_str())
                    .await
                    .map_err(|e| format!("the NATS server cannot be reached: {e}"))?;
                let mut context = async_nats::jetstream::new(client);
                context.set_timeout(self.timeout);
                Ok(context)
            })
            .await
    }

    /// The subject `topic` is published to.
    pub fn subject(&self, topic: &str) -> String {
        format!("{}{topic}", self.subject_prefix)
    }
}

#[async_trait]
impl Publisher for JetStreamPublisher {
    async fn publish(&self, message: &Message) -> Delivery {
        let context = match self.context().await {
            Ok(context) => context,
            Err(why) => return Delivery::failed(why),
        };
        let max = context.client().server_info().max_payload;
        let size = message.payload.len();
        if max > 0 && size > max {
            return Delivery::dead(format!(
                "the payload is {size} bytes; the NATS server takes at most {max}"
            ));
        }
        let subject = self.subject(&message.topic);
        let headers = headers(message);
        let payload = message.payload.clone();
        let ack = match context
            .publish_with_headers(subject.clone(), headers, payload)
            .await
        {
            Ok(ack) => ack,
            Err(e) => return Delivery::failed(format!("the publish to {subject} failed: {e}")),
        };
        match ack.await {
            // A duplicate: the stream holds the message from an earlier attempt.
            Ok(_) => Delivery::Delivered { status: None },
            Err(e) => refused(&subject, e.kind(), &e.to_string()),
        }
    }
}

/// What a publish the stream did not acknowledge makes of the attempt.
fn refused(subject: &str, kind: PublishErrorKind, text: &str) -> Delivery {
    match kind {
        PublishErrorKind::StreamNotFound => {
            Delivery::failed(format!("no stream takes subject {subject}"))
        }
        PublishErrorKind::TimedOut => {
            Delivery::failed(format!("no acknowledgement for {subject} in time"))
        }
        // JetStream error 10054: larger than the stream's max_msg_size.
        _ if text.contains("exceeds maximum") || text.contains("10054") => {
            Delivery::dead(format!("the stream refuses the message: {text}"))
        }
        _ => Delivery::failed(format!("the stream did not take {subject}: {text}")),
    }
}

/// The message's headers as NATS carries them: the row's own, then the relay's over them.
fn headers(message: &Message) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let ours = [
        "Nats-Msg-Id",
        "Outbox-Topic",
        "Outbox-Aggregate-Id",
        "Outbox-Seq",
        "Delivery-Attempt",
        "Content-Type",
    ];
    for (name, value) in &message.headers {
        if !ours.iter().any(|o| o.eq_ignore_ascii_case(name)) {
            headers.insert(name.as_str(), value.as_str());
        }
    }
    headers.insert("Nats-Msg-Id", message.id.as_str());
    headers.insert("Outbox-Topic", message.topic.as_str());
    if let Some(aggregate) = &message.aggregate_id {
        headers.insert("Outbox-Aggregate-Id", aggregate.as_str());
    }
    headers.insert("Outbox-Seq", message.seq.to_string().as_str());
    headers.insert("Delivery-Attempt", message.attempt.to_string().as_str());
    headers.insert("Content-Type", message.content_type.as_str());
    headers
}

/// Streams on the server at `url` whose duplicate window is shorter than `needed` (the
/// outbox's `lease` plus `retry_max`): past its window, a row sent again is a second message.
/// Each as `(stream, window)`; `subjects` are the subjects the outbox publishes to (a wildcard
/// for `deliver_to`).
pub async fn short_duplicate_windows(
    url: &Uri,
    subjects: &[String],
    needed: Duration,
    timeout: Duration,
) -> Result<Vec<(String, Duration)>, String> {
    let publisher = JetStreamPublisher::new(url, "", timeout);
    let reach = async {
        let client = ConnectOptions::new()
            .connection_timeout(timeout)
            .connect(publisher.url.as_str())
            .await
            .map_err(|e| format!("the NATS server cannot be reached: {e}"))?;
        let context = async_nats::jetstream::new(client);
        let mut short = Vec::new();
        for subject in subjects {
            let Ok(name) = context.stream_by_subject(subject.as_str()).await else {
                continue;
            };
            let stream = context
                .get_stream(&name)
                .await
                .map_err(|e| format!("stream {name}: {e}"))?;
            let window = stream.cached_info().config.duplicate_window;
            if window < needed && !short.iter().any(|(n, _)| n == &name) {
                short.push((name, window));
            }
        }
        Ok(short)
    };
    tokio::time::timeout(timeout, reach)
        .await
        .unwrap_or_else(|_| Err("the NATS server did not answer in time".to_owned()))
}

/// See [`duplicate_window_warnings`](super::duplicate_window_warnings).
pub(super) async fn duplicate_window_warnings(
    config: &OutboxConfig,
    timeout: Duration,
) -> Vec<String> {
    let needed = config.effective_lease() + config.retry.max;
    let prefix = &config.nats_subject_prefix;
    let mut subjects: BTreeMap<String, (Uri, Vec<String>)> = BTreeMap::new();
    let listed = config
        .topics
        .iter()
        .map(|(topic, url)| (url, format!("{prefix}{topic}")));
    let rest = config
        .deliver_to
        .iter()
        .map(|url| (url, format!("{prefix}>")));
    for (url, subject) in listed.chain(rest) {
        if DestinationKind::of(url) == Some(DestinationKind::JetStream) {
            let entry = subjects
                .entry(url.to_string())
                .or_insert((url.clone(), Vec::new()));
            entry.1.push(subject);
        }
    }
    let name = config.name.as_str();
    let mut lines = Vec::new();
    for (url, subjects) in subjects.values() {
        let shown = redacted(url);
        match short_duplicate_windows(url, subjects, needed, timeout).await {
            Ok(short) => lines.extend(short.into_iter().map(|(stream, window)| {
                format!(
                    "outbox {name:?}: stream {stream} on {shown} drops duplicates for {}, less \
                     than lease plus retry_max ({}): a row sent again later is a second message",
                    humantime::format_duration(window),
                    humantime::format_duration(needed)
                )
            })),
            Err(why) => lines.push(format!(
                "outbox {name:?}: the duplicate windows on {shown} cannot be checked: {why}"
            )),
        }
    }
    lines
}
