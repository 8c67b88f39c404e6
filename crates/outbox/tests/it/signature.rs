//! Signed deliveries, checked by an implementation that owes this project nothing: the
//! `standardwebhooks` Python package (the Standard Webhooks authors' own), fed the headers and
//! the body exactly as the receiver got them. Without Python and that package the test is
//! skipped loudly, unless `REQUIRE_STANDARD_WEBHOOKS=1` (as CI sets) makes that a failure.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{event, Db, HyperTransport, Receiver, Relays, WAIT};
use idempotency_delivery::signing::WebhookSigner;
use idempotency_delivery::Secret;
use idempotency_test_support::temp::TempPath;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Verifies each `(headers, body)` with `standardwebhooks.Webhook(secret).verify`, and with a
/// body changed by one byte (which must be refused); prints one line per case.
const VERIFY: &str = r#"
import json, sys
from standardwebhooks import Webhook, WebhookVerificationError
secret, cases = sys.argv[1], json.load(sys.stdin)
hook = Webhook(secret)
for case in cases:
    body = bytes(case["body"])
    try:
        hook.verify(body, case["headers"])
        good = "verified"
    except WebhookVerificationError as e:
        good = "refused: %s" % e
    try:
        hook.verify(body + b" ", case["headers"])
        bad = "verified"
    except WebhookVerificationError:
        bad = "refused"
    print(good, bad)
"#;

fn python_has_standard_webhooks() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import standardwebhooks"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        let why = "python3 with the standardwebhooks package (pip install standardwebhooks)";
        assert!(
            std::env::var("REQUIRE_STANDARD_WEBHOOKS").as_deref() != Ok("1"),
            "REQUIRE_STANDARD_WEBHOOKS=1 but there is no {why}"
        );
        eprintln!("SKIPPED: no {why}; set REQUIRE_STANDARD_WEBHOOKS=1 to fail");
    }
    found
}

#[tokio::test]
async fn every_attempt_is_signed_as_standard_webhooks_verify() {
    if !python_has_standard_webhooks() {
        return;
    }
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    receiver.script("evt-retried", [common::Reply::status(500)]);
    // From a file, as an operator may give it: the tests of this binary share one process
    // environment, so none of them sets a variable in it.
    let file = TempPath::new("outbox-signature-secret");
    std::fs::write(file.path(), SECRET).unwrap();
    let secret = Secret::resolve(&format!("file:{}", file.path().display())).unwrap();
    let mut config = db.config(&receiver);
    config.signer = Some(WebhookSigner::new(&secret).unwrap());
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    let body = serde_json::json!({ "customer": "Zoë Ångström", "note": "✓ paid" });
    let id = idempotency_outbox::EventId::new("evt-unicode").unwrap();
    let unicode = idempotency_outbox::Event::json(id, "payment.confirmed", &body).unwrap();
    db.commit(&[event("evt-signed"), event("evt-retried"), unicode])
        .await;
    for id in ["evt-signed", "evt-retried", "evt-unicode"] {
        db.until_delivered(id).await;
    }
    let arrivals = receiver.all();
    assert_eq!(arrivals.len(), 4, "evt-retried twice");
    let cases: Vec<serde_json::Value> = arrivals
        .iter()
        .map(|a| {
            let headers: serde_json::Map<String, serde_json::Value> = a
                .headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_str().unwrap().into()))
                .collect();
            assert_eq!(a.headers["webhook-id"], a.key.as_str());
            serde_json::json!({ "headers": headers, "body": a.body.to_vec() })
        })
        .collect();
    let mut python = Command::new("python3")
        .args(["-c", VERIFY, SECRET])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::to_vec(&cases).unwrap();
    python.stdin.take().unwrap().write_all(&input).unwrap();
    let output = python.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let lines = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines, vec!["verified refused"; 4]);
    relay.drain(WAIT).await;
}
