"""The 409 for a message_id reused across threads is no oracle (issue 9, finding 14)."""

from __future__ import annotations

from typing import Any

import httpx

from ..conftest import Keys

SECRET = "I work at Initech and my badge code is 7781."


def post(thread: str, agent: str, user: str, role: str, content: str) -> dict[str, Any]:
    return {
        "agent_id": agent,
        "user_id": user,
        "messages": [{"message_id": "m-secret", "role": role, "content": content}],
    }


async def test_conflicts_across_threads_say_the_same_whatever_the_guess(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    stored = await client.post(
        "/v1/threads/alice-1/messages",
        json=post("alice-1", "bot", "alice", "user", SECRET),
        headers=keys.acme,
    )
    assert stored.status_code == 201
    bodies = []
    guesses = [
        ("bot", "user", SECRET),
        ("bot", "user", "I work at Initech and my badge code is 0000."),
        ("bot", "assistant", SECRET),
        ("other-bot", "user", SECRET),
    ]
    for i, (agent, role, guess) in enumerate(guesses):
        thread = f"mallory-{i}"
        response = await client.post(
            f"/v1/threads/{thread}/messages",
            json=post(thread, agent, "mallory", role, guess),
            headers=keys.acme,
        )
        assert response.status_code == 409, response.text
        bodies.append(response.json())
        # nothing written: not even the thread the append would have created
        assert (await client.get(f"/v1/threads/{thread}", headers=keys.acme)).status_code == 404
    assert all(body == bodies[0] for body in bodies), bodies
    message = bodies[0]["error"]["message"]
    for leak in ("content", "role", "alice", "Initech", "7781"):
        assert leak not in message, message
    assert "new message_id" in message


async def test_a_retry_in_the_same_thread_still_names_what_differs(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    body = post("alice-1", "bot", "alice", "user", SECRET)
    first = await client.post("/v1/threads/alice-1/messages", json=body, headers=keys.acme)
    retry = await client.post("/v1/threads/alice-1/messages", json=body, headers=keys.acme)
    assert (first.status_code, retry.status_code) == (201, 201)
    assert retry.json()["messages"] == first.json()["messages"]
    changed = await client.post(
        "/v1/threads/alice-1/messages",
        json=post("alice-1", "bot", "alice", "user", "changed"),
        headers=keys.acme,
    )
    assert changed.status_code == 409
    assert "different content" in changed.json()["error"]["message"]


async def test_other_accounts_never_collide(client: httpx.AsyncClient, keys: Keys) -> None:
    body = post("t1", "bot", "alice", "user", SECRET)
    assert (await client.post("/v1/threads/t1/messages", json=body, headers=keys.acme)).status_code == 201
    other = post("t1", "bot", "bob", "user", "something else")
    assert (await client.post("/v1/threads/t1/messages", json=other, headers=keys.globex)).status_code == 201
