//! The floor the load benchmark sets the proxy against: a reverse proxy that does nothing but
//! forward, built from the same parts as the proxy (hyper 1's HTTP/1 server and client
//! connections, one single-threaded tokio runtime per worker thread, listeners shared by
//! `SO_REUSEPORT`).
//!
//! Each client connection gets one upstream connection of its own, and one task drives both, so
//! no request crosses to another task and no pool is consulted: whatever hyper and tokio cost
//! for a forwarded request, and nothing else. No key, no store, no log line, no headers added or
//! removed, no time-outs. What the proxy costs above this is its own work.
//!
//!   bare-proxy LISTEN UPSTREAM [WORKERS]     e.g. bare-proxy 127.0.0.1:8081 127.0.0.1:8080 2

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(listen), Some(upstream)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: bare-proxy LISTEN UPSTREAM [WORKERS]");
        std::process::exit(2);
    };
    let listen: SocketAddr = listen.parse().expect("LISTEN is HOST:PORT");
    let upstream: SocketAddr = upstream.parse().expect("UPSTREAM is HOST:PORT");
    let workers = args.get(3).map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        |n| n.parse().expect("WORKERS is a number"),
    );
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let listener = reuse_port_listener(listen);
            std::thread::spawn(move || worker(listener, upstream))
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
}

fn reuse_port_listener(addr: SocketAddr) -> std::net::TcpListener {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .expect("socket");
    socket.set_reuse_port(true).expect("SO_REUSEPORT");
    socket.set_reuse_address(true).expect("SO_REUSEADDR");
    socket.set_nonblocking(true).expect("non-blocking");
    socket.bind(&addr.into()).expect("bind LISTEN");
    socket.listen(4096).expect("listen");
    socket.into()
}

fn worker(listener: std::net::TcpListener, upstream: SocketAddr) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener).expect("listener");
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(serve(client, upstream));
        }
    });
}

/// Serves one client connection through one upstream connection of its own, both driven here.
async fn serve(client: TcpStream, upstream: SocketAddr) {
    let _ = client.set_nodelay(true);
    let Ok(upstream) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = upstream.set_nodelay(true);
    let Ok((sender, upstream_connection)) =
        hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await
    else {
        return;
    };
    // HTTP/1 serves one request at a time, so the lock is never contended; it is there because
    // each request's future needs the sender and hyper's server wants `Send` services.
    let sender = Arc::new(Mutex::new(sender));
    let forward = service_fn(move |request| forward(sender.clone(), request));
    let client_connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(client), forward);
    // The upstream connection ends when the client connection has ended and dropped the
    // sender, or earlier if the upstream closes it (then the next request fails, and with it the
    // client connection).
    let _ = tokio::join!(client_connection, upstream_connection);
}

async fn forward(
    sender: Arc<Mutex<SendRequest<Incoming>>>,
    request: Request<Incoming>,
) -> Result<Response<Incoming>, hyper::Error> {
    std::future::poll_fn(|cx| sender.lock().expect("sender").poll_ready(cx)).await?;
    let response = sender.lock().expect("sender").send_request(request);
    response.await
}
