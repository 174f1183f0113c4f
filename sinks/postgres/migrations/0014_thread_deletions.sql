-- Thread deletions (`DELETE /v1/threads/{id}`, core.thread_deletion): the durable register. A row is
-- written before anything of the thread is removed (the intent), then each store's step records its
-- report in `report` (by step name) as it completes, `up_to_seq`/`seqs` once the journal's rows are
-- deleted (the tombstone: every message of the thread with seq <= up_to_seq is deleted; `seqs` the
-- ranges [[lo, hi], ...] of the deleted seqs, so a rebuild knows which seqs it will never read), and
-- `completed_at` at the end. A node finishes at start every deletion left incomplete. Rows are kept:
-- they are the tombstones every projection loads before it projects.
CREATE TABLE thread_deletions (
    deletion_id  bigserial   PRIMARY KEY,
    environment  text        NOT NULL,
    account_id   text        NOT NULL,
    thread_id    text        NOT NULL,
    agent_id     text,
    user_id      text,
    requested_at timestamptz NOT NULL DEFAULT now(),
    up_to_seq    bigint,
    seqs         jsonb,
    report       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    completed_at timestamptz,
    CHECK ((up_to_seq IS NULL) = (seqs IS NULL))
);

-- At most one incomplete deletion per thread; the latest deletion of a thread.
CREATE UNIQUE INDEX thread_deletions_open
    ON thread_deletions (environment, account_id, thread_id) WHERE completed_at IS NULL;
CREATE INDEX thread_deletions_by_thread
    ON thread_deletions (environment, account_id, thread_id, deletion_id DESC);
