"""Tuning of the processor runtime: batching, retries, dead-letter limit, consumer-group timing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeOptions:
    """How every processor of a run is driven. Defaults suit the embedded node and production.

    - Batching: a batch is up to `batch_size` records, or what arrived within `batch_wait_s`.
    - Transient errors: a batch is tried up to `max_attempts` times, sleeping
      `backoff_initial_s * 2**(n-1)` (at most `backoff_max_s`) between tries; then the processor
      crashes without committing.
    - Dead letters: more than `dlq_limit` dead-lettered records within `dlq_window_s` stop the
      processor; a dead-letter record not acknowledged within `dlq_ack_timeout_s` counts as a
      transient error.
    - Consumer group: `session_timeout_s` bounds how long a dead member holds its partitions (and,
      on Tansu, a group join takes about half of it); Apache Kafka refuses values below its
      `group.min.session.timeout.ms` (6 s by default). `commit_interval_s` is faust's background
      commit; the runtime also commits after every batch.
    - Stopping: `drain_timeout_s` is how long a stop waits for the batch in progress to finish
      before cancelling it (a cancelled batch is not committed and is redelivered).
    """

    batch_size: int = 500
    batch_wait_s: float = 0.2
    max_attempts: int = 10
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    dlq_limit: int = 100
    dlq_window_s: float = 60.0
    dlq_ack_timeout_s: float = 30.0
    session_timeout_s: float = 6.0
    heartbeat_interval_s: float = 1.0
    commit_interval_s: float = 2.8
    drain_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_attempts < 1 or self.dlq_limit < 0:
            raise ValueError("batch_size and max_attempts must be >= 1, dlq_limit >= 0")
        if self.heartbeat_interval_s >= self.session_timeout_s:
            raise ValueError("heartbeat_interval_s must be below session_timeout_s")

    def backoff(self, attempt: int) -> float:
        """Seconds to sleep after failed attempt number `attempt` (1-based)."""
        return float(min(self.backoff_max_s, self.backoff_initial_s * 2 ** (attempt - 1)))
