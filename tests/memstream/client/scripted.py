"""A scripted httpx transport for unit tests of the client's logic: answers in order, records requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

Answer = httpx.Response | Exception


class Script:
    """Answers the requests with `answers` in order (an exception is raised as the transport's);
    `requests` records what was sent, `waits` what the client slept."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.waits: list[float] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def sleep(self) -> Callable[[float], None]:
        return self.waits.append

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]


def unavailable(retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": {"code": "postgres_unavailable", "message": "the database is unavailable"}}
    return httpx.Response(503, headers=headers, json=body)


def stored(thread_id: str, *message_ids: str) -> httpx.Response:
    messages = [
        {
            "message_id": mid,
            "environment": "dev",
            "account_id": "acme",
            "agent_id": "bot",
            "user_id": None,
            "thread_id": thread_id,
            "offset": offset,
            "seq": offset + 1,
            "role": "user",
            "content": "hi",
            "created_at": "2026-12-01T00:00:00Z",
            "token_count": 1,
        }
        for offset, mid in enumerate(message_ids)
    ]
    return httpx.Response(201, json={"thread_id": thread_id, "messages": messages})
