//! What every part of the chat layer shares ([`Ground`]): the store, the broker, the hub and the
//! limits, the send hook, files and streams; and the steps every write takes. Parts borrow it;
//! none owns another part's state.

use std::sync::Arc;
use std::time::Instant;

use herald_protocol::limits::size_in_words;
use serde_json::value::RawValue;

use super::ChatLimits;
use super::files::FileService;
use super::stream::Streams;
use crate::broker::Broker;
use crate::error::Error;
use crate::guard::JoinThrottle;
use crate::hub::Hub;
use crate::model::{ChatKey, Published};
use crate::store::{Store, Write, Written};

/// The chat layer's shared state; see the module's documentation.
pub struct Ground {
    pub(super) store: Arc<dyn Store>,
    pub(super) broker: Arc<dyn Broker>,
    pub(super) hub: Arc<Hub>,
    pub(super) join_throttle: Option<JoinThrottle>,
    pub(super) limits: ChatLimits,
    /// Asked before a client's `send` or `edit` is stored (`screen.rs`).
    pub(super) send_hook: Option<Arc<crate::hooks::send::SendHook>>,
    /// v1.2: streams' `append` pushes waiting for their turn.
    pub(super) streams: Arc<Streams>,
    /// v1.2: files, when kept (every server keeps them; some tests do not).
    pub(super) files: Option<Arc<FileService>>,
}

impl Ground {
    /// Applies `write` and publishes its event, on a task that finishes even if the caller goes away.
    pub(super) async fn write(&self, write: Write) -> Result<Written, Error> {
        let (store, broker) = (self.store.clone(), self.broker.clone());
        let task = tokio::spawn(async move {
            let key = write.key().clone();
            let started = Instant::now();
            let result = store.write(write).await;
            metrics::histogram!("herald_store_write_seconds").record(started.elapsed().as_secs_f64());
            if let Ok(Written { event: Some(event), .. }) = &result {
                broker.publish(Published::new(key, event)).await;
            }
            result
        });
        match task.await {
            Ok(result) => result.map_err(Error::from),
            Err(e) => {
                tracing::error!(error = %e, "write task failed");
                Err(Error::Internal("the write did not finish".into()))
            }
        }
    }

    pub(super) fn check_body(&self, body: &RawValue) -> Result<(), Error> {
        if body.get().len() > self.limits.settings.body_limit {
            let limit = size_in_words(self.limits.settings.body_limit as u64);
            return Err(Error::TooLarge(format!("body is over {limit}")));
        }
        Ok(())
    }

    /// Fails unless `user` is a member of `key` (`forbidden`; `not_found` for
    /// no chat); with `speaking`, also while the member is muted.
    pub(super) async fn check_member(&self, key: &ChatKey, user: &str, speaking: bool) -> Result<(), Error> {
        let Some(member) = self.store.member(key, user).await? else {
            return Err(Error::Forbidden(format!("not a member of {}", key.chat)));
        };
        if speaking && member.muted_until_ms.is_some() {
            return Err(Error::Forbidden(format!("you are muted in {}", key.chat)));
        }
        Ok(())
    }
}
