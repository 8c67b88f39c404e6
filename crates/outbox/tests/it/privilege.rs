//! Least privilege: with the table, its indexes and triggers made by their owner, a role that
//! holds only row rights (and USAGE on the `seq` sequence) runs the relay, which checks and
//! runs no DDL; when something is missing and the role may not add it, the start is refused
//! naming the object and the statements to run.

use crate::common;

use common::{event, ordered, Db, HyperTransport, Relays, WAIT};
use idempotency_outbox::{Outbox, OutboxError};
use idempotency_postgres::{ConnectOptions, DatabaseUrl};
use idempotency_test_support::postgres_server::shared_postgres;

fn outbox_as(url: &str, db: &Db, receiver: &common::Receiver) -> Outbox {
    let url = DatabaseUrl::resolve(url).unwrap();
    Outbox::new(db.config(receiver), url, ConnectOptions::default()).unwrap()
}

#[tokio::test]
async fn a_role_with_row_rights_runs_the_relay_and_is_told_what_it_may_not_add() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let db = Db::on(server.fresh_database()).await;
    let database = db.url.rsplit('/').next().unwrap().to_owned();
    let url = server.row_only_role(&database, &["outbox"], &["outbox_seq_seq"]);
    let receiver = common::Receiver::start().await;

    let outbox = outbox_as(&url, &db, &receiver);
    outbox.prepare_table().await.unwrap();
    let relay = outbox.start_relay(HyperTransport::shared());
    db.commit(&[event("plain"), ordered("o1", "a"), ordered("o2", "a")])
        .await;
    for id in ["plain", "o1", "o2"] {
        db.until_delivered(id).await;
    }
    relay.drain(WAIT).await;

    db.execute("DROP INDEX outbox_ready").await;
    let Err(OutboxError::Table(refused)) = outbox_as(&url, &db, &receiver).prepare_table().await
    else {
        panic!("refused");
    };
    let why = refused.to_string();
    assert!(why.contains("index outbox_ready missing"), "{why}");
    assert!(
        why.contains("CREATE INDEX IF NOT EXISTS \"outbox_ready\""),
        "{why}"
    );
}
