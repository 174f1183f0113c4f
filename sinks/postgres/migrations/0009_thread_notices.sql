-- Announce every change of a thread row to the nodes that cache threads (core.cached_threads): the
-- payload is the thread's scope as a JSON array [environment, account_id, thread_id] ('*' after a
-- TRUNCATE: forget every thread). Inserts need no notice: a missing thread is never cached.
-- NOTIFY is delivered when the writing transaction commits.
CREATE FUNCTION threads_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('memstream_threads', '*');
    ELSE
        PERFORM pg_notify('memstream_threads',
                          json_build_array(OLD.environment, OLD.account_id, OLD.thread_id)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER threads_notify AFTER UPDATE OR DELETE ON threads
    FOR EACH ROW EXECUTE FUNCTION threads_notify();
CREATE TRIGGER threads_notify_truncate AFTER TRUNCATE ON threads
    FOR EACH STATEMENT EXECUTE FUNCTION threads_notify();
