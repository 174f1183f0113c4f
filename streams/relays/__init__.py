"""Relays: publish a durable source to a topic in order, advancing the source only after the
broker confirmed: the journal relay (`journal`: the SlateDB journal to `journal.messages`) and the
agent-memory outbox relay (`memory_entries`: Postgres `memory_outbox` to `memory.entries`).
"""
