"""Transcript tools over the ClickHouse projection of the journal: `journal_message_search` and
`journal_tool_call_view` (`memstream.transcripts.tools`).

They are not part of the Memory capability: an agent is offered them whether or not Memory is
bound, on agent surfaces only (never to a caller whose API key was issued to an MCP gateway).
"""
