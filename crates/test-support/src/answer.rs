//! A response as the tests read it: whole, with what they ask of it (a header, the body as
//! JSON, the problem type, whether it was replayed). The same for answers that came over a
//! socket and for those of a service called in process.

use std::fmt::Debug;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;

/// A response, fully read.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status line's code.
    pub status: StatusCode,
    /// Every header, as sent.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Answer {
    /// Reads `response` whole.
    pub async fn read<B>(response: Response<B>) -> Self
    where
        B: http_body::Body,
        B::Error: Debug,
    {
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .expect("the body arrives whole")
            .to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// A header's value, if it is there and is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// The problem type of a problem+json answer, without the base.
    pub fn problem_type(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        let kind = self.json()["type"].as_str().unwrap().to_owned();
        kind.rsplit(':')
            .next()
            .unwrap()
            .rsplit('#')
            .next()
            .unwrap()
            .to_owned()
    }

    /// Whether the proxy marked the answer as a replay (`Idempotent-Replayed: true`).
    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }
}
