//! Refusing request smuggling: requests whose body length could be read two ways.
//!
//! A proxy and its upstream must agree where one request ends and the next begins. RFC 9112
//! section 6.3 lets an intermediary forward a request with both `Content-Length` and
//! `Transfer-Encoding` after dropping the length, and hyper does exactly that, silently: the
//! proxy never sees the `Content-Length`. So the bytes are watched on their way into hyper
//! ([`FramingGuard`]), and a request whose head is ambiguous is answered `400 bad-request`
//! instead of being forwarded. hyper itself refuses differing `Content-Length` values, a
//! `Transfer-Encoding` whose last coding is not `chunked`, and malformed chunk sizes.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::HeaderMap;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How a request head says its body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// The framing of a request head given as (name, value) pairs, or why it is ambiguous.
pub(crate) fn framing<'a>(
    headers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Framing, &'static str> {
    let (mut length, mut chunked, mut codings) = (None, false, 0);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            codings += 1;
            chunked = value.trim_ascii().eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case(b"content-length") {
            for part in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                let n = std::str::from_utf8(part)
                    .ok()
                    .filter(|p| p.bytes().all(|b| b.is_ascii_digit()));
                let n = n
                    .and_then(|p| p.parse::<u64>().ok())
                    .ok_or("invalid Content-Length")?;
                if length.is_some_and(|l| l != n) {
                    return Err("conflicting Content-Length values");
                }
                length = Some(n);
            }
        }
    }
    match (codings, length) {
        (0, None) => Ok(Framing::None),
        (0, Some(n)) => Ok(Framing::Length(n)),
        (_, Some(_)) => Err("both Content-Length and Transfer-Encoding"),
        (1, None) if chunked => Ok(Framing::Chunked),
        _ => Err("Transfer-Encoding other than exactly \"chunked\""),
    }
}

/// The check on a parsed request, for what reaches the service whatever the guard saw.
pub(crate) fn check_headers(headers: &HeaderMap) -> Result<(), &'static str> {
    framing(
        headers
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
    )
    .map(drop)
}

/// What the guard of one connection found: the ordinal of the first ambiguous request head.
#[derive(Debug)]
pub(crate) struct Verdicts {
    first_bad: AtomicUsize,
    reason: std::sync::OnceLock<&'static str>,
    served: AtomicUsize,
}

impl Verdicts {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            first_bad: AtomicUsize::new(usize::MAX),
            reason: std::sync::OnceLock::new(),
            served: AtomicUsize::new(0),
        })
    }

    /// Called once per request, in order (HTTP/1 serves a connection's requests one by one):
    /// why this request must be refused, if it must.
    pub(crate) fn next_request(&self) -> Option<&'static str> {
        let ordinal = self.served.fetch_add(1, Ordering::SeqCst);
        (ordinal >= self.first_bad.load(Ordering::SeqCst))
            .then(|| *self.reason.get().unwrap_or(&"ambiguous framing"))
    }

    fn refuse(&self, ordinal: usize, reason: &'static str) {
        let _ = self.reason.set(reason);
        self.first_bad.fetch_min(ordinal, Ordering::SeqCst);
    }
}

/// Where the guard is in the byte stream of an HTTP/1 connection.
#[derive(Debug)]
enum State {
    Head,
    Body(u64),
    ChunkLine,
    /// Chunk data plus its closing CRLF.
    ChunkData(u64),
    Trailers,
    /// Not HTTP/1 any more (h2, an upgrade) or past what it can follow: hyper's own checks apply.
    Off,
}

/// Reads through to the socket and follows the request framing, recording ambiguous heads in
/// [`Verdicts`] before hyper parses them.
#[derive(Debug)]
pub(crate) struct FramingGuard<IO> {
    io: IO,
    state: State,
    pending: Vec<u8>,
    heads: usize,
    max_head: usize,
    verdicts: Arc<Verdicts>,
}

