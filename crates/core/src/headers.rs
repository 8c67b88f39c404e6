//! Header rules shared by the forwarding path and the record path.
//!
//! Hop-by-hop headers (RFC 9110 section 7.6.1) describe one connection, not the message, so a
//! proxy must neither forward nor store them: replaying a stale `Connection: close` or
//! `Transfer-Encoding` to another client would break that client's connection.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The fixed hop-by-hop set, and `Upgrade`; anything named in `Connection` is hop-by-hop too.
/// As names, so that removing one skips parsing its text back into a name; they are found by
/// their text (`hop_by_hop_bit`).
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names finds the few present (often none, or an upstream's
    // `Connection: keep-alive`), instead of a removal for each of the nine, which hashes each.
    // What it finds is kept as bits, and names are removed as `&str`: a forwarded answer with
    // `Connection: keep-alive` took three allocations here when they were collected.
    let present = headers
        .keys()
        .fold(0u16, |found, name| found | hop_by_hop_bit(name.as_str()));
    if present == 0 {
        return;
    }
    if headers.get_all(header::CONNECTION).iter().nth(1).is_some() {
        // Several `Connection` lines: rare enough to copy them out first.
        let values: Vec<HeaderValue> = headers
            .get_all(header::CONNECTION)
            .iter()
            .cloned()
            .collect();
        for value in &values {
            remove_named(headers, value);
        }
    } else if let Some(value) = headers.remove(header::CONNECTION) {
        remove_named(headers, &value);
    }
    for (bit, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << bit) != 0 {
            headers.remove(name);
        }
    }
}

/// Removes the headers a `Connection` value names. A name that is not a valid header name
/// names nothing there is to remove.
fn remove_named(headers: &mut HeaderMap, connection: &HeaderValue) {
    let Ok(names) = connection.to_str() else {
        return;
    };
    for name in names.split(',').map(str::trim) {
        // The fixed set is removed anyway. A name no header has (`close`, most often) needs no
        // removal, and looking over the few names costs less than the map's hash of it.
        let fixed = hop_by_hop_bit(name) != 0;
        if !fixed
            && headers
                .keys()
                .any(|key| key.as_str().eq_ignore_ascii_case(name))
        {
            headers.remove(name);
        }
    }
}

/// The bit of a header in a set of `HOP_BY_HOP` ones (its place there), 0 for any other
/// header. (Those that `Connection` names are hop-by-hop because it names them, and it is in
/// the set.) Every name of every request and answer passes here: a `match` on the text finds
/// most names different by their length alone, where comparing names one by one cost three
/// times as much.
fn hop_by_hop_bit(name: &str) -> u16 {
    let at = match name {
        "connection" => 0,
        "keep-alive" => 1,
        "proxy-connection" => 2,
        "proxy-authenticate" => 3,
        "proxy-authorization" => 4,
        "te" => 5,
        "trailer" => 6,
        "transfer-encoding" => 7,
        "upgrade" => 8,
        _ => return 0,
    };
    1 << at
}

/// The headers of a response as they may be stored and replayed: no hop-by-hop headers, no
/// `Set-Cookie` (a session is one client's, not every retry's), no `Date` (a replay is answered
/// now), and none of the route's `replay_exclude_headers`.
pub(crate) fn storable_response_headers(headers: &HeaderMap, exclude: &[HeaderName]) -> HeaderMap {
    let mut kept = headers.clone();
    strip_hop_by_hop(&mut kept);
    kept.remove(header::SET_COOKIE);
    kept.remove(header::DATE);
    for name in exclude {
        kept.remove(name);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hop_by_hop_name_has_the_bit_of_its_place() {
        for (at, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_bit(name.as_str()), 1 << at, "{name}");
        }
        assert_eq!(hop_by_hop_bit("content-type"), 0);
        assert_eq!(hop_by_hop_bit("x-te"), 0);
    }

    /// The names left once `lines` (appended in order) are stripped.
    fn left_after_stripping(lines: &[(&'static str, &'static str)]) -> Vec<String> {
        let mut headers = HeaderMap::new();
        for (name, value) in lines {
            headers.append(*name, HeaderValue::from_static(value));
        }
        strip_hop_by_hop(&mut headers);
        headers
            .keys()
            .map(|name| name.as_str().to_owned())
            .collect()
    }

    #[test]
    fn strips_fixed_and_connection_named_headers() {
        let left = left_after_stripping(&[
            ("connection", "close, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("close", "named by the option of the same name"),
            ("transfer-encoding", "chunked"),
            ("keep-alive", "timeout=5"),
            ("upgrade", "websocket"),
            ("content-type", "text/plain"),
        ]);
        assert_eq!(left, ["content-type"]);
    }

    #[test]
    fn every_connection_line_and_every_name_in_it_is_honoured() {
        let two_lines = left_after_stripping(&[
            ("connection", "X-First , close"),
            ("connection", "x-second,,not a name"),
            ("x-first", "1"),
            ("x-second", "2"),
            ("x-kept", "3"),
        ]);
        assert_eq!(two_lines, ["x-kept"]);
        let one_line = left_after_stripping(&[
            ("connection", "Keep-Alive, X-Hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("x-kept", "2"),
        ]);
        assert_eq!(one_line, ["x-kept"]);
    }

    #[test]
    fn storable_headers_drop_cookies_dates_and_exclusions() {
        let mut headers = HeaderMap::new();
        headers.append(header::SET_COOKIE, HeaderValue::from_static("s=1"));
        headers.insert(
            header::DATE,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        headers.insert("x-request-id", HeaderValue::from_static("abc"));
        headers.append("x-keep", HeaderValue::from_static("1"));
        headers.append("x-keep", HeaderValue::from_static("2"));
        let kept = storable_response_headers(&headers, &[HeaderName::from_static("x-request-id")]);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept.get_all("x-keep").iter().count(), 2);
    }

    #[test]
    fn each_fixed_hop_by_hop_header_alone_is_stripped() {
        // Listed here again, not read from the list under test: a name dropped there must fail.
        let fixed = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "proxy-authenticate",
            "proxy-authorization",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
        ];
        for name in fixed {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_static("x"));
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            strip_hop_by_hop(&mut headers);
            assert!(!headers.contains_key(name), "{name} was kept");
            assert_eq!(headers.len(), 1);
        }
    }

    #[test]
    fn headers_without_hop_by_hop_ones_are_left_alone() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        headers.append("x-many", HeaderValue::from_static("1"));
        headers.append("x-many", HeaderValue::from_static("2"));
        let before = headers.clone();
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers, before);
    }
}
