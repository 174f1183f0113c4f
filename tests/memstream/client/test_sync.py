"""`MemstreamClient`'s logic over a scripted transport: requests built, retries by the rules,
typed errors. (Each method against a real node: test_client_node.py.)"""

from __future__ import annotations

import httpx
import pytest

from memstream.client import (
    ConflictError,
    MemstreamClient,
    NewMessage,
    NotFoundError,
    RetryPolicy,
    UnavailableError,
)
from tests.memstream.client.scripted import Script, stored, unavailable

FAST = RetryPolicy(max_attempts=4, initial_backoff_s=0.01, max_backoff_s=0.01)


def _client(script: Script, retry: RetryPolicy = FAST) -> MemstreamClient:
    return MemstreamClient(
        "http://node:8080/", "msk_test", retry=retry, transport=script.transport(), sleep=script.sleep()
    )


def test_an_append_generates_message_ids_once_and_retries_with_the_same_ids() -> None:
    request = httpx.Request("POST", "http://node:8080")
    script = Script(unavailable(), httpx.ReadTimeout("slow", request=request), stored("t-1", "given", "x"))
    with _client(script) as client:
        result = client.append(
            "t-1",
            [NewMessage(message_id="given", role="user", content="hi"), {"role": "user", "content": "hey"}],
            agent_id="bot",
        )
    assert [m.message_id for m in result.messages] == ["given", "x"]
    bodies = script.bodies()
    assert len(bodies) == 3 and bodies[0] == bodies[1] == bodies[2]
    sent = bodies[0]["messages"]
    assert sent[0] == {"message_id": "given", "role": "user", "content": "hi"}
    assert sent[1]["message_id"].startswith("m-") and len(sent[1]["message_id"]) == 34
    assert bodies[0]["agent_id"] == "bot" and "user_id" not in bodies[0]
    first = script.requests[0]
    assert (first.method, first.url.path) == ("POST", "/v1/threads/t-1/messages")
    assert first.headers["authorization"] == "Bearer msk_test"
    assert len(script.waits) == 2


def test_retry_after_is_honoured() -> None:
    script = Script(
        unavailable(retry_after="3"),
        httpx.Response(200, json={"agent_id": "a", "capabilities": [], "tools": []}),
    )
    with _client(script) as client:
        assert client.get_agent("a").tools == []
    assert script.waits == [3.0]


def test_the_last_error_is_raised_when_attempts_run_out() -> None:
    script = Script(*(unavailable() for _ in range(4)))
    with _client(script) as client, pytest.raises(UnavailableError) as raised:
        client.get_thread("t-1")
    assert (raised.value.status, raised.value.code) == (503, "postgres_unavailable")
    assert len(script.requests) == 4 and len(script.waits) == 3


def test_a_final_error_is_raised_at_once_with_the_servers_code() -> None:
    body = {
        "error": {
            "code": "message_id_conflict",
            "message": "m-1 was stored with other content",
            "field": "messages[0].message_id",
        }
    }
    script = Script(httpx.Response(409, json=body))
    with _client(script) as client, pytest.raises(ConflictError) as raised:
        client.append("t-1", [{"message_id": "m-1", "role": "user", "content": "other"}])
    assert (raised.value.code, raised.value.field) == ("message_id_conflict", "messages[0].message_id")
    assert len(script.requests) == 1 and script.waits == []


def test_a_delete_is_not_repeated_after_a_timeout_but_is_after_a_503_or_a_refused_connection() -> None:
    request = httpx.Request("DELETE", "http://node:8080")
    timeout = Script(httpx.ReadTimeout("slow", request=request))
    with _client(timeout) as client, pytest.raises(UnavailableError) as raised:
        client.delete_memory("bot", "e-1")
    assert raised.value.code == "network_error" and len(timeout.requests) == 1
    recovered = Script(httpx.ConnectError("refused", request=request), unavailable(), httpx.Response(204))
    with _client(recovered) as client:
        client.delete_memory("bot", "e-1", user_id="u-1")
    assert len(recovered.requests) == 3
    assert recovered.requests[0].url.path == "/v1/agents/bot/memory/e-1"
    assert recovered.requests[0].url.params["user_id"] == "u-1"


def test_memory_forget_is_retried_after_a_timeout_only_with_an_explicit_scope() -> None:
    request = httpx.Request("POST", "http://node:8080")
    answer = httpx.Response(200, json={"tool": "memory_forget", "result": {"forgotten": True, "key": "k"}})
    scoped = Script(httpx.ReadTimeout("slow", request=request), answer)
    with _client(scoped) as client:
        assert client.memory_forget("bot", "k", scope="private", user_id="u").result["forgotten"] is True
    assert scoped.bodies()[1] == {"arguments": {"key": "k", "scope": "private"}, "user_id": "u"}
    unscoped = Script(httpx.ReadTimeout("slow", request=request))
    with _client(unscoped) as client, pytest.raises(UnavailableError):
        client.memory_forget("bot", "k", user_id="u")
    assert len(unscoped.requests) == 1


def test_no_retry_policy_sends_once() -> None:
    script = Script(unavailable())
    with _client(script, RetryPolicy(max_attempts=1)) as client, pytest.raises(UnavailableError):
        client.get_context("t-1")
    assert len(script.requests) == 1


def test_ids_are_percent_encoded_into_one_path_segment() -> None:
    script = Script(httpx.Response(404, json={"error": {"code": "not_found", "message": "no"}}))
    with _client(script) as client, pytest.raises(NotFoundError):
        client.get_thread("../admin")
    assert script.requests[0].url.raw_path == b"/v1/threads/..%2Fadmin"


def test_query_parameters_leave_out_what_was_not_given() -> None:
    page = httpx.Response(200, json={"entries": [], "next_cursor": None})
    script = Script(page, httpx.Response(200, json={"thread_id": "t", "messages": [], "next_after": 4}))
    with _client(script) as client:
        assert client.list_memory("bot", category="user_profile").next_cursor is None
        assert client.read_messages("t", after=4, limit=10).next_after == 4
    assert dict(script.requests[0].url.params) == {"category": "user_profile", "limit": "50"}
    assert dict(script.requests[1].url.params) == {"after": "4", "limit": "10"}


def test_erasing_a_user_is_repeated_after_a_timeout_and_reads_the_report() -> None:
    request = httpx.Request("DELETE", "http://node:8080")
    report = {
        "user_id": "u/1",
        "erasure_id": 4,
        "requested_at": "2026-12-02T07:00:00Z",
        "completed_at": "2026-12-02T07:00:01Z",
        "erased": {"threads": {"threads": 0, "deletions": [], "deleted": {}}},
    }
    script = Script(httpx.ReadTimeout("slow", request=request), httpx.Response(200, json=report))
    with _client(script) as client:
        erased = client.erase_user("u/1")
    assert (erased.erasure_id, erased.erased["threads"]["threads"]) == (4, 0)
    assert [r.url.raw_path for r in script.requests] == [b"/v1/users/u%2F1"] * 2
    assert all(r.method == "DELETE" for r in script.requests)
