-- User erasures (`DELETE /v1/users/{user_id}`, core.user_erasure): the durable register. A row is
-- written before anything of the user is removed (the intent); `deletions` gets the id of each
-- thread deletion (thread_deletions) the erasure opens, before that deletion runs, so an erasure
-- stopped midway finds them again; each further step records its report in `report` (by step
-- name) when done, and `completed_at` is stamped at the end. A node finishes at start every
-- erasure left incomplete. Rows are kept: they say which user was erased when, and
-- `memstream verify` checks what each left behind.
CREATE TABLE user_erasures (
    erasure_id   bigserial   PRIMARY KEY,
    environment  text        NOT NULL,
    account_id   text        NOT NULL,
    user_id      text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    deletions    bigint[]    NOT NULL DEFAULT '{}',
    report       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    completed_at timestamptz
);

-- At most one incomplete erasure per user; the latest erasure of a user.
CREATE UNIQUE INDEX user_erasures_open
    ON user_erasures (environment, account_id, user_id) WHERE completed_at IS NULL;
CREATE INDEX user_erasures_by_user
    ON user_erasures (environment, account_id, user_id, erasure_id DESC);

-- The threads of one user (an erasure lists them, in thread id order, until none is left).
CREATE INDEX threads_by_user
    ON threads (environment, account_id, user_id, thread_id) WHERE user_id IS NOT NULL;
