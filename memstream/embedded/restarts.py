"""How often the supervisor restarts one process that died: backoff and a bounded rate.

`RestartBudget.next_delay(now)` records a restart and returns how long to wait before it: no wait
for the first restart in a minute (a kill or a crash is repaired at once), then 1 s, 2 s, 4 s...
up to `max_delay_s` while the restarts keep coming within a minute of each other. More than
`per_minute` restarts within any 60 s means the process cannot stay up: `RestartsExhausted`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WINDOW_S = 60.0


class RestartsExhausted(Exception):
    """The process died more than `per_minute` times within a minute."""

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} restarts within a minute")
        self.count = count


@dataclass
class RestartBudget:
    per_minute: int = 5
    max_delay_s: float = 8.0
    _restarts: list[float] = field(default_factory=list)

    def next_delay(self, now: float) -> float:
        """Record a restart at `now` (monotonic seconds); the backoff before it (module doc)."""
        self._restarts = [t for t in self._restarts if now - t < WINDOW_S]
        earlier = len(self._restarts)
        self._restarts.append(now)
        if earlier + 1 > self.per_minute:
            raise RestartsExhausted(earlier + 1)
        return 0.0 if earlier == 0 else min(self.max_delay_s, 2.0 ** (earlier - 1))
