-- API keys: only the SHA-256 of the key is stored, plus a short visible prefix to recognise it.
CREATE TABLE api_keys (
    key_id      text        PRIMARY KEY,
    environment text        NOT NULL,
    account_id  text        NOT NULL,
    key_hash    bytea       NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    prefix      text        NOT NULL,
    label       text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE INDEX api_keys_by_account ON api_keys (environment, account_id);
