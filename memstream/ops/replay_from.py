"""Parsing `memstream replay PROCESSOR --from ...`: where a processor's consumer group restarts.

Accepted forms (`parse_replay_from`):
- `earliest`: the first offset still on the broker, on every partition of every source topic;
- offsets: comma-separated `PARTITION:OFFSET` (the processor's only source topic) or
  `TOPIC:PARTITION:OFFSET` (topic as declared in topics.yaml, without the prefix), e.g. `0:120,1:98`;
  partitions not named keep their committed offset; a partition named twice is refused (here when
  written the same way; `GroupOffsets.plan` refuses it written both ways, e.g. `0:5,journal.messages:0:9`);
- an ISO-8601 timestamp (`2026-05-01T12:00:00Z`; without a zone it is UTC): per partition the first
  offset whose record timestamp is at or after it (the end of the partition when none is).
Anything else raises `InvalidInput(field="from")` saying which form was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from core.errors import InvalidInput

_ITEM_RE = re.compile(r"^(?:(?P<topic>[A-Za-z0-9._-]+):)?(?P<partition>\d+):(?P<offset>\d+)$")
FIELD = "from"


@dataclass(frozen=True)
class Earliest:
    def describe(self) -> str:
        return "earliest"


@dataclass(frozen=True)
class Offsets:
    """(topic or None for the only source topic, partition) -> offset."""

    offsets: tuple[tuple[str | None, int, int], ...]

    def describe(self) -> str:
        return ",".join(f"{t + ':' if t else ''}{p}:{o}" for t, p, o in self.offsets)


@dataclass(frozen=True)
class Timestamp:
    at: datetime  # timezone-aware

    @property
    def epoch_ms(self) -> int:
        return round(self.at.timestamp() * 1000)

    def describe(self) -> str:
        return self.at.isoformat()


ReplayFrom = Earliest | Offsets | Timestamp


def parse_replay_from(text: str) -> ReplayFrom:
    """See the module doc."""
    value = text.strip()
    if not value:
        raise InvalidInput(
            "--from is empty: give earliest, PARTITION:OFFSET[,...] or an ISO-8601 time", field=FIELD
        )
    if value.lower() == "earliest":
        return Earliest()
    at = _timestamp(value)
    if at is not None:
        return Timestamp(at)
    items: list[tuple[str | None, int, int]] = []
    seen: set[tuple[str | None, int]] = set()
    for raw in value.split(","):
        match = _ITEM_RE.fullmatch(raw.strip())
        if match is None:
            raise InvalidInput(
                f"--from {text!r}: {raw.strip()!r} is not PARTITION:OFFSET or TOPIC:PARTITION:OFFSET "
                "(nor is the whole value `earliest` or an ISO-8601 timestamp such as 2026-05-01T12:00:00Z)",
                field=FIELD,
            )
        topic, partition, offset = match["topic"], int(match["partition"]), int(match["offset"])
        if (topic, partition) in seen:
            raise InvalidInput(f"--from {text!r}: partition {partition} is given twice", field=FIELD)
        seen.add((topic, partition))
        items.append((topic, partition, offset))
    return Offsets(tuple(items))


def _timestamp(value: str) -> datetime | None:
    if not re.match(r"^\d{4}-\d{2}-\d{2}", value):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(
            f"--from {value!r} looks like a date but is not ISO-8601 (e.g. 2026-05-01T12:00:00Z)", field=FIELD
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
