//! A shard's identity, recorded in the shard itself: the name chats are
//! routed by and a random id, the one row of `herald_shard`. Two nodes that
//! reach one database under two names (`localhost` on one, `127.0.0.1` on
//! the other) would route one chat to two seq streams; so a node whose name
//! for a shard is not the recorded one refuses the shard, and a node given
//! one database twice (two spellings, two names) refuses the second entry.
//!
//! Not here: the table (`postgres/schema.sql`), when the check runs (`postgres`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::apply::now_ms;
use super::shard_spec::ShardName;

/// The shards one node has checked, by recorded id, with the name and URL
/// each was given: the second entry reaching one database finds the first.
#[derive(Debug, Clone, Default)]
pub struct Claims(Arc<Mutex<HashMap<String, (String, String)>>>);

/// Why a shard's identity could not be confirmed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityError {
    #[error(transparent)]
    Pg(#[from] tokio_postgres::Error),
    /// The shard must not be used under this entry; the message, for
    /// operators, says which URL recorded which name.
    #[error("{0}")]
    Refused(String),
}

/// Records `name` as the shard's name if it has none yet: a new shard, or
/// one from before names (schema 1), which thereby adopts the name this node
/// gives it; a bare URL records its derived name, so routing stays as it was.
/// Then refuses the shard if this node already uses it under another
/// entry, or if it recorded another name. `shown` is the URL without
/// password. Answers the shard's id.
pub(crate) async fn check(
    client: &tokio_postgres::Client,
    name: &ShardName,
    shown: &str,
    claims: &Claims,
) -> Result<String, IdentityError> {
    let fresh_id = format!("{:032x}", rand::random::<u128>());
    client
        .execute(
            "INSERT INTO herald_shard (name, id, created_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&name.as_str(), &fresh_id, &now_ms()],
        )
        .await?;
    let row = client.query_one("SELECT name, id FROM herald_shard", &[]).await?;
    let (recorded, id): (String, String) = (row.get(0), row.get(1));
    if id == fresh_id {
        tracing::info!(shard = %name, id, "shard name recorded in the shard");
    }
    // One database given twice is named twice, so this comes before the name check: it says more.
    let mut claims = claims.0.lock().expect("claims lock poisoned");
    if let Some((other, other_shown)) = claims.get(&id)
        && other != name.as_str()
    {
        return Err(IdentityError::Refused(format!(
            "{shown} (shard {:?}) and {other_shown} (shard {other:?}) reach one database (or copies of one): \
             both record shard id {id}; give each shard once",
            name.as_str()
        )));
    }
    if recorded != name.as_str() {
        let how = if name.is_explicit() { "" } else { " (derived from how its URL spells host, port and database)" };
        return Err(IdentityError::Refused(format!(
            "{shown} records the shard name {recorded:?}, but this node's --store names it {:?}{how}: \
             every node must give a shard the name it recorded, or one chat is routed to two seq streams \
             (renaming a shard moves its chats; see docs/operations.md)",
            name.as_str()
        )));
    }
    claims.insert(id.clone(), (name.as_str().to_string(), shown.to_string()));
    Ok(id)
}
