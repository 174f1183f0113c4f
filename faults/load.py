"""The load during faults: several client threads appending conversations through the HTTP API.

Each worker owns a fixed set of conversations (`faults.ledger.Conversation`), so one thread's
appends are sent one at a time, in order, as one agent platform would. An append is one message, a
user + assistant pair, or an assistant tool call with its tool result (one request, atomic). Texts
are 25-60 words (about 35-80 tokens), so a hot conversation crosses the compaction thresholds
(2,000 tokens or 50 messages) every 30-50 messages.

Outcomes go to the `Ledger`. An append without a definite answer (transport error, timeout, 5xx,
429) is retried with the same body - the same message ids - with capped backoff until it gets one,
as a real client resolves an unknown outcome; a 201 then returns the stored messages (idempotent).

`pause()` lets every worker finish (resolve) its current append and then wait; it answers whether
all did within the timeout. `retarget(url, key)` points the workers at another node (a failover):
an append in flight is retried there.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from faults.ledger import Conversation, Ledger, ServerError

WORDS = (
    "order refund invoice shipping parcel courier address window seat flight hotel booking visa "
    "budget schedule meeting report draft contract renewal warranty printer laptop battery screen "
    "password account login billing plan upgrade discount coupon delivery tracking warehouse Lisbon "
    "Berlin Tokyo Monday Friday morning evening urgent later thanks please maybe tomorrow yesterday "
    "customer support agent manager ticket priority escalation feedback survey"
).split()
"""Vocabulary of the generated texts (offline summaries keep whole sentences of them)."""


@dataclass
class Target:
    """Where the load sends its appends (one node's API and an API key of its account)."""

    url: str
    api_key: str


def conversations(run_id: str, count: int, *, seed: int) -> list[Conversation]:
    """`count` conversations over 3 agents; every third without a user; two in three hot."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        user = None if i % 3 == 2 else f"user-{rng.randrange(5)}"
        out.append(Conversation(f"{run_id}-t{i:03d}", f"agent-{i % 3}", user, hot=i % 3 != 1))
    return out


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(25, 60))]
    return " ".join(words).capitalize() + "."


def append_bodies(conversation: Conversation, k: int, rng: random.Random) -> list[dict[str, Any]]:
    """The messages of append number `k` of `conversation` (ids `{thread}.m{k}.{i}`)."""

    def mid(i: int) -> str:
        return f"{conversation.thread_id}.m{k}.{i}"

    kind = rng.random()
    if kind < 0.15:
        call = f"call-{k}"
        args = {"order_id": f"A-{rng.randrange(10_000)}", "verbose": rng.random() < 0.5}
        return [
            {
                "message_id": mid(0),
                "role": "assistant",
                "tool_call": {"id": call, "name": "lookup_order", "arguments": json.dumps(args)},
            },
            {
                "message_id": mid(1),
                "role": "tool",
                "tool_call": {"id": call, "result": json.dumps({"status": sentence(rng)})},
            },
        ]
    if kind < 0.40:
        return [
            {"message_id": mid(0), "role": "user", "content": sentence(rng)},
            {"message_id": mid(1), "role": "assistant", "content": sentence(rng)},
        ]
    role = "user" if kind < 0.75 else "assistant"
    return [{"message_id": mid(0), "role": role, "content": sentence(rng)}]


def error_code(response: httpx.Response) -> str | None:
    """`error.code` of a JSON error body, or None."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


class Load:
    """See the module doc. `rate` is the total appends per second over all workers."""

    def __init__(
        self,
        ledger: Ledger,
        target: Target,
        conversations: Sequence[Conversation],
        *,
        workers: int = 4,
        rate: float = 20.0,
        seed: int = 0,
        timeout_s: float = 10.0,
    ) -> None:
        self.ledger = ledger
        self.rate = rate
        self.timeout_s = timeout_s
        self._target = target
        self._generation = 0
        self._lock = threading.Lock()
        self._running = threading.Event()  # set: append; clear: pause
        self._stopping = threading.Event()
        self._idle = [threading.Event() for _ in range(workers)]
        for conversation in conversations:
            ledger.add_conversation(conversation)
        shares: list[list[Conversation]] = [[] for _ in range(workers)]
        for i, conversation in enumerate(conversations):
            shares[i % workers].append(conversation)
        self._threads = [
            threading.Thread(target=self._work, args=(i, shares[i], seed + i), name=f"load-{i}", daemon=True)
            for i in range(workers)
        ]

    # ---- control

    def start(self) -> None:
        self._running.set()
        for thread in self._threads:
            thread.start()

    def pause(self, timeout: float = 60.0) -> bool:
        """Stop starting appends; True once every worker resolved its current one within `timeout`."""
        self._running.clear()
        deadline = time.monotonic() + timeout
        return all(idle.wait(max(0.0, deadline - time.monotonic())) for idle in self._idle)

    def resume(self) -> None:
        self._running.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop for good: workers resolve their current append (until `timeout`) and end."""
        self._running.clear()
        self.pause(timeout)
        self._stopping.set()
        self._running.set()  # wake paused workers so they see `_stopping`
        for thread in self._threads:
            thread.join(5)

    def retarget(self, target: Target) -> None:
        with self._lock:
            self._target = target
            self._generation += 1

    def target(self) -> tuple[Target, int]:
        with self._lock:
            return self._target, self._generation

    # ---- workers

    def _work(self, index: int, mine: list[Conversation], seed: int) -> None:
        rng = random.Random(seed)
        counters = dict.fromkeys((c.thread_id for c in mine), 0)
        weights = [3.0 if c.hot else 0.3 for c in mine]
        period = len(self._threads) / self.rate
        client: httpx.Client | None = None
        generation = -1
        idle = self._idle[index]
        try:
            while True:
                if not self._running.is_set():
                    idle.set()
                    self._running.wait()
                if self._stopping.is_set():
                    return
                idle.clear()
                started = time.monotonic()
                conversation = rng.choices(mine, weights)[0]
                k = counters[conversation.thread_id]
                counters[conversation.thread_id] = k + 1
                bodies = append_bodies(conversation, k, rng)
                ids = self.ledger.sending(conversation.thread_id, bodies)
                payload: dict[str, Any] = {"agent_id": conversation.agent_id, "messages": bodies}
                if conversation.user_id is not None:
                    payload["user_id"] = conversation.user_id
                backoff = 0.2
                while True:  # until a definite answer (or the run stops for good)
                    target, current = self.target()
                    if client is None or current != generation:
                        if client is not None:
                            client.close()
                        client = httpx.Client(
                            base_url=target.url,
                            headers={"Authorization": f"Bearer {target.api_key}"},
                            timeout=self.timeout_s,
                        )
                        generation = current
                    if self._deliver(client, conversation.thread_id, payload, ids):
                        break
                    if self._stopping.is_set():
                        return
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                if self._running.is_set():
                    time.sleep(max(0.0, period - (time.monotonic() - started)))
        finally:
            idle.set()
            if client is not None:
                client.close()

    def _deliver(self, client: httpx.Client, thread_id: str, payload: dict[str, Any], ids: list[str]) -> bool:
        """One attempt; True when the outcome is definite (acked or rejected)."""
        path = f"/v1/threads/{thread_id}/messages"
        self.ledger.attempted(ids)
        try:
            response = client.post(path, json=payload)
        except httpx.HTTPError:
            self.ledger.transport_error()
            return False
        if response.status_code == 201:
            stored = response.json()["messages"]
            by_id = {m["message_id"]: int(m["offset"]) for m in stored}
            self.ledger.acked(ids, [by_id.get(i, -1) for i in ids])
            return True
        code = error_code(response)
        if response.status_code >= 500:
            self.ledger.server_error(ServerError(time.time(), "POST", path, response.status_code, code))
            return False
        if response.status_code == 429:
            return False
        self.ledger.rejected(ids, f"{response.status_code} {code}: {response.text[:300]}")
        return True
