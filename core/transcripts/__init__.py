"""Transcript tools over the ClickHouse projection of the journal: `journal_message_search` and
`journal_tool_call_view` (`core.transcripts.tools`), and the pairing of tool calls with their
results that every transcript store uses (`core.transcripts.tool_calls`).

They are not part of the Memory capability: an agent is offered them whether or not Memory is
bound, on agent surfaces only (never to a caller whose API key was issued to an MCP gateway).
"""
