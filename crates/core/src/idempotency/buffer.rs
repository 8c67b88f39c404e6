//! Buffering an upstream answer just far enough to decide whether it can be kept.
//!
//! The body is collected up to `max_cached_body`. Past that, it is handed to the client as a
//! stream (the bytes read so far first), so a large download costs no more memory than the
//! limit, and the record keeps only status and headers.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum_core::body::Body;
use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::{BodyExt, Full};

use crate::error::BoxError;
use crate::grpc::MessageCounter;
use crate::model::StoredBody;

/// An upstream body, read whole or found too large to keep.
pub(super) enum BufferedBody {
    /// Read to its end, with its trailers if it had any (a gRPC answer's status).
    Whole(Bytes, Option<Box<HeaderMap>>),
    TooLarge(PrefixedBody),
    /// A gRPC answer of more than one message: a server stream, passed on as it comes.
    Stream(PrefixedBody),
}

impl BufferedBody {
    /// What the store keeps of this body: the bytes (shared, not copied), or nothing.
    pub(super) fn stored(&self) -> StoredBody {
        match self {
            BufferedBody::Whole(bytes, None) => StoredBody::Kept(bytes.clone()),
            BufferedBody::Whole(bytes, Some(trailers)) => StoredBody::KeptWithTrailers {
                body: bytes.clone(),
                trailers: trailers.clone(),
            },
            BufferedBody::TooLarge(_) | BufferedBody::Stream(_) => StoredBody::NotKept,
        }
    }

    /// The trailers of a body read whole.
    pub(super) fn trailers(&self) -> Option<&HeaderMap> {
        match self {
            BufferedBody::Whole(_, trailers) => trailers.as_deref(),
            _ => None,
        }
    }

    pub(super) fn into_body(self) -> Body {
        match self {
            BufferedBody::Whole(bytes, None) => Body::from(bytes),
            BufferedBody::Whole(bytes, Some(trailers)) => with_trailers(bytes, *trailers),
            BufferedBody::TooLarge(streaming) | BufferedBody::Stream(streaming) => {
                Body::new(streaming)
            }
        }
    }
}

/// `bytes`, then `trailers`: a gRPC answer as it was read, or as it is replayed.
pub(super) fn with_trailers(bytes: Bytes, trailers: HeaderMap) -> Body {
    let trailers = std::future::ready(Some(Ok(trailers)));
    Body::new(Full::new(bytes).with_trailers(trailers))
}

/// How an answer is read: an HTTP answer's trailers are dropped, as they always were; a gRPC
/// answer's are its status and kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    Http,
    /// `single_message`: a second message ends the reading, the answer being a stream (a
    /// route that does not deduplicate streams).
    Grpc {
        single_message: bool,
    },
}

/// Reads `body` until it ends or exceeds `limit` bytes.
pub(super) async fn buffer<B>(
    body: B,
    limit: usize,
    reading: Reading,
) -> Result<BufferedBody, BoxError>
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut body = Body::new(body.map_err(Into::into));
    let mut chunks = VecDeque::new();
    let mut len = 0usize;
    // Boxed: only a gRPC route counts messages, and an HTTP answer's read should not carry it.
    let mut messages = matches!(
        reading,
        Reading::Grpc {
            single_message: true
        }
    )
    .then(Box::<MessageCounter>::default);
    while let Some(frame) = body.frame().await {
        let data = match frame?.into_data() {
            Ok(data) => data,
            Err(frame) if reading != Reading::Http => match frame.into_trailers() {
                Ok(trailers) => return Ok(whole_with(chunks, len, trailers)),
                Err(_) => continue,
            },
            Err(_) => continue,
        };
        len += data.len();
        if let Some(counter) = &mut messages {
            counter.feed(&data);
        }
        chunks.push_back(data);
        let streaming = messages.as_ref().is_some_and(|c| c.begun() > 1);
        if len > limit || streaming {
            let rest = PrefixedBody {
                prefix: chunks,
                rest: body,
            };
            return Ok(if streaming {
                BufferedBody::Stream(rest)
            } else {
                BufferedBody::TooLarge(rest)
            });
        }
    }
    Ok(BufferedBody::Whole(concat(chunks, len), None))
}

