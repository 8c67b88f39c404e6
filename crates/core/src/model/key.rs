//! Idempotency keys as clients send them (docs/reference.md#keys), and the scoped keys the store is
//! indexed by.
//!
//! A header value is an RFC 9651 String (`"abc"`) or, as most clients send it, a bare token
//! (`abc`). Either way the key itself must be 1 to 255 characters of visible ASCII: spaces and
//! control characters are refused rather than normalised, so two byte-different headers can
//! never name one key.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The longest key the proxy accepts, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// Why a key was refused; the text reaches the client in the problem's `detail`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No characters.
    #[error("the idempotency key is empty")]
    Empty,
    /// More than [`MAX_KEY_LEN`] characters.
    #[error("the idempotency key is longer than {MAX_KEY_LEN} characters")]
    TooLong,
    /// A space, a control character or a non-ASCII character.
    #[error("the idempotency key may hold only visible ASCII characters")]
    NotVisibleAscii,
    /// A quoted value that is not a valid RFC 9651 String.
    #[error("the idempotency key is not a valid structured-field string")]
    MalformedString,
    /// The key header was sent more than once.
    #[error("the request carries more than one idempotency key")]
    Repeated,
}

/// A validated idempotency key: 1 to 255 visible ASCII characters.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates a key taken verbatim (from a JSON body, an admin path).
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong);
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(KeyError::NotVisibleAscii);
        }
        Ok(Self(key))
    }

    /// Parses a header value: an RFC 9651 String or a bare token, surrounded by optional spaces.
    pub fn from_header_value(raw: &[u8]) -> Result<Self, KeyError> {
        let raw = raw.trim_ascii();
        if let Some(b'"') = raw.first() {
            Self::new(parse_sf_string(raw)?)
        } else {
            let text = std::str::from_utf8(raw).map_err(|_| KeyError::NotVisibleAscii)?;
            Self::new(text)
        }
    }

    /// The key as the client sent it (unquoted).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key at an RFC 6901 JSON pointer in a body (`key_body_pointer`). A body that is not
    /// JSON, or has no such member (or a null one), has no key; a string member is the key, and
    /// so is an integer (some senders number their events); any other member is refused.
    ///
    /// ```
    /// use idempotency_core::backend::IdempotencyKey;
    ///
    /// let event = br#"{"id": "evt_1", "attempt": 3}"#;
    /// let key = IdempotencyKey::from_json_body(event, "/id").unwrap().unwrap();
    /// assert_eq!(key.as_str(), "evt_1");
    /// assert_eq!(IdempotencyKey::from_json_body(event, "/attempt").unwrap().unwrap().as_str(), "3");
    /// assert_eq!(IdempotencyKey::from_json_body(b"not json", "/id"), Ok(None));
    /// ```
    pub fn from_json_body(body: &[u8], pointer: &str) -> Result<Option<Self>, KeyError> {
        let Ok(document) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Ok(None);
        };
        match document.pointer(pointer) {
            Some(serde_json::Value::String(s)) => Self::new(s.as_str()).map(Some),
            Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => {
                Self::new(n.to_string()).map(Some)
            }
            Some(serde_json::Value::Null) | None => Ok(None),
            Some(_) => Err(KeyError::NotVisibleAscii),
        }
    }
}

impl fmt::Debug for IdempotencyKey {
    // Keys can be guessable customer data; debug output shows only a short digest.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", short_digest(self.0.as_bytes()))
    }
}

/// Decodes an RFC 9651 sf-string (section 4.2.5), refusing anything after the closing quote.
fn parse_sf_string(raw: &[u8]) -> Result<String, KeyError> {
    let mut out = String::with_capacity(raw.len());
    let mut bytes = raw[1..].iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped as char),
                _ => return Err(KeyError::MalformedString),
            },
            b'"' if bytes.len() == 0 => return Ok(out),
            b'"' => return Err(KeyError::MalformedString),
            0x20..=0x7e => out.push(b as char),
            _ => return Err(KeyError::NotVisibleAscii),
        }
    }
    Err(KeyError::MalformedString)
}

/// A name that cannot be a route's: empty, longer than 64 bytes, or holding a character other
/// than a letter, a digit, `-`, `_` or `.`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route name {name:?} must be 1 to 64 characters of letters, digits, '-', '_' or '.'")]
pub struct RouteNameError {
    name: String,
}

impl RouteNameError {
    /// The name refused.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A route name: what a key is unique within, before any client scope.
///
/// Shared: every keyed request names its route, and copying the name was an allocation each.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteName(Arc<str>);

impl RouteName {
    /// The route that catches what no configured route matches.
    pub const DEFAULT: &'static str = "default";

    /// Route names are restricted so that they can never collide inside a storage key.
    pub fn new(name: impl Into<String>) -> Result<Self, RouteNameError> {
        let name = name.into();
        let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if name.is_empty() || name.len() > 64 || !name.chars().all(valid_char) {
            return Err(RouteNameError { name });
        }
        Ok(Self(name.into()))
    }

