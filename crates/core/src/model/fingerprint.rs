//! The fingerprint: a digest of what a request asks for.
//!
//! Same key with another fingerprint is a client bug (or an attack), answered `422 key-reused`
//! and never a replay. A request has four parts ([`Part`]): its method, its target (path and
//! query), the values of the route's `fingerprint_headers`, and its body. Each part is hashed on
//! its own with SHA-256, and the fingerprint is the SHA-256 of the method followed by the other
//! three part digests: the method is a short token, and the digests after it have a fixed
//! length, so where each ends is never in doubt, and a fingerprint costs two compressions more
//! than the digests of its parts. Every byte of the body is hashed once, and moving bytes from
//! one part into another always changes the whole. Equal fingerprints are the same request.
//!
//! Beside the whole, a fingerprint keeps the first [`PartDigests::LEN`] bytes of each part
//! digest, so that a `422` can say which parts differed (never what they held). Eight bytes are
//! enough for that: the whole has already decided that the requests differ, the parts only
//! explain it, and a differing part that looked the same (one chance in 2^64) would go unnamed,
//! never replayed. They cost a record 33 bytes rather than the 129 of full digests.
//!
//! A route reads the body one of two ways ([`FingerprintBody`]): its bytes, or (`"json"`) its
//! RFC 8785 canonical form ([`jcs`](super::jcs)) with the members `fingerprint_ignore` names left
//! out, so that a client that rebuilds its JSON on a retry sends the same request. A body that
//! is not I-JSON counts by its bytes. The body digest starts with a byte naming the way it was
//! read, so a route that changes `fingerprint_body` changes the body digest of every request.
//!
//! Records stored before part digests existed carry one SHA-256 over the length-prefixed parts
//! and nothing else ([`Fingerprint::compute_unsplit`]): a request is compared with such a record
//! by computing that digest, and a mismatch cannot say which part differed.

use std::fmt;
use std::sync::LazyLock;

use http::{HeaderMap, HeaderName, Method, Uri};
use sha2::{Digest, Sha256};

use super::jcs::{self, JsonPointer};

/// The parts of a request the fingerprint covers, in the order their digests are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The method.
    Method,
    /// The path and query.
    Target,
    /// The values of the route's `fingerprint_headers`.
    Headers,
    /// The body, as the route reads it.
    Body,
}

impl Part {
    /// Every part, in the order their digests are kept.
    pub const ALL: [Part; 4] = [Part::Method, Part::Target, Part::Headers, Part::Body];

    /// The name a `422 key-reused` problem gives the part in `differs`.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Method => "method",
            Part::Target => "target",
            Part::Headers => "headers",
            Part::Body => "body",
        }
    }
}

/// The first bytes of each part's digest, in the order of [`Part::ALL`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartDigests([[u8; PartDigests::LEN]; 4]);

impl PartDigests {
    /// How many bytes of each part digest are kept.
    pub const LEN: usize = 8;
    /// The length of all four, as stored.
    pub const STORED_LEN: usize = 4 * Self::LEN;

    /// Part digests as stored.
    pub fn from_bytes(bytes: [u8; Self::STORED_LEN]) -> Self {
        let part = |i: usize| {
            let mut digest = [0; Self::LEN];
            digest.copy_from_slice(&bytes[i * Self::LEN..(i + 1) * Self::LEN]);
            digest
        };
        Self([part(0), part(1), part(2), part(3)])
    }

    /// The part digests, as stored.
    pub fn to_bytes(&self) -> [u8; Self::STORED_LEN] {
        let mut bytes = [0; Self::STORED_LEN];
        for (chunk, digest) in bytes.chunks_exact_mut(Self::LEN).zip(&self.0) {
            chunk.copy_from_slice(digest);
        }
        bytes
    }

    /// The kept digest of one part.
    pub fn get(&self, part: Part) -> &[u8; Self::LEN] {
        &self.0[part as usize]
    }

    /// The kept digest of one part in hex, for an operator to compare two records by eye.
    pub fn hex(&self, part: Part) -> String {
        hex::encode(self.get(part))
    }
}

impl fmt::Debug for PartDigests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for part in Part::ALL {
            map.entry(&part.as_str(), &self.hex(part));
        }
        map.finish()
    }
}

/// How a route's fingerprint reads request bodies (`fingerprint_body`, `fingerprint_ignore`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FingerprintBody {
    /// The body's bytes, as they came.
    #[default]
    Bytes,
    /// The body's RFC 8785 canonical form, without the members `ignore` names; a body that is
    /// not I-JSON counts by its bytes.
    Json {
        /// The members left out of the fingerprint (`fingerprint_ignore`).
        ignore: Vec<JsonPointer>,
    },
}

impl FingerprintBody {
    /// The byte a body digest starts with, naming how the body was read.
    fn tag(&self) -> u8 {
        match self {
            FingerprintBody::Bytes => 0,
            FingerprintBody::Json { .. } => 1,
        }
    }
}

/// What a request asks for: SHA-256 over its method and the digests of its other parts, and the
/// kept part digests.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    whole: [u8; 32],
    /// `None` for a record stored before part digests existed.
    parts: Option<PartDigests>,
}

impl Fingerprint {
    /// The length of the whole digest in bytes.
    pub const LEN: usize = 32;

