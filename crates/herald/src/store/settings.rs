//! Where the event log lives: the flags that choose the store, declared
//! once. Not here: opening it (`server`), shard names and URLs' rules
//! ([`super::ShardSpec`]).

use std::path::PathBuf;

use clap::Args;

/// Where the event log lives.
#[derive(Debug, Clone, Args)]
pub struct StoreSettings {
    /// Directory of the embedded store.
    #[arg(long, env = "HERALD_DATA", default_value = "./data")]
    pub data: PathBuf,
    /// A PostgreSQL shard, `[NAME=]postgres://user@host:port/db`, once per
    /// shard. Chats are routed by NAME (1-64 of A-Z a-z 0-9 _ . -), or by
    /// `host:port/db` without one; every node must name a shard alike.
    /// `?sslmode=require&sslrootcert=PATH`: TLS, certificate verified.
    /// A shard with standbys lists its hosts, `postgres://u@h1:5432,h2:5432/db`:
    /// herald writes to whichever is the primary. Entries may also be given
    /// comma-separated in one value. With none, the embedded SQLite store in
    /// `--data` is used.
    #[arg(long = "store", env = "HERALD_STORE")]
    pub stores: Vec<String>,
}
