//! `LISTEN` on a connection of its own: a wake-up signal for whoever waits on a channel, which
//! tells its owner when the connection is gone so it can make another.

use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client};

use crate::{options, quote_identifier, ConnectError, ConnectOptions, DatabaseUrl};

/// A connection that listens on one channel.
pub struct Listener {
    // Kept so the connection stays open (dropping the client ends it), and to check it.
    client: Client,
    messages: mpsc::UnboundedReceiver<AsyncMessage>,
}

impl Listener {
    /// Connects to `url` and runs `LISTEN channel` on the new connection.
    pub async fn start(
        url: &DatabaseUrl,
        options: &ConnectOptions,
        channel: &str,
    ) -> Result<Self, ConnectError> {
        let (sender, messages) = mpsc::unbounded_channel();
        let client = options::connect_with_messages(url, options, sender).await?;
        client
            .batch_execute(&format!("LISTEN {}", quote_identifier(channel)))
            .await?;
        Ok(Self { client, messages })
    }

    /// Asks the server for an empty answer: a connection that died silently (a server frozen,
    /// or a path that drops packets) never answers, so the caller bounds this in time.
    pub async fn ping(&self) -> Result<(), tokio_postgres::Error> {
        self.client.simple_query("").await.map(|_| ())
    }

    /// Waits for the next notification on the channel: `Some(payload)`, or `None` once the
    /// connection is gone (the listener is then spent).
    pub async fn notified(&mut self) -> Option<String> {
        loop {
            match self.messages.recv().await? {
                AsyncMessage::Notification(n) => return Some(n.payload().to_owned()),
                // Notices (a server's warnings) wake nobody.
                _ => continue,
            }
        }
    }
}
