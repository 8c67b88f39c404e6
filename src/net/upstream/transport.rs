//! The byte stream under an upstream connection, and opening one.
//!
//! Everything above this module (the pool, the exchange, the body) sees only [`UpstreamIo`]: a
//! TCP stream, or for an `https://` upstream the TLS stream over one ([`crate::tls::connect`]).
//!
//! An idle pooled connection is checked for a close right before a request is written on it.
//! The runtime learns that a socket became readable only when its IO driver next runs, which on
//! a busy worker can be a while after the upstream's `FIN` arrived; a read in that gap says
//! "nothing yet" although the kernel knows the connection is closing. While a check is under
//! way (see [`CloseCheck`]), a read that the runtime would leave pending asks the kernel itself.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::Scheme;
use http::Uri;
use rustls::ClientConfig;
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::tls;

/// How long resolving and connecting may take before the request is given up as never sent.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where connections to one upstream go, and how: host and port, taken from its base URL once,
/// and for an `https://` upstream the client config its handshakes use.
#[derive(Debug, Clone)]
pub(super) struct Address {
    host: String,
    port: u16,
    tls: Option<Arc<ClientConfig>>,
}

impl Address {
    /// `None` if the URL names no host. `tls` is used for an `https://` URL only, which
    /// without it fails every connection as never sent.
    pub(super) fn from_uri(uri: &Uri, tls: Option<Arc<ClientConfig>>) -> Option<Self> {
        let host = uri.host()?;
        // A URI writes an IPv6 literal in brackets; the resolver wants it bare.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let https = uri.scheme() == Some(&Scheme::HTTPS);
        Some(Self {
            host: host.to_owned(),
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
            // Without a route's own config, the platform's roots are trusted.
            tls: https.then(|| tls.unwrap_or_else(tls::platform_client_config)),
        })
    }
}

/// The kinds of stream an upstream connection can run over.
#[derive(Debug)]
pub(super) enum Transport {
    Tcp(TcpStream),
    // Boxed: the TLS state is some hundreds of bytes, a TCP stream a few words.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Transport {
    fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Tcp(stream) => stream,
            Transport::Tls(stream) => stream.get_ref().0,
        }
    }
}

/// A connection's byte stream, with the switch that turns on the kernel check of reads.
#[derive(Debug)]
pub(super) struct UpstreamIo {
    transport: Transport,
    checking: Arc<AtomicBool>,
}

/// Turns on, for the duration of a close check, reads that ask the kernel directly.
#[derive(Debug, Clone)]
pub(super) struct CloseCheck(Arc<AtomicBool>);

impl CloseCheck {
    /// Runs `check` with kernel reads on.
    pub(super) fn during<T>(&self, check: impl FnOnce() -> T) -> T {
        self.0.store(true, Ordering::Relaxed);
        let result = check();
        self.0.store(false, Ordering::Relaxed);
        result
    }
}

impl UpstreamIo {
    pub(super) fn new(transport: Transport) -> (Self, CloseCheck) {
        let checking = Arc::new(AtomicBool::new(false));
        let check = CloseCheck(checking.clone());
        (
            Self {
                transport,
                checking,
            },
            check,
        )
    }

    /// What the kernel has for this socket right now: `Pending` if nothing, else end of stream
    /// (nothing put in `buf`) or an error. Bytes an idle connection was never meant to receive
    /// are an error too: they are not the answer to anything.
    fn kernel_read(&self) -> Poll<io::Result<()>> {
        // Under TLS too: a close, or an alert, shows as the socket's end or as unexpected bytes.
        let socket = SockRef::from(self.transport.tcp());
        let mut byte = [MaybeUninit::<u8>::uninit(); 1];
        match socket.peek(&mut byte) {
            Ok(0) => Poll::Ready(Ok(())),
            Ok(_) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the upstream sent bytes on an idle connection",
            ))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncRead for UpstreamIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let polled = match &mut self.transport {
            Transport::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Transport::Tls(stream) => Pin::new(stream).poll_read(cx, buf),
        };
        if polled.is_pending() && self.checking.load(Ordering::Relaxed) {
            // The waker stays registered by the poll above, so `Pending` here is still honest.
            return self.kernel_read();
        }
        polled
    }
}

impl AsyncWrite for UpstreamIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.transport {
            Transport::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
            Transport::Tls(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.transport {
            Transport::Tcp(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Transport::Tls(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.transport {
            Transport::Tcp(stream) => stream.is_write_vectored(),
            Transport::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.transport {
            Transport::Tcp(stream) => Pin::new(stream).poll_flush(cx),
            Transport::Tls(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.transport {
            Transport::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Transport::Tls(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

/// Connects to the address, then, for an `https://` upstream, runs the TLS handshake (bounded
/// on its own). A failure of either is a request never sent.
pub(super) async fn connect(address: &Address) -> io::Result<Transport> {
    let tcp = connect_tcp(address).await?;
    match &address.tls {
        None => Ok(Transport::Tcp(tcp)),
        Some(config) => {
            let stream = tls::connect(config, tcp, &address.host).await?;
            Ok(Transport::Tls(Box::new(stream)))
        }
    }
}

/// Resolves the address and connects to the first of its addresses that answers, all within
/// [`CONNECT_TIMEOUT`]. Small requests go out at once: Nagle's delay would hold each for an ACK.
async fn connect_tcp(address: &Address) -> io::Result<TcpStream> {
    let attempt = async {
        let mut last_error = None;
        for addr in tokio::net::lookup_host((address.host.as_str(), address.port)).await? {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "the upstream host has no address")
        }))
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connecting to the upstream timed out",
            ))
        })
}
