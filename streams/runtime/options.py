"""Tuning of the processor runtime: batching, retries, dead-letter limit, restarts, group timing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeOptions:
    """How every processor of a run is driven. Defaults suit the embedded node and production.

    - Batching: a batch is up to `batch_size` records, or what arrived within `batch_wait_s`.
    - Outages (`streams.runtime.outages.is_outage`: a store or the broker is unavailable): the
      batch is retried without limit, sleeping `backoff(n)` between tries, with a warning at the
      first failure and then at most every `outage_log_every_s`; never dead-lettered.
    - Other errors: a batch is tried up to `max_attempts` times in a row, sleeping
      `backoff_initial_s * 2**(n-1)` (at most `backoff_max_s`) between tries; then it is isolated
      (bisected) and a record that still fails `max_attempts` times alone is dead-lettered with the
      error as its reason (`streams.runtime.batch`).
    - Dead letters: more than `dlq_limit` dead-lettered records within `dlq_window_s` crash the
      processor (a bad deploy is not dead-lettered wholesale); a dead-letter record not
      acknowledged within `dlq_ack_timeout_s` is an outage (retried).
    - Restarts (`ProcessorSupervisor`): a crashed processor is restarted alone after
      `restart_delay(n)` = `restart_backoff_initial_s * 2**(n-1)` (at most `restart_backoff_max_s`)
      for its n-th crash in a row; a crash after `restart_stable_s` of running starts over at n = 1.
    - Consumer group: `session_timeout_s` bounds how long a dead member holds its partitions (and,
      on Tansu, a group join takes about half of it); Apache Kafka refuses values below its
      `group.min.session.timeout.ms` (6 s by default). `commit_interval_s` is faust's background
      commit; the runtime also commits after every batch. `metadata_max_age_s` is how often a
      consumer reads the topics' metadata: consumers never create a topic
      (`streams.runtime.consumer`), so one the broker lost is consumed again at most this long after
      the node declared it again.
    - Stopping: `drain_timeout_s` is how long a stop waits for the batch in progress to finish
      before cancelling it (a cancelled batch is not committed and is redelivered); a batch that is
      failing or waiting out an outage is abandoned at once.
    """

    batch_size: int = 500
    batch_wait_s: float = 0.2
    max_attempts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    outage_log_every_s: float = 60.0
    dlq_limit: int = 100
    dlq_window_s: float = 60.0
    dlq_ack_timeout_s: float = 30.0
    restart_backoff_initial_s: float = 1.0
    restart_backoff_max_s: float = 300.0
    restart_stable_s: float = 60.0
    session_timeout_s: float = 6.0
    heartbeat_interval_s: float = 1.0
    commit_interval_s: float = 2.8
    metadata_max_age_s: float = 5.0
    drain_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_attempts < 1 or self.dlq_limit < 0:
            raise ValueError("batch_size and max_attempts must be >= 1, dlq_limit >= 0")
        if self.heartbeat_interval_s >= self.session_timeout_s:
            raise ValueError("heartbeat_interval_s must be below session_timeout_s")

    def backoff(self, attempt: int) -> float:
        """Seconds to sleep after failed attempt number `attempt` (1-based)."""
        return float(min(self.backoff_max_s, self.backoff_initial_s * 2 ** (attempt - 1)))

    def restart_delay(self, crashes: int) -> float:
        """Seconds before restarting a processor after its `crashes`-th crash in a row (1-based)."""
        return float(min(self.restart_backoff_max_s, self.restart_backoff_initial_s * 2 ** (crashes - 1)))
