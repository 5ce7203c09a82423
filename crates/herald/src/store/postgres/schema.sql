-- herald's PostgreSQL schema, version 3. Applied on start by each node, under
-- an advisory lock, when herald_schema does not record it yet. One database
-- per shard; every chat lives wholly on one shard. Every statement is
-- idempotent: a shard of version 1 takes this file as it is.

CREATE TABLE IF NOT EXISTS herald_schema (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- One row per chat. seq and members are written once per write batch of a
-- node (never once per event), under the row lock that serializes appends
-- to this chat across nodes.
CREATE TABLE IF NOT EXISTS chats (
    id         bigserial PRIMARY KEY,
    ws         text    NOT NULL,
    chat       text    NOT NULL,
    open       boolean NOT NULL,
    seq        bigint  NOT NULL,   -- the latest event's seq
    members    bigint  NOT NULL,   -- the member count, kept as a count
    created_ms bigint  NOT NULL,
    UNIQUE (ws, chat)
);

CREATE TABLE IF NOT EXISTS members (
    chat_id   bigint NOT NULL,
    "user"    text   NOT NULL,
    read_seq  bigint NOT NULL,   -- moves only forward
    joined_ms bigint NOT NULL,
    PRIMARY KEY (chat_id, "user")
);

-- The event log: one range scan per fetch. No sequence or serial column here,
-- so appends take no table-level lock; seq comes from the locked chat row.
CREATE TABLE IF NOT EXISTS events (
    chat_id   bigint NOT NULL,
    seq       bigint NOT NULL,
    type      text   NOT NULL,
    "user"    text,
    ts        bigint NOT NULL,
    body      text   NOT NULL,   -- the JSON exactly as sent
    client_id text,
    PRIMARY KEY (chat_id, seq)
);

-- Idempotent sends: one event per (chat, user, client_id).
CREATE UNIQUE INDEX IF NOT EXISTS events_client_id ON events (chat_id, "user", client_id)
    WHERE client_id IS NOT NULL;

-- The shard's identity (version 2): the name chats are routed by and a
-- random id, written by the first node that starts on the shard (the code
-- inserts the row: the name is that node's). Nodes that give the shard
-- another name refuse to start. One row: `one` can only be true.
CREATE TABLE IF NOT EXISTS herald_shard (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    name       text    NOT NULL,
    id         text    NOT NULL,
    created_ms bigint  NOT NULL
);

-- Version 3 (protocol v1.1): the message lifecycle, mutes, bans and the
-- inbox's counts. Columns first, then their values for rows stored before
-- (the counts kept as counts start from the log once, here), then indexes.
ALTER TABLE chats ADD COLUMN IF NOT EXISTS messages bigint NOT NULL DEFAULT 0;     -- message events, as a count
ALTER TABLE chats ADD COLUMN IF NOT EXISTS last_ts bigint NOT NULL DEFAULT 0;      -- the latest event's ts
ALTER TABLE chats ADD COLUMN IF NOT EXISTS last_message bigint NOT NULL DEFAULT 0; -- the latest message's seq
ALTER TABLE events ADD COLUMN IF NOT EXISTS ord bigint;       -- a message's place among the chat's messages
ALTER TABLE events ADD COLUMN IF NOT EXISTS user_ord bigint;  -- ... among its sender's messages in the chat
ALTER TABLE events ADD COLUMN IF NOT EXISTS target bigint;    -- edit and delete events: the message they change
ALTER TABLE events ADD COLUMN IF NOT EXISTS edited bigint;    -- messages: the seq of the latest edit
ALTER TABLE events ADD COLUMN IF NOT EXISTS deleted boolean NOT NULL DEFAULT false;

UPDATE events SET ord = n.o, user_ord = n.uo FROM (
    SELECT chat_id, seq,
           row_number() OVER (PARTITION BY chat_id ORDER BY seq) AS o,
           row_number() OVER (PARTITION BY chat_id, "user" ORDER BY seq) AS uo
      FROM events WHERE type = 'message') AS n
 WHERE events.chat_id = n.chat_id AND events.seq = n.seq AND events.ord IS NULL;
UPDATE chats SET
    messages = (SELECT count(*) FROM events e WHERE e.chat_id = chats.id AND e.type = 'message'),
    last_message = coalesce((SELECT max(seq) FROM events e WHERE e.chat_id = chats.id AND e.type = 'message'), 0),
    last_ts = coalesce((SELECT ts FROM events e WHERE e.chat_id = chats.id ORDER BY seq DESC LIMIT 1), created_ms)
 WHERE last_ts = 0;

-- The partial indexes hold only message rows (or deleted ones, which are
-- rare): an unread count is a few lookups in them, never a scan of history.
CREATE INDEX IF NOT EXISTS members_user ON members ("user", chat_id);
CREATE INDEX IF NOT EXISTS events_messages ON events (chat_id, seq, ord) WHERE ord IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_own ON events (chat_id, "user", seq, user_ord) WHERE ord IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_deleted ON events (chat_id, seq, "user") WHERE deleted;
CREATE INDEX IF NOT EXISTS events_target ON events (chat_id, target) WHERE target IS NOT NULL;

CREATE TABLE IF NOT EXISTS bans (
    chat_id bigint NOT NULL,
    "user"  text   NOT NULL,
    PRIMARY KEY (chat_id, "user")
);

-- Mutes outlive a membership: leaving and joining again does not end one.
CREATE TABLE IF NOT EXISTS mutes (
    chat_id  bigint NOT NULL,
    "user"   text   NOT NULL,
    until_ms bigint NOT NULL,   -- 9223372036854775807: until unmuted
    PRIMARY KEY (chat_id, "user")
);

INSERT INTO herald_schema (version) VALUES (2) ON CONFLICT DO NOTHING;
INSERT INTO herald_schema (version) VALUES (3) ON CONFLICT DO NOTHING;

-- Version 4: the hooks' state.

-- webhook: delivery positions. One row per chat that stored an event while
-- a webhook was configured (written by the batch that stored it, under the
-- chat's row lock); the partial index holds only chats with events not
-- acknowledged yet, oldest first, so finding them reads no idle chat.
CREATE TABLE IF NOT EXISTS webhook_positions (
    chat_id   bigint PRIMARY KEY,
    delivered bigint NOT NULL,   -- the last seq the receiver acknowledged
    head      bigint NOT NULL,   -- the latest seq stored while the webhook was on
    since_ms  bigint NOT NULL    -- when the oldest event not acknowledged was stored (or a moment before)
);
CREATE INDEX IF NOT EXISTS webhook_pending ON webhook_positions (since_ms, chat_id) WHERE head > delivered;

-- revocations: a user's tokens issued (iat) at or before revoked_ms are
-- refused. stored_ms is when the row was written, by this database's clock:
-- nodes poll by it, so their own clocks do not matter. Every shard holds
-- every revocation (see docs/operations.md).
CREATE TABLE IF NOT EXISTS revocations (
    ws         text   NOT NULL,
    "user"     text   NOT NULL,
    revoked_ms bigint NOT NULL,
    stored_ms  bigint NOT NULL,
    PRIMARY KEY (ws, "user")
);
CREATE INDEX IF NOT EXISTS revocations_stored ON revocations (stored_ms);

INSERT INTO herald_schema (version) VALUES (4) ON CONFLICT DO NOTHING;

-- Version 5 (protocol v1.2): conversations. Every row stored before is a
-- message outside any thread with no mentions, pins or stream, so the
-- defaults are its values; reactions on now start from the log once, here.
ALTER TABLE chats ADD COLUMN IF NOT EXISTS pins bigint NOT NULL DEFAULT 0;         -- pinned messages, as a count
ALTER TABLE chats ADD COLUMN IF NOT EXISTS profile text;                           -- {name, image, data}; NULL until set
ALTER TABLE chats ADD COLUMN IF NOT EXISTS profile_seq bigint NOT NULL DEFAULT 0;  -- the latest profile event
ALTER TABLE events ADD COLUMN IF NOT EXISTS thread bigint;      -- replies: their thread's root
ALTER TABLE events ADD COLUMN IF NOT EXISTS quote bigint;       -- messages: the message quoted
ALTER TABLE events ADD COLUMN IF NOT EXISTS mentions text;      -- messages: mentions now; edits: as given (JSON array)
ALTER TABLE events ADD COLUMN IF NOT EXISTS tord bigint;        -- replies: place among the root's replies
ALTER TABLE events ADD COLUMN IF NOT EXISTS tuser_ord bigint;   -- replies: place among the sender's replies in it
ALTER TABLE events ADD COLUMN IF NOT EXISTS replies bigint NOT NULL DEFAULT 0;        -- roots: replies not deleted
ALTER TABLE events ADD COLUMN IF NOT EXISTS replies_total bigint NOT NULL DEFAULT 0;  -- roots: every reply stored
ALTER TABLE events ADD COLUMN IF NOT EXISTS last_reply bigint NOT NULL DEFAULT 0;     -- roots: latest reply not deleted
ALTER TABLE events ADD COLUMN IF NOT EXISTS pinned boolean NOT NULL DEFAULT false;
ALTER TABLE events ADD COLUMN IF NOT EXISTS pin_seq bigint NOT NULL DEFAULT 0;        -- the latest pin event of it
ALTER TABLE events ADD COLUMN IF NOT EXISTS pin_user text;
ALTER TABLE events ADD COLUMN IF NOT EXISTS reactions text;     -- messages: {emoji: count} of reactions on now
ALTER TABLE events ADD COLUMN IF NOT EXISTS stream bigint;      -- messages sent as streams: 1 open, 2 done
ALTER TABLE events ADD COLUMN IF NOT EXISTS stream_ms bigint;   -- open streams: when they last grew

-- The reactions on now, one row per (target, emoji, user).
CREATE TABLE IF NOT EXISTS reactions (
    chat_id bigint NOT NULL,
    target  bigint NOT NULL,
    emoji   text   NOT NULL,
    "user"  text   NOT NULL,
    PRIMARY KEY (chat_id, target, emoji, "user")
);
-- Who each message mentions now, its sender left out: the inbox's mention counts.
CREATE TABLE IF NOT EXISTS mentions (
    chat_id bigint NOT NULL,
    "user"  text   NOT NULL,
    seq     bigint NOT NULL,
    PRIMARY KEY (chat_id, "user", seq)
);
CREATE INDEX IF NOT EXISTS mentions_message ON mentions (chat_id, seq);
-- A user's place in a thread: followed (sent its root, replied, was mentioned) and read to.
CREATE TABLE IF NOT EXISTS thread_reads (
    chat_id  bigint  NOT NULL,
    root     bigint  NOT NULL,
    "user"   text    NOT NULL,
    read_seq bigint  NOT NULL,
    follows  boolean NOT NULL,
    PRIMARY KEY (chat_id, root, "user")
);
CREATE INDEX IF NOT EXISTS thread_reads_user ON thread_reads ("user", chat_id, root) WHERE follows;
CREATE INDEX IF NOT EXISTS events_thread ON events (chat_id, thread, seq, tord) WHERE thread IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_thread_own ON events (chat_id, thread, "user", seq, tuser_ord) WHERE thread IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_pinned ON events (chat_id, pin_seq) WHERE pinned;
CREATE INDEX IF NOT EXISTS events_open_streams ON events (stream_ms) WHERE stream = 1;
-- Member and chat pages in byte order (COLLATE "C", as shards' pages merge), whatever the
-- database's collation: a page of a million-member chat is an index range, never a sort.
CREATE INDEX IF NOT EXISTS members_by_id ON members (chat_id, "user" COLLATE "C");
CREATE INDEX IF NOT EXISTS chats_by_id ON chats (ws, chat COLLATE "C");

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM herald_schema WHERE version = 5) THEN
        INSERT INTO reactions (chat_id, target, emoji, "user")
        SELECT chat_id, target, emoji, "user" FROM (
            SELECT e.chat_id, (e.body::jsonb ->> 'target')::bigint AS target, e.body::jsonb ->> 'emoji' AS emoji,
                   e."user", (e.body::jsonb ->> 'on')::boolean AS on_now,
                   row_number() OVER (PARTITION BY e.chat_id, e.body::jsonb ->> 'target', e.body::jsonb ->> 'emoji',
                                      e."user" ORDER BY e.seq DESC) AS n
              FROM events e WHERE e.type = 'reaction') AS latest
         WHERE n = 1 AND on_now AND target IS NOT NULL AND emoji IS NOT NULL AND "user" IS NOT NULL
        ON CONFLICT DO NOTHING;
        UPDATE events SET reactions = counts.c FROM (
            SELECT chat_id, target, json_object_agg(emoji, n)::text AS c FROM (
                SELECT chat_id, target, emoji, count(*) AS n FROM reactions GROUP BY chat_id, target, emoji) AS g
             GROUP BY chat_id, target) AS counts
         WHERE events.chat_id = counts.chat_id AND events.seq = counts.target AND events.type = 'message';
    END IF;
END $$;

INSERT INTO herald_schema (version) VALUES (5) ON CONFLICT DO NOTHING;

-- Version 6 (protocol v1.2): files. A message's files (and an edit's) as the stored view shows
-- them, and each uploaded file's metadata (the bytes live outside the database).
ALTER TABLE events ADD COLUMN IF NOT EXISTS files text;   -- messages: files now; edits: as given (JSON array)
CREATE TABLE IF NOT EXISTS files (
    id         text   PRIMARY KEY,
    chat_id    bigint NOT NULL,
    "user"     text   NOT NULL,
    name       text   NOT NULL,
    type       text   NOT NULL,
    size       bigint NOT NULL,
    created_ms bigint NOT NULL,
    seq        bigint,          -- the message that attached it
    gone_ms    bigint           -- when its message stopped naming it: its bytes are to be deleted
);
CREATE INDEX IF NOT EXISTS files_message ON files (chat_id, seq) WHERE seq IS NOT NULL AND gone_ms IS NULL;
CREATE INDEX IF NOT EXISTS files_gone ON files (gone_ms) WHERE gone_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS files_unattached ON files (created_ms) WHERE seq IS NULL AND gone_ms IS NULL;

INSERT INTO herald_schema (version) VALUES (6) ON CONFLICT DO NOTHING;
-- Version 7 (protocol v1.2 search): the shard's search index, kept by each node's indexer after
-- the log's commits (store/postgres/search_index.rs). A message's folded text, and its unigrams and
-- bigrams ordered by gram, then newest first; the last event each chat's index has read.
CREATE TABLE IF NOT EXISTS search_docs (
    chat_id bigint NOT NULL,
    seq     bigint NOT NULL,
    ts      bigint NOT NULL,
    text    text   NOT NULL,
    PRIMARY KEY (chat_id, seq)
);
CREATE TABLE IF NOT EXISTS search_grams (
    gram    text COLLATE "C" NOT NULL,
    ts      bigint NOT NULL,
    chat_id bigint NOT NULL,
    seq     bigint NOT NULL,
    PRIMARY KEY (gram, ts, chat_id, seq)
);
CREATE TABLE IF NOT EXISTS search_positions (
    chat_id bigint PRIMARY KEY,
    seq     bigint NOT NULL
);

INSERT INTO herald_schema (version) VALUES (7) ON CONFLICT DO NOTHING;

-- Version 8: a user's messages oldest first (a user's data export), one index range per page
-- whatever the size of the log. Partial, as the export reads it: `message` events only.
CREATE INDEX IF NOT EXISTS events_sender ON events ("user", ts, chat_id, seq) WHERE type = 'message';

INSERT INTO herald_schema (version) VALUES (8) ON CONFLICT DO NOTHING;

-- Version 9: the chats whose latest seq moved, a row per chat and transaction, for the nodes' tail
-- checks: each node reads the rows of transactions that were still running at its previous read (xid
-- at least that read's snapshot xmin), so its cost follows the writes, not the chats it watches. A
-- trigger writes them, so that every path that moves a chat's seq is seen, a node of an older version
-- during a rolling upgrade included. Each node deletes the rows every node has long read (`changes.rs`).
CREATE TABLE IF NOT EXISTS chat_changes (
    xid     xid8   NOT NULL DEFAULT pg_current_xact_id(),
    chat_id bigint NOT NULL,
    seq     bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS chat_changes_xid ON chat_changes (xid);

CREATE OR REPLACE FUNCTION herald_chat_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.seq > 0 AND (TG_OP = 'INSERT' OR NEW.seq <> OLD.seq) THEN
        INSERT INTO chat_changes (chat_id, seq) VALUES (NEW.id, NEW.seq);
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS chats_moved ON chats;
CREATE TRIGGER chats_moved AFTER INSERT OR UPDATE OF seq ON chats
    FOR EACH ROW EXECUTE FUNCTION herald_chat_moved();

INSERT INTO herald_schema (version) VALUES (9) ON CONFLICT DO NOTHING;
