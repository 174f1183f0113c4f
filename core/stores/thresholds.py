"""Per-thread threshold state (what the `thresholds` processor counts): the store of the counters
since the last summary and of the flush-and-summarize guard (`ThresholdStore`), whose counters
(`ThreadScope`) and what counting one message did (`Outcome`). The adapter is
`sinks.redis.thresholds.RedisThresholdStore` (its module doc has the key layout and the scripts).

Contract: counting is by offset. The counters of a thread are exactly the pure rule's fold
(`processors.thresholds.fold`) of its agent's journal messages with `base <= offset <= upto`;
a message at or below `upto` is never counted twice; a message past `upto + 1`, or a missing or
stale state, is answered (`gap`, `rebuild`) for the caller to read the journal and `install` the
result, which applies only while the state is still the one `count` saw. The guard is held from a
crossing until released (or its lease runs out). The state is derived or coordination state only:
losing it all is repaired by the rebuild. Storage errors propagate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


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


class ThresholdStore(Protocol):
    async def count(self, scope: ThreadScope, offset: int, tokens: int) -> Outcome:
        """Count the message at `offset` (of `tokens` tokens) and check the thresholds, atomically:
        `counted`, `request`, `guarded`, or - nothing changed - `duplicate`, `resend`, `old`,
        `rebuild`, `gap`."""
        ...

    async def count_batch(self, messages: Sequence[tuple[ThreadScope, int, int]]) -> list[Outcome]:
        """`count` each of `messages` (scope, offset, tokens) in order, stopping after the first
        answered `rebuild` or `gap` (which changed nothing): the answers of the messages counted,
        as many `count` calls one after another would give (each `count` atomic, the batch need
        not be)."""
        ...

    async def install(
        self,
        scope: ThreadScope,
        seen: Outcome,
        *,
        base: int,
        upto: int,
        tokens: int,
        messages: int,
        offset: int,
    ) -> Outcome:
        """Install the counters of the journal's messages (of the scope's agent) with
        `base <= offset <= upto`, when the state is still what `count` answered as `seen` (a
        `rebuild` or a `gap`); then check the thresholds at `upto` for the message at `offset`
        (<= `upto`). Answers `exists` and changes nothing when the state changed meanwhile."""
        ...

    async def mark_sent(self, scope: ThreadScope, offset: int) -> None:
        """The request decided at `offset` is durable on the broker: never resend it."""
        ...

    async def release_guard(self, scope: ThreadScope, *, up_to: int | None = None) -> bool:
        """Release the flush-and-summarize guard. With `up_to`, only a guard taken at a crossing at
        or before that offset is released (atomic). True when a guard was released."""
        ...

    async def hold_guard(self, scope: ThreadScope, offset: int) -> bool:
        """Take the guard for the crossing at `offset` unless one is held. True when taken."""
        ...

    async def reset_counters(self, scope: ThreadScope, from_offset: int) -> None:
        """After a summary covering offsets < `from_offset` was written: the counters restart from
        there, marked stale (the next message recounts from the journal what was counted since)."""
        ...

    async def counters(self, scope: ThreadScope) -> dict[str, int] | None:
        """The thread's state as integers (None when absent): for tests and operators."""
        ...

    async def aclose(self) -> None:
        """Close what the store owns."""
        ...
