-- Announce every change of an API key to the nodes that cache keys (core.cached_api_keys): the
-- payload is the key's hash in hex ('*' after a TRUNCATE: forget every key). NOTIFY is delivered
-- when the writing transaction commits.
CREATE FUNCTION api_keys_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('memstream_api_keys', '*');
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_notify('memstream_api_keys', encode(OLD.key_hash, 'hex'));
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.key_hash <> OLD.key_hash) THEN
        PERFORM pg_notify('memstream_api_keys', encode(NEW.key_hash, 'hex'));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_notify AFTER INSERT OR UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION api_keys_notify();
CREATE TRIGGER api_keys_notify_truncate AFTER TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION api_keys_notify();
