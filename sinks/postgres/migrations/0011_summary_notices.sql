-- Announce every change of a thread's durable summary version mark to the nodes that cache
-- summaries (core.cached_summaries): the payload is the thread's scope as a JSON array
-- [environment, account_id, agent_id, thread_id] ('*' after a TRUNCATE: forget everything). The mark
-- is raised after each new summary is durable; other changes of the row (compaction requests) are
-- not announced. NOTIFY is delivered when the writing transaction commits.
CREATE FUNCTION summary_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('memstream_summaries', '*');
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('memstream_summaries',
                          json_build_array(OLD.environment, OLD.account_id, OLD.agent_id, OLD.thread_id)::text);
    ELSE
        PERFORM pg_notify('memstream_summaries',
                          json_build_array(NEW.environment, NEW.account_id, NEW.agent_id, NEW.thread_id)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER summary_notify_insert AFTER INSERT ON thread_compactions
    FOR EACH ROW WHEN (NEW.summary_version > 0) EXECUTE FUNCTION summary_notify();
CREATE TRIGGER summary_notify_update AFTER UPDATE ON thread_compactions
    FOR EACH ROW WHEN (OLD.summary_version IS DISTINCT FROM NEW.summary_version) EXECUTE FUNCTION summary_notify();
CREATE TRIGGER summary_notify_delete AFTER DELETE ON thread_compactions
    FOR EACH ROW EXECUTE FUNCTION summary_notify();
CREATE TRIGGER summary_notify_truncate AFTER TRUNCATE ON thread_compactions
    FOR EACH STATEMENT EXECUTE FUNCTION summary_notify();
