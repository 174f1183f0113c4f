"""Resetting a processor's consumer group, and its lag: the broker side of `memstream replay`.

`GroupOffsets` wraps confluent-kafka's AdminClient (synchronous: call it from a worker thread).
- `plan(...)` turns a `ReplayFrom` into target offsets per partition of the processor's source
  topics, next to the currently committed ones. Offsets beyond a partition's end are refused.
  Timestamps are refused on a broker that answers timestamp lookups wrongly (Tansu answers 0 for
  every time): detected by asking for a time one day ahead, which a correct broker answers with
  "no such offset".
- `activity(group)` says why the group looks active (broker state not Empty/Dead, or members), or
  None. Tansu reports no members but does report the state.
- `apply(plan)` commits the targets for the group; a broker refusing because the group has
  members (`UNKNOWN_MEMBER_ID`, `REBALANCE_IN_PROGRESS`, ...) raises `GroupActive`.
- `lag(group, topics)` compares committed offsets with the partitions' end offsets.

End offsets are read, not trusted: Tansu reports the high watermark as the last batch's base
offset + 1, so `end_offsets` reads from that point to the end of each partition (one batch at most)
and takes the position where the broker reports end-of-partition; on Apache Kafka that reads at most
one record.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from core.errors import Conflict, InvalidInput, MemstreamError
from memstream.ops.replay_from import Earliest, Offsets, ReplayFrom, Timestamp

TP = tuple[str, int]
_ACTIVE_ERRORS = {
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.FENCED_INSTANCE_ID,
}
_IDLE_STATES = {"EMPTY", "DEAD", "UNKNOWN"}
_DAY_MS = 86_400_000


class GroupActive(Conflict):
    """The consumer group has active members (or the broker says so): its offsets were not changed."""

    code = "group_active"


class BrokerOpFailed(MemstreamError):
    """The broker could not be reached or answered an admin request with an error."""

    code = "broker_failed"


@dataclass(frozen=True)
class PartitionTarget:
    topic: str  # broker-side name
    partition: int
    committed: int | None  # None: nothing committed yet
    target: int


@dataclass(frozen=True)
class ReplayPlan:
    processor: str
    group_id: str
    start: str  # the `--from` value, normalised
    partitions: tuple[PartitionTarget, ...]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int

    @property
    def lag(self) -> int:
        """Records after the committed offset (all of them when nothing is committed)."""
        return max(0, self.end - (self.committed or 0))


def total_lag(lags: Iterable[PartitionLag]) -> int:
    return sum(lag.lag for lag in lags)


class GroupOffsets:
    """Admin operations on one broker (module doc). Synchronous."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})

    # ---- reads ---------------------------------------------------------------------------------

    def partitions(self, topics: Sequence[str]) -> list[TP]:
        """Every (topic, partition) of `topics` (broker names); NotFound-like error if one is missing."""
        try:
            meta = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise BrokerOpFailed(f"cannot reach the broker at {self.bootstrap}: {exc}") from None
        out: list[TP] = []
        for topic in topics:
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                raise BrokerOpFailed(
                    f"topic {topic!r} does not exist on {self.bootstrap}: run `memstream topics apply`"
                )
            out.extend((topic, p) for p in sorted(info.partitions))
        return out

    def committed(self, group: str, tps: Sequence[TP]) -> dict[TP, int | None]:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])
        result = self._result(self._admin.list_consumer_group_offsets([request])[group], "reading offsets")
        found = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}
        return {tp: (found[tp] if found.get(tp, -1) >= 0 else None) for tp in tps}

    def _list_offsets(self, tps: Sequence[TP], spec: Any) -> dict[TP, int]:
        if not tps:
            return {}
        futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in tps})
        return {
            (tp.topic, tp.partition): self._result(future, "listing offsets").offset
            for tp, future in futures.items()
        }

    def earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        return self._list_offsets(tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]

    def end_offsets(self, tps: Sequence[TP]) -> dict[TP, int]:
        """The offset after the last record of each partition, read rather than trusted (module doc)."""
        reported = self._list_offsets(tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        ends = {tp: 0 for tp, hw in reported.items() if hw <= 0}
        pending = {tp: hw for tp, hw in reported.items() if hw > 0}
        if not pending:
            return ends
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"memstream-ops-{uuid.uuid4().hex[:8]}",  # never joined nor committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "log_level": 3,
            }
        )
        try:
            consumer.assign([TopicPartition(t, p, hw - 1) for (t, p), hw in pending.items()])
            deadline = time.monotonic() + self.timeout_s
            while pending and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                tp = (message.topic(), message.partition())
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    if tp in pending:
                        ends[tp] = max(message.offset() or 0, pending.pop(tp))
                elif error is not None:
                    raise BrokerOpFailed(f"reading the end of {tp[0]}[{tp[1]}]: {error.str()}")
            if pending:
                raise BrokerOpFailed(
                    f"the end of {sorted(pending)} was not reached within {self.timeout_s:.0f}s on "
                    f"{self.bootstrap}"
                )
        finally:
            consumer.close()
        return ends

    def offsets_for_time(self, tps: Sequence[TP], epoch_ms: int) -> dict[TP, int]:
        """First offset at or after `epoch_ms` per partition (the end when there is none)."""
        probe = self._list_offsets(tps, OffsetSpec.for_timestamp(int(time.time() * 1000) + _DAY_MS))
        if any(offset >= 0 for offset in probe.values()):
            raise InvalidInput(
                f"the broker at {self.bootstrap} does not answer timestamp lookups correctly (it reports "
                "records written tomorrow; the embedded Tansu broker answers 0 for every time), so "
                "--from TIMESTAMP cannot be used there: use --from earliest or explicit "
                "PARTITION:OFFSET values",
                field="from",
            )
        found = self._list_offsets(tps, OffsetSpec.for_timestamp(epoch_ms))
        missing = [tp for tp, offset in found.items() if offset < 0]
        ends = self.end_offsets(missing) if missing else {}
        return {tp: (ends[tp] if offset < 0 else offset) for tp, offset in found.items()}

    def activity(self, group: str) -> str | None:
        """Why the group looks active on the broker, or None (module doc)."""
        future = self._admin.describe_consumer_groups([group])[group]
        description = self._result(future, "describing the group")
        state = str(getattr(description.state, "name", description.state)).upper()
        members = len(description.members or ())
        if members:
            return f"the broker reports {members} member(s) in group {group}"
        if state not in _IDLE_STATES:
            return f"the broker reports group {group} as {state}"
        return None

    # ---- planning and applying ---------------------------------------------------------------

    def plan(self, processor: str, group: str, topics: Mapping[str, str], start: ReplayFrom) -> ReplayPlan:
        """Targets for `group` over `topics` (declared name -> broker name) from `start`."""
        tps = self.partitions(list(topics.values()))
        if isinstance(start, Earliest):
            targets = self.earliest(tps)
        elif isinstance(start, Timestamp):
            targets = self.offsets_for_time(tps, start.epoch_ms)
        else:
            targets = self._explicit(start, topics, tps)
        committed = self.committed(group, tps)
        partitions = tuple(
            PartitionTarget(topic=t, partition=p, committed=committed[(t, p)], target=targets[(t, p)])
            for t, p in tps
            if (t, p) in targets
        )
        return ReplayPlan(processor=processor, group_id=group, start=start.describe(), partitions=partitions)

    def _explicit(self, start: Offsets, topics: Mapping[str, str], tps: Sequence[TP]) -> dict[TP, int]:
        targets: dict[TP, int] = {}
        for topic, partition, offset in start.offsets:
            if topic is None:
                if len(topics) != 1:
                    raise InvalidInput(
                        f"this processor reads {len(topics)} topics ({', '.join(topics)}): write "
                        "TOPIC:PARTITION:OFFSET",
                        field="from",
                    )
                broker_topic = next(iter(topics.values()))
            else:
                broker_topic = topics.get(topic, topic)
                if broker_topic not in topics.values():
                    raise InvalidInput(
                        f"topic {topic!r} is not a source of this processor (it reads {', '.join(topics)})",
                        field="from",
                    )
            if (broker_topic, partition) not in tps:
                count = sum(1 for t, _ in tps if t == broker_topic)
                raise InvalidInput(
                    f"{broker_topic} has no partition {partition} (it has {count}: 0..{count - 1})",
                    field="from",
                )
            if (broker_topic, partition) in targets:  # e.g. `0:5,journal.messages:0:9`: the same partition
                raise InvalidInput(
                    f"{broker_topic}[{partition}] is given twice in --from {start.describe()!r}", field="from"
                )
            targets[(broker_topic, partition)] = offset
        ends = self.end_offsets(list(targets))
        for (t, p), offset in targets.items():
            if offset > ends[(t, p)]:
                raise InvalidInput(
                    f"offset {offset} is past the end of {t}[{p}], which ends at {ends[(t, p)]}", field="from"
                )
        return targets

    def apply(self, plan: ReplayPlan) -> None:
        """Commit the plan's targets for its group (module doc)."""
        request = ConsumerGroupTopicPartitions(
            plan.group_id, [TopicPartition(t.topic, t.partition, t.target) for t in plan.partitions]
        )
        future = self._admin.alter_consumer_group_offsets([request])[plan.group_id]
        try:
            result = future.result(timeout=self.timeout_s)
        except KafkaException as exc:
            raise self._refused(plan.group_id, exc.args[0] if exc.args else None, str(exc)) from None
        for tp in result.topic_partitions:
            if tp.error is not None:
                raise self._refused(plan.group_id, tp.error, f"{tp.topic}[{tp.partition}]: {tp.error.str()}")

    def lag(self, group: str, topics: Sequence[str]) -> list[PartitionLag]:
        tps = self.partitions(topics)
        committed = self.committed(group, tps)
        ends = self.end_offsets(tps)
        return [
            PartitionLag(topic=t, partition=p, committed=committed[(t, p)], end=ends[(t, p)]) for t, p in tps
        ]

    # ---- helpers -------------------------------------------------------------------------------

    def _refused(self, group: str, error: object, text: str) -> MemstreamError:
        if isinstance(error, KafkaError) and error.code() in _ACTIVE_ERRORS:
            return GroupActive(
                f"the broker refused to change the offsets of group {group} because it has active members "
                f"({text}): stop its consumers first, or use --coordinate when the node runs it"
            )
        return BrokerOpFailed(f"changing the offsets of group {group} failed: {text}")

    def _result(self, future: Any, action: str) -> Any:
        try:
            return future.result(timeout=self.timeout_s)
        except KafkaException as exc:
            raise BrokerOpFailed(f"{action} on {self.bootstrap} failed: {exc}") from None
        except TimeoutError:
            raise BrokerOpFailed(
                f"{action} on {self.bootstrap}: no answer within {self.timeout_s:.0f}s"
            ) from None