    /// The fingerprint of a request: its method, path and query, the values of the route's
    /// `fingerprint_headers`, and its body read as `body_form` says.
    pub fn compute(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        fingerprint_headers: &[HeaderName],
        body: &[u8],
        body_form: &FingerprintBody,
    ) -> Self {
        let digests: [[u8; 32]; 4] = [
            method_digest(method),
            Sha256::digest(target(uri)).into(),
            headers_digest(headers, fingerprint_headers),
            body_digest(body, body_form),
        ];
        let mut whole = Sha256::new();
        whole.update(method.as_str());
        for digest in &digests[1..] {
            whole.update(digest);
        }
        let kept = digests.map(|digest| {
            let mut first = [0; PartDigests::LEN];
            first.copy_from_slice(&digest[..PartDigests::LEN]);
            first
        });
        Self {
            whole: whole.finalize().into(),
            parts: Some(PartDigests(kept)),
        }
    }

    /// The fingerprint as records stored before part digests existed carry it: one SHA-256 over
    /// the length-prefixed method, path and query, named headers and body bytes, its parts
    /// unknown. Only for comparing a request with such a record.
    pub fn compute_unsplit(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        fingerprint_headers: &[HeaderName],
        body: &[u8],
    ) -> Self {
        let mut digest = Sha256::new();
        let mut field = |bytes: &[u8]| {
            digest.update((bytes.len() as u64).to_be_bytes());
            digest.update(bytes);
        };
        field(method.as_str().as_bytes());
        field(target(uri));
        named_headers(headers, fingerprint_headers, &mut field);
        field(body);
        Self::from_bytes(digest.finalize().into())
    }

    /// A fingerprint as stored, its parts unknown.
    pub fn from_bytes(whole: [u8; 32]) -> Self {
        Self { whole, parts: None }
    }

    /// A fingerprint as stored, with its part digests.
    pub fn with_parts(whole: [u8; 32], parts: PartDigests) -> Self {
        Self {
            whole,
            parts: Some(parts),
        }
    }

    /// The whole digest, as stored.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.whole
    }

    /// The kept part digests; `None` for a record stored before they existed.
    pub fn parts(&self) -> Option<&PartDigests> {
        self.parts.as_ref()
    }

    /// The parts whose digests differ from `other`'s, in the order of [`Part::ALL`]; none when
    /// either fingerprint's parts are unknown.
    pub(crate) fn differing_parts(&self, other: &Fingerprint) -> Vec<Part> {
        let (Some(mine), Some(theirs)) = (&self.parts, &other.parts) else {
            return Vec::new();
        };
        Part::ALL
            .into_iter()
            .filter(|&part| mine.get(part) != theirs.get(part))
            .collect()
    }

    /// The first hex digits, enough for an operator to compare two records by eye.
    pub fn short_hex(&self) -> String {
        hex::encode(&self.whole[..8])
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.parts {
            Some(parts) => write!(f, "Fingerprint({}…, {parts:?})", self.short_hex()),
            None => write!(f, "Fingerprint({}…, parts unknown)", self.short_hex()),
        }
    }
}

fn target(uri: &Uri) -> &[u8] {
    uri.path_and_query()
        .map_or("/", |pq| pq.as_str())
        .as_bytes()
}

/// Feeds each named header to `field`: its name, how many values it has (a header sent twice
/// is not the same request as once), and each value.
fn named_headers(headers: &HeaderMap, names: &[HeaderName], field: &mut impl FnMut(&[u8])) {
    for name in names {
        field(name.as_str().as_bytes());
        let values = headers.get_all(name);
        field(&(values.iter().count() as u64).to_be_bytes());
        for value in values {
            field(value.as_bytes());
        }
    }
}

/// The digests of the methods routes cover by default or often, hashed once: every request
/// hashes its target and body anyway, and this keeps the cost of a fingerprint close to what
/// it was as a single digest.
static COMMON_METHODS: LazyLock<[(Method, [u8; 32]); 4]> = LazyLock::new(|| {
    [Method::POST, Method::PATCH, Method::PUT, Method::DELETE]
        .map(|method| (method.clone(), Sha256::digest(method.as_str()).into()))
});

/// The headers digest of a route that names none, which is most routes.
static NO_HEADERS: LazyLock<[u8; 32]> = LazyLock::new(|| Sha256::digest([]).into());

fn method_digest(method: &Method) -> [u8; 32] {
    let common = COMMON_METHODS.iter().find(|(known, _)| known == method);
    common.map_or_else(
        || Sha256::digest(method.as_str()).into(),
        |(_, digest)| *digest,
    )
}

fn headers_digest(headers: &HeaderMap, names: &[HeaderName]) -> [u8; 32] {
    if names.is_empty() {
        return *NO_HEADERS;
    }
    let mut digest = Sha256::new();
    named_headers(headers, names, &mut |bytes: &[u8]| {
        digest.update((bytes.len() as u64).to_be_bytes());
        digest.update(bytes);
    });
    digest.finalize().into()
}

fn body_digest(body: &[u8], form: &FingerprintBody) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update([form.tag()]);
    // A body that is not I-JSON cannot collide with a canonical form: that form is I-JSON, and
    // canonicalizes to itself.
    let canonical = match form {
        FingerprintBody::Bytes => None,
        FingerprintBody::Json { ignore } => jcs::canonicalize(body, ignore),
    };
    digest.update(canonical.as_deref().unwrap_or(body));
    digest.finalize().into()
}

#[cfg(test)]
#[path = "fingerprint_tests.rs"]
mod tests;
