//! The scenarios, one module each: what a run sets up, what it measures and
//! the columns it reports. A scenario builds on the shared modules (clients,
//! servers, fleets, reports) and never on another scenario: a piece two
//! scenarios need moves out to a shared module (`pubsub` for `fanout` and
//! `hot`, `join_tally` for both join floods). A scenario with two parts keeps
//! the second in its own folder (`sends/joins`, `inbox/`). Drivers above the
//! scenarios (`compare`, `smoke`) call them; the scenarios do not know them.

pub mod cell;
pub mod churn;
pub mod fanout;
pub mod files;
mod files_local;
pub mod hot;
pub mod idle;
pub mod inbox;
pub mod inbox_live;
pub mod joinflood;
pub mod members;
pub mod presence;
pub mod replication;
pub mod search;
pub mod sendhook;
pub mod sends;
pub mod slowloris;
pub mod streams;
pub mod webhook;
