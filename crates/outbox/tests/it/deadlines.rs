//! Deadlines: a database that stops answering (frozen, every backend too, as when its path
//! drops packets) is found out by the relay's own deadlines, not by TCP minutes later: the
//! relay says it is paused and names the reason, and resumes by itself once the database
//! answers again, losing nothing.

use crate::common;

use common::{event, Db, HyperTransport, Receiver, Relays, WAIT};
use idempotency_outbox::Health;
use idempotency_test_support::outbox::CHANNEL;
use idempotency_test_support::poll;
use idempotency_test_support::postgres_server::PostgresServer;

#[tokio::test]
async fn a_database_that_stops_answering_pauses_the_relay_and_it_says_so() {
    let Some(server) = PostgresServer::start().await else {
        return;
    };
    let db = Db::on(server.fresh_database()).await;
    let receiver = Receiver::start().await;
    let mut config = db.config(&receiver);
    config.notify_channel = Some(CHANNEL.to_owned());
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[event("before")]).await;
    db.until_delivered("before").await;
    assert_eq!(relay.health(), Health::Ready);

    let frozen = server.freeze();
    let why = poll::until(
        WAIT,
        "the relay says the database does not answer",
        async || match relay.health() {
            Health::Unreachable(why) => Some(why),
            _ => None,
        },
    )
    .await;
    assert!(why.contains("timeout"), "{why}");

    drop(frozen);
    db.commit(&[event("after")]).await;
    db.until_delivered("after").await;
    poll::until(WAIT, "the relay is ready again", async || {
        relay.health().is_ready().then_some(())
    })
    .await;
    relay.drain(WAIT).await;
}
