//! The SQLite schema and its migrations: the tables every capability's
//! statements read and write, and how an older file is brought up to date
//! when the store opens. `herald-bench`'s inbox loader writes these tables
//! too: change them only with a new version.
//!
//! Not here: connection settings (WAL, fsync, secure delete; `mod.rs`), or
//! the statements that use the tables (one file per capability).

use std::path::Path;

use rusqlite::Connection;

/// Schema version kept in `PRAGMA user_version`. Version 2 (protocol v1.1)
/// added the message lifecycle, mutes, bans and the inbox's counts
/// ([`SCHEMA_V2`]); a version 1 file is migrated at start. Version 3 added
/// the hooks' tables ([`SCHEMA_V3`]); version 4 (protocol v1.2) conversations ([`MIGRATE_V4`],
/// [`SCHEMA_V4`]); version 5 files ([`MIGRATE_V5`], [`SCHEMA_V5`]). Version 7 (protocol v1.2, a user's
/// data) indexes messages by sender ([`SCHEMA_V7`]).
const SCHEMA_VERSION: i64 = 7;

/// The schema. `events` is clustered by (chat, seq) so a fetch is one range scan.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS chats (
    id         INTEGER PRIMARY KEY,
    ws         TEXT NOT NULL,
    chat       TEXT NOT NULL,
    open       INTEGER NOT NULL,
    seq        INTEGER NOT NULL,   -- latest event's seq; written once per batch
    members    INTEGER NOT NULL,   -- member count; written once per batch
    created_ms INTEGER NOT NULL,
    UNIQUE (ws, chat)
);
CREATE TABLE IF NOT EXISTS members (
    chat_id   INTEGER NOT NULL,
    user      TEXT NOT NULL,
    read_seq  INTEGER NOT NULL,
    joined_ms INTEGER NOT NULL,
    PRIMARY KEY (chat_id, user)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    chat_id   INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    type      TEXT NOT NULL,
    user      TEXT,
    ts        INTEGER NOT NULL,
    body      TEXT NOT NULL,
    client_id TEXT,
    PRIMARY KEY (chat_id, seq)
) WITHOUT ROWID;
-- Idempotent sends: one event per (chat, user, client_id).
CREATE UNIQUE INDEX IF NOT EXISTS events_client_id ON events (chat_id, user, client_id)
    WHERE client_id IS NOT NULL;
";

/// Version 2, from version 1: columns, then their values for rows stored
/// before (counts kept as counts start from the log once, here).
const MIGRATE_V2: &str = "
ALTER TABLE chats ADD COLUMN messages INTEGER NOT NULL DEFAULT 0;     -- message events, kept as a count
ALTER TABLE chats ADD COLUMN last_ts INTEGER NOT NULL DEFAULT 0;      -- the latest event's ts
ALTER TABLE chats ADD COLUMN last_message INTEGER NOT NULL DEFAULT 0; -- the latest message's seq
ALTER TABLE events ADD COLUMN ord INTEGER;       -- a message's place among the chat's messages
ALTER TABLE events ADD COLUMN user_ord INTEGER;  -- a message's place among its sender's messages in the chat
ALTER TABLE events ADD COLUMN target INTEGER;    -- edit and delete events: the message they change
ALTER TABLE events ADD COLUMN edited INTEGER;    -- messages: the seq of the latest edit
ALTER TABLE events ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
UPDATE events SET ord = n.o, user_ord = n.uo FROM (
    SELECT chat_id, seq,
           row_number() OVER (PARTITION BY chat_id ORDER BY seq) AS o,
           row_number() OVER (PARTITION BY chat_id, user ORDER BY seq) AS uo
      FROM events WHERE type = 'message') AS n
 WHERE events.chat_id = n.chat_id AND events.seq = n.seq;
UPDATE chats SET
    messages = (SELECT count(*) FROM events e WHERE e.chat_id = chats.id AND e.type = 'message'),
    last_message = coalesce((SELECT max(seq) FROM events e WHERE e.chat_id = chats.id AND e.type = 'message'), 0),
    last_ts = coalesce((SELECT ts FROM events e WHERE e.chat_id = chats.id ORDER BY seq DESC LIMIT 1), created_ms);
";

