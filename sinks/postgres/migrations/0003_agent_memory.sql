-- Agent memory: agents and their capability bindings, memory entries, and the entries outbox.

-- One row per agent that has (or had) capability bindings. No row = no capabilities.
CREATE TABLE agents (
    environment  text        NOT NULL,
    account_id   text        NOT NULL,
    agent_id     text        NOT NULL,
    capabilities text[]      NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment, account_id, agent_id)
);

-- Curated entries. Postgres is the authority; every change also writes a memory_outbox row in the
-- same transaction. A private entry has its owner in user_id; a shared one has none (its author,
-- when known, is in author_user_id for the per-user capacity count).
CREATE TABLE memory_entries (
    entry_id         uuid             PRIMARY KEY,
    environment      text             NOT NULL,
    account_id       text             NOT NULL,
    agent_id         text             NOT NULL,
    user_id          text,
    author_user_id   text,
    key              text             NOT NULL CHECK (key <> ''),
    content          text             NOT NULL,
    category         text             NOT NULL
        CHECK (category IN ('user_profile', 'project_fact', 'observation')),
    visibility       text             NOT NULL CHECK (visibility IN ('private', 'shared')),
    importance       double precision NOT NULL CHECK (importance >= 0 AND importance <= 1),
    content_hash     text             NOT NULL,
    expires_at       timestamptz,
    recall_count     integer          NOT NULL DEFAULT 0,
    last_recalled_at timestamptz,
    decayed_at       timestamptz,
    created_at       timestamptz      NOT NULL,
    updated_at       timestamptz      NOT NULL,
    source           jsonb,
    version          bigint           NOT NULL DEFAULT 1 CHECK (version >= 1),
    search           tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, content), 'A')
        || setweight(to_tsvector('english'::regconfig, translate(key, '._:/-', '     ')), 'B')
    ) STORED,
    CHECK ((visibility = 'private') = (user_id IS NOT NULL))
);

-- One entry per key in each visibility scope: the agent's shared keys, and each user's private keys.
CREATE UNIQUE INDEX memory_entries_shared_key
    ON memory_entries (environment, account_id, agent_id, key) WHERE visibility = 'shared';
CREATE UNIQUE INDEX memory_entries_private_key
    ON memory_entries (environment, account_id, agent_id, user_id, key) WHERE visibility = 'private';

-- Pinning (category + importance) and the per-agent capacity count per category.
CREATE INDEX memory_entries_by_category
    ON memory_entries (environment, account_id, agent_id, category, importance DESC, updated_at DESC);
-- The per-user capacity count per category.
CREATE INDEX memory_entries_by_author
    ON memory_entries (environment, account_id, agent_id, author_user_id, category)
    WHERE author_user_id IS NOT NULL;
-- Browsing (newest first, keyset pagination).
CREATE INDEX memory_entries_by_created
    ON memory_entries (environment, account_id, agent_id, created_at DESC, entry_id DESC);
-- Hygiene: expiry and decay passes.
CREATE INDEX memory_entries_expiry ON memory_entries (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memory_entries_decay
    ON memory_entries ((coalesce(last_recalled_at, created_at)))
    WHERE category IN ('project_fact', 'observation');
-- Full-text fallback of recall.
CREATE INDEX memory_entries_search ON memory_entries USING gin (search);

-- Transactional outbox of memory.entries: one row per committed change, published in seq order
-- by memstream.memory.outbox.EntriesOutboxRelay and deleted once the broker confirmed it.
-- value NULL = tombstone (the entry was deleted).
CREATE TABLE memory_outbox (
    seq        bigserial   PRIMARY KEY,
    record_key text        NOT NULL,
    value      jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Wake the relay when a transaction that wrote outbox rows commits (NOTIFY is delivered at commit).
CREATE FUNCTION memory_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('memstream_memory_outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER memory_outbox_notify AFTER INSERT ON memory_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION memory_outbox_notify();
