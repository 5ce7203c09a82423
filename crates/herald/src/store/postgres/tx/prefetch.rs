//! A batch's reads made ahead ([`Tx::prefetch`](crate::store::apply::Tx::prefetch)):
//! every (chat, user) pair its writes ask about (membership, mute, ban, the
//! sender's message count) and every `client_id` they carry, in two queries.
//!
//! Not here: the statements of the writes themselves (`tx.rs`).

use std::collections::HashMap;

use super::PgTx;
use crate::model::ChatKey;
use crate::store::Write;
use crate::store::apply::ChatRow;

/// Reads ahead, in two queries, what `writes` of `tx`'s batch will ask: every (chat, user) pair's
/// membership, mute, ban and message count, and every `client_id`.
pub(super) async fn read_ahead(
    tx: &mut PgTx<'_, '_>,
    writes: &[&Write],
    rows: &HashMap<ChatKey, ChatRow>,
) -> Result<(), tokio_postgres::Error> {
    let (mut m_chats, mut m_users) = (Vec::new(), Vec::new());
    let (mut c_chats, mut c_users, mut c_ids) = (Vec::new(), Vec::new(), Vec::new());
    for w in writes {
        let Some(row) = rows.get(w.key()) else { continue };
        let user = match w {
            Write::Join { user, .. }
            | Write::Leave { user, .. }
            | Write::React { user, .. }
            | Write::Read { user, .. }
            | Write::Pin { user, .. }
            | Write::Edit { user: Some(user), .. }
            | Write::Delete { user: Some(user), .. }
            | Write::Profile { user: Some(user), .. }
            | Write::StreamText { user: Some(user), .. }
            | Write::Upload { user, .. } => Some(user),
            Write::Append { user: Some(user), client_id, .. } => {
                if let Some(cid) = client_id
                    && tx.client_ids.insert((row.id, user.to_string(), cid.clone()), None).is_none()
                {
                    c_chats.push(row.id);
                    c_users.push(user.to_string());
                    c_ids.push(cid.clone());
                }
                Some(user)
            }
            Write::Append { user: None, .. }
            | Write::PutChat { .. }
            | Write::Edit { user: None, .. }
            | Write::Delete { user: None, .. }
            | Write::Ban { .. }
            | Write::Mute { .. }
            | Write::Profile { user: None, .. }
            | Write::StreamText { user: None, .. }
            | Write::ForgetFile { .. } => None,
        };
        if let Some(user) = user
            && tx.members.insert((row.id, user.to_string()), None).is_none()
        {
            m_chats.push(row.id);
            m_users.push(user.to_string());
        }
    }
    if !m_chats.is_empty() {
        // With each pair: its mute, its ban, and its messages so far (for
        // a new message's place among its sender's), in the same round trip.
        let found = tx
            .query(
                r#"SELECT t.c, t.u, m.read_seq, mu.until_ms, b.chat_id IS NOT NULL,
                          coalesce((SELECT e.user_ord FROM events e
                                     WHERE e.chat_id = t.c AND e."user" = t.u AND e.ord IS NOT NULL
                                     ORDER BY e.seq DESC LIMIT 1), 0)
                   FROM unnest($1::bigint[], $2::text[]) AS t(c, u)
                   LEFT JOIN members m ON m.chat_id = t.c AND m."user" = t.u
                   LEFT JOIN mutes mu ON mu.chat_id = t.c AND mu."user" = t.u
                   LEFT JOIN bans b ON b.chat_id = t.c AND b."user" = t.u"#,
                &[&m_chats, &m_users],
            )
            .await?;
        for r in found {
            let pair: (i64, String) = (r.get(0), r.get(1));
            tx.members.insert(pair.clone(), r.get::<_, Option<i64>>(2).map(|v| v as u64));
            tx.mutes.insert(pair.clone(), r.get(3));
            tx.bans.insert(pair.clone(), r.get(4));
            tx.own.insert(pair, r.get::<_, i64>(5) as u64);
        }
    }
    if !c_chats.is_empty() {
        let found = tx
            .query(
                r#"SELECT e.chat_id, e."user", e.client_id, e.seq FROM events e
                   JOIN unnest($1::bigint[], $2::text[], $3::text[]) AS t(c, u, k)
                     ON e.chat_id = t.c AND e."user" = t.u AND e.client_id = t.k"#,
                &[&c_chats, &c_users, &c_ids],
            )
            .await?;
        for r in found {
            tx.client_ids.insert((r.get(0), r.get(1), r.get(2)), Some(r.get::<_, i64>(3) as u64));
        }
    }
    Ok(())
}
