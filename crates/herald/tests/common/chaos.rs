//! The chaos harness: the machinery `tests/chaos.rs` tells its story with.
//! Each part is a file of its own beside this one:
//!
//! | file | owns |
//! |---|---|
//! | `chaos_cell.rs` | the processes: three herald nodes, three nats-servers, two PostgreSQL shards; killing and starting them |
//! | `chaos_run.rs` | the run's settings (seed, length), its chats and users, its clock, phase, timeline and failures, and the end (timeline kept, logs removed or shown) |
//! | `chaos_client.rs` | one client connection (over the shared test [`Client`](crate::common::Client)), why it ended, which node to go to next, backoff |
//! | `chaos_watcher.rs` | a watcher: watches every chat of its workspace, follows pushes, fetches gaps and `notify`s, holds what it got |
//! | `chaos_sender.rs` | a sender: resends with the same `client_id` until acknowledged; the ledger of acknowledged sends; quiet chats' bursts |
//! | `chaos_load.rs` | the load: every watcher and sender of the run, started and stopped |
//! | `chaos_faults.rs` | the bouncer: which fault comes when, aimed at what, and mending it |
//! | `chaos_presence.rs` | the presence audit: a probe on every node, and agreement checked after every fault's mend |
//! | `chaos_audit.rs` | the checks: convergence after the load, the logs against the ledger and every watcher, and the report |
//!
//! The shape of the run (how many nodes, chats, watchers and senders) and
//! its time bounds are the constants below. Not here: the story itself
//! (`tests/chaos.rs`).

#[path = "chaos_audit.rs"]
pub mod audit;
#[path = "chaos_cell.rs"]
pub mod cell;
#[path = "chaos_client.rs"]
pub mod client;
#[path = "chaos_faults.rs"]
pub mod faults;
#[path = "chaos_load.rs"]
pub mod load;
#[path = "chaos_presence.rs"]
pub mod presence;
#[path = "chaos_run.rs"]
pub mod run;
#[path = "chaos_sender.rs"]
pub mod sender;
#[path = "chaos_watcher.rs"]
pub mod watcher;

use std::time::Duration;

pub use cell::Cell;
pub use run::{Run, Settings};

/// herald nodes in the cell.
pub const NODES: usize = 3;
/// The run's workspaces; each has chats, watchers and senders of its own.
pub const WORKSPACES: [&str; 2] = ["w0", "w1"];
/// Chats with steady traffic, per workspace.
pub const BUSY_CHATS: usize = 3;
/// Quiet chats per workspace: bursts of sends, then silence.
pub const QUIET_CHATS: usize = 2;
/// Watchers per workspace; each watches every chat of its workspace.
pub const WATCHERS: usize = 4;
/// Senders per workspace; each sends to the busy chats of its workspace.
pub const SENDERS: usize = 3;
/// The auditor's bound on convergence.
pub const CONVERGE: Duration = Duration::from_secs(10);
/// A quiet chat's silence after each burst: longer than [`CONVERGE`], so
/// nothing but the protocol can bring its last events to its watchers.
pub const QUIET_SILENCE: Duration = Duration::from_secs(12);
/// A burst starts only this long before the load stops, or sooner: room for the burst and its silence.
pub const QUIET_ROOM: Duration = Duration::from_secs(15);
/// How long a client waits for a reply before it takes the connection for dead.
pub const REPLY_WAIT: Duration = Duration::from_secs(10);
/// After the load stops, senders keep resending a pending send this long, then give it up.
pub const SEND_GIVE_UP: Duration = Duration::from_secs(10);
/// Events per `fetch` (the protocol's most).
pub const FETCH_LIMIT: u64 = 500;
