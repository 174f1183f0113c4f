-- Announce every change of a pinnable entry (a private user_profile entry) to the nodes that cache
-- pinned facts (core.cached_pinned): the payload is the entry's scope as a JSON array
-- [environment, account_id, agent_id, user_id] ('*' after a TRUNCATE: forget everything). Every
-- change of an entry bumps its version; an update that keeps the version (the recall counters) is
-- not announced. NOTIFY is delivered when the writing transaction commits.
CREATE FUNCTION pinned_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('memstream_pinned', '*');
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.category = 'user_profile' AND OLD.visibility = 'private' THEN
        PERFORM pg_notify('memstream_pinned',
                          json_build_array(OLD.environment, OLD.account_id, OLD.agent_id, OLD.user_id)::text);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.category = 'user_profile' AND NEW.visibility = 'private' THEN
        PERFORM pg_notify('memstream_pinned',
                          json_build_array(NEW.environment, NEW.account_id, NEW.agent_id, NEW.user_id)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER pinned_notify_insert_delete AFTER INSERT OR DELETE ON memory_entries
    FOR EACH ROW EXECUTE FUNCTION pinned_notify();
CREATE TRIGGER pinned_notify_update AFTER UPDATE ON memory_entries
    FOR EACH ROW WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION pinned_notify();
CREATE TRIGGER pinned_notify_truncate AFTER TRUNCATE ON memory_entries
    FOR EACH STATEMENT EXECUTE FUNCTION pinned_notify();
