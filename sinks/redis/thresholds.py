"""Per-thread threshold state in Redis (`RedisThresholdStore`, a
`core.stores.thresholds.ThresholdStore`): the counters since the last summary, what they cover,
the flush-and-summarize guard.

Keys, under `{namespace}/{environment}/{account_id}/{agent_id}/{thread_id}` (`ThreadScope.prefix`):
- `.../state` (hash): `base` (the first offset after the last summary: what the counters count
  from), `upto` and the counters `tokens`, `messages`. Invariant: the counters are exactly the
  pure rule's `fold` of the journal's messages of the thread's agent with `base <= offset <= upto`
  (`upto = base - 1`: none yet). `stale` when the summarizer reset the counters (`upto` is then
  kept: how far the counting had got). `req_offset`/`req_tokens`/`req_messages`/`req_reason`
  while a compaction request is decided but not yet confirmed delivered (`mark_sent` clears them).
- `.../guard`: the flush-and-summarize guard (`SET NX` with a lease, `guard_ttl_s`; its value is
  the crossing offset), held from the crossing until the summarizer calls `release_guard` (or the
  lease runs out). The compaction recovery takes it again (`hold_guard`) when it requests a
  compaction again after Redis lost it.

Counting is by offset, not by message: a thread's offsets are gap-free, so the message at
`upto + 1` is the only one that can extend the counters by itself. `count(...)` is ONE Lua script
(read the state, count, check the thresholds, take the guard) and answers an `Outcome` (see
`Outcome.kind`): a message at or below `upto` is already counted (redelivery, replay, republish),
whatever order messages arrive in, so nothing is ever counted twice; a message past `upto + 1`
(records lost or reordered on their way, or another agent's messages in between) is a `gap`; a
missing or stale state is a `rebuild`. For both the caller reads the journal and installs the
result with `install(...)` (also one script), which applies it only when the state is still the
one `count` saw (`Outcome.state`), so concurrent workers, resets and wipes never mix. Nothing is
kept per message (cost per message: one hash). `count_batch(...)` runs the same count for many
messages in order in one script call (one round trip per batch), stopping after the first
`rebuild` or `gap`, whose caller goes on once it installed.

Redis holds only derived or coordination state: losing it all is repaired by that rebuild. Redis
errors propagate (the processor's batch is retried). All keys of a thread (of a batch) are in one
script call; on Redis Cluster they would need a shared hash tag (not used: memstream runs one
Redis).
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from core.stores.thresholds import Outcome, ThreadScope
from sinks.redis.client import redis_client

DEFAULT_NAMESPACE = "memstream/thresholds"
GUARD_TTL_S = 15 * 60
"""The guard's lease: a summarizer that dies frees the thread after this long."""
BATCH_SCRIPT_MESSAGES = 500
"""`count_batch` counts at most this many messages per script call (bounds a script's run time)."""

# Every script answers {kind, base, tokens, messages, offset, reason, state} (false where unknown):
# `offset` is where the counters end (`upto`, or the request's crossing), `state` the fingerprint
# of the state seen (base:upto:stale, empty parts when absent) that `install` checks.
_COMMON = """
local function fingerprint(base, upto, stale)
  return (base or '') .. ':' .. (upto or '') .. ':' .. (stale or '')
end
local function decide(state, guard, offset, tokens, messages, base, tl, ml, guard_ttl)
  local reason = false
  if tokens >= tl then reason = 'tokens' elseif messages >= ml then reason = 'messages' end
  if not reason then return {'counted', base, tokens, messages, offset} end
  if redis.call('SET', guard, offset, 'NX', 'PX', guard_ttl) then
    redis.call('HSET', state, 'req_offset', offset, 'req_tokens', tokens,
               'req_messages', messages, 'req_reason', reason)
    return {'request', base, tokens, messages, offset, reason}
  end
  return {'guarded', base, tokens, messages, offset, reason}
end
"""

