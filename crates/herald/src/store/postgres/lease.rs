//! Connections that went bad leave the pool. A pooled connection to a
//! primary that hung (stopped, its disk stalled) looks open: the pool's
//! cheap check asks only whether the socket is closed, and every request
//! handed that connection would wait as long as the hang lasts. So:
//!
//! - a read's connection is lent as a [`Lease`]; one held longer than
//!   [`SUSPECT_AFTER`] (its request was cut off by the shard's time limit, or
//!   was merely that slow) is taken out of the pool when dropped, never reused;
//! - that, and a failed write batch, raise the shard's [`Fence`]: every
//!   pooled connection made before it is closed instead of reused, since the
//!   host they reach may be the one that failed (a primary gone, hung or
//!   demoted). New connections then find the primary (`connect.rs`).
//!
//! A slow but healthy shard costs reconnects only, each a fraction of the
//! time that made it suspect.
//!
//! A connection that sat in the pool [`IDLE_CHECK_AFTER`] or longer since it
//! was last lent is checked with one empty query before it is lent again
//! ([`idle_check`]): the server may have closed it meanwhile (a restart, an
//! idle timeout, a failover), or a firewall dropped it without a word. One
//! that does not answer within [`IDLE_CHECK_TIMEOUT`] is closed and raises
//! the fence, and the pool makes another. A connection in steady use pays
//! nothing; a lull costs one round trip per connection.
//!
//! Not here: finding the primary (`connect.rs`), the time limits of shard
//! calls (`sharded`), running a request again whose connection was gone (`retry.rs`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::{ClientWrapper, Hook, HookError, Object};

use crate::store::shard_spec::ShardName;

/// A read that holds its connection this long is taken as hung. Below the
/// shard calls' one-second limit, so that every call cut off by it counts.
pub(super) const SUSPECT_AFTER: Duration = Duration::from_millis(900);

/// A pooled connection unused this long is checked before it is lent. Well
/// under the idle timeouts of servers, poolers and firewalls (minutes), and
/// long enough that connections in steady use (the pool lends the one
/// returned last first) are never checked.
pub(super) const IDLE_CHECK_AFTER: Duration = Duration::from_secs(15);

/// The idle check's round trip answers within this, or the connection is
/// closed: a healthy server answers an empty query in well under a
/// millisecond, and a hung one must leave room, within the shard calls'
/// one-second limit, for a new connection (`connect.rs`: 500 ms a host).
pub(super) const IDLE_CHECK_TIMEOUT: Duration = Duration::from_millis(250);

/// Pooled connections made before this instant are not reused.
pub(super) struct Fence {
    since: Mutex<Option<Instant>>,
    shard: ShardName,
}

impl Fence {
    pub(super) fn new(shard: ShardName) -> Fence {
        Fence { since: Mutex::new(None), shard }
    }

    /// Retires every connection made so far; `why` is counted by its label.
    pub(super) fn raise(&self, why: &'static str) {
        *self.since.lock().expect("fence lock poisoned") = Some(Instant::now());
        metrics::counter!("herald_store_pg_fence_total", "shard" => self.shard.to_string(), "reason" => why)
            .increment(1);
    }

    fn retires(&self, created: Instant) -> bool {
        self.since.lock().expect("fence lock poisoned").is_some_and(|since| created <= since)
    }
}

/// The pool's check before it hands out a pooled connection again.
pub(super) fn recycle_check(fence: std::sync::Arc<Fence>) -> Hook {
    Hook::sync_fn(move |_, metrics| {
        if fence.retires(metrics.created) {
            return Err(HookError::message("made before the shard's last failure"));
        }
        Ok(())
    })
}

/// The pool's check of a connection that sat idle (see the module
/// documentation), after its own check that the socket is open. Each one
/// that fails is counted (`herald_store_pg_idle_closed_total`) and raises the
/// fence: what silenced one idle connection (a host gone, a network that
/// dropped them) silenced the others, and checking each in turn, a quarter
/// second apiece, would outlast the request that waits for one.
pub(super) fn idle_check(fence: std::sync::Arc<Fence>) -> Hook {
    Hook::async_fn(move |client, used| {
        let idle = used.last_used();
        let fence = fence.clone();
        Box::pin(async move {
            if idle < IDLE_CHECK_AFTER {
                return Ok(());
            }
            let failed = match tokio::time::timeout(IDLE_CHECK_TIMEOUT, client.simple_query("")).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => HookError::Backend(e),
                Err(_) => HookError::message("an idle connection did not answer its check in time"),
            };
            tracing::warn!(
                shard = %fence.shard,
                idle_s = idle.as_secs(),
                error = %failed,
                "an idle postgres connection failed its check: closed, and the shard's older connections retired"
            );
            metrics::counter!("herald_store_pg_idle_closed_total", "shard" => fence.shard.to_string()).increment(1);
            fence.raise("idle");
            Err(failed)
        })
    })
}

/// A pooled connection lent to one read. See the module documentation.
pub(crate) struct Lease {
    conn: Option<Object>,
    since: Instant,
    fence: std::sync::Arc<Fence>,
}

impl Lease {
    pub(super) fn new(conn: Object, fence: std::sync::Arc<Fence>) -> Lease {
        Lease { conn: Some(conn), since: Instant::now(), fence }
    }
}

impl std::ops::Deref for Lease {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        self.conn.as_ref().expect("a lease holds its connection until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.since.elapsed() >= SUSPECT_AFTER
            && let Some(conn) = self.conn.take()
        {
            tracing::warn!(
                shard = %self.fence.shard,
                held_ms = self.since.elapsed().as_millis() as u64,
                "a postgres connection was held too long: closed, and the shard's older connections retired"
            );
            drop(Object::take(conn));
            self.fence.raise("slow");
        }
    }
}

/// Takes a connection that failed out of the pool for good.
pub(super) fn discard(conn: Object) {
    drop(Object::take(conn));
}
