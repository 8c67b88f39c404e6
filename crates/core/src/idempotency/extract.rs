//! Taking a request apart: reading its body within the limit and finding its key.

use bytes::Bytes;
use http::{header, request::Parts, HeaderMap, HeaderName};
use http_body::Body as HttpBody;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::error::Problem;
use crate::model::{IdempotencyKey, KeyError};
use crate::units::ByteSize;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Reads the whole body, refusing one over `limit` without reading past it.
pub(crate) async fn read_body<B>(parts: &Parts, body: B, limit: ByteSize) -> Result<Bytes, Problem>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let too_large = Problem::BodyTooLarge { limit };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit.as_u64()) {
        return Err(too_large);
    }
    match Limited::new(body, limit.as_usize()).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large),
        Err(_) => Err(Problem::UnreadableBody),
    }
}

/// The key in a header: none, one valid key, or an error (two headers count as invalid).
pub(crate) fn key_from_headers(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<IdempotencyKey>, KeyError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    IdempotencyKey::from_header_value(value.as_bytes()).map(Some)
}

/// The key at a JSON pointer in the body: [`IdempotencyKey::from_json_body`].
pub(crate) fn key_from_body(
    body: &[u8],
    pointer: &str,
) -> Result<Option<IdempotencyKey>, KeyError> {
    IdempotencyKey::from_json_body(body, pointer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn two_key_headers_are_refused() {
        let name = HeaderName::from_static("idempotency-key");
        let mut headers = HeaderMap::new();
        assert_eq!(key_from_headers(&headers, &name), Ok(None));
        headers.append(&name, HeaderValue::from_static("a"));
        assert_eq!(
            key_from_headers(&headers, &name).unwrap().unwrap().as_str(),
            "a"
        );
        headers.append(&name, HeaderValue::from_static("a"));
        assert_eq!(key_from_headers(&headers, &name), Err(KeyError::Repeated));
    }

    #[test]
    fn body_pointer_finds_strings_and_integers() {
        let key = |body: &str, ptr: &str| key_from_body(body.as_bytes(), ptr);
        assert_eq!(
            key(r#"{"id":"evt_1"}"#, "/id").unwrap().unwrap().as_str(),
            "evt_1"
        );
        assert_eq!(
            key(r#"{"event":{"n":42}}"#, "/event/n")
                .unwrap()
                .unwrap()
                .as_str(),
            "42"
        );
        assert_eq!(key(r#"{"other":1}"#, "/id"), Ok(None));
        assert_eq!(key("not json", "/id"), Ok(None));
        assert_eq!(key(r#"{"id":""}"#, "/id"), Err(KeyError::Empty));
        assert_eq!(
            key(r#"{"id":{"nested":true}}"#, "/id"),
            Err(KeyError::NotVisibleAscii)
        );
    }

    #[tokio::test]
    async fn body_over_the_limit_is_refused_by_declared_or_actual_length() {
        let limit = ByteSize::bytes(4);
        let (mut parts, ()) = http::Request::new(()).into_parts();
        let body = http_body_util::Full::new(Bytes::from_static(b"12345"));
        assert!(matches!(
            read_body(&parts, body, limit).await,
            Err(Problem::BodyTooLarge { .. })
        ));
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("100"));
        let small = http_body_util::Full::new(Bytes::from_static(b"1"));
        assert!(matches!(
            read_body(&parts, small, limit).await,
            Err(Problem::BodyTooLarge { .. })
        ));
        parts.headers.remove(header::CONTENT_LENGTH);
        let fits = http_body_util::Full::new(Bytes::from_static(b"1234"));
        assert_eq!(read_body(&parts, fits, limit).await.unwrap(), "1234");
    }
}
