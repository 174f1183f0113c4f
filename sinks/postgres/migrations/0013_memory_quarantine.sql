-- Retroactive screening (`memstream rescreen`, core.memory.rescreen): entries that today's screening
-- rules reject are MOVED here out of memory_entries, in one transaction with a tombstone in
-- memory_outbox (so the Qdrant projection drops the point, as for forget and expiry). Nothing reads
-- this table but the operator command, so no read path of memory (recall, pinned facts, browse,
-- the index) can reach a quarantined entry, for any tenant; the DELETE from memory_entries fires
-- pinned_notify, evicting the nodes' pinned-fact caches. Rows are never deleted: an operator's
-- release moves the entry back (version bumped, an upsert in the outbox) and stamps released_at,
-- which keeps the history and tells later rescreens not to quarantine the same key and content
-- again.
CREATE TABLE memory_quarantine (
    quarantine_id    bigserial        PRIMARY KEY,
    entry_id         uuid             NOT NULL,
    environment      text             NOT NULL,
    account_id       text             NOT NULL,
    agent_id         text             NOT NULL,
    user_id          text,
    author_user_id   text,
    key              text             NOT NULL,
    content          text             NOT NULL,
    category         text             NOT NULL,
    visibility       text             NOT NULL,
    importance       double precision NOT NULL,
    content_hash     text             NOT NULL,
    expires_at       timestamptz,
    recall_count     integer          NOT NULL,
    last_recalled_at timestamptz,
    decayed_at       timestamptz,
    created_at       timestamptz      NOT NULL,
    updated_at       timestamptz      NOT NULL,
    source           jsonb,
    version          bigint           NOT NULL,
    reason           text             NOT NULL,  -- outcome code: screening_rejected, sensitive_without_user, ...
    rule             text             NOT NULL,  -- the screening pattern (ignore_instructions, email, ...)
    field            text             NOT NULL,  -- key or content
    detail           text             NOT NULL,  -- the human explanation
    quarantined_at   timestamptz      NOT NULL,
    released_at      timestamptz
);

-- At most one open quarantine per entry; the operator listing (scope, then id order).
CREATE UNIQUE INDEX memory_quarantine_open
    ON memory_quarantine (entry_id) WHERE released_at IS NULL;
CREATE INDEX memory_quarantine_by_scope
    ON memory_quarantine (environment, account_id, entry_id);
