"""`InMemoryThresholdStore`: the `ThresholdStore` (`core.stores.thresholds`) in memory, on the pure
rule.

Each step of `sinks.redis.thresholds`'s Lua scripts is here in Python, with the counting and the
threshold check done by the pure rule itself (`processors.thresholds.advance` and `crossing`), not
a copy of it: the contract suite (`tests/core/stores/test_thresholds.py`) runs the same generated
sequences of counts, installs, resets, guard and wipe steps on this store and on Redis and requires
equal outcomes and states, which binds the Lua copy of the rule to the Python one. The state of a
thread is the Redis hash's fields (`state`: `base`, `upto`, `tokens`, `messages`, `stale`,
`req_*`) and the guard its crossing offset and lease expiry (`time.monotonic()`); both are public
for tests (`states`, `guards`), and `wipe()` loses everything like a Redis wipe.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from core.stores.thresholds import Outcome, OutcomeKind, ThreadScope
from processors.thresholds import Counters, advance, crossing
from sinks.redis.thresholds import GUARD_TTL_S

State = dict[str, int | str]


def _fingerprint(state: State) -> str:
    """What `install` checks: `base:upto:stale` (empty parts when absent), as the script's."""
    return ":".join(str(state.get(field, "")) for field in ("base", "upto", "stale"))


class InMemoryThresholdStore:
    """See the module doc. `token_limit` and `message_limit` as `RedisThresholdStore`'s."""

    def __init__(self, *, token_limit: int, message_limit: int, guard_ttl_s: float = GUARD_TTL_S) -> None:
        if token_limit < 1 or message_limit < 1:
            raise ValueError("threshold limits must be at least 1")
        self.token_limit = token_limit
        self.message_limit = message_limit
        self.guard_ttl_s = max(1, int(guard_ttl_s * 1000)) / 1000
        self.states: dict[ThreadScope, State] = {}
        self.guards: dict[ThreadScope, tuple[int, float]] = {}

    def wipe(self) -> None:
        """Lose every state and guard (a Redis wipe)."""
        self.states.clear()
        self.guards.clear()

    async def count(self, scope: ThreadScope, offset: int, tokens: int) -> Outcome:
        state = self.states.get(scope, {})
        seen = _fingerprint(state)
        upto_known = state.get("upto")
        if any(f not in state for f in ("base", "upto", "tokens", "messages")) or "stale" in state:
            return Outcome("rebuild", offset=None if upto_known is None else int(upto_known), state=seen)
        base, upto = int(state["base"]), int(state["upto"])
        counters = Counters(tokens=int(state["tokens"]), messages=int(state["messages"]))
        if offset < base:
            return Outcome("old", base, counters.tokens, counters.messages, upto)
        if offset <= upto:
            if state.get("req_offset") == offset and self._guard(scope) is not None:
                return Outcome(
                    "resend",
                    base,
                    int(state["req_tokens"]),
                    int(state["req_messages"]),
                    offset,
                    str(state["req_reason"]),
                )
            return Outcome("duplicate", base, counters.tokens, counters.messages, upto)
        if offset > upto + 1:
            return Outcome("gap", base, counters.tokens, counters.messages, upto, state=seen)
        counters, _ = advance(counters, tokens)
        state.update(upto=offset, tokens=counters.tokens, messages=counters.messages)
        return self._decide(scope, state, offset, counters, base)

    async def count_batch(self, messages: Sequence[tuple[ThreadScope, int, int]]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for scope, offset, tokens in messages:
            outcomes.append(await self.count(scope, offset, tokens))
            if outcomes[-1].kind in ("rebuild", "gap"):
                break
        return outcomes

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
        if seen.kind not in ("rebuild", "gap") or seen.state is None:
            raise ValueError(f"install needs the state a rebuild or gap outcome saw, not {seen.kind!r}")
        if upto < max(base - 1, offset):
            raise ValueError(f"upto {upto} is below the message ({offset}) or the base ({base})")
        state = self.states.get(scope, {})
        if _fingerprint(state) != seen.state:
            return Outcome("exists")
        if "stale" in state:
            state = {}
        state.update(base=base, upto=upto, tokens=tokens, messages=messages)
        self.states[scope] = state
        out = self._decide(scope, state, upto, Counters(tokens, messages), base)
        if out.kind == "counted":  # the message itself was counted before, or is covered by the summary
            kind: OutcomeKind = "old" if offset < base else "duplicate" if offset < upto else "counted"
            out = Outcome(kind, out.base, out.tokens, out.messages, out.offset)
        return out

    async def mark_sent(self, scope: ThreadScope, offset: int) -> None:
        state = self.states.get(scope)
        if state is not None and state.get("req_offset") == offset:
            for field in ("req_offset", "req_tokens", "req_messages", "req_reason"):
                del state[field]

    async def release_guard(self, scope: ThreadScope, *, up_to: int | None = None) -> bool:
        held = self._guard(scope)
        if held is None or (up_to is not None and held > up_to):
            return False
        del self.guards[scope]
        return True

    async def hold_guard(self, scope: ThreadScope, offset: int) -> bool:
        return self._hold(scope, offset)

    async def reset_counters(self, scope: ThreadScope, from_offset: int) -> None:
        if from_offset < 0:
            raise ValueError(f"from_offset must be >= 0, not {from_offset}")
        upto = self.states.get(scope, {}).get("upto")
        floor = from_offset - 1
        kept = floor if upto is None or int(upto) < floor else int(upto)
        self.states[scope] = {"base": from_offset, "upto": kept, "tokens": 0, "messages": 0, "stale": 1}

    async def counters(self, scope: ThreadScope) -> dict[str, int] | None:
        state = self.states.get(scope)
        if not state:
            return None
        return {k: int(v) for k, v in state.items() if k != "req_reason"}

    async def aclose(self) -> None:
        """Nothing to close."""

    def _decide(
        self, scope: ThreadScope, state: State, offset: int, counters: Counters, base: int
    ) -> Outcome:
        """After counting up to `offset`: the crossing (the pure rule), and the guard when crossed."""
        self.states[scope] = state
        reason = crossing(counters, token_limit=self.token_limit, message_limit=self.message_limit)
        if reason is None:
            return Outcome("counted", base, counters.tokens, counters.messages, offset)
        if not self._hold(scope, offset):
            return Outcome("guarded", base, counters.tokens, counters.messages, offset, reason)
        state.update(
            req_offset=offset, req_tokens=counters.tokens, req_messages=counters.messages, req_reason=reason
        )
        return Outcome("request", base, counters.tokens, counters.messages, offset, reason)

    def _hold(self, scope: ThreadScope, offset: int) -> bool:
        if self._guard(scope) is not None:
            return False
        self.guards[scope] = (offset, time.monotonic() + self.guard_ttl_s)
        return True

    def _guard(self, scope: ThreadScope) -> int | None:
        """The crossing offset of the guard held now (a lease that ran out holds nothing)."""
        held = self.guards.get(scope)
        if held is None or held[1] <= time.monotonic():
            self.guards.pop(scope, None)
            return None
        return held[0]
