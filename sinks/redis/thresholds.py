"""Per-thread threshold state in Redis: message claims, counters since the last summary, the
flush-and-summarize guard.

Keys, under `{namespace}/{environment}/{account_id}/{agent_id}/{thread_id}` (`ThreadScope.prefix`):
- `.../state` (hash): `base` (the first offset after the last summary: what the counters count
  from), `tokens`, `messages`; `stale` when the summarizer reset the counters (the next message
  rebuilds them from the journal); `req_offset`/`req_tokens`/`req_messages`/`req_reason` while a
  compaction request is decided but not yet confirmed delivered (`mark_sent` clears them).
- `.../claim/{message_id}`: the per-message side-effect claim (`SET NX`, `claim_ttl_s`, 7 days).
- `.../guard`: the flush-and-summarize guard (`SET NX` with a lease, `guard_ttl_s`; its value is
  the crossing offset), held from the crossing until the summarizer calls `release_guard` (or the
  lease runs out). The compaction recovery takes it again (`hold_guard`) when it requests a
  compaction again after Redis lost it.

`count(...)` is ONE Lua script: claim + increment + threshold check + guard, so a crash can never
claim a message without counting it. It answers an `Outcome` (see `Outcome.kind`). A missing (or
stale) state hash means Redis lost the thread's state, or a summary was just written: the caller
rebuilds from the journal and installs the result with `install(...)` (also one script).

Redis holds only derived or coordination state: losing it all is repaired by that rebuild. Redis
errors propagate (the processor's batch is retried). All keys of a thread are in one script call;
on Redis Cluster they would need a shared hash tag (not used: memstream runs one Redis).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from sinks.redis.client import redis_client

DEFAULT_NAMESPACE = "memstream/thresholds"
CLAIM_TTL_S = 7 * 24 * 3600
"""A claim outlives any redelivery or replay window worth deduplicating (older offsets are below
`base` once summarized)."""
GUARD_TTL_S = 15 * 60
"""The guard's lease: a summarizer that dies frees the thread after this long."""

_DECIDE = """
local function decide(state, guard, offset, tokens, messages, base, tl, ml, guard_ttl)
  local reason = false
  if tokens >= tl then reason = 'tokens' elseif messages >= ml then reason = 'messages' end
  if not reason then return {'counted', base, tokens, messages} end
  if redis.call('SET', guard, offset, 'NX', 'PX', guard_ttl) then
    redis.call('HSET', state, 'req_offset', offset, 'req_tokens', tokens,
               'req_messages', messages, 'req_reason', reason)
    return {'request', base, tokens, messages, reason}
  end
  return {'guarded', base, tokens, messages, reason}
end
"""

_COUNT = (
    _DECIDE
    + """
-- KEYS: state, claim, guard. ARGV: offset, tokens, claim_ttl_ms, token_limit, message_limit, guard_ttl_ms
local base = redis.call('HGET', KEYS[1], 'base')
if (not base) or redis.call('HEXISTS', KEYS[1], 'stale') == 1 then return {'rebuild'} end
base = tonumber(base)
local offset = tonumber(ARGV[1])
if offset < base then return {'old', base} end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then
  local req = redis.call('HMGET', KEYS[1], 'req_offset', 'req_tokens', 'req_messages', 'req_reason')
  if req[1] and tonumber(req[1]) == offset and redis.call('EXISTS', KEYS[3]) == 1 then
    return {'resend', base, tonumber(req[2]), tonumber(req[3]), req[4]}
  end
  return {'duplicate', base}
end
local tokens = redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[2])
local messages = redis.call('HINCRBY', KEYS[1], 'messages', 1)
return decide(KEYS[1], KEYS[3], offset, tokens, messages, base,
              tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6])
"""
)

