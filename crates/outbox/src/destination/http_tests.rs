//! The request an HTTP attempt sends, and what its answer makes of the attempt.

use http::Response;
use idempotency_core::BoxError;
use idempotency_delivery::Secret;

use super::*;
use crate::destination::message::{build, tests::row};
use crate::table::PayloadKind;

/// Never called: these tests build requests and judge answers without sending.
#[derive(Debug)]
struct Unsent;

#[async_trait]
impl Transport for Unsent {
    async fn send(&self, _: Request<Bytes>) -> Result<Response<()>, BoxError> {
        unreachable!("not sent in these tests")
    }
}

fn publisher(signer: Option<WebhookSigner>) -> HttpPublisher {
    let url = "http://127.0.0.1:9/events?v=1".parse().unwrap();
    HttpPublisher::new(Arc::new(Unsent), url, Method::POST, signer)
}

#[test]
fn the_relays_headers_come_after_and_over_the_rows() {
    let headers = r#"{"Idempotency-Key": "mine", "Outbox-Seq": "1", "X-Tenant": "t1", "Content-Type": "application/cloudevents+json"}"#;
    let message = build(PayloadKind::Json, &row(Some(headers))).unwrap();
    let request = publisher(None)
        .request(&message, SystemTime::now())
        .unwrap();
    assert_eq!(request.uri(), "http://127.0.0.1:9/events?v=1");
    assert_eq!(request.method(), Method::POST);
    let headers = request.headers();
    assert_eq!(headers["idempotency-key"], "evt_1");
    assert_eq!(headers["delivery-attempt"], "3");
    assert_eq!(headers["outbox-topic"], "payment.confirmed");
    assert_eq!(headers["outbox-aggregate-id"], "order-7");
    assert_eq!(headers["outbox-seq"], "41");
    assert_eq!(headers["x-tenant"], "t1");
    assert_eq!(headers["content-type"], "application/cloudevents+json");
    assert!(headers.get("webhook-signature").is_none());
    assert_eq!(request.body().as_ref(), br#"{"order":7}"#);
    let mut loose = row(None);
    loose.aggregate_id = None;
    let message = build(PayloadKind::Bytes, &loose).unwrap();
    let plain = publisher(None)
        .request(&message, SystemTime::now())
        .unwrap();
    assert_eq!(plain.headers()["content-type"], "application/octet-stream");
    assert!(plain.headers().get("outbox-aggregate-id").is_none());
}

#[test]
fn a_signed_request_carries_the_three_webhook_headers() {
    // A file, not a variable: the environment is shared by every test thread.
    let path = std::env::temp_dir().join(format!("outbox-http-secret-{}", std::process::id()));
    std::fs::write(&path, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let secret = Secret::resolve(&format!("file:{}", path.display())).unwrap();
    let signer = WebhookSigner::new(&secret).unwrap();
    let at = UNIX_EPOCH + Duration::from_secs(1_614_265_330);
    let message = build(PayloadKind::Json, &row(None)).unwrap();
    let request = publisher(Some(signer.clone()))
        .request(&message, at)
        .unwrap();
    let headers = request.headers();
    assert_eq!(headers["webhook-id"], "evt_1");
    assert_eq!(headers["webhook-timestamp"], "1614265330");
    let expected = signer.sign("evt_1", 1_614_265_330, br#"{"order":7}"#);
    assert_eq!(headers["webhook-signature"], expected.as_str());
}

fn answer(status: u16, retry_after: Option<&str>, now: SystemTime) -> Delivery {
    let mut headers = HeaderMap::new();
    if let Some(value) = retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
    }
    answered(StatusCode::from_u16(status).unwrap(), &headers, now)
}

#[test]
fn success_gone_and_failures() {
    let now = SystemTime::now();
    let ok = Some(StatusCode::NO_CONTENT);
    assert_eq!(answer(204, None, now), Delivery::Delivered { status: ok });
    assert!(matches!(
        answer(410, None, now),
        Delivery::Dead {
            status: Some(StatusCode::GONE),
            ..
        }
    ));
    let Delivery::Failed {
        status,
        retry_after,
        reason,
    } = answer(503, None, now)
    else {
        panic!("failed")
    };
    assert_eq!(
        (status, retry_after),
        (Some(StatusCode::SERVICE_UNAVAILABLE), None)
    );
    assert_eq!(reason, "the receiver answered 503");
}

#[test]
fn retry_after_is_read_as_seconds_or_a_date() {
    let now = SystemTime::now();
    let asked = |value| match answer(429, Some(value), now) {
        Delivery::Failed { retry_after, .. } => retry_after,
        other => panic!("{other:?}"),
    };
    assert_eq!(asked("7"), Some(Duration::from_secs(7)));
    let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
    let waited = asked(&date).unwrap();
    assert!(
        waited <= Duration::from_secs(30) && waited >= Duration::from_secs(28),
        "{waited:?}"
    );
    assert_eq!(asked("soon"), None, "unreadable: ignored");
}
