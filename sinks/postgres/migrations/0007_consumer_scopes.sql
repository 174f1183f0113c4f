-- Where a consumer group's stored progress (consumer_progress, consumer_watermarks) was made: the
-- id of the store its effects live in, for processors whose store can differ between the members
-- of the group (streams.runtime.processor.Processor.progress_scope). A member writing to another
-- store (created anew, or another node's own) drops the progress first (sinks/postgres/progress.py).
CREATE TABLE consumer_scopes (
    group_id   text        PRIMARY KEY,
    scope      text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