_INSTALL = (
    _DECIDE
    + """
-- KEYS: state, guard, claims... ARGV: base, tokens, messages, offset, claim_ttl_ms, token_limit,
-- message_limit, guard_ttl_ms, counted ('1' when the current message is among the counted ones)
local current = redis.call('HGET', KEYS[1], 'base')
if current and redis.call('HEXISTS', KEYS[1], 'stale') == 0 then return {'exists'} end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'base', ARGV[1], 'tokens', ARGV[2], 'messages', ARGV[3])
for i = 3, #KEYS do redis.call('SET', KEYS[i], '1', 'PX', ARGV[5]) end
local base = tonumber(ARGV[1])
if ARGV[9] ~= '1' then return {'old', base} end
return decide(KEYS[1], KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[2]), tonumber(ARGV[3]), base,
              tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8])
"""
)

_MARK_SENT = """
if redis.call('HGET', KEYS[1], 'req_offset') == ARGV[1] then
  return redis.call('HDEL', KEYS[1], 'req_offset', 'req_tokens', 'req_messages', 'req_reason')
end
return 0
"""

_RELEASE_UP_TO = """
local held = redis.call('GET', KEYS[1])
if not held then return 0 end
local crossing = tonumber(held)
if crossing and crossing > tonumber(ARGV[1]) then return 0 end
return redis.call('DEL', KEYS[1])
"""

_RESET = """
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'base', ARGV[1], 'tokens', 0, 'messages', 0, 'stale', 1)
return 1
"""


@dataclass(frozen=True, slots=True)
class ThreadScope:
    """Whose counters: a thread of one agent, in one account and environment."""

    environment: str
    account_id: str
    agent_id: str
    thread_id: str

    def prefix(self, namespace: str) -> str:
        return f"{namespace}/{self.environment}/{self.account_id}/{self.agent_id}/{self.thread_id}"