_COUNT_ONE = """
local function count(state, guard, offset, tokens, tl, ml, guard_ttl)
  local s = redis.call('HMGET', state, 'base', 'upto', 'tokens', 'messages', 'stale', 'req_offset')
  local seen = fingerprint(s[1], s[2], s[5])
  if not s[1] or not s[2] or not s[3] or not s[4] or s[5] then
    return {'rebuild', false, false, false, s[2] and tonumber(s[2]) or false, false, seen}
  end
  local base, upto = tonumber(s[1]), tonumber(s[2])
  local counted, messages = tonumber(s[3]), tonumber(s[4])
  if offset < base then return {'old', base, counted, messages, upto} end
  if offset <= upto then
    if s[6] and tonumber(s[6]) == offset and redis.call('EXISTS', guard) == 1 then
      local req = redis.call('HMGET', state, 'req_tokens', 'req_messages', 'req_reason')
      return {'resend', base, tonumber(req[1]), tonumber(req[2]), offset, req[3]}
    end
    return {'duplicate', base, counted, messages, upto}
  end
  if offset > upto + 1 then return {'gap', base, counted, messages, upto, false, seen} end
  counted = counted + tokens
  messages = messages + 1
  redis.call('HSET', state, 'upto', offset, 'tokens', counted, 'messages', messages)
  return decide(state, guard, offset, counted, messages, base, tl, ml, guard_ttl)
end
"""

_COUNT = (
    _COMMON
    + _COUNT_ONE
    + """
-- KEYS: state, guard. ARGV: offset, tokens, token_limit, message_limit, guard_ttl_ms
return count(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]),
             tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5])
"""
)

_COUNT_BATCH = (
    _COMMON
    + _COUNT_ONE
    + """
-- KEYS: state, guard of each message. ARGV: token_limit, message_limit, guard_ttl_ms, then offset,
-- tokens of each message. Counts them in order; stops after the first `rebuild` or `gap`.
local tl, ml, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local out = {}
for i = 1, #KEYS / 2 do
  local answer = count(KEYS[2 * i - 1], KEYS[2 * i], tonumber(ARGV[2 + 2 * i]),
                       tonumber(ARGV[3 + 2 * i]), tl, ml, ttl)
  out[i] = answer
  if answer[1] == 'rebuild' or answer[1] == 'gap' then break end
end
return out
"""
)

