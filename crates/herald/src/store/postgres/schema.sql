-- herald's PostgreSQL schema, version 2. Applied on start by each node, under
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

INSERT INTO herald_schema (version) VALUES (2) ON CONFLICT DO NOTHING;
