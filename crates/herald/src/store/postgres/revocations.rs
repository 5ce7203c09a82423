//! A shard's revocations: each stored by one statement outside the
//! writer's batches (it touches no chat row), with the shard's clock.
//!
//! Not here: checking tokens against them (`revoke.rs`); storing one on
//! every shard (`sharded`).

use std::time::Duration;

use super::PgShard;
use crate::store::{BoxFuture, Revocation, RevocationList, Revoked, StoreError};

impl RevocationList for PgShard {
    fn revoke<'a>(&'a self, ws: &'a str, user: &'a str, revoked_ms: i64) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Idempotent (a later revocation wins), so run again safely by `read`.
            self.read(|conn| async move {
                let stmt = conn
                    .prepare_cached(
                        r#"INSERT INTO revocations (ws, "user", revoked_ms, stored_ms)
                           VALUES ($1, $2, $3, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                           ON CONFLICT (ws, "user") DO UPDATE
                              SET revoked_ms = excluded.revoked_ms, stored_ms = excluded.stored_ms
                            WHERE excluded.revoked_ms > revocations.revoked_ms"#,
                    )
                    .await?;
                conn.execute(&stmt, &[&ws, &user, &revoked_ms]).await?;
                Ok(())
            })
            .await
        })
    }

    fn revocations(&self, within: Option<Duration>) -> BoxFuture<'_, Result<Revoked, StoreError>> {
        Box::pin(async move {
            let window_ms = within.map_or(i64::MAX, |w| w.as_millis() as i64);
            let rows = self
                .read_rows(
                    r#"SELECT ws, "user", revoked_ms FROM revocations
                        WHERE stored_ms >= (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1"#,
                    &[&window_ms],
                )
                .await?;
            let rows = rows.iter().map(|r| Revocation { ws: r.get(0), user: r.get(1), revoked_ms: r.get(2) }).collect();
            Ok(Revoked { rows, complete: true })
        })
    }
}
