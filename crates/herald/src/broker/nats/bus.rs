//! The cell's bus over the NATS broker's connection: each [`Topic`] is the
//! subject `herald.<cell>.<topic>` (`nodes`, `revoke`, `online`), the
//! subjects nodes used before there was a bus, so nodes of an older build
//! still hear and answer a newer one during a rolling upgrade. Payloads go
//! out as given, without the broker's signal header.
//!
//! Also the one scatter-gather ([`scatter`]) that both [`Bus::ask`] and the
//! broker's `gather` use: a fresh inbox, subscribed before the question
//! leaves on the same connection, so no answer can come before it.
//!
//! Not here: chat subjects and signals (the broker, in the parent module).

use std::future::Future;

use async_nats::Client;
use bytes::Bytes;
use futures_util::StreamExt;

use super::{NatsBroker, subscribe_retrying};
use crate::broker::bus::{Answers, Bus, BusError, Note, Notes, Topic};
use crate::model::BoxFuture;

impl NatsBroker {
    fn topic_subject(&self, topic: Topic) -> String {
        format!("{}.{}", self.prefix, topic.name())
    }
}

/// Subscribes a new inbox of `client`, then `send`s the question with the
/// inbox as its reply address; the answers as they come.
pub(super) async fn scatter<F>(client: &Client, send: impl FnOnce(String) -> F) -> Result<Answers, BusError>
where
    F: Future<Output = Result<(), BusError>>,
{
    let inbox = client.new_inbox();
    let sub = client.subscribe(inbox.clone()).await.map_err(|e| {
        metrics::counter!("herald_broker_errors_total", "kind" => "subscribe").increment(1);
        BusError(e.to_string())
    })?;
    send(inbox).await?;
    Ok(Answers::new(sub.map(|msg| msg.payload)))
}

impl Bus for NatsBroker {
    fn post(&self, topic: Topic, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        let subject = self.topic_subject(topic);
        Box::pin(async move { self.client.publish(subject, payload).await.map_err(|e| BusError(e.to_string())) })
    }

    fn follow(&self, topic: Topic) -> BoxFuture<'_, Notes> {
        let subject = self.topic_subject(topic);
        Box::pin(async move {
            let sub = subscribe_retrying(&self.client, &subject).await;
            Notes::new(sub.map(|msg| Note { payload: msg.payload, reply: msg.reply.map(|r| r.to_string()) }))
        })
    }

    fn ask(&self, topic: Topic, payload: Bytes) -> BoxFuture<'_, Result<Answers, BusError>> {
        let subject = self.topic_subject(topic);
        Box::pin(async move {
            let send = |inbox: String| async move {
                self.client.publish_with_reply(subject, inbox, payload).await.map_err(|e| BusError(e.to_string()))
            };
            scatter(&self.client, send).await
        })
    }

    fn reply(&self, to: &str, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        let to = to.to_string();
        Box::pin(async move { self.client.publish(to, payload).await.map_err(|e| BusError(e.to_string())) })
    }
}
