//! herald: a real-time chat server. See docs/architecture.md for the path
//! of a message through these modules:
//!
//! gateway (sockets) -> chat (rules) -> store (event log), broker (between
//! nodes) and hub (this node's fan-out) -> outbox (a connection's queue).

pub mod api;
pub mod auth;
pub mod backup;
pub mod broker;
pub mod chat;
pub mod cluster;
pub mod config;
pub mod error;
pub mod files;
pub mod front;
pub mod gateway;
pub mod guard;
#[doc(hidden)]
pub mod harness;
pub mod hashing;
pub mod hooks;
pub mod hub;
pub mod log_every;
pub mod metrics;
pub mod model;
pub mod outbox;
pub mod revoke;
pub mod server;
pub mod store;
pub(crate) mod timers;
pub(crate) mod utc;

pub use config::Config;
pub use server::run;
