"""Driving thread memory over the HTTP API: a thread that crosses the 50-message threshold, and
waiting for its summary (shared by the node's and `memstream up`'s end-to-end tests)."""

from __future__ import annotations

import time
from typing import Any

import httpx


def append_messages(client: httpx.Client, thread: str, user: str, n: int, first: str) -> None:
    messages: list[dict[str, Any]] = [{"message_id": f"{thread}-0", "role": "user", "content": first}]
    for i in range(1, n):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append(
            {"message_id": f"{thread}-{i}", "role": role, "content": f"Message {i} about the trip."}
        )
    body = {"agent_id": "bot", "user_id": user, "messages": messages}
    response = client.post(f"/v1/threads/{thread}/messages", json=body)
    assert response.status_code == 201, response.text


def wait_for_summary(client: httpx.Client, thread: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        context: dict[str, Any] = client.get(f"/v1/threads/{thread}/context").json()
        if context["metadata"].get("summary_version"):
            return context
        assert time.monotonic() < deadline, f"no summary for {thread}: {context['metadata']}"
        time.sleep(0.5)
