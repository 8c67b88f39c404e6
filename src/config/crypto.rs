//! The config keys that name keys and secrets for cryptography: `encryption_key` and
//! `encryption_old_keys` (records sealed at rest), and a route's `verify` table (signed
//! webhooks). Each names its secret as `env:NAME` or `file:PATH`, never inline, and is checked
//! at load, so a wrong key length or scheme stops the start rather than the first request.

use toml::Spanned;

use crate::config::common::error::{ConfigError, Reason};
use crate::config::common::source::Source;
use crate::config::common::values::duration;
use crate::config::routes::keys::VerifyTable;
use crate::store::{SealingKey, SealingKeys};
use idempotency_core::policy::Verifier;
use idempotency_core::Secret;

/// The sealing keys, if `encryption_key` is set; old keys without a current one are refused.
pub(super) fn encryption(
    src: &Source,
    current: &Option<Spanned<String>>,
    old: &[Spanned<String>],
) -> Result<Option<SealingKeys>, ConfigError> {
    let Some(current) = current else {
        return match old.first() {
            Some(first) => Err(src.bad(
                first,
                "encryption_old_keys",
                "old keys only open records; set encryption_key too",
            )),
            None => Ok(None),
        };
    };
    let current = sealing_key(src, current, "encryption_key")?;
    let old = old
        .iter()
        .map(|key| sealing_key(src, key, "encryption_old_keys"))
        .collect::<Result<_, _>>()?;
    Ok(Some(SealingKeys::new(current, old)))
}

fn sealing_key(src: &Source, raw: &Spanned<String>, key: &str) -> Result<SealingKey, ConfigError> {
    let secret = Secret::resolve(raw.get_ref()).map_err(|reason| src.bad(raw, key, reason))?;
    SealingKey::from_secret(&secret).map_err(|reason| src.bad(raw, key, reason))
}

/// Checks a `verify` table and reads its secret.
pub(super) fn verifier(table: &VerifyTable) -> Result<Verifier, String> {
    let secret = Secret::resolve(&table.secret).map_err(Reason::into_reason)?;
    let tolerance = table.tolerance.as_deref().map(duration).transpose()?;
    Verifier::new(table.scheme, secret, tolerance).map_err(Reason::into_reason)
}

/// A verifier in the file's vocabulary, for `--check`.
pub(super) fn verify_table(verifier: &Verifier) -> VerifyTable {
    VerifyTable {
        scheme: verifier.scheme(),
        secret: verifier.secret().reference().to_owned(),
        tolerance: verifier
            .tolerance()
            .map(|t| humantime::format_duration(t).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::config::{load_str, ConfigError, Overrides, Settings};

    /// A secret file for one test; its path is what the config names.
    fn secret_file(name: &str, value: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "idempotency-proxy-config-{name}-{}",
            std::process::id()
        ));
        std::fs::write(&path, value).unwrap();
        path
    }

    fn load(text: &str) -> Result<Settings, ConfigError> {
        let text = format!("upstream = \"http://127.0.0.1:9000\"\n{text}");
        load_str("config.toml", &text, &Overrides::default())
    }

    #[test]
    fn encryption_keys_load_print_and_round_trip() {
        let current = secret_file("enc-current", &"0f".repeat(32));
        let old = secret_file("enc-old", "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=\n");
        let text = format!(
            "encryption_key = \"file:{}\"\nencryption_old_keys = [\"file:{}\"]\n",
            current.display(),
            old.display()
        );
        let settings = load(&text).unwrap_or_else(|e| panic!("{e}"));
        let keys = settings.encryption.as_ref().unwrap();
        assert_eq!(keys.old().len(), 1);
        let printed = settings.to_toml();
        assert!(printed.contains(&format!("encryption_key = \"file:{}\"", current.display())));
        assert!(!printed.contains(&"0f".repeat(32)), "{printed}");
        let again = load_str("check.toml", &printed, &Overrides::default()).unwrap();
        assert_eq!(format!("{settings:?}"), format!("{again:?}"));
    }

    #[test]
    fn bad_encryption_keys_stop_the_start_without_showing_the_key() {
        let short = secret_file("enc-short", &"0f".repeat(31));
        let err = load(&format!("encryption_key = \"file:{}\"\n", short.display()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.toml:2: key \"encryption_key\""),
            "{err}"
        );
        assert!(!err.contains(&"0f".repeat(31)), "{err}");
        let inline = load("encryption_key = \"0f0f\"\n").unwrap_err().to_string();
        assert!(inline.contains("never inline"), "{inline}");
        let lonely = load(&format!(
            "encryption_old_keys = [\"file:{}\"]\n",
            short.display()
        ));
        assert!(lonely
            .unwrap_err()
            .to_string()
            .contains("set encryption_key too"));
    }

    #[test]
    fn verify_tables_load_print_and_refuse_mistakes() {
        let secret = secret_file("verify", "whsec_c2VjcmV0");
        let route = |verify: &str| {
            format!(
                "[[routes]]\nname = \"hooks\"\npath_prefix = \"/hooks\"\nupstream = \"http://127.0.0.1:9001\"\n[routes.verify]\n{verify}\nsecret = \"file:{}\"\n",
                secret.display()
            )
        };
        let settings = load(&route("scheme = \"standard-webhooks\"\ntolerance = \"1m\""))
            .unwrap_or_else(|e| panic!("{e}"));
        let printed = settings.to_toml();
        assert!(
            printed.contains("scheme = \"standard-webhooks\""),
            "{printed}"
        );
        assert!(printed.contains("tolerance = \"1m\""), "{printed}");
        let again = load_str("check.toml", &printed, &Overrides::default()).unwrap();
        assert_eq!(format!("{settings:?}"), format!("{again:?}"));

        let github = load(&route("scheme = \"github\"\ntolerance = \"1m\"")).unwrap_err();
        assert!(
            github.to_string().contains("key \"verify\": github"),
            "{github}"
        );
        assert!(load(&route("scheme = \"gitlab\"")).is_err());
        assert!(load(&route("scheme = \"github\"\nalgorithm = \"sha1\"")).is_err());
        let plain = secret_file("verify-plain", "not-base64");
        let plain = route("scheme = \"standard-webhooks\"")
            .replace(&secret.display().to_string(), &plain.display().to_string());
        assert!(load(&plain).unwrap_err().to_string().contains("whsec_"));
    }
}
