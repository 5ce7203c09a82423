//! A connection of a fresh node without a socket, for fuzzing: the node is
//! built as the server builds one (embedded store, in-process broker, hub,
//! chat rules), and its connection is a [`FrameConn`]. Here rather than in
//! `gateway`, because it needs the server's wiring, which sits above the
//! gateway.

use std::path::Path;
use std::sync::Arc;

use crate::auth::Tokens;
use crate::broker::memory::MemoryBroker;
use crate::config::Config;
use crate::gateway::harness::FrameConn;
use crate::server::Core;
use crate::store::Store;
use crate::store::sqlite::SqliteStore;

/// A token's lifetime in the harness: long enough for any run.
const TOKEN_TTL_S: u64 = 3600;

/// One connection of a fresh node. See the module documentation.
pub struct FrameHarness {
    conn: FrameConn,
    tokens: Arc<Tokens>,
    store: Arc<dyn Store>,
}

impl FrameHarness {
    /// A connection of a fresh node: embedded store in `dir`, in-process broker, HS256 secret `secret`.
    pub async fn new(dir: &Path, secret: &str) -> anyhow::Result<FrameHarness> {
        let config = Config::for_tests(dir.to_path_buf(), secret, "harness-api-key-0123456789abcdef0123456789");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir)?);
        let core = Core::new(&config, store.clone(), Arc::new(MemoryBroker::new()), "http://127.0.0.1:1", false)?;
        Ok(FrameHarness { conn: FrameConn::open(core.gateway)?, tokens: core.tokens, store })
    }

    /// A token for (workspace, user) signed with the node's secret.
    pub fn token(&self, ws: &str, user: &str) -> String {
        self.tokens.issue(ws, user, TOKEN_TTL_S).expect("the harness has a secret")
    }

    /// Feeds one text frame as the connection's reader would, and waits
    /// until the request it started (if any) has answered.
    pub async fn text(&mut self, frame: &str) {
        self.conn.text(frame).await;
    }

    /// Feeds one binary frame.
    pub async fn binary(&mut self, _frame: &[u8]) {
        self.conn.binary();
    }

    /// The frames queued for the client since the last call, and the close
    /// code requested so far, if any.
    pub fn take(&mut self) -> (Vec<String>, Option<u16>) {
        self.conn.take()
    }

    /// Ends the connection as a socket close would (its watches end), and
    /// flushes the node's store.
    pub async fn close(self) {
        self.conn.end().await;
        self.store.close().await;
    }
}