_INSTALL = (
    _COMMON
    + """
-- KEYS: state, guard. ARGV: seen (the fingerprint `count` answered), base, upto, tokens, messages,
-- offset (the message being counted), token_limit, message_limit, guard_ttl_ms
local s = redis.call('HMGET', KEYS[1], 'base', 'upto', 'stale')
if fingerprint(s[1], s[2], s[3]) ~= ARGV[1] then return {'exists'} end
if s[3] then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'base', ARGV[2], 'upto', ARGV[3], 'tokens', ARGV[4], 'messages', ARGV[5])
local base, upto, offset = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[6])
local tokens, messages = tonumber(ARGV[4]), tonumber(ARGV[5])
local out = decide(KEYS[1], KEYS[2], upto, tokens, messages, base,
                   tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9])
if out[1] == 'counted' then  -- the message itself was counted before, or is covered by the summary
  if offset < base then out[1] = 'old' elseif offset < upto then out[1] = 'duplicate' end
end
return out
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
-- KEYS: state. ARGV: from_offset. Keeps how far the counting had got (`upto`).
local upto = tonumber(redis.call('HGET', KEYS[1], 'upto'))
local floor = tonumber(ARGV[1]) - 1
if not upto or upto < floor then upto = floor end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'base', ARGV[1], 'upto', upto, 'tokens', 0, 'messages', 0, 'stale', 1)
return 1
"""


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _outcome(raw: Sequence[object]) -> Outcome:
    """Parse a script's answer {kind, base, tokens, messages, offset, reason, state} (shorter, or
    with nils, where unknown)."""
    values = [None if v is None else _text(v) for v in raw] + [None] * 7
    numbers = [None if v is None else int(v) for v in values[1:5]]
    return Outcome(
        kind=values[0],  # type: ignore[arg-type]  # the scripts return only OutcomeKind values
        base=numbers[0],
        tokens=numbers[1],
        messages=numbers[2],
        offset=numbers[3],
        reason=values[5],
        state=values[6],
    )


class RedisThresholdStore:
    """The Redis state of the threshold counter (module doc; a `core.stores.thresholds.ThresholdStore`).
    `client` is owned by the caller unless built by `from_url`."""

    def __init__(
        self,
        client: Redis,
        *,
        token_limit: int,
        message_limit: int,
        namespace: str = DEFAULT_NAMESPACE,
        guard_ttl_s: float = GUARD_TTL_S,
        owns_client: bool = False,
    ) -> None:
        if token_limit < 1 or message_limit < 1:
            raise ValueError("threshold limits must be at least 1")
        self.client = client
        self.namespace = namespace
        self.token_limit = token_limit
        self.message_limit = message_limit
        self.guard_ttl_ms = max(1, int(guard_ttl_s * 1000))
        self._owns_client = owns_client
        self._count = client.register_script(_COUNT)
        self._count_batch = client.register_script(_COUNT_BATCH)
        self._install = client.register_script(_INSTALL)
        self._mark_sent = client.register_script(_MARK_SENT)
        self._reset = client.register_script(_RESET)
        self._release_up_to = client.register_script(_RELEASE_UP_TO)

    @classmethod
    def from_url(
        cls, url: str, *, token_limit: int, message_limit: int, **kwargs: object
    ) -> RedisThresholdStore:
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

    async def count(self, scope: ThreadScope, offset: int, tokens: int) -> Outcome:
        """Count the message at `offset` (of `tokens` tokens) and check the thresholds, atomically
        (module doc): `counted`, `request`, `guarded`, or - nothing changed - `duplicate`,
        `resend`, `old`, `rebuild`, `gap`."""
        raw = await self._count(
            keys=[self.state_key(scope), self.guard_key(scope)],
            args=[offset, tokens, self.token_limit, self.message_limit, self.guard_ttl_ms],
        )
        return _outcome(raw)

    async def count_batch(self, messages: Sequence[tuple[ThreadScope, int, int]]) -> list[Outcome]:
        """Count `messages` (scope, offset, tokens) in order, each as `count` would, in one script
        call per `BATCH_SCRIPT_MESSAGES`, stopping after the first answered `rebuild` or `gap`
        (which changed nothing): the answers of the messages counted, in order."""
        outcomes: list[Outcome] = []
        for start in range(0, len(messages), BATCH_SCRIPT_MESSAGES):
            chunk = messages[start : start + BATCH_SCRIPT_MESSAGES]
            keys: list[str] = []
            args: list[int] = [self.token_limit, self.message_limit, self.guard_ttl_ms]
            for scope, offset, tokens in chunk:
                prefix = scope.prefix(self.namespace)
                keys += (f"{prefix}/state", f"{prefix}/guard")
                args += (offset, tokens)
            raw = await self._count_batch(keys=keys, args=args)
            outcomes += (_outcome(answer) for answer in raw)
            if len(raw) < len(chunk) or outcomes[-1].kind in ("rebuild", "gap"):
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
        """Install the counters of the journal's messages (of the scope's agent) with
        `base <= offset <= upto` (`upto >= base - 1`), when the state is still what `count`
        answered as `seen` (a `rebuild` or a `gap`); then check the thresholds at `upto` for the
        message at `offset` (<= `upto`). Answers `exists` and changes nothing when the state changed
        meanwhile (another worker, a reset, a wipe): count again."""
        if seen.kind not in ("rebuild", "gap") or seen.state is None:
            raise ValueError(f"install needs the state a rebuild or gap outcome saw, not {seen.kind!r}")
        if upto < max(base - 1, offset):
            raise ValueError(f"upto {upto} is below the message ({offset}) or the base ({base})")
        raw = await self._install(
            keys=[self.state_key(scope), self.guard_key(scope)],
            args=[
                seen.state,
                base,
                upto,
                tokens,
                messages,
                offset,
                self.token_limit,
                self.message_limit,
                self.guard_ttl_ms,
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
        there. They are marked stale and keep how far the counting had got (`upto`), so the next
        message - whichever it is, an old one republished included - recounts from the journal
        everything counted since the summary (messages counted while it was being made are not
        lost)."""
        if from_offset < 0:
            raise ValueError(f"from_offset must be >= 0, not {from_offset}")
        await self._reset(keys=[self.state_key(scope)], args=[from_offset])

    async def forget(self, scope: ThreadScope) -> int:
        """Delete the thread's counters and guard (a thread deletion); the keys deleted."""
        return int(await self.client.delete(self.state_key(scope), self.guard_key(scope)))

    async def counters(self, scope: ThreadScope) -> dict[str, int] | None:
        """The thread's state hash as integers (None when absent): for tests and operators."""
        raw = await self.client.hgetall(self.state_key(scope))
        if not raw:
            return None
        return {_text(k): int(_text(v)) for k, v in raw.items() if _text(k) != "req_reason"}

    async def aclose(self) -> None:
        if self._owns_client:
            await self.client.aclose()