/// Version 2's tables and indexes. The partial indexes hold only message
/// rows (or deleted ones, which are rare): an unread count is a few lookups
/// in them, never a scan of a chat's history.
const SCHEMA_V2: &str = "
CREATE INDEX IF NOT EXISTS members_user ON members (user, chat_id);
CREATE INDEX IF NOT EXISTS events_messages ON events (chat_id, seq, ord) WHERE ord IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_own ON events (chat_id, user, seq, user_ord) WHERE ord IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_deleted ON events (chat_id, seq, user) WHERE deleted = 1;
CREATE INDEX IF NOT EXISTS events_target ON events (chat_id, target) WHERE target IS NOT NULL;
CREATE TABLE IF NOT EXISTS bans (
    chat_id INTEGER NOT NULL,
    user    TEXT NOT NULL,
    PRIMARY KEY (chat_id, user)
) WITHOUT ROWID;
-- Mutes outlive a membership: leaving and joining again does not end one.
CREATE TABLE IF NOT EXISTS mutes (
    chat_id  INTEGER NOT NULL,
    user     TEXT NOT NULL,
    until_ms INTEGER NOT NULL,   -- 9223372036854775807: until unmuted
    PRIMARY KEY (chat_id, user)
) WITHOUT ROWID;
";

/// Version 3: the hooks' state (new tables only, so applying it is the migration).
const SCHEMA_V3: &str = "
-- webhook: delivery positions. One row per chat that stored an event while
-- a webhook was configured; the partial index holds only the chats with
-- events not acknowledged yet, oldest first, so finding them reads no idle chat.
CREATE TABLE IF NOT EXISTS webhook_positions (
    chat_id   INTEGER PRIMARY KEY,
    delivered INTEGER NOT NULL,   -- the last seq the receiver acknowledged
    head      INTEGER NOT NULL,   -- the latest seq stored while the webhook was on
    since_ms  INTEGER NOT NULL    -- when the oldest event not acknowledged was stored (or a moment before)
);
CREATE INDEX IF NOT EXISTS webhook_pending ON webhook_positions (since_ms, chat_id) WHERE head > delivered;
-- revocations
-- A user's tokens issued (iat) at or before revoked_ms are refused. stored_ms:
-- when the row was written, by this store's clock, which nodes poll by.
CREATE TABLE IF NOT EXISTS revocations (
    ws         TEXT NOT NULL,
    user       TEXT NOT NULL,
    revoked_ms INTEGER NOT NULL,
    stored_ms  INTEGER NOT NULL,
    PRIMARY KEY (ws, user)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS revocations_stored ON revocations (stored_ms);
";

/// Version 4, from version 3: v1.2's columns. Every row stored before is a message outside any
/// thread, with no mentions, pins, reactions counted or stream, so the defaults are its values;
/// reaction counts start from the log once, here.
const MIGRATE_V4: &str = "
ALTER TABLE chats ADD COLUMN pins INTEGER NOT NULL DEFAULT 0;         -- pinned messages, kept as a count
ALTER TABLE chats ADD COLUMN profile TEXT;                            -- {name, image, data}; NULL until set
ALTER TABLE chats ADD COLUMN profile_seq INTEGER NOT NULL DEFAULT 0;  -- the latest profile event
ALTER TABLE events ADD COLUMN thread INTEGER;      -- replies: their thread's root
ALTER TABLE events ADD COLUMN quote INTEGER;       -- messages: the message quoted
ALTER TABLE events ADD COLUMN mentions TEXT;       -- messages: mentions now; edits: as given (JSON array)
ALTER TABLE events ADD COLUMN tord INTEGER;        -- replies: place among the root's replies
ALTER TABLE events ADD COLUMN tuser_ord INTEGER;   -- replies: place among the sender's replies in the thread
ALTER TABLE events ADD COLUMN replies INTEGER NOT NULL DEFAULT 0;        -- roots: replies not deleted
ALTER TABLE events ADD COLUMN replies_total INTEGER NOT NULL DEFAULT 0;  -- roots: every reply stored
ALTER TABLE events ADD COLUMN last_reply INTEGER NOT NULL DEFAULT 0;     -- roots: latest reply not deleted
ALTER TABLE events ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN pin_seq INTEGER NOT NULL DEFAULT 0;        -- the latest pin event of it
ALTER TABLE events ADD COLUMN pin_user TEXT;
ALTER TABLE events ADD COLUMN reactions TEXT;      -- messages: {emoji: count} of reactions on now
ALTER TABLE events ADD COLUMN stream INTEGER;      -- messages sent as streams: 1 open, 2 done
ALTER TABLE events ADD COLUMN stream_ms INTEGER;   -- open streams: when they last grew
";

/// Version 4's tables and indexes.
const SCHEMA_V4: &str = "
-- The reactions on now, one row per (target, emoji, user): `reactions` lists them; the
-- counts in events.reactions follow them.
CREATE TABLE IF NOT EXISTS reactions (
    chat_id INTEGER NOT NULL,
    target  INTEGER NOT NULL,
    emoji   TEXT NOT NULL,
    user    TEXT NOT NULL,
    PRIMARY KEY (chat_id, target, emoji, user)
) WITHOUT ROWID;
-- Who each message mentions now, its sender left out: the inbox's mention counts.
CREATE TABLE IF NOT EXISTS mentions (
    chat_id INTEGER NOT NULL,
    user    TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (chat_id, user, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mentions_message ON mentions (chat_id, seq);
-- A user's place in a thread: followed (sent its root, replied, was mentioned) and read to.
CREATE TABLE IF NOT EXISTS thread_reads (
    chat_id  INTEGER NOT NULL,
    root     INTEGER NOT NULL,
    user     TEXT NOT NULL,
    read_seq INTEGER NOT NULL,
    follows  INTEGER NOT NULL,
    PRIMARY KEY (chat_id, root, user)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS thread_reads_user ON thread_reads (user, chat_id, root) WHERE follows = 1;
-- A thread's replies (and a sender's among them) in seq order: thread fetches and unread counts.
CREATE INDEX IF NOT EXISTS events_thread ON events (chat_id, thread, seq, tord) WHERE thread IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_thread_own ON events (chat_id, thread, user, seq, tuser_ord) WHERE thread IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_pinned ON events (chat_id, pin_seq) WHERE pinned = 1;
CREATE INDEX IF NOT EXISTS events_open_streams ON events (stream_ms) WHERE stream = 1;
";

/// Version 7: a user's messages oldest first (`export.rs`), one index range per page whatever
/// the size of the log. Partial, as the export reads it: `message` events only.
const SCHEMA_V7: &str = "
CREATE INDEX IF NOT EXISTS events_sender ON events (user, ts, chat_id, seq) WHERE type = 'message';
";

/// The file's schema version; refuses a file of a newer herald.
pub(super) fn version(conn: &Connection, path: &Path) -> anyhow::Result<i64> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        anyhow::bail!("{} has schema version {version}; this herald knows {SCHEMA_VERSION}", path.display());
    }
    Ok(version)
}

/// Brings the database from `version` to [`SCHEMA_VERSION`] in one
/// transaction: creates what is missing, migrates a version 1 file.
/// Version 5, from version 4: a message's files (and an edit's), as the stored view shows them.
const MIGRATE_V5: &str = "
ALTER TABLE events ADD COLUMN files TEXT;   -- messages: files now; edits: as given (JSON array)
";

/// Version 5's tables and indexes: uploaded files' metadata (the bytes live outside the database).
const SCHEMA_V5: &str = "
CREATE TABLE IF NOT EXISTS files (
    id         TEXT PRIMARY KEY,
    chat_id    INTEGER NOT NULL,
    user       TEXT NOT NULL,
    name       TEXT NOT NULL,
    type       TEXT NOT NULL,
    size       INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    seq        INTEGER,          -- the message that attached it
    gone_ms    INTEGER           -- when its message stopped naming it: its bytes are to be deleted
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS files_message ON files (chat_id, seq) WHERE seq IS NOT NULL AND gone_ms IS NULL;
CREATE INDEX IF NOT EXISTS files_gone ON files (gone_ms) WHERE gone_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS files_unattached ON files (created_ms) WHERE seq IS NULL AND gone_ms IS NULL;
";

pub(super) fn migrate(conn: &Connection, path: &Path, version: i64) -> anyhow::Result<()> {
    let tx = conn.unchecked_transaction()?;
    tx.execute_batch(SCHEMA)?;
    if version < 2 {
        tx.execute_batch(MIGRATE_V2)?;
        if version == 1 {
            tracing::info!(path = %path.display(), "sqlite store migrated from schema 1 to 2");
        }
    }
    tx.execute_batch(SCHEMA_V2)?;
    tx.execute_batch(SCHEMA_V3)?;
    if version < 4 {
        tx.execute_batch(MIGRATE_V4)?;
    }
    tx.execute_batch(SCHEMA_V4)?;
    if version < 5 {
        tx.execute_batch(MIGRATE_V5)?;
    }
    tx.execute_batch(SCHEMA_V5)?;
    if (1..4).contains(&version) {
        // Reactions stored before: the latest of each (target, emoji, user) says whether it is on.
        tx.execute_batch(
            "INSERT OR IGNORE INTO reactions (chat_id, target, emoji, user)
             SELECT chat_id, target, emoji, user FROM (
                 SELECT e.chat_id, json_extract(e.body, '$.target') AS target,
                        json_extract(e.body, '$.emoji') AS emoji, e.user,
                        json_extract(e.body, '$.on') AS on_now,
                        row_number() OVER (PARTITION BY e.chat_id, json_extract(e.body, '$.target'),
                                           json_extract(e.body, '$.emoji'), e.user ORDER BY e.seq DESC) AS n
                   FROM events e WHERE e.type = 'reaction')
              WHERE n = 1 AND on_now = 1 AND target IS NOT NULL AND emoji IS NOT NULL AND user IS NOT NULL;
             UPDATE events SET reactions = (
                 SELECT json_group_object(emoji, n) FROM (
                     SELECT r.emoji, count(*) AS n FROM reactions r
                      WHERE r.chat_id = events.chat_id AND r.target = events.seq GROUP BY r.emoji))
              WHERE type = 'message' AND EXISTS (
                 SELECT 1 FROM reactions r WHERE r.chat_id = events.chat_id AND r.target = events.seq);",
        )?;
        tracing::info!(path = %path.display(), from = version, "sqlite store migrated to schema 4");
    }
    if version < 7 {
        tx.execute_batch(SCHEMA_V7)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChatKey;
    use crate::store::sqlite::{DB_FILE, SqliteStore};
    use crate::store::{EventLog, Lifecycle, Membership, Write};
    use serde_json::value::RawValue;

    /// A file written by a herald of schema 1 (the v1 schema as it was, with
    /// its rows): the store opens it, migrates it, and counts as if it had
    /// always kept the counts.
    #[tokio::test]
    async fn a_schema_1_file_is_migrated_with_its_counts() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(
                r#"INSERT INTO chats VALUES (1, 'w', 'g', 1, 6, 2, 1000);
                   INSERT INTO members VALUES (1, 'alice', 3, 1000), (1, 'bob', 0, 1001);
                   INSERT INTO events VALUES
                     (1, 1, 'join', 'alice', 1000, '{}', NULL),
                     (1, 2, 'join', 'bob', 1001, '{}', NULL),
                     (1, 3, 'message', 'bob', 1002, '{"t":1}', 'c1'),
                     (1, 4, 'message', 'alice', 1003, '{"t":2}', NULL),
                     (1, 5, 'message', 'bob', 1004, '{"t":3}', NULL),
                     (1, 6, 'reaction', 'alice', 1005, '{"target":5,"emoji":"+1","on":true}', NULL);
                   PRAGMA user_version = 1;"#,
            )
            .unwrap();
        }
        let store = SqliteStore::open(dir.path()).unwrap();
        let key = ChatKey::new("w", "g");
        let alice = store.inbox_entry(&key, "alice").await.unwrap().unwrap();
        assert_eq!((alice.seq, alice.ts, alice.read, alice.unread), (6, 1005, 3, 1), "bob's 5 only: {alice:?}");
        assert_eq!(alice.last.as_ref().map(|e| e.seq), Some(5));
        let bob = store.inbox_entry(&key, "bob").await.unwrap().unwrap();
        assert_eq!(bob.unread, 1, "alice's 4 only");
        // New messages continue the migrated counts.
        let sent = store
            .write(Write::Append {
                key: key.clone(),
                user: Some("bob".into()),
                system: false,
                body: RawValue::from_string("1".into()).unwrap(),
                client_id: Some("c1".into()),
                member_only: true,
                conv: Default::default(),
            })
            .await
            .unwrap();
        assert_eq!(sent.seq, 3, "the migrated client_id still answers its first seq");
        store
            .write(Write::Append {
                key: key.clone(),
                user: Some("bob".into()),
                system: false,
                body: RawValue::from_string("2".into()).unwrap(),
                client_id: None,
                member_only: true,
                conv: Default::default(),
            })
            .await
            .unwrap();
        assert_eq!(store.inbox_entry(&key, "alice").await.unwrap().unwrap().unread, 2);
        store.close().await;
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }
}