impl<IO> FramingGuard<IO> {
    /// `max_head` bounds what is buffered for one head; past it hyper refuses the request anyway.
    pub(crate) fn new(io: IO, max_head: usize, verdicts: Arc<Verdicts>) -> Self {
        Self {
            io,
            state: State::Head,
            pending: Vec::new(),
            heads: 0,
            max_head,
            verdicts,
        }
    }

    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            data = match self.state {
                State::Off => return,
                State::Body(left) => {
                    let take = left.min(data.len() as u64);
                    self.state = if take == left {
                        State::Head
                    } else {
                        State::Body(left - take)
                    };
                    &data[take as usize..]
                }
                State::ChunkData(left) => {
                    let take = left.min(data.len() as u64);
                    self.state = if take == left {
                        State::ChunkLine
                    } else {
                        State::ChunkData(left - take)
                    };
                    &data[take as usize..]
                }
                State::Head => self.buffer(data, FramingGuard::head),
                State::ChunkLine | State::Trailers => self.buffer(data, FramingGuard::line),
            };
        }
    }

    /// Lets `step` consume a complete unit (a head, a chunk line) from `data`, joined to what
    /// earlier reads left pending; returns what is left of `data` for the next state.
    fn buffer<'d>(&mut self, data: &'d [u8], step: Step<IO>) -> &'d [u8] {
        let before = self.pending.len();
        let stepped = if before == 0 {
            // Most heads arrive whole in one read: read them where they are, without a copy.
            let stepped = step(self, data);
            if stepped.is_none() {
                self.pending.extend_from_slice(data);
            }
            stepped
        } else {
            self.pending.extend_from_slice(data);
            let pending = std::mem::take(&mut self.pending);
            let stepped = step(self, &pending);
            self.pending = pending;
            stepped
        };
        match stepped {
            Some(used) => {
                self.pending.clear();
                &data[used.saturating_sub(before).min(data.len())..]
            }
            None if matches!(self.state, State::Off) || self.pending.len() > self.max_head => {
                self.state = State::Off;
                self.pending = Vec::new();
                &[]
            }
            None => &[],
        }
    }

    /// A complete head at the start of `bytes`: its length, after recording its verdict.
    fn head(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut []);
        let len = match request.parse_with_uninit_headers(bytes, &mut headers) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return None,
            Err(_) => return self.off(),
        };
        let ordinal = self.heads;
        self.heads += 1;
        let upgrade = request.method == Some("CONNECT")
            || request
                .headers
                .iter()
                .any(|h| h.name.eq_ignore_ascii_case("upgrade"));
        self.state = match framing(request.headers.iter().map(|h| (h.name.as_bytes(), h.value))) {
            Err(reason) => {
                self.verdicts.refuse(ordinal, reason);
                State::Off
            }
            Ok(_) if upgrade => State::Off,
            Ok(Framing::None) => State::Head,
            Ok(Framing::Length(n)) => State::Body(n),
            Ok(Framing::Chunked) => State::ChunkLine,
        };
        Some(len)
    }

    /// A complete line of a chunked body at the start of `bytes`: its length, after moving on.
    fn line(&mut self, bytes: &[u8]) -> Option<usize> {
        let end = bytes.iter().position(|&b| b == b'\n')? + 1;
        let line = bytes[..end].trim_ascii();
        self.state = match self.state {
            State::Trailers if line.is_empty() => State::Head,
            State::Trailers => State::Trailers,
            _ => {
                let size = line
                    .split(|&b| b == b';')
                    .next()
                    .unwrap_or_default()
                    .trim_ascii();
                match std::str::from_utf8(size)
                    .ok()
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
                {
                    Some(0) => State::Trailers,
                    Some(n) => State::ChunkData(n.saturating_add(2)),
                    // hyper refuses the body itself.
                    None => State::Off,
                }
            }
        };
        Some(end)
    }

    fn off(&mut self) -> Option<usize> {
        self.state = State::Off;
        None
    }
}

/// What [`FramingGuard::buffer`] runs on the bytes it has: [`FramingGuard::head`] or
/// [`FramingGuard::line`].
type Step<IO> = fn(&mut FramingGuard<IO>, &[u8]) -> Option<usize>;

/// As many header lines as a head may have; hyper's own limit is 100.
const MAX_HEADERS: usize = 128;

impl<IO: AsyncRead + Unpin> AsyncRead for FramingGuard<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.feed(&buf.filled()[before..]);
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for FramingGuard<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    // Passed through so hyper writes a response's head and body with one `writev(2)` instead of
    // copying them into one buffer for a `send(2)`.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "framing_tests.rs"]
mod tests;
