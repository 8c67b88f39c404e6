//! Header rules shared by the forwarding path and the record path.
//!
//! Hop-by-hop headers (RFC 9110 section 7.6.1) describe one connection, not the message, so a
//! proxy must neither forward nor store them: replaying a stale `Connection: close` or
//! `Transfer-Encoding` to another client would break that client's connection.

use http::header::{self, HeaderMap, HeaderName};

/// The fixed hop-by-hop set, and `Upgrade`; anything named in `Connection` is hop-by-hop too.
const HOP_BY_HOP: [&str; 9] = [
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

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names finds the few present (often none, or an upstream's
    // `Connection: keep-alive`), instead of a removal for each of the nine, which hashes each.
    let present: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    if present.is_empty() {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in present.iter().chain(&named) {
        headers.remove(name);
    }
}

/// Whether a header is hop-by-hop by name alone. (Those that `Connection` names are
/// hop-by-hop because it names them, and it is in the set.)
fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
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
    use http::HeaderValue;

    #[test]
    fn strips_fixed_and_connection_named_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-secret-hop"),
        );
        headers.insert("x-secret-hop", HeaderValue::from_static("1"));
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key(header::CONTENT_TYPE));
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
