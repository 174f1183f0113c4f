"""The retry rules of the client, shared by the sync and the async client.

The server documents (`memstream.api.app.DESCRIPTION`, README "Faults"): give every message a
`message_id` and retry on 503 or network errors, a retry returns the same stored messages; a 503
means the call did not succeed, `postgres_unavailable` comes with `Retry-After`. So:

- A call is retried only after an `UnavailableError`: 503 (and a gateway's 502/504) or no answer.
  Every other error (4xx, 500) is final: retrying would give the same answer.
- An *idempotent* call (every read, appends - whose messages always carry message ids - thread
  and agent PUT/PATCH, entry edits, the tools whose repetition changes nothing) is retried after
  any of them. A call that is not idempotent (deleting an entry by id, `memory_forget` without an
  explicit `scope`) is retried only when it surely did not take effect: a 503 from memstream
  ("the call did not succeed") or a connection that was never made (`connect_failed`); not after
  a timeout, a broken connection or a gateway's 502/504, whose call may have run.
- Waits grow exponentially with "equal jitter": the n-th retry waits a uniform draw from
  [b/2, b] with b = min(max_backoff_s, initial_backoff_s * multiplier**(n-1)), and at least the
  server's `Retry-After` when it sent one (`honour_retry_after`).
- Bounded: at most `max_attempts` attempts in all, and no wait that would end after
  `max_elapsed_s` from the first attempt; then the last error is raised.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from memstream.client.errors import MemstreamApiError, UnavailableError

CONNECT_FAILED = "connect_failed"
"""The code of an `UnavailableError` whose request never reached the server (connection refused
or not established in time): safe to retry for any call."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry (see the module doc). `RetryPolicy(max_attempts=1)` never
    retries."""

    max_attempts: int = 5
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    multiplier: float = 2.0
    max_elapsed_s: float = 30.0
    honour_retry_after: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0 or self.max_elapsed_s < 0:
            raise ValueError("backoffs and max_elapsed_s must not be negative")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")


NO_RETRY = RetryPolicy(max_attempts=1)


def retryable(error: MemstreamApiError, *, idempotent: bool) -> bool:
    """Whether the rules allow another attempt of a call that failed with `error`."""
    if not isinstance(error, UnavailableError):
        return False
    if idempotent:
        return True
    return error.status == 503 or error.code == CONNECT_FAILED


@dataclass
class RetryState:
    """The retries of one call: ask `next_delay` after each failure; None means give up."""

    policy: RetryPolicy
    idempotent: bool
    clock: Callable[[], float] = time.monotonic
    uniform: Callable[[float, float], float] = random.uniform
    attempts: int = 0
    started: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def next_delay(self, error: MemstreamApiError) -> float | None:
        """Count the failed attempt; the seconds to wait before the next one, or None when `error`
        is final (not retryable, attempts used up, or the wait would pass `max_elapsed_s`)."""
        self.attempts += 1
        policy = self.policy
        if self.attempts >= policy.max_attempts or not retryable(error, idempotent=self.idempotent):
            return None
        cap = min(policy.max_backoff_s, policy.initial_backoff_s * policy.multiplier ** (self.attempts - 1))
        delay = self.uniform(cap / 2, cap)
        if policy.honour_retry_after and error.retry_after_s is not None:
            delay = max(delay, error.retry_after_s)
        if self.clock() + delay - self.started > policy.max_elapsed_s:
            return None
        return delay
