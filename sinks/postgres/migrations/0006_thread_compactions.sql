-- Thread memory's durable state, one row per (environment, account, agent, thread) that ever
-- crossed a compaction threshold or got a summary. Redis (counters, claims, the guard) and the
-- broker (the requests) may lose everything; this row keeps what must survive them
-- (sinks/postgres/compactions.py):
--   request/to_offset/requested_at/rerequests: the compaction in flight (NULL when none);
--   crossed_offset: the latest message that crossed a threshold again while it was in flight;
--   summary_version: the highest summary version ever written (versions never go backwards).
CREATE TABLE thread_compactions (
    environment     text        NOT NULL,
    account_id      text        NOT NULL,
    agent_id        text        NOT NULL,
    thread_id       text        NOT NULL,
    request         jsonb,
    to_offset       bigint,
    requested_at    timestamptz,
    rerequests      integer     NOT NULL DEFAULT 0,
    crossed_offset  bigint,
    summary_version integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (environment, account_id, agent_id, thread_id),
    CHECK ((request IS NULL) = (to_offset IS NULL) AND (request IS NULL) = (requested_at IS NULL))
);

-- The recovery sweep reads only the open rows (a request in flight or a pending crossing).
CREATE INDEX thread_compactions_open ON thread_compactions (requested_at)
    WHERE request IS NOT NULL OR crossed_offset IS NOT NULL;
