//! Header rules shared by the forwarding path and the record path.
//!
//! Hop-by-hop headers (RFC 9110 section 7.6.1) describe one connection, not the message, so a
//! proxy must neither forward nor store them: replaying a stale `Connection: close` or
//! `Transfer-Encoding` to another client would break that client's connection.

use http::header::{self, HeaderMap, HeaderName};

/// The fixed hop-by-hop set; anything named in `Connection` is hop-by-hop too.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
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
}
