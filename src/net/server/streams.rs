//! How many requests an HTTP/2 connection has in progress, so it can be told idle.
//!
//! hyper does not say how many streams an HTTP/2 connection has open, so the service counts
//! them (on HTTP/2 only: HTTP/1 has hyper's own header read time-out, and its requests pay
//! nothing for this): a request is in progress from the moment hyper hands it to the service until its
//! answer has been sent (hyper drops the response body then) or the client reset the stream
//! (hyper drops the service's future or the body).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tokio::sync::watch;

/// The requests in progress on one connection; every change wakes whoever watches.
#[derive(Debug, Clone)]
pub(super) struct OpenStreams(Arc<watch::Sender<usize>>);

impl OpenStreams {
    pub(super) fn new() -> Self {
        Self(Arc::new(watch::Sender::new(0)))
    }

    /// Seen through a receiver, every opening and ending is a change, even one that leaves the
    /// count where it was by the time it is looked at.
    pub(super) fn watch(&self) -> watch::Receiver<usize> {
        self.0.subscribe()
    }

    /// Counts one more request in progress until the guard is dropped.
    pub(super) fn open(&self) -> StreamGuard {
        self.0.send_modify(|open| *open += 1);
        StreamGuard(self.clone())
    }
}

/// One request in progress.
#[derive(Debug)]
pub(super) struct StreamGuard(OpenStreams);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0 .0.send_modify(|open| *open -= 1);
    }
}

/// A response body that keeps its request counted as in progress until hyper is done with it.
#[derive(Debug)]
pub(super) struct CountedBody<B> {
    body: B,
    _stream: Option<StreamGuard>,
}

impl<B> CountedBody<B> {
    pub(super) fn new(body: B, stream: Option<StreamGuard>) -> Self {
        Self {
            body,
            _stream: stream,
        }
    }
}

impl<B: Body + Unpin> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[test]
    fn a_request_counts_until_its_body_is_dropped() {
        let streams = OpenStreams::new();
        let watch = streams.watch();
        let first = streams.open();
        let body = CountedBody::new(Full::new(bytes::Bytes::from("hi")), Some(streams.open()));
        assert_eq!(*watch.borrow(), 2);
        drop(first);
        assert_eq!(*watch.borrow(), 1);
        drop(body);
        assert_eq!(*watch.borrow(), 0);
    }

    #[test]
    fn an_opening_and_ending_both_seen_later_is_still_a_change() {
        let streams = OpenStreams::new();
        let mut watch = streams.watch();
        drop(streams.open());
        assert!(watch.has_changed().unwrap());
        assert_eq!(*watch.borrow_and_update(), 0);
    }

    #[tokio::test]
    async fn the_body_is_passed_through() {
        let streams = OpenStreams::new();
        let body = CountedBody::new(Full::new(bytes::Bytes::from("hi")), Some(streams.open()));
        assert_eq!(body.size_hint().exact(), Some(2));
        assert_eq!(body.collect().await.unwrap().to_bytes(), "hi");
        assert_eq!(*streams.watch().borrow(), 0);
    }
}
