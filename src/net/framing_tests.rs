//! Tests of the framing guard: an ambiguous head is refused however its bytes arrive, clean
//! requests pass, and a head the guard cannot read is left to hyper.

use super::*;

const CLEAN: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
const CHUNKED: &[u8] =
    b"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n";
const AMBIGUOUS: &[u8] =
    b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";

/// The verdicts on `requests` requests after the guard was fed `pieces` in order.
fn verdicts(pieces: &[&[u8]], requests: usize) -> Vec<Option<&'static str>> {
    let found = Verdicts::new();
    let mut guard = FramingGuard::new((), 1024, found.clone());
    for piece in pieces {
        guard.feed(piece);
    }
    (0..requests).map(|_| found.next_request()).collect()
}

/// Every way of cutting `stream` in two, and one byte at a time, gives `expected`.
fn same_however_cut(stream: &[u8], expected: &[Option<&'static str>]) {
    assert_eq!(
        verdicts(&[stream], expected.len()),
        expected,
        "in one piece"
    );
    for cut in 1..stream.len() {
        let (a, b) = stream.split_at(cut);
        assert_eq!(verdicts(&[a, b], expected.len()), expected, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(verdicts(&bytes, expected.len()), expected, "byte by byte");
}

#[test]
fn an_ambiguous_head_after_a_body_is_refused_however_the_bytes_arrive() {
    let stream = [CLEAN, AMBIGUOUS].concat();
    let both = Some("both Content-Length and Transfer-Encoding");
    same_however_cut(&stream, &[None, both]);
}

#[test]
fn chunked_bodies_with_extensions_and_trailers_are_followed_to_the_next_head() {
    let stream = [CHUNKED, CLEAN, AMBIGUOUS].concat();
    let both = Some("both Content-Length and Transfer-Encoding");
    same_however_cut(&stream, &[None, None, both]);
}

#[test]
fn clean_requests_are_never_refused() {
    let stream = [CLEAN, CHUNKED, CLEAN].concat();
    same_however_cut(&stream, &[None, None, None]);
}

#[test]
fn a_head_past_the_limit_turns_the_guard_off_and_leaves_it_to_hyper() {
    let long = format!(
        "POST /a HTTP/1.1\r\nX-Long: {}\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        "a".repeat(2048)
    );
    let (a, b) = long.as_bytes().split_at(1500);
    assert_eq!(verdicts(&[a, b], 1), [None]);
}

#[test]
fn a_malformed_head_turns_the_guard_off() {
    let stream = [b"NOT HTTP AT ALL\r\n\r\n".as_slice(), AMBIGUOUS].concat();
    assert_eq!(verdicts(&[&stream], 2), [None, None]);
}
