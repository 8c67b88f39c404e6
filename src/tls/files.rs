//! Reading the PEM files the config names as `file:PATH`: certificate chains, CA bundles and
//! private keys. Every refusal names the file, as an operator with several pairs needs to know
//! which one to fix, and none quotes what the file holds (a key is a secret).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The path in a `file:PATH` reference.
fn path(reference: &str) -> Result<&str, String> {
    reference
        .strip_prefix("file:")
        .filter(|path| !path.is_empty())
        .ok_or_else(|| format!("expected \"file:PATH\" naming a PEM file, not {reference:?}"))
}

fn read(path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {path:?}: {e}"))
}

/// Every certificate in the PEM file `reference` names, in file order; at least one.
pub(crate) fn certificates(reference: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let path = path(reference)?;
    let pem = read(path)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{path:?} is not a valid PEM file: {e}"))?;
    if certificates.is_empty() {
        return Err(format!("{path:?} holds no PEM certificate"));
    }
    Ok(certificates)
}

/// The first private key (PKCS#8, RSA or EC) in the PEM file `reference` names.
pub(crate) fn private_key(reference: &str) -> Result<PrivateKeyDer<'static>, String> {
    let path = path(reference)?;
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("{path:?} holds no PEM private key (PKCS#8, RSA or EC)")
        }
        e => format!("{path:?} is not a valid PEM file: {e}"),
    })
}

/// Where the reference points, for messages about a pair of files.
pub(super) fn shown(reference: &str) -> &str {
    reference.strip_prefix("file:").unwrap_or(reference)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, text: &str) -> String {
        let path = std::env::temp_dir().join(format!(
            "idempotency-proxy-pem-{name}-{}",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap();
        format!("file:{}", path.display())
    }

    #[test]
    fn refusals_name_the_file_and_never_its_content() {
        let missing = certificates("file:/no/such/cert.pem").unwrap_err();
        assert!(missing.contains("\"/no/such/cert.pem\""), "{missing}");
        let secret = "not-a-key-but-secret";
        let garbage = temp("garbage", secret);
        let reason = private_key(&garbage).unwrap_err();
        assert!(reason.contains("holds no PEM private key"), "{reason}");
        assert!(reason.contains(shown(&garbage)), "{reason}");
        assert!(!reason.contains(secret), "{reason}");
        let reason = certificates(&garbage).unwrap_err();
        assert!(reason.contains("holds no PEM certificate"), "{reason}");
        assert!(certificates("/bare/path.pem")
            .unwrap_err()
            .contains("file:PATH"));
    }

    #[test]
    fn a_truncated_pem_block_is_refused() {
        let truncated = temp("truncated", "-----BEGIN CERTIFICATE-----\nMIIB\n");
        let reason = certificates(&truncated).unwrap_err();
        assert!(reason.contains("not a valid PEM file"), "{reason}");
    }
}
