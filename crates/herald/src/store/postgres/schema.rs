//! A shard's schema: `schema.sql`, applied once per process and shard on
//! the first connection, with the shard's identity confirmed on the way.
//!
//! Not here: what the identity check compares (`shard_identity`).

use deadpool_postgres::Object;

use super::Checked;
use crate::store::shard_identity::{self, IdentityError};

/// The schema, applied on start when `herald_schema` lacks its version.
/// Version 2 added `herald_shard`: a shard from version 1 gets it on its
/// first start under version 2, recording the name that node gives it (see
/// [`shard_identity::check`]).
/// Version 3 added the message lifecycle, mutes, bans and the inbox's counts
/// (protocol v1.1), with the values of rows stored before. Version 4 added
/// the hooks' tables; version 5 protocol v1.2's conversations; version 6 files. Version 8 indexes
/// messages by sender, for a user's data export.
const SCHEMA: &str = include_str!("schema.sql");
const SCHEMA_VERSION: i32 = 8;

/// Applies the schema and confirms the shard's identity, once per process
/// and shard, under an advisory lock so that nodes starting together do not race.
pub(super) async fn ensure_schema(shard: &Checked, conn: &Object) -> Result<(), IdentityError> {
    shard
        .done
        .get_or_try_init(|| async {
            conn.batch_execute("SELECT pg_advisory_lock(7424173)").await?;
            let applied = async {
                let have: Option<i32> = match conn.query_opt("SELECT max(version) FROM herald_schema", &[]).await {
                    Ok(row) => row.and_then(|r| r.get(0)),
                    Err(_) => None, // no table yet
                };
                if have.is_none_or(|v| v < SCHEMA_VERSION) {
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
