//! The broker helpers do what the broker tests rely on: a private `nats-server` restarts on its
//! port, and a RabbitMQ vhost exists while its value lives and is gone after.

use std::time::Duration;

use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::poll;
use idempotency_test_support::rabbitmq::{rabbitmqctl, RabbitVhost};
use tokio::net::TcpStream;

#[tokio::test]
async fn a_nats_server_restarts_on_its_port() {
    let Some(mut server) = NatsServer::start().await else {
        return;
    };
    let port = server.port();
    assert!(server.url().ends_with(&format!(":{port}")));
    TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    server.kill();
    poll::until(Duration::from_secs(5), "the port refuses", async || {
        TcpStream::connect(("127.0.0.1", port)).await.is_err()
    })
    .await;
    server.restart().await;
    assert_eq!(server.port(), port);
    TcpStream::connect(("127.0.0.1", port)).await.unwrap();
}

#[test]
fn a_vhost_lives_as_long_as_its_value() {
    let Some(vhost) = RabbitVhost::create("helper") else {
        return;
    };
    let name = vhost.name().to_owned();
    assert!(vhost.url().ends_with(&format!("/{name}")));
    let listed = || rabbitmqctl(&["-q", "list_vhosts"]).unwrap();
    assert!(listed().lines().any(|line| line == name), "{}", listed());
    drop(vhost);
    assert!(!listed().lines().any(|line| line == name), "{}", listed());
}
