-- Data-access keys (`memstream keys create --data-access`, core.sql.access): the credentials of the
-- read-only SQL endpoint, issued for the surface `data`. The agent API refuses them and the SQL
-- endpoint refuses every other key. One is scoped to one account, or to every account of its
-- environment (account_id '*', which no account id can be).
ALTER TABLE api_keys DROP CONSTRAINT api_keys_surface_check;
ALTER TABLE api_keys
    ADD CONSTRAINT api_keys_surface_check CHECK (surface IN ('agent', 'mcp', 'data')),
    ADD CONSTRAINT api_keys_all_accounts_check CHECK (account_id <> '*' OR surface = 'data');
