"""What the integration tests of the client run against a real node, sync and async alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from core.config import Settings
from memstream.client import NewMessage, ToolCall
from memstream.client.calls import MessageInput
from tests.memstream.node_process import RunningNode, running_node

TOOL_RESULT = "booked: lighthouse tour, Saturday 10:00"
RECORDED: list[MessageInput] = [
    {"role": "user", "content": "Book the lighthouse tour for Saturday."},
    NewMessage(
        role="assistant",
        tool_call=ToolCall(id="call-7", name="book_tour", arguments='{"tour": "lighthouse"}'),
    ),
    {"role": "tool", "tool_call": {"id": "call-7", "result": TOOL_RESULT}},
    {"role": "assistant", "content": "The lighthouse tour is booked."},
]
"""A turn with a tool call; the messages have no message_id: the client generates them."""


def api_key(node: RunningNode) -> str:
    return node.api.headers["Authorization"].removeprefix("Bearer ")


def node_with_key(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real node (API, journal, relays, processors, memory, transcripts): its URL and a key."""
    with running_node(settings, tmp_path) as node:
        yield node.url, api_key(node)
