//! A connection of a real node without a socket, for fuzzing a connection's
//! frame handling: frames go in as the reader would hand them over, and what
//! the connection queued for its client comes out. Everything behind the
//! connection is the real thing (embedded store, in-process broker, hub,
//! chat rules); only the WebSocket framing is left out, and Autobahn's cases
//! cover that.

use std::path::Path;
use std::sync::Arc;

use super::conn::Conn;
use crate::auth::Tokens;
use crate::broker::memory::MemoryBroker;
use crate::config::Config;
use crate::server::Core;
use crate::store::Store;
use crate::store::sqlite::SqliteStore;

/// A token's lifetime in the harness: long enough for any run.
const TOKEN_TTL_S: u64 = 3600;

/// One connection of a fresh node. See the module documentation.
pub struct FrameHarness {
    conn: Conn,
    tokens: Arc<Tokens>,
    store: Arc<dyn Store>,
}

impl FrameHarness {
    /// A connection of a fresh node: embedded store in `dir`, in-process broker, HS256 secret `secret`.
    pub async fn new(dir: &Path, secret: &str) -> anyhow::Result<FrameHarness> {
        let config = Config::for_tests(dir.to_path_buf(), secret, "harness-api-key-0123456789abcdef0123456789");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir)?);
        let core = Core::new(&config, store.clone(), Arc::new(MemoryBroker::new()))?;
        core.gateway.take_place().map_err(|(m, _)| anyhow::anyhow!(m))?.taken();
        Ok(FrameHarness { conn: Conn::open(core.gateway, None), tokens: core.tokens, store })
    }

    /// A token for (workspace, user) signed with the node's secret.
    pub fn token(&self, ws: &str, user: &str) -> String {
        self.tokens.issue(ws, user, TOKEN_TTL_S).expect("the harness has a secret")
    }

    /// Feeds one text frame as the connection's reader would, and waits
    /// until the request it started (if any) has answered.
    pub async fn text(&mut self, frame: &str) {
        self.conn.on_text(frame);
        self.settle().await;
    }

    /// Feeds one binary frame.
    pub async fn binary(&mut self, _frame: &[u8]) {
        self.conn.on_binary();
    }

    /// The frames queued for the client since the last call, and the close
    /// code requested so far, if any.
    pub fn take(&mut self) -> (Vec<String>, Option<u16>) {
        let mut frames = Vec::new();
        let close = self.conn.outbox().drain(usize::MAX, &mut frames);
        (frames.iter().map(|f| f.as_str().to_owned()).collect(), close.map(|(code, _)| code.0))
    }

    /// Ends the connection as a socket close would (its watches end), and
    /// flushes the node's store.
    pub async fn close(mut self) {
        self.settle().await;
        self.conn.end();
        self.store.close().await;
    }

    async fn settle(&mut self) {
        if let Some(task) = self.conn.inflight() {
            let _ = task.await;
            self.conn.request_done();
        }
    }
}
