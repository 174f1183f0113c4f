"""Restarting the consumers of a replaced topic from its beginning (`streams.topic_sync` asks for it).

When the topic check finds that a topic is not the one its consumers' progress was confirmed on
(the embedded broker lost it and it was created anew, or another node's broker), nothing the
consumers knew of the old topic may be carried onto the new one. Two things would be:
- faust's in-memory read and ack positions of the old topic's offsets;
- offsets acked on the old topic that a consumer commits while it rejoins: aiokafka commits them
  with no generation, which a broker accepts for a group without members - so they land on the new
  broker's empty group, the group then starts from them, and the lower offsets of the refilled
  topic are never read (the projection lacks those messages for good, and the thresholds miss
  their counts).

`ConsumerRestart(offsets, supervisor)` (called with the topic's declared name) does, at once for
every processor of this node that reads the topic (`consumers_of`):
1. pauses it: its runtime stops, the batch in progress is committed or left for redelivery, and
   its consumer leaves the group;
2. commits the earliest offsets of the new topic for its group (waiting while the broker still
   counts a member);
3. resumes it with a fresh runtime.
This is `memstream replay PROCESSOR --from earliest --coordinate` (`memstream.ops.replay_run`), without
forgetting the group's progress: the records it already processed are recognised from their
stamps and skipped (`streams.runtime.progress`), so reading the topic from its start costs little.
A processor the node does not run right now (crashed, or paused by an operator) only has its
offsets reset; a paused one stays paused.

A consumer paused while it was still rejoining the new broker's group can leave a member behind
that the broker keeps counting for a while (Tansu kept one for more than 30 s), refusing the reset
(`GroupActive`). Then the processor is resumed - it joins properly - and paused and reset again,
`attempts` times in all, each waiting at most `idle_timeout_s` for the group to empty. Any other
failure, or the last refusal, raises (logged by the caller): the topic's identity is then not
stored, and the next check restarts the consumers again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from core.config import Settings
from memstream.ops.replay import GroupActive, GroupOffsets
from memstream.ops.replay_from import Earliest
from memstream.ops.replay_run import run_replay
from streams.runtime.supervisor import ProcessorSupervisor
from streams.topics import topic_name

log = logging.getLogger("memstream.topic_sync")


class ConsumerRestart:
    """Restarts this node's consumers of a replaced topic from its beginning (module doc)."""

    def __init__(
        self,
        settings: Settings,
        supervisor: ProcessorSupervisor,
        consumers_of: Callable[[str], Sequence[str]],
        *,
        offsets: Callable[[], GroupOffsets] | None = None,
        idle_timeout_s: float = 5.0,
        attempts: int = 4,
    ) -> None:
        self.settings = settings
        self.supervisor = supervisor
        self.consumers_of = consumers_of
        self.offsets = offsets or (lambda: GroupOffsets(settings.broker_bootstrap))
        self.idle_timeout_s = idle_timeout_s
        self.attempts = attempts
        self.restarts = 0

    async def __call__(self, topic: str) -> None:
        """Restart the consumers of declared topic `topic` (module doc)."""
        names = [name for name in self.consumers_of(topic) if name in self.supervisor.names()]
        if not names:
            return
        offsets = await asyncio.to_thread(self.offsets)
        broker_name = topic_name(self.settings, topic)
        results = await asyncio.gather(
            *(self._restart(offsets, name, topic, broker_name) for name in names), return_exceptions=True
        )
        failed = [
            (name, result)
            for name, result in zip(names, results, strict=True)
            if isinstance(result, BaseException)
        ]
        for name, error in failed:
            log.warning("restarting processor %s on the new %s failed: %r", name, broker_name, error)
        if failed:
            raise failed[0][1]
        self.restarts += 1
        log.warning(
            "%s is new: processor(s) %s restarted from its start (what they processed already is skipped)",
            broker_name,
            ", ".join(names),
        )

    async def _restart(self, offsets: GroupOffsets, name: str, topic: str, broker_name: str) -> None:
        for attempt in range(1, self.attempts + 1):
            running = self.supervisor.status(name).state in ("running", "starting", "crashed")
            try:
                await run_replay(
                    offsets,
                    self.supervisor,
                    name,
                    Earliest(),
                    coordinate=running,
                    idle_timeout_s=self.idle_timeout_s,
                    topics={topic: broker_name},
                )
                return
            except GroupActive as exc:
                if attempt == self.attempts or not running:
                    raise
                log.info(
                    "processor %s: the broker still counts a member of its group (%s); resumed, "
                    "pausing it again (attempt %d of %d)",
                    name,
                    exc.message,
                    attempt + 1,
                    self.attempts,
                )
