//! The forwarding client's connect step for `https://` upstreams: TCP by hyper-util's
//! `HttpConnector`, then the handshake of [`connect`](super::connect).
//!
//! Anything that fails here fails before the request is written, and the client reports it
//! as a connect error, which the forwarding service turns into "never sent".

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::Scheme;
use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tower::Service;

use crate::BoxError;

/// Connects over TCP, then TLS for `https://` URIs with the route's client config.
#[derive(Debug, Clone)]
pub(crate) struct HttpsConnector {
    http: HttpConnector,
    tls: Option<Arc<ClientConfig>>,
}

impl HttpsConnector {
    /// `tls` is the client config of an `https://` upstream; without it only `http://` works.
    pub(crate) fn new(mut http: HttpConnector, tls: Option<Arc<ClientConfig>>) -> Self {
        http.enforce_http(false);
        Self { http, tls }
    }
}

impl Service<Uri> for HttpsConnector {
    type Response = MaybeTls;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<MaybeTls, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = match (uri.scheme() == Some(&Scheme::HTTPS), &self.tls) {
            (false, _) => None,
            (true, Some(config)) => Some(config.clone()),
            (true, None) => {
                return Box::pin(async { Err("no TLS client config for an https upstream".into()) })
            }
        };
        let host = uri.host().unwrap_or_default().to_owned();
        let tcp = self.http.call(uri);
        Box::pin(async move {
            let tcp = tcp.await?;
            let Some(config) = tls else {
                return Ok(MaybeTls::Plain(tcp));
            };
            let stream = super::connect(&config, tcp.into_inner(), &host).await?;
            Ok(MaybeTls::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

/// A connection to an upstream, in clear or over TLS.
#[derive(Debug)]
pub(crate) enum MaybeTls {
    Plain(TokioIo<TcpStream>),
    // Boxed: the TLS state is some hundreds of bytes, the plain stream a few words.
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

impl Connection for MaybeTls {
    fn connected(&self) -> Connected {
        match self {
            MaybeTls::Plain(tcp) => tcp.connected(),
            MaybeTls::Tls(tls) => tls.inner().get_ref().0.connected(),
        }
    }
}

impl Read for MaybeTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            MaybeTls::Tls(tls) => Pin::new(&mut **tls).poll_read(cx, buf),
        }
    }
}

impl Write for MaybeTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            MaybeTls::Tls(tls) => Pin::new(&mut **tls).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(tls) => Pin::new(&mut **tls).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(tcp) => tcp.is_write_vectored(),
            MaybeTls::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            MaybeTls::Tls(tls) => Pin::new(&mut **tls).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            MaybeTls::Tls(tls) => Pin::new(&mut **tls).poll_shutdown(cx),
        }
    }
}
