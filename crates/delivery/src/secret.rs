//! Secrets named in the config by reference (`env:NAME` or `file:PATH`), never written inline,
//! so a committed config file never holds one and `--check` prints only the reference.

use std::fmt;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

/// Why a secret could not be read. Its text names the reference, never the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// `env:NAME`, and the variable is not set (or not Unicode).
    #[error("environment variable {name:?} is not set")]
    NotSet {
        /// The variable's name.
        name: String,
        /// What the environment said.
        #[source]
        source: std::env::VarError,
    },
    /// `file:PATH`, and the file cannot be read.
    #[error("cannot read {path:?}")]
    Unreadable {
        /// The file, as named.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Neither `env:` nor `file:`: a secret written inline would sit in a committed config.
    #[error("a secret is given as \"env:NAME\" or \"file:PATH\", never inline")]
    Inline,
    /// The reference holds nothing.
    #[error("the secret in {reference:?} is empty")]
    Empty {
        /// The reference, as written.
        reference: String,
    },
}

/// A secret value and the reference it was read from.
#[derive(Clone)]
pub struct Secret {
    reference: String,
    value: Vec<u8>,
}

impl Secret {
    /// Reads `env:NAME` (an environment variable) or `file:PATH` (a file, trailing newline
    /// dropped). Anything else is refused, as is an empty secret.
    ///
    /// ```
    /// use idempotency_delivery::{Secret, SecretError};
    ///
    /// assert!(matches!(Secret::resolve("s3cret"), Err(SecretError::Inline)));
    /// ```
    pub fn resolve(reference: &str) -> Result<Self, SecretError> {
        Self::resolve_in(reference, |name| std::env::var(name))
    }

    /// [`Secret::resolve`] with `env:` looked up by `env`, so its tests need not write to the
    /// process's environment, which every test thread shares.
    fn resolve_in(
        reference: &str,
        env: impl FnOnce(&str) -> Result<String, std::env::VarError>,
    ) -> Result<Self, SecretError> {
        let value = if let Some(name) = reference.strip_prefix("env:") {
            env(name).map_err(|source| SecretError::NotSet {
                name: name.to_owned(),
                source,
            })?
        } else if let Some(path) = reference.strip_prefix("file:") {
            let text = std::fs::read_to_string(path).map_err(|source| SecretError::Unreadable {
                path: path.into(),
                source,
            })?;
            text.trim_end_matches(['\r', '\n']).to_owned()
        } else {
            return Err(SecretError::Inline);
        };
        if value.is_empty() {
            return Err(SecretError::Empty {
                reference: reference.to_owned(),
            });
        }
        Ok(Self {
            reference: reference.to_owned(),
            value: value.into_bytes(),
        })
    }

    /// Where the secret came from, safe to print.
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// The secret's bytes, for the one place that uses them.
    pub fn expose(&self) -> &[u8] {
        &self.value
    }

    /// Compares in time independent of where the inputs differ, and of their lengths: both
    /// sides are hashed first, then every byte of the digests is compared.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        let expected = Sha256::digest(&self.value);
        let given = Sha256::digest(candidate);
        expected
            .iter()
            .zip(given.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({})", self.reference)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_one_line() {
        // Found by the config fuzz corpus: a name with a newline split the start-up error.
        let name = "IDEMPOTENCY_PROXY_NO\nSUCH";
        for reference in [format!("env:{name}"), "file:/no/such\ndir".to_owned()] {
            let reason = Secret::resolve(&reference).unwrap_err().to_string();
            assert!(!reason.contains('\n'), "{reason}");
        }
    }

    #[test]
    fn reads_a_variable_and_names_one_not_set() {
        let secret = Secret::resolve_in("env:SIGNING", |name| {
            assert_eq!(name, "SIGNING");
            Ok("s3cret".to_owned())
        })
        .unwrap();
        assert_eq!(secret.expose(), b"s3cret");
        assert_eq!(secret.reference(), "env:SIGNING");
        let unset = Secret::resolve("env:IDEMPOTENCY_DELIVERY_NO_SUCH_VARIABLE").unwrap_err();
        assert!(matches!(unset, SecretError::NotSet { .. }), "{unset}");
        let empty = Secret::resolve_in("env:EMPTY", |_| Ok(String::new())).unwrap_err();
        assert!(matches!(empty, SecretError::Empty { .. }), "{empty}");
    }

    #[test]
    fn reads_files_and_refuses_inline_or_empty() {
        let path =
            std::env::temp_dir().join(format!("idempotency-proxy-secret-{}", std::process::id()));
        std::fs::write(&path, "s3cret\n").unwrap();
        let secret = Secret::resolve(&format!("file:{}", path.display())).unwrap();
        assert_eq!(secret.expose(), b"s3cret");
        assert!(secret.matches(b"s3cret"));
        assert!(!secret.matches(b"s3cre"));
        assert!(!secret.matches(b""));
        assert!(!format!("{secret:?}").contains("s3cret"));
        std::fs::write(&path, "\n").unwrap();
        assert!(Secret::resolve(&format!("file:{}", path.display())).is_err());
        assert!(matches!(
            Secret::resolve("s3cret"),
            Err(SecretError::Inline)
        ));
        let unset = Secret::resolve("env:IDEMPOTENCY_PROXY_SURELY_UNSET").unwrap_err();
        assert!(std::error::Error::source(&unset).is_some(), "{unset:?}");
        std::fs::remove_file(path).unwrap();
    }
}
