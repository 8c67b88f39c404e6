//! What this machine's kernel says about one TCP connection (Linux's `/proc/net/tcp` and
//! `/proc/net/tcp6`), for a test that must know a close has reached the other end rather than
//! guess how long that takes.
//!
//! A side that closes, or shuts down its writing half, sends a `FIN`. The other end's socket
//! enters `CLOSE_WAIT` when its kernel takes that `FIN` in, and from then on a read there finds
//! the end of the stream, whether or not the process there has looked yet. (The closing side's
//! own move from `FIN_WAIT1` to `FIN_WAIT2` says the same, but only once the other end's
//! acknowledgement comes back, which a delayed ACK can hold for some 40 ms.)

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::poll;

/// A connection's state, as `include/net/tcp_states.h` numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpState {
    /// Open both ways.
    Established,
    /// Connecting: `SYN` sent.
    SynSent,
    /// Being accepted: `SYN` received.
    SynRecv,
    /// This end sent its `FIN`, not acknowledged yet.
    FinWait1,
    /// This end's `FIN` is acknowledged; the other end may still send.
    FinWait2,
    /// Both ends closed, this one first; waiting out stray segments.
    TimeWait,
    /// Gone.
    Close,
    /// The other end sent its `FIN`; this end may still send.
    CloseWait,
    /// Closed after the other end, waiting for the acknowledgement.
    LastAck,
    /// A listening socket.
    Listen,
    /// Both ends sent a `FIN` at once; this one is not acknowledged yet.
    Closing,
    /// A number this list does not name.
    Other(u8),
}

impl TcpState {
    fn from_number(number: u8) -> Self {
        match number {
            0x01 => Self::Established,
            0x02 => Self::SynSent,
            0x03 => Self::SynRecv,
            0x04 => Self::FinWait1,
            0x05 => Self::FinWait2,
            0x06 => Self::TimeWait,
            0x07 => Self::Close,
            0x08 => Self::CloseWait,
            0x09 => Self::LastAck,
            0x0A => Self::Listen,
            0x0B => Self::Closing,
            other => Self::Other(other),
        }
    }
}

/// The state of the connection from `local` to `peer` (this machine's end at `local`), or
/// `None` if the kernel does not list it.
///
/// # Panics
///
/// Where the kernel's table cannot be read: these tests need Linux.
pub fn state(local: SocketAddr, peer: SocketAddr) -> Option<TcpState> {
    let table = match local.ip() {
        IpAddr::V4(_) => "/proc/net/tcp",
        IpAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table)
        .unwrap_or_else(|e| panic!("{table}: {e} (the socket state needs Linux)"));
    let (local, peer) = (Listed(local).to_string(), Listed(peer).to_string());
    text.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace().skip(1);
        let (from, to, state) = (fields.next()?, fields.next()?, fields.next()?);
        if from != local || to != peer {
            return None;
        }
        u8::from_str_radix(state, 16)
            .ok()
            .map(TcpState::from_number)
    })
}

/// Whether the other end's kernel has taken in the `FIN` sent on the connection from `local` to
/// `peer`: a read there now finds the end of the stream.
pub fn fin_received(local: SocketAddr, peer: SocketAddr) -> bool {
    use TcpState::{CloseWait, Closing, FinWait2, LastAck, TimeWait};
    // The other end has it and has not closed, has closed since, or had closed first; or this
    // end holds the acknowledgement of it.
    matches!(
        state(peer, local),
        Some(CloseWait | LastAck | Closing | TimeWait)
    ) || matches!(state(local, peer), Some(FinWait2 | TimeWait))
}

/// How long the other end's kernel may take to take in a `FIN` on a loaded machine.
const RECEIVED_WITHIN: Duration = Duration::from_secs(30);

/// Waits until [`fin_received`], letting this thread's runtime run meanwhile.
///
/// # Panics
///
/// When it is not within 30 s.
pub async fn until_fin_received(local: SocketAddr, peer: SocketAddr) {
    let what = format!("the FIN from {local} received at {peer}");
    let received = async || fin_received(local, peer);
    poll::until(RECEIVED_WITHIN, what, received).await;
}

/// Waits as [`until_fin_received`] does, but blocking this thread, so that a runtime on it
/// learns nothing meanwhile.
///
/// # Panics
///
/// When it is not within 30 s.
pub fn until_fin_received_blocking(local: SocketAddr, peer: SocketAddr) {
    let deadline = std::time::Instant::now() + RECEIVED_WITHIN;
    while !fin_received(local, peer) {
        assert!(
            std::time::Instant::now() < deadline,
            "not within {RECEIVED_WITHIN:?}: the FIN from {local} received at {peer}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An address as the kernel's table writes it: the address as the 32-bit words it is stored in,
/// each printed in this machine's byte order, then the port, in hexadecimal.
struct Listed(SocketAddr);

impl fmt::Display for Listed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let octets = match self.0.ip() {
            IpAddr::V4(ip) => ip.octets().to_vec(),
            IpAddr::V6(ip) => ip.octets().to_vec(),
        };
        for word in octets.chunks_exact(4) {
            let word = u32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
            write!(f, "{word:08X}")?;
        }
        write!(f, ":{:04X}", self.0.port())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};

    #[test]
    fn a_shut_down_writing_half_is_received_and_the_other_end_reads_its_end() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let (local, peer) = (server.local_addr().unwrap(), server.peer_addr().unwrap());
        assert_eq!(state(local, peer), Some(TcpState::Established));
        assert_eq!(state(peer, local), Some(TcpState::Established));
        server.shutdown(Shutdown::Write).unwrap();
        until_fin_received_blocking(local, peer);
        assert_eq!(state(peer, local), Some(TcpState::CloseWait));
        client.set_nonblocking(true).unwrap();
        assert_eq!(
            client.read(&mut [0u8; 1]).unwrap(),
            0,
            "the end of the stream"
        );
        // The half still open carries on.
        client.write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        server.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
    }

    #[test]
    fn an_unknown_connection_is_not_listed() {
        let nowhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(state(nowhere, nowhere), None);
        assert!(!fin_received(nowhere, nowhere));
    }
}
