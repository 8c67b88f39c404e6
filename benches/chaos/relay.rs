//! A TCP relay between the proxies and one Redis node, which the nemesis can slow, stall or
//! cut: the network faults a process signal cannot make.
//!
//! Delay is latency, not throughput: each chunk is stamped when read and written no earlier
//! than its stamp plus the delay then in force, so a steady load does not pile delays up.
//! A stall holds every byte (in both directions) until it ends; nothing is lost, as with a
//! congested link. A cut closes every open connection at once, and closes new ones as soon as
//! they are accepted until it ends.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Link {
    Pass,
    Delay(Duration),
    Stall,
    Cut,
}

pub struct Relay {
    pub port: u16,
    link: watch::Sender<Link>,
}

impl Relay {
    /// Listens on `port` (0 for any free one) and relays every connection to `target`.
    pub async fn start(port: u16, target: u16) -> std::io::Result<Relay> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let port = listener.local_addr()?.port();
        let (link, watching) = watch::channel(Link::Pass);
        tokio::spawn(accept(listener, target, watching));
        Ok(Relay { port, link })
    }

    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

async fn accept(listener: TcpListener, target: u16, link: watch::Receiver<Link>) {
    while let Ok((client, _)) = listener.accept().await {
        if *link.borrow() == Link::Cut {
            let _ = client.set_zero_linger();
            continue;
        }
        let link = link.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                return;
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            relay(client, server, link).await;
        });
    }
}

/// Pumps both directions until both sides have closed or a cut begins.
async fn relay(client: TcpStream, server: TcpStream, mut link: watch::Receiver<Link>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let upward = pump(client_read, server_write, link.clone());
    let downward = pump(server_read, client_write, link.clone());
    tokio::select! {
        _ = async { tokio::join!(upward, downward) } => {}
        _ = link.wait_for(|l| *l == Link::Cut) => {}
    }
}

/// One direction: a reader stamping chunks, and a writer holding each until it is due.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, link: watch::Receiver<Link>) {
    let (chunks, mut due) = mpsc::channel::<(Instant, Vec<u8>)>(64);
    let reading_link = link.clone();
    let reader = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let delay = match *reading_link.borrow() {
                Link::Delay(delay) => delay,
                _ => Duration::ZERO,
            };
            if chunks
                .send((Instant::now() + delay, buffer[..n].to_vec()))
                .await
                .is_err()
            {
                return;
            }
        }
    };
    let writer = async move {
        let mut link = link;
        while let Some((when, chunk)) = due.recv().await {
            tokio::time::sleep_until(when).await;
            if link.wait_for(|l| *l != Link::Stall).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        // The reader saw the end: pass it on, so the other side sees it too.
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}
