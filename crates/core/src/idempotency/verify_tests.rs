//! Signatures computed here with the HMAC the senders use, checked by the verifier.

use super::*;

const NOW: u64 = 1_700_000_000;

fn secret(name: &str, value: &str) -> Secret {
    let path = std::env::temp_dir().join(format!(
        "idempotency-proxy-verify-{name}-{}",
        std::process::id()
    ));
    std::fs::write(&path, value).unwrap();
    let secret = Secret::resolve(&format!("file:{}", path.display())).unwrap();
    std::fs::remove_file(path).unwrap();
    secret
}

fn hmac(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).unwrap();
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, value.parse().unwrap());
    }
    map
}

fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

#[test]
fn github_signs_the_body() {
    let verifier = Verifier::new(
        Scheme::Github,
        secret("gh", "It's a Secret to Everybody"),
        None,
    )
    .unwrap();
    let body = b"Hello, World!";
    let good = format!(
        "sha256={}",
        hex::encode(hmac(b"It's a Secret to Everybody", body))
    );
    let check =
        |value: String| verifier.verify(&headers(&[("x-hub-signature-256", value)]), body, at(NOW));
    assert_eq!(check(good.clone()), Ok(()));
    // GitHub's documented example signature for this secret and body.
    assert!(good.ends_with("757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"));
    assert!(check(good.replace("sha256=7", "sha256=8")).is_err());
    assert!(check(good.replace("sha256=", "sha1=")).is_err());
    assert!(verifier.verify(&HeaderMap::new(), body, at(NOW)).is_err());
    assert!(Verifier::new(Scheme::Github, secret("gh2", "s"), Some(DEFAULT_TOLERANCE)).is_err());
}

#[test]
fn stripe_accepts_any_v1_within_tolerance() {
    let verifier = Verifier::new(Scheme::Stripe, secret("st", "whsec_stripe"), None).unwrap();
    let body = br#"{"id":"evt_1"}"#;
    let sign = |t: u64| {
        hex::encode(hmac(
            b"whsec_stripe",
            &[format!("{t}.").as_bytes(), body].concat(),
        ))
    };
    let check = |t: u64, sigs: &str, now: u64| {
        let value = format!("t={t},{sigs}");
        verifier.verify(&headers(&[("stripe-signature", value)]), body, at(now))
    };
    let good = sign(NOW);
    assert_eq!(check(NOW, &format!("v1={good}"), NOW), Ok(()));
    assert_eq!(
        check(
            NOW,
            &format!("v1={},v1={good},v0=00", "0".repeat(64)),
            NOW + 299
        ),
        Ok(())
    );
    assert!(check(NOW, &format!("v1={good}"), NOW + 301).is_err());
    assert!(check(NOW, &format!("v1={good}"), NOW - 301).is_err());
    assert!(check(NOW + 1, &format!("v1={good}"), NOW).is_err());
    assert!(check(NOW, &format!("v0={good}"), NOW).is_err());
}

#[test]
fn standard_webhooks_signs_id_timestamp_and_body() {
    let key = b"a standard webhooks key";
    let base64 = base64::engine::general_purpose::STANDARD;
    let value = format!("whsec_{}", base64.encode(key));
    let verifier = Verifier::new(Scheme::StandardWebhooks, secret("sw", &value), None).unwrap();
    let body = b"{}";
    let signed = |id: &str, t: u64| base64.encode(hmac(key, format!("{id}.{t}.{{}}").as_bytes()));
    let check = |id: &str, t: u64, signature: String| {
        let map = headers(&[
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", t.to_string()),
            ("webhook-signature", signature),
        ]);
        verifier.verify(&map, body, at(NOW))
    };
    let good = signed("msg_1", NOW);
    assert_eq!(
        check("msg_1", NOW, format!("v1,bm9wZQ== v1,{good}")),
        Ok(())
    );
    assert!(check("msg_2", NOW, format!("v1,{good}")).is_err());
    assert!(check(
        "msg_1",
        NOW - 600,
        format!("v1,{}", signed("msg_1", NOW - 600))
    )
    .is_err());
    assert!(check("msg_1", NOW, format!("v1a,{good}")).is_err());
    let raw = secret("sw2", "not-whsec");
    assert!(Verifier::new(Scheme::StandardWebhooks, raw, None).is_err());
}

#[test]
fn what_the_outbox_signs_the_receiving_check_accepts() {
    use idempotency_delivery::signing::WebhookSigner;

    let secret = secret("round-trip", "whsec_c2VjcmV0LWtleS1vZi10aGUtc2VuZGVy");
    let signer = WebhookSigner::new(&secret).unwrap();
    let verifier = Verifier::new(Scheme::StandardWebhooks, secret, None).unwrap();
    let signed = |body: &[u8]| {
        headers(&[
            ("webhook-id", "evt_1".to_owned()),
            ("webhook-timestamp", NOW.to_string()),
            ("webhook-signature", signer.sign("evt_1", NOW, body)),
        ])
    };
    assert_eq!(verifier.verify(&signed(b"{}"), b"{}", at(NOW)), Ok(()));
    assert!(verifier.verify(&signed(b"{}"), b"{ }", at(NOW)).is_err());
    assert!(
        verifier
            .verify(&signed(b"{}"), b"{}", at(NOW + 3600))
            .is_err(),
        "stale"
    );
}
