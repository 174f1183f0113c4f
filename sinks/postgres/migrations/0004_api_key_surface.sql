-- The surface a key is issued for: `agent` (an agent platform calling memstream directly, the
-- default) or `mcp` (an MCP gateway). Agent-only tools (the journal tools) are hidden from `mcp` keys.
ALTER TABLE api_keys
    ADD COLUMN surface text NOT NULL DEFAULT 'agent' CHECK (surface IN ('agent', 'mcp'));
