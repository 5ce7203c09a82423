//! Reaching a shard's primary. Each new pooled connection is made here, to
//! one host at a time, with a bound on the whole attempt (TCP, TLS, startup,
//! authentication and the role check), so that a host that hangs (a stopped
//! process, a stalled disk, a network that drops packets: the kernel still
//! accepts the TCP connection) is skipped rather than waited on.
//!
//! A one-host URL is tried as it is. A multi-host URL's hosts are tried the
//! way a failover needs: first the host that was the primary last time,
//! then every other host at once, and the first that answers as a primary
//! (not in recovery, and not read-only, as libpq's `read-write` means) wins
//! and is remembered. A standby answers, but is not
//! written to: after a promotion herald follows the new primary by itself,
//! whatever order the URL lists the hosts in.
//!
//! Not here: dropping connections that went bad (`lease.rs`), parsing the
//! URL into one setting per host (`shard_spec`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use deadpool_postgres::Connect;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::task::JoinHandle;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, Error, Socket};

use crate::store::shard_spec::{ShardName, chain};

/// The most one host may take to connect, authenticate and say it is the primary.
pub(super) const HOST_TIMEOUT: Duration = Duration::from_millis(500);

/// Every session's setting: a transaction left idle 3 s (its node frozen
/// mid-batch: SIGSTOP, a paused VM) is ended by the server, and its row
/// locks with it, instead of locking every other node out of its chats until
/// the node wakes. A live node never idles that long inside a transaction:
/// its whole batch is cut off at `BATCH_TIMEOUT` (3 s). The woken node's next
/// statement fails as a connection gone before COMMIT, and runs again on a
/// new one (`retry.rs`).
macro_rules! session_setup {
    () => {
        "SET idle_in_transaction_session_timeout = '3s'"
    };
}
const SESSION_SETUP: &str = session_setup!();

/// [`SESSION_SETUP`], then refuses a host in recovery, or one whose sessions
/// are read-only (an operator's `default_transaction_read_only`), with a
/// server error of its own (SQLSTATE 25006, read-only), which the pool
/// reports like any failed connection.
const PRIMARY_CHECK: &str = concat!(
    session_setup!(),
    "; DO $$ BEGIN \
    IF pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on' THEN \
    RAISE EXCEPTION 'herald: this host is a standby or read-only, not a primary taking writes' \
    USING ERRCODE = '25006'; END IF; END $$"
);

/// Connects a shard's pool to its primary. See the module documentation.
pub(super) struct PrimaryConnect<T> {
    /// One setting per host; one entry for a one-host URL.
    hosts: Vec<Config>,
    tls: T,
    /// The host that answered as the primary last.
    last: AtomicUsize,
    shard: ShardName,
}

impl<T> PrimaryConnect<T> {
    /// `hosts` empty means a one-host URL, given as `one`.
    pub(super) fn new(one: Config, hosts: Vec<Config>, tls: T, shard: ShardName) -> PrimaryConnect<T> {
        let hosts = if hosts.is_empty() { vec![one] } else { hosts };
        PrimaryConnect { hosts, tls, last: AtomicUsize::new(0), shard }
    }
}

impl<T> PrimaryConnect<T>
where
    T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    /// One host, within [`HOST_TIMEOUT`]; with `primary`, only as the primary.
    async fn attempt(&self, i: usize, primary: bool) -> Result<(Client, JoinHandle<()>), Error> {
        let config = &self.hosts[i];
        let attempt = async {
            let (client, connection) = config.connect(self.tls.clone()).await?;
            let shard = self.shard.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(shard = %shard, error = %chain(&e), "postgres connection ended");
                }
            });
            let setup = if primary { PRIMARY_CHECK } else { SESSION_SETUP };
            if let Err(e) = client.batch_execute(setup).await {
                task.abort();
                return Err(e);
            }
            Ok((client, task))
        };
        match tokio::time::timeout(HOST_TIMEOUT, attempt).await {
            Ok(result) => result,
            Err(_) => {
                metrics::counter!("herald_store_pg_host_timeouts_total", "shard" => self.shard.to_string())
                    .increment(1);
                // tokio-postgres makes its errors itself; this is the one it gives its own connect timeout.
                Err(Error::__private_api_timeout())
            }
        }
    }

    async fn primary(&self) -> Result<(Client, JoinHandle<()>), Error> {
        if self.hosts.len() == 1 {
            return self.attempt(0, false).await;
        }
        let first = self.last.load(Ordering::Relaxed);
        let mut failed = match self.attempt(first, true).await {
            Ok(found) => return Ok(found),
            Err(e) => e,
        };
        let mut others: FuturesUnordered<_> = (0..self.hosts.len())
            .filter(|&i| i != first)
            .map(|i| async move { (i, self.attempt(i, true).await) })
            .collect();
        while let Some((i, result)) = others.next().await {
            match result {
                Ok(found) => {
                    tracing::warn!(shard = %self.shard, host = i + 1, "the shard's primary is now another host");
                    metrics::counter!("herald_store_pg_primary_changes_total", "shard" => self.shard.to_string())
                        .increment(1);
                    self.last.store(i, Ordering::Relaxed);
                    return Ok(found);
                }
                Err(e) => failed = e,
            }
        }
        Err(failed)
    }
}

impl<T> Connect for PrimaryConnect<T>
where
    T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    fn connect(&self, _: &Config) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), Error>> {
        Box::pin(self.primary())
    }
}
