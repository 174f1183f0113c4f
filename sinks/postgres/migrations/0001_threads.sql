-- Threads: one row per (environment, account, thread). agent_id and user_id never change.
CREATE TABLE threads (
    environment text        NOT NULL,
    account_id  text        NOT NULL,
    thread_id   text        NOT NULL,
    agent_id    text        NOT NULL,
    user_id     text,
    metadata    jsonb       NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment, account_id, thread_id)
);

CREATE INDEX threads_by_agent ON threads (environment, account_id, agent_id, updated_at DESC);
