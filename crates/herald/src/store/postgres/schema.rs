//! A shard's schema: `schema.sql`, applied once per process and shard on
//! the first connection, with the shard's identity confirmed on the way.
//!
//! Not here: what the identity check compares (`shard_identity`).

use super::Checked;
use crate::store::shard_identity::{self, IdentityError};

/// The schema, applied on start when `herald_schema` lacks its version.
/// Version 2 added `herald_shard`: a shard from version 1 gets it on its
/// first start under version 2, recording the name that node gives it (see
/// [`shard_identity::check`]).
/// Version 3 added the message lifecycle, mutes, bans and the inbox's counts
/// (protocol v1.1), with the values of rows stored before. Version 4 added
/// the hooks' tables; version 5 protocol v1.2's conversations; version 6 files; version 7 the
/// search index's tables; version 8 indexes messages by sender, for a user's data export; version 9 the chats
/// whose seq moved, for the tail checks (`changes.rs`).
const SCHEMA: &str = include_str!("schema.sql");
const SCHEMA_VERSION: i32 = 9;

/// Applies the schema and confirms the shard's identity, once per process
/// and shard, under an advisory lock so that nodes starting together do not race.
pub(super) async fn ensure_schema(
    shard: &Checked,
    conn: &deadpool_postgres::ClientWrapper,
) -> Result<(), IdentityError> {
    shard
        .done
        .get_or_try_init(|| async {
            conn.batch_execute("SELECT pg_advisory_lock(7424173)").await?;
            let applied = async {
                // Every version's row, not only the highest: versions added side by side (6, 7 and 8 came
                // together) may have been applied one without another by nodes of that time.
                let have: Vec<i32> = match conn.query("SELECT version FROM herald_schema", &[]).await {
                    Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
                    Err(_) => Vec::new(), // no table yet
                };
                if (2..=SCHEMA_VERSION).any(|v| !have.contains(&v)) {
                    conn.batch_execute(SCHEMA).await?;
                    tracing::info!(shard = %shard.name, version = SCHEMA_VERSION, "postgres schema applied");
                }
                let id = shard_identity::check(conn, &shard.name, &shard.shown, &shard.claims).await?;
                let _ = shard.id.set(id);
                Ok(())
            }
            .await;
            let _ = conn.batch_execute("SELECT pg_advisory_unlock(7424173)").await;
            applied
        })
        .await
        .map(|_| ())
}
