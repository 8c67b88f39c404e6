//! An outbox's admin endpoints (docs/reference.md#admin-endpoints), asked of the binary over
//! its admin listener while its relay works on a private PostgreSQL: the counts say what the
//! table holds, the dead list pages in `seq` order with ids that need percent-encoding, a retry
//! sends the row again and frees its aggregate, a delete removes it, and every refusal is a
//! problem: the token, an unknown outbox or id, a bad query, a database that is down.

use crate::common;

use common::answer::Answer;
use common::outbox::{RelayProcess, WAIT};
use common::postgres_server::{PostgresServer, Shutdown};
use common::receiver::{Receiver, Reply};
use common::temp::TempPath;
use idempotency_test_support::outbox::{event, ordered, OutboxDb};

const TOKEN: &str = "outbox-admin-token";
const BEARER: [(&str, &str); 1] = [("authorization", "Bearer outbox-admin-token")];

/// A row the relay cannot send (its headers are not an object), under an id that a URL must
/// percent-encode.
const ODD_ID: &str = "evt/7&x=1%";
const ODD_ID_ENCODED: &str = "evt%2F7%26x%3D1%25";

/// A relay of the outbox `payments` on `db` to `receiver`, with the admin token in `token`:
/// attempts may wait 30 s for an answer, so a held one stays in flight while the test looks.
fn config(db: &OutboxDb, receiver: &Receiver, token: &TempPath) -> String {
    format!(
        r#"admin_token = "file:{token}"
[[outboxes]]
name = "payments"
database = "{database}"
deliver_to = "{to}"
poll_interval = "100ms"
notify_channel = "outbox"
deliver_timeout = "30s"
retry_initial = "50ms"
retry_max = "200ms"
on_dead = "block"
"#,
        token = token.path().display(),
        database = db.url,
        to = receiver.url("/events"),
    )
}

async fn get(relay: &RelayProcess, path: &str) -> Answer {
    relay.admin.send("GET", path, &BEARER, "").await
}