OutcomeKind = Literal["counted", "request", "resend", "guarded", "duplicate", "old", "rebuild", "exists"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `count`/`install` did for one message.

    - `counted`: claimed and counted, no threshold crossed.
    - `request`: counted, a threshold is crossed and the guard was acquired: emit a request.
    - `resend`: already claimed, and the request decided for this very message was never confirmed
      delivered (`mark_sent`) while its guard is still held: emit it again.
    - `guarded`: counted and crossed, but a compaction is already in flight (guard held).
    - `duplicate`: already claimed (redelivery or replay): nothing changed.
    - `old`: the message is covered by the last summary (offset < base): nothing changed.
    - `rebuild`: the thread's state is missing or stale: rebuild it from the journal.
    - `exists` (install only): another worker installed the state first: count again.
    `base`, `tokens`, `messages`, `reason` describe the counters after the call when known.
    """

    kind: OutcomeKind
    base: int | None = None
    tokens: int | None = None
    messages: int | None = None
    reason: str | None = None

    @property
    def emits(self) -> bool:
        return self.kind in ("request", "resend")


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _outcome(raw: Sequence[object]) -> Outcome:
    kind = _text(raw[0])
    numbers = [int(_text(v)) for v in raw[1:4]]
    return Outcome(
        kind=kind,  # type: ignore[arg-type]  # the scripts return only OutcomeKind values
        base=numbers[0] if len(numbers) > 0 else None,
        tokens=numbers[1] if len(numbers) > 1 else None,
        messages=numbers[2] if len(numbers) > 2 else None,
        reason=_text(raw[4]) if len(raw) > 4 else None,
    )


class ThresholdStore:
    """The Redis state of the threshold counter (module doc). `client` is owned by the caller
    unless built by `from_url`."""

    def __init__(
        self,
        client: Redis,
        *,
        token_limit: int,
        message_limit: int,
        namespace: str = DEFAULT_NAMESPACE,
        claim_ttl_s: float = CLAIM_TTL_S,
        guard_ttl_s: float = GUARD_TTL_S,
        owns_client: bool = False,
    ) -> None:
        if token_limit < 1 or message_limit < 1:
            raise ValueError("threshold limits must be at least 1")
        self.client = client
        self.namespace = namespace
        self.token_limit = token_limit
        self.message_limit = message_limit
        self.claim_ttl_ms = max(1, int(claim_ttl_s * 1000))
        self.guard_ttl_ms = max(1, int(guard_ttl_s * 1000))
        self._owns_client = owns_client
        self._count = client.register_script(_COUNT)
        self._install = client.register_script(_INSTALL)
        self._mark_sent = client.register_script(_MARK_SENT)
        self._reset = client.register_script(_RESET)
        self._release_up_to = client.register_script(_RELEASE_UP_TO)

    @classmethod
    def from_url(cls, url: str, *, token_limit: int, message_limit: int, **kwargs: object) -> ThresholdStore:
        """A store on its own client of `url` (closed by `aclose`). Does no I/O."""
        return cls(
            redis_client(url, timeout_s=2.0),
            token_limit=token_limit,
            message_limit=message_limit,
            owns_client=True,
            **kwargs,  # type: ignore[arg-type]
        )

    def state_key(self, scope: ThreadScope) -> str:
        return f"{scope.prefix(self.namespace)}/state"

    def guard_key(self, scope: ThreadScope) -> str:
        return f"{scope.prefix(self.namespace)}/guard"

    def claim_key(self, scope: ThreadScope, message_id: str) -> str:
        return f"{scope.prefix(self.namespace)}/claim/{message_id}"

    async def count(self, scope: ThreadScope, message_id: str, offset: int, tokens: int) -> Outcome:
        """Claim, count and check one message atomically (module doc)."""
        raw = await self._count(
            keys=[self.state_key(scope), self.claim_key(scope, message_id), self.guard_key(scope)],
            args=[offset, tokens, self.claim_ttl_ms, self.token_limit, self.message_limit, self.guard_ttl_ms],
        )
        return _outcome(raw)

    async def install(
        self,
        scope: ThreadScope,
        *,
        base: int,
        tokens: int,
        messages: int,
        message_ids: Sequence[str],
        offset: int,
        counted: bool,
    ) -> Outcome:
        """Install rebuilt counters (`base`, sums of the journal's messages from `base` up to and
        including `offset`), claim those messages, then check the threshold for the message at
        `offset` (when `counted`). Answers `exists` and changes nothing when a valid state is
        already there."""
        raw = await self._install(
            keys=[
                self.state_key(scope),
                self.guard_key(scope),
                *(self.claim_key(scope, m) for m in message_ids),
            ],
            args=[
                base,
                tokens,
                messages,
                offset,
                self.claim_ttl_ms,
                self.token_limit,
                self.message_limit,
                self.guard_ttl_ms,
                "1" if counted else "0",
            ],
        )
        return _outcome(raw)

    async def mark_sent(self, scope: ThreadScope, offset: int) -> None:
        """The request decided at `offset` is durable on the broker: never resend it."""
        await self._mark_sent(keys=[self.state_key(scope)], args=[str(offset)])

    async def release_guard(self, scope: ThreadScope, *, up_to: int | None = None) -> bool:
        """Release the flush-and-summarize guard (the summarizer, when done or given up). With
        `up_to`, only a guard taken at a crossing at or before that offset is released (atomic): a
        late redelivery never frees the guard of a newer crossing. True when a guard was released."""
        if up_to is None:
            return bool(await self.client.delete(self.guard_key(scope)))
        return bool(await self._release_up_to(keys=[self.guard_key(scope)], args=[up_to]))

    async def hold_guard(self, scope: ThreadScope, offset: int) -> bool:
        """Take the guard for the crossing at `offset` unless one is held (a compaction requested
        again after Redis lost its guard). True when taken."""
        return bool(await self.client.set(self.guard_key(scope), offset, nx=True, px=self.guard_ttl_ms))

    async def reset_counters(self, scope: ThreadScope, from_offset: int) -> None:
        """After a summary covering offsets < `from_offset` was written: the counters restart from
        there. They are marked stale, so the next message recounts what arrived since from the
        journal (messages counted while the summary was being made are not lost)."""
        if from_offset < 0:
            raise ValueError(f"from_offset must be >= 0, not {from_offset}")
        await self._reset(keys=[self.state_key(scope)], args=[from_offset])

    async def counters(self, scope: ThreadScope) -> dict[str, int] | None:
        """The thread's state hash as integers (None when absent): for tests and operators."""
        raw = await self.client.hgetall(self.state_key(scope))
        if not raw:
            return None
        return {_text(k): int(_text(v)) for k, v in raw.items() if _text(k) != "req_reason"}

    async def aclose(self) -> None:
        if self._owns_client:
            await self.client.aclose()