    /// The name as configured.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RouteName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RouteName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RouteName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RouteName({})", self.0)
    }
}

/// A SHA-256 of the client identity header, so the secret itself is never stored.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientScope([u8; 32]);

impl ClientScope {
    /// The scope of the client that sent `secret` (e.g. its `Authorization` value).
    pub fn from_secret(secret: &[u8]) -> Self {
        Self(Sha256::digest(secret).into())
    }

    /// The scope whose digest this is (as stored).
    pub fn from_digest(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// The digest's bytes, as stored.
    pub fn digest(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest in lower-case hex, as store names carry it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for ClientScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientScope({}…)", &self.to_hex()[..12])
    }
}

/// What a record is stored under: route, optional client scope, key.
///
/// Shared, not copied: a request's key goes to the store, the upstream call, the completion and
/// the log line, and a clone that copied its three strings cost three allocations each time.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ScopedKey(Arc<Parts>);

#[derive(PartialEq, Eq, Hash)]
struct Parts {
    route: RouteName,
    scope: Option<ClientScope>,
    key: IdempotencyKey,
    /// The store's name for it, made once: every store operation, the replay cache and the log
    /// line use it.
    name: Box<str>,
    /// The SHA-256 of `name`, made once: the log line shows its first bytes and the memory
    /// store files records under it.
    name_digest: [u8; 32],
}

impl ScopedKey {
    /// The name of `key` within `route`, for the client of `scope` where the route has one.
    pub fn new(route: RouteName, scope: Option<ClientScope>, key: IdempotencyKey) -> Self {
        let name = storage_name(&route, scope.as_ref(), &key);
        let name_digest = Sha256::digest(name.as_bytes()).into();
        Self(Arc::new(Parts {
            route,
            scope,
            key,
            name,
            name_digest,
        }))
    }

    /// The route the key belongs to.
    pub fn route(&self) -> &RouteName {
        &self.0.route
    }

    /// The client scope, where the route names one.
    pub fn scope(&self) -> Option<&ClientScope> {
        self.0.scope.as_ref()
    }

    /// The client's key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.0.key
    }

    /// The store's name for this record: `route:scope:key`, the scope in hex or `-`.
    pub fn storage_key(&self) -> &str {
        &self.0.name
    }

    /// The SHA-256 of [`storage_key`](Self::storage_key): a fixed-width stand-in for the name,
    /// as unique as the name itself, for a map kept in memory.
    pub fn name_digest(&self) -> &[u8; 32] {
        &self.0.name_digest
    }

    /// The same name with the client's key replaced by its SHA-256, for a store whose contents
    /// must not show raw keys (encryption at rest). It is a plain digest, not keyed by the
    /// encryption key, so it stays the same across key rotation and admin lookups still find it.
    #[cfg(feature = "sealing")]
    pub(crate) fn with_hashed_key(&self) -> ScopedKey {
        let digest = Sha256::digest(self.0.key.as_str().as_bytes());
        let key = IdempotencyKey(hex::encode(digest));
        Self::new(self.0.route.clone(), self.0.scope, key)
    }

    /// A short, stable digest for logs and metrics: enough to correlate, never the key itself.
    pub fn log_id(&self) -> LogId {
        let mut hex = [b'0'; 12];
        // Six bytes always fit twelve hex digits.
        let _ = hex::encode_to_slice(&self.0.name_digest[..6], &mut hex);
        LogId(hex)
    }
}

/// The twelve hex digits that stand for a key in logs, metrics and the status page. Held in
/// place rather than in a `String`: every keyed request's log line carries one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LogId([u8; 12]);

impl LogId {
    /// The digits as text.
    pub fn as_str(&self) -> &str {
        // Hex digits are ASCII: the check cannot fail.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScopedKey({}:{})", self.0.route, self.log_id())
    }
}

/// The route name cannot contain `:` and the scope is fixed-width hex or `-`, so the key (which
/// may hold `:`) can safely come last.
fn storage_name(route: &RouteName, scope: Option<&ClientScope>, key: &IdempotencyKey) -> Box<str> {
    let (route, key) = (route.as_str(), key.as_str());
    let mut scope_hex = [0; 64];
    let scope = match scope {
        Some(scope) => {
            // 32 bytes always fit 64 hex digits.
            let _ = hex::encode_to_slice(scope.0, &mut scope_hex);
            std::str::from_utf8(&scope_hex).unwrap_or_default()
        }
        None => "-",
    };
    // Exactly the length, so the boxed name keeps this allocation and is not copied.
    let mut name = String::with_capacity(route.len() + scope.len() + key.len() + 2);
    for part in [route, ":", scope, ":", key] {
        name.push_str(part);
    }
    name.into_boxed_str()
}