/// The dead list's ids.
fn ids(answer: &Answer) -> Vec<String> {
    assert_eq!(answer.status, 200, "{answer:?}");
    let list = answer.json();
    let rows = list.as_array().expect("a JSON list");
    rows.iter()
        .map(|row| row["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The four endpoints of the outbox `name`, on the dead row `id`.
fn endpoints(name: &str, id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GET", format!("/outbox/{name}")),
        ("GET", format!("/outbox/{name}/dead")),
        ("POST", format!("/outbox/{name}/dead/{id}/retry")),
        ("DELETE", format!("/outbox/{name}/dead/{id}")),
    ]
}

/// Asks each `(method, path)` with `headers`; each must be refused with `status` and the
/// problem `kind`. The answers, for more checks.
async fn refused(
    relay: &RelayProcess,
    requests: Vec<(&str, String)>,
    headers: &[(&str, &str)],
    (status, kind): (u16, &str),
) -> Vec<Answer> {
    let mut answers = Vec::new();
    for (method, path) in requests {
        let answer = relay.admin.send(method, &path, headers, "").await;
        assert_eq!(answer.status, status, "{method} {path}: {answer:?}");
        assert_eq!(answer.problem_type(), kind, "{method} {path}");
        answers.push(answer);
    }
    answers
}

fn token_file() -> TempPath {
    let token = TempPath::new("outbox-admin-token");
    std::fs::write(token.path(), format!("{TOKEN}\n")).unwrap();
    token
}

#[tokio::test]
async fn an_operator_sees_the_table_pages_its_dead_rows_and_retries_or_deletes_them() {
    let Some(db) = OutboxDb::fresh().await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.script("a1", [Reply::status(410)]);
    receiver.script("held", [Reply::status(200).held()]);
    let token = token_file();
    let relay = RelayProcess::start("outbox-admin", &config(&db, &receiver, &token)).await;

    db.commit(&[ordered("a1", "order-A"), ordered("a2", "order-A")])
        .await;
    db.execute(&format!(
        "INSERT INTO outbox (id, topic, payload, headers) VALUES ('{ODD_ID}', 'payment.confirmed', '{{}}', '[1]')"
    ))
    .await;
    db.commit(&[event("fine"), event("held")]).await;
    db.until_dead("a1").await;
    db.until_dead(ODD_ID).await;
    db.until_delivered("fine").await;
    receiver
        .until(WAIT, "held being attempted", |r| r.held() == 1)
        .await;

    // Every path is behind the token.
    let unauthorized = (401, "unauthorized");
    refused(&relay, endpoints("payments", "a1"), &[], unauthorized).await;

    let counts = get(&relay, "/outbox/payments").await;
    assert_eq!(counts.status, 200, "{counts:?}");
    let counts = counts.json();
    assert_eq!(counts["pending"], 1, "a2, behind its dead a1: {counts}");
    assert_eq!(counts["in_flight"], 1, "held: {counts}");
    assert_eq!(counts["dead"], 2, "{counts}");
    assert_eq!(counts["delivered_last_hour"], 1, "fine: {counts}");
    assert_eq!(counts["blocked_aggregates"], 1, "order-A: {counts}");
    let oldest = &counts["oldest_pending_seconds"];
    assert!(oldest.is_f64() && oldest.as_f64() > Some(0.0), "{counts}");

    let dead = get(&relay, "/outbox/payments/dead").await;
    assert_eq!(ids(&dead), ["a1", ODD_ID], "in seq order");
    let rows = dead.json();
    let (a1, odd) = (&rows[0], &rows[1]);
    assert_eq!(a1["topic"], "payment.confirmed");
    assert_eq!(a1["aggregate_id"], "order-A");
    assert_eq!(
        (a1["attempts"].as_u64(), a1["last_status"].as_u64()),
        (Some(1), Some(410))
    );
    let created = a1["created_at"].as_str().unwrap();
    assert!(humantime::parse_rfc3339(created).is_ok(), "{created}");
    assert_eq!(odd["attempts"], 0, "never attempted");
    assert!(odd["last_status"].is_null());
    assert!(odd["aggregate_id"].is_null());
    let why = odd["last_error"].as_str().unwrap();
    assert!(why.contains("headers"), "{why}");
    for hidden in ["payload", "headers"] {
        assert!(a1.get(hidden).is_none(), "the list shows no {hidden}");
    }

    // Pages, by `limit` and `after`; an id in `after` percent-encoded.
    let first = get(&relay, "/outbox/payments/dead?limit=1").await;
    assert_eq!(ids(&first), ["a1"]);
    let next = get(&relay, "/outbox/payments/dead?limit=1&after=a1").await;
    assert_eq!(ids(&next), [ODD_ID]);
    let after_odd = format!("/outbox/payments/dead?after={ODD_ID_ENCODED}");
    assert!(ids(&get(&relay, &after_odd).await).is_empty(), "the end");

    // A bad query, an unknown outbox or id: problems, and nothing changes.
    for bad in [
        "limit=0",
        "limit=1001",
        "limit=all",
        "after=gone-since",
        "after=%20",
    ] {
        let refused = get(&relay, &format!("/outbox/payments/dead?{bad}")).await;
        assert_eq!(refused.status, 400, "{bad}");
        assert_eq!(refused.problem_type(), "bad-request", "{bad}");
    }
    refused(
        &relay,
        endpoints("refunds", "a1"),
        &BEARER,
        (404, "no-outbox"),
    )
    .await;
    // An id never there, and one of a row that is not dead.
    for id in ["never-there", "fine"] {
        let row_paths = endpoints("payments", id).split_off(2);
        refused(&relay, row_paths, &BEARER, (404, "no-delivery")).await;
    }
    assert!(
        db.row("fine").await.unwrap().delivered,
        "a delivered row stays"
    );

    // A retry: a1 is sent again (the receiver takes it now), and order-A moves on.
    let retried = relay
        .admin
        .send("POST", "/outbox/payments/dead/a1/retry", &BEARER, "")
        .await;
    assert_eq!(retried.status, 204, "{retried:?}");
    db.until_delivered("a1").await;
    db.until_delivered("a2").await;
    let a1_sent = receiver.arrivals("a1");
    assert_eq!(a1_sent.len(), 2, "once dead, once retried");
    assert!(a1_sent.iter().all(|a| a.headers["idempotency-key"] == "a1"));
    let a2_sent = receiver.arrivals("a2");
    assert!(a2_sent[0].at > a1_sent[1].at, "a2 only after a1");

    // A delete, by the percent-encoded id; the second finds nothing.
    let path = format!("/outbox/payments/dead/{ODD_ID_ENCODED}");
    let deleted = relay.admin.send("DELETE", &path, &BEARER, "").await;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    assert!(db.row(ODD_ID).await.is_none());
    let again = relay.admin.send("DELETE", &path, &BEARER, "").await;
    assert_eq!(again.problem_type(), "no-delivery");

    let counts = get(&relay, "/outbox/payments").await.json();
    assert_eq!(counts["dead"], 0, "{counts}");
    assert_eq!(counts["blocked_aggregates"], 0, "{counts}");
    receiver.release();
    db.until_delivered("held").await;
    assert_eq!(get(&relay, "/outbox/payments").await.json()["in_flight"], 0);
}

#[tokio::test]
async fn while_the_database_is_down_the_endpoints_answer_503_and_then_recover() {
    let Some(mut server) = PostgresServer::start().await else {
        return;
    };
    let db = OutboxDb::on(server.fresh_database()).await;
    let receiver = Receiver::start().await;
    receiver.script("gone", [Reply::status(410)]);
    let token = token_file();
    let relay = RelayProcess::start("outbox-admin-down", &config(&db, &receiver, &token)).await;
    db.commit(&[event("gone")]).await;
    db.until_dead("gone").await;
    assert_eq!(ids(&get(&relay, "/outbox/payments/dead").await), ["gone"]);

    server.stop(Shutdown::Immediate);
    let down = (503, "outbox-unavailable");
    for refused in refused(&relay, endpoints("payments", "gone"), &BEARER, down).await {
        let text = String::from_utf8_lossy(&refused.body).into_owned();
        assert!(
            !text.contains("127.0.0.1") && !text.contains("postgres"),
            "no address in the answer: {text}"
        );
    }

    server.restart().await;
    relay.until_ready().await;
    let counts = get(&relay, "/outbox/payments").await;
    assert_eq!(counts.status, 200, "{counts:?}");
    assert_eq!(
        counts.json()["dead"],
        1,
        "nothing was changed while it was down"
    );
}

#[tokio::test]
async fn an_operator_retries_or_deletes_dead_rows_in_bulk_by_topic_and_aggregate() {
    let Some(db) = OutboxDb::fresh().await else {
        return;
    };
    let receiver = Receiver::start().await;
    for id in ["t1", "t2", "t3", "b1", "x1"] {
        receiver.script(id, [Reply::status(410)]);
    }
    let token = token_file();
    let relay = RelayProcess::start("outbox-admin-bulk", &config(&db, &receiver, &token)).await;
    db.commit(&[event("t1"), event("t2"), event("t3")]).await;
    db.commit(&[ordered("b1", "order-B"), ordered("b2", "order-B")])
        .await;
    db.execute("INSERT INTO outbox (id, topic, payload) VALUES ('x1', 'refund.issued', '{}')")
        .await;
    for id in ["t1", "t2", "t3", "b1", "x1"] {
        db.until_dead(id).await;
    }

    // A bad filter is refused; the rows stay dead.
    let bad = relay
        .admin
        .send("POST", "/outbox/payments/dead/retry?color=red", &BEARER, "")
        .await;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.problem_type(), "bad-request");

    // Two of the three rows of the topic, oldest first; the receiver now says yes.
    for id in ["t1", "t2", "t3"] {
        receiver.script(id, [Reply::status(200)]);
    }
    let path = "/outbox/payments/dead/retry?topic=payment.confirmed&limit=2";
    let retried = relay.admin.send("POST", path, &BEARER, "").await;
    assert_eq!(retried.status, 200, "{retried:?}");
    assert_eq!(retried.json()["retried"], 2);
    db.until_delivered("t1").await;
    db.until_delivered("t2").await;
    assert!(db.row("t3").await.unwrap().dead, "past the limit");

    // Deleting the dead head of order-B by its aggregate lets b2 go (on_dead = "block").
    let path = "/outbox/payments/dead?aggregate_id=order-B";
    let deleted = relay.admin.send("DELETE", path, &BEARER, "").await;
    assert_eq!(deleted.status, 200, "{deleted:?}");
    assert_eq!(deleted.json()["deleted"], 1);
    db.until_delivered("b2").await;
    assert!(db.row("b1").await.is_none());

    // No row was inserted before 2000: none is deleted.
    let before = "/outbox/payments/dead?before=2000-01-01T00:00:00Z";
    let none = relay.admin.send("DELETE", before, &BEARER, "").await;
    assert_eq!(none.json()["deleted"], 0);
    let dead = get(&relay, "/outbox/payments/dead").await;
    assert_eq!(ids(&dead), ["t3", "x1"]);
}
