-- Announce every change of an agent's capability bindings to the nodes that cache them
-- (core.cached_agents): the payload is the agent's key as a JSON array
-- [environment, account_id, agent_id] ('*' after a TRUNCATE: forget every agent). Inserts are
-- announced too: "no bindings" is cached. NOTIFY is delivered when the writing transaction commits.
CREATE FUNCTION agents_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('memstream_agents', '*');
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('memstream_agents', json_build_array(OLD.environment, OLD.account_id, OLD.agent_id)::text);
    ELSE
        PERFORM pg_notify('memstream_agents', json_build_array(NEW.environment, NEW.account_id, NEW.agent_id)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER agents_notify AFTER INSERT OR UPDATE OR DELETE ON agents
    FOR EACH ROW EXECUTE FUNCTION agents_notify();
CREATE TRIGGER agents_notify_truncate AFTER TRUNCATE ON agents
    FOR EACH STATEMENT EXECUTE FUNCTION agents_notify();