fn short_digest(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..6])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_sf_string_and_bare_token() {
        let quoted = IdempotencyKey::from_header_value(br#""8e03978e-40d5""#).unwrap();
        let bare = IdempotencyKey::from_header_value(b" 8e03978e-40d5 ").unwrap();
        assert_eq!(quoted, bare);
        assert_eq!(quoted.as_str(), "8e03978e-40d5");
    }

    #[test]
    fn decodes_escapes_in_sf_string() {
        let key = IdempotencyKey::from_header_value(br#""a\"b\\c""#).unwrap();
        assert_eq!(key.as_str(), r#"a"b\c"#);
    }

    #[test]
    fn refuses_bad_keys() {
        let cases: &[(&[u8], KeyError)] = &[
            (b"", KeyError::Empty),
            (b"\"\"", KeyError::Empty),
            (b"\"abc", KeyError::MalformedString),
            (b"\"abc\";p=1", KeyError::MalformedString),
            (b"\"a\\nb\"", KeyError::MalformedString),
            (b"a b", KeyError::NotVisibleAscii),
            (b"\"a b\"", KeyError::NotVisibleAscii),
            (b"a\x01b", KeyError::NotVisibleAscii),
            ("cl\u{e9}".as_bytes(), KeyError::NotVisibleAscii),
        ];
        for (raw, want) in cases {
            assert_eq!(
                IdempotencyKey::from_header_value(raw).unwrap_err(),
                *want,
                "{raw:?}"
            );
        }
    }

    #[test]
    fn length_limit_is_255() {
        assert!(IdempotencyKey::new("k".repeat(255)).is_ok());
        assert_eq!(
            IdempotencyKey::new("k".repeat(256)).unwrap_err(),
            KeyError::TooLong
        );
    }

    #[test]
    fn scope_separates_clients_and_hides_secret() {
        let route = RouteName::new("payments").unwrap();
        let key = IdempotencyKey::new("k1").unwrap();
        let alice = ScopedKey::new(
            route.clone(),
            Some(ClientScope::from_secret(b"Bearer a")),
            key.clone(),
        );
        let bob = ScopedKey::new(
            route.clone(),
            Some(ClientScope::from_secret(b"Bearer b")),
            key.clone(),
        );
        let anonymous = ScopedKey::new(route, None, key);
        assert_ne!(alice.storage_key(), bob.storage_key());
        assert_ne!(alice.storage_key(), anonymous.storage_key());
        assert!(!alice.storage_key().contains("Bearer"));
        assert!(!format!("{alice:?}").contains("k1"));
    }

    #[test]
    fn storage_names_keep_their_stored_form() {
        // Records already in a file or in Redis are found by these names: the form must not move.
        let route = RouteName::new("payments").unwrap();
        let key = IdempotencyKey::new("a:b").unwrap();
        let scope = ClientScope::from_secret(b"Bearer a");
        let scoped = ScopedKey::new(route.clone(), Some(scope), key.clone());
        let expected = format!("payments:{}:a:b", scope.to_hex());
        assert_eq!(scoped.storage_key(), expected);
        assert_eq!(scope.to_hex().len(), 64);
        let unscoped = ScopedKey::new(route, None, key);
        assert_eq!(unscoped.storage_key(), "payments:-:a:b");
    }

    #[test]
    fn the_log_id_is_the_start_of_the_names_digest() {
        // Log lines from earlier builds and other replicas carry this form: it must not move.
        let key = ScopedKey::new(
            RouteName::new("payments").unwrap(),
            None,
            IdempotencyKey::new("a:b").unwrap(),
        );
        let digest: [u8; 32] = Sha256::digest(b"payments:-:a:b").into();
        assert_eq!(key.name_digest(), &digest);
        assert_eq!(key.log_id().as_str(), hex::encode(&digest[..6]));
        assert_eq!(key.log_id().as_str().len(), 12);
    }

    #[test]
    fn route_names_cannot_hold_separators() {
        assert!(RouteName::new("stripe-events.v1").is_ok());
        assert!(RouteName::new("a:b").is_err());
        assert!(RouteName::new("").is_err());
    }

    proptest! {
        #[test]
        fn any_visible_ascii_key_round_trips_through_sf_string(key in "[!-~]{1,255}") {
            let escaped = key.replace('\\', "\\\\").replace('"', "\\\"");
            let parsed = IdempotencyKey::from_header_value(format!("\"{escaped}\"").as_bytes()).unwrap();
            prop_assert_eq!(parsed.as_str(), key.as_str());
        }

        #[test]
        fn bare_tokens_parse_to_themselves(key in "[!#-~][!-~]{0,254}") {
            let parsed = IdempotencyKey::from_header_value(key.as_bytes()).unwrap();
            prop_assert_eq!(parsed.as_str(), key.as_str());
        }

        #[test]
        fn parsing_never_panics_and_valid_keys_are_visible_ascii(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(key) = IdempotencyKey::from_header_value(&raw) {
                prop_assert!(!key.as_str().is_empty() && key.as_str().len() <= MAX_KEY_LEN);
                prop_assert!(key.as_str().bytes().all(|b| b.is_ascii_graphic()));
            }
        }
    }
}
