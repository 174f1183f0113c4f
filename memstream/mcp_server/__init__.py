"""memstream as an MCP server (the official `mcp` SDK): one agent's tools - `memory_store`,
`memory_recall`, `memory_forget` when the agent has Memory bound, `journal_message_search` and
`journal_tool_call_view` on an agent surface - for MCP clients (Claude Desktop, Cursor, ...).

Two transports over one server definition (`server.build_server`):
- streamable HTTP, served by the node itself at `/mcp/{agent_id}` (`http.McpEndpoint`, mounted by
  `memstream.wiring.node`): each request authenticated with its own API key (`Authorization:
  Bearer`), running the tools in process through `memstream.api.agent_tools.AgentTools`, the code
  the REST routes run;
- stdio (`memstream mcp --agent ID`, `stdio.serve_stdio`): a client of a running node's REST API.
  The node owns the journal (one fenced writer), the embedded ClickHouse and the in-process vector
  index, so another process cannot run the tools itself; relaying to the API also keeps every rule
  (keys, surfaces, tenancy) where it is enforced for everyone.

Either way the tools, their arguments and their errors are the API's: an error the API answers
(`{"error": {"code", "message", "field"}}`) is a tool result with `isError` and that message.
"""