/// A body whose trailers came: they end it.
fn whole_with(chunks: VecDeque<Bytes>, len: usize, trailers: HeaderMap) -> BufferedBody {
    BufferedBody::Whole(concat(chunks, len), Some(Box::new(trailers)))
}

/// Most small answers arrive in one frame: that one is kept as it is, without a copy.
fn concat(mut chunks: VecDeque<Bytes>, len: usize) -> Bytes {
    if chunks.len() <= 1 {
        return chunks.pop_front().unwrap_or_default();
    }
    let mut whole = BytesMut::with_capacity(len);
    for chunk in &chunks {
        whole.extend_from_slice(chunk);
    }
    whole.freeze()
}

/// The chunks already read, then the rest of the upstream body.
pub(super) struct PrefixedBody {
    prefix: VecDeque<Bytes>,
    rest: Body,
}

impl HttpBody for PrefixedBody {
    type Data = Bytes;
    type Error = axum_core::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(chunk) = self.prefix.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let buffered: u64 = self.prefix.iter().map(|c| c.len() as u64).sum();
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + buffered);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + buffered);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that arrives in the given frames: data only, as a chunked upstream answer, or
    /// data then trailers, as a gRPC answer.
    struct Framed(VecDeque<Frame<Bytes>>);

    impl HttpBody for Framed {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    fn grpc_answer(messages: usize) -> Framed {
        let mut frames: VecDeque<_> = (0..messages)
            .map(|_| Frame::data(Bytes::from_static(b"\0\0\0\0\x01x")))
            .collect();
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        frames.push_back(Frame::trailers(trailers));
        Framed(frames)
    }

    #[tokio::test]
    async fn a_grpc_answer_keeps_its_trailers_and_a_second_message_makes_it_a_stream() {
        let unary = Reading::Grpc {
            single_message: true,
        };
        let one = buffer(grpc_answer(1), 1024, unary).await.unwrap();
        assert_eq!(one.trailers().unwrap()["grpc-status"], "0");
        assert!(matches!(one.stored(), StoredBody::KeptWithTrailers { .. }));
        let replayed = one.into_body().collect().await.unwrap();
        assert_eq!(replayed.trailers().unwrap()["grpc-status"], "0");
        let stream = buffer(grpc_answer(3), 1024, unary).await.unwrap();
        assert!(matches!(stream, BufferedBody::Stream(_)));
        let passed = stream.into_body().collect().await.unwrap();
        assert!(passed.trailers().is_some());
        assert_eq!(passed.to_bytes().len(), 18, "every message passed on");
        let keyed = Reading::Grpc {
            single_message: false,
        };
        let whole = buffer(grpc_answer(3), 1024, keyed).await.unwrap();
        assert!(matches!(&whole, BufferedBody::Whole(b, Some(_)) if b.len() == 18));
        let http = buffer(grpc_answer(1), 1024, Reading::Http).await.unwrap();
        assert!(
            http.trailers().is_none(),
            "an HTTP answer's trailers are dropped"
        );
    }

    fn chunked(chunks: &[&'static [u8]]) -> Framed {
        Framed(
            chunks
                .iter()
                .map(|c| Frame::data(Bytes::from_static(c)))
                .collect(),
        )
    }

    #[tokio::test]
    async fn small_bodies_are_whole_and_large_ones_stream_every_byte() {
        let whole = buffer(chunked(&[b"ab", b"cd"]), 4, Reading::Http)
            .await
            .unwrap();
        assert!(matches!(&whole, BufferedBody::Whole(b, None) if b == "abcd"));
        let large = buffer(chunked(&[b"ab", b"cd", b"ef", b"gh"]), 3, Reading::Http)
            .await
            .unwrap();
        assert!(matches!(large, BufferedBody::TooLarge(_)));
        let all = large.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(all, "abcdefgh");
    }
}
