"""Per-thread threshold state (what the `thresholds` processor counts): whose counters
(`ThreadScope`) and what counting one message did (`Outcome`). The adapter is
`sinks.redis.thresholds.ThresholdStore` (its module doc has the key layout and the scripts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ThreadScope:
    """Whose counters: a thread of one agent, in one account and environment."""

    environment: str
    account_id: str
    agent_id: str
    thread_id: str

    def prefix(self, namespace: str) -> str:
        return f"{namespace}/{self.environment}/{self.account_id}/{self.agent_id}/{self.thread_id}"


OutcomeKind = Literal[
    "counted", "request", "resend", "guarded", "duplicate", "old", "rebuild", "gap", "exists"
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `count`/`install` did for one message.

    - `counted`: counted (it was the next offset), no threshold crossed.
    - `request`: the counters cross a threshold at `offset` and the guard was acquired: emit a
      request up to `offset` (past the message itself when a rebuild found messages counted
      before it).
    - `resend`: already counted, and the request decided at this very message was never confirmed
      delivered (`mark_sent`) while its guard is still held: emit it again.
    - `guarded`: crossed at `offset`, but a compaction is already in flight (guard held).
    - `duplicate`: already counted (redelivery, replay, republish): nothing changed.
    - `old`: the message is covered by the last summary (offset < base): nothing changed.
    - `rebuild` (count only): the thread's state is missing or stale: rebuild it from the journal
      since the last summary, up to the message and at least to `offset` (how far the counting
      had got, when known), and `install` it.
    - `gap` (count only): messages between `offset` (the counters' end) and this one were never
      counted: add the journal's and `install`.
    - `exists` (install only): the state changed since `count` saw it: count again.
    `base`, `tokens`, `messages`, `offset` (where the counters end: the state's `upto`, or the
    crossing), `reason` describe the counters after the call when known; `state` is what `install`
    checks (rebuild and gap).
    """

    kind: OutcomeKind
    base: int | None = None
    tokens: int | None = None
    messages: int | None = None
    offset: int | None = None
    reason: str | None = None
    state: str | None = None

    @property
    def emits(self) -> bool:
        return self.kind in ("request", "resend")
