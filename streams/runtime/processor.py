"""The processor contract: what a processor is, what it receives, and how it rejects a record.

A processor is a named step. Its `name` is its step id (logs, metrics) and its consumer group
(`group_id(name, settings)` = `<topic_prefix>memstream.<name>`); `source_topics` are unprefixed names
declared in topics.yaml. The runtime hands it batches of `Record`s in offset order per partition.

`process(batch)` must return only when the batch's effects are durable: the runtime commits the
batch's offsets right after it returns. Delivery is at least once (a crash before the commit
redelivers the batch), so effects must be idempotent. To reject one bad record, raise
`InvalidMessage(record, reason)`: the runtime dead-letters exactly that record and calls `process`
again with the rest of the batch. When a store or broker is unavailable, raise `SinkUnavailable`
(connection-class errors of the usual clients count as such too: `streams.runtime.outages`): the
batch is retried without limit and nothing is dead-lettered. Any other exception is retried a few
times; then the record that still fails on its own is dead-lettered with the error as its reason
(`streams.runtime.batch`), so a bug that hits one record never stops the processor.

Keep the logic free of I/O and the effects in a sink: `TransformProcessor(name, topics, transform,
sink)` maps each record with a pure `transform` and hands the results to `sink.write` in one call.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from core.config import Settings
from streams.codecs.errors import InvalidEvent

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed Kafka record, undecoded. `topic` is the broker-side (prefixed) name."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int | None

    @property
    def position(self) -> tuple[str, int, int]:
        """(topic, partition, offset): identifies the record within a run."""
        return (self.topic, self.partition, self.offset)

    def header(self, name: str) -> bytes | None:
        """The value of the first header called `name`, or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


class InvalidMessage(Exception):
    """`record` can never be processed (poison): dead-letter it with `reason` and go on.

    Raise it from `process` (ideally `raise InvalidMessage(record, "...") from decode_error`):
    the DLQ record's `error_type` is the class of the cause when there is one, else this class.
    """

    def __init__(self, record: Record, reason: str) -> None:
        if not reason.strip():
            raise ValueError("InvalidMessage needs a non-empty reason")
        super().__init__(f"{reason} ({record.topic}[{record.partition}]@{record.offset})")
        self.record = record
        self.reason = reason

    @property
    def error(self) -> BaseException:
        """The exception recorded as the DLQ `error_type`: the cause, else this exception."""
        return self.__cause__ if self.__cause__ is not None else self


@contextlib.contextmanager
def decoding(record: Record) -> Iterator[None]:
    """Decode `record` inside: a codec's `InvalidEvent` becomes `InvalidMessage(record, reason)`
    caused by it (the record is dead-lettered, the DLQ `error_type` is the codec's error)."""
    try:
        yield
    except InvalidEvent as exc:
        raise InvalidMessage(record, str(exc)) from exc


class Processor(abc.ABC):
    """A named step consuming `source_topics` in its own consumer group (see the module doc)."""

    name: str
    source_topics: tuple[str, ...]
    batch_size: int | None = None
    """Most records per batch for this processor; None: the run's `RuntimeOptions.batch_size`."""
    batch_wait_s: float | None = None
    """Longest wait to fill a batch; None: the run's `RuntimeOptions.batch_wait_s`."""

    @abc.abstractmethod
    async def process(self, batch: Sequence[Record]) -> None:
        """Apply the batch; return only when its effects are durable. May raise InvalidMessage."""

    async def start(self) -> None:
        """Open connections (pools, clients) before the first batch. Default: nothing."""
        return None

    async def stop(self) -> None:
        """Close what `start` opened, after the last batch. Default: nothing."""
        return None

    async def progress_scope(self) -> str | None:
        """Where this processor's effects live, when that can differ between the members of its
        group: e.g. the id of the store it writes (`TranscriptStore.instance_id`). Called once after
        `start`; the group's progress (`streams.runtime.progress`) is kept per scope, so a store
        created anew starts from nothing instead of skipping what only the old store holds.
        None (the default): the effects live in stores every member shares."""
        return None

    def stopping(self) -> None:
        """The runtime started to stop (called from the event loop, before it waits for the batch
        in progress): give up waits on systems that may never answer (e.g. an unreachable
        broker), so the batch ends now. A batch that fails from here on is abandoned, not retried
        nor committed: it is redelivered to the next run. Default: nothing."""
        return None


class Sink(Protocol[T_contra]):
    """Where a processor's results go. `write` returns only when they are durable, and is
    idempotent: the same items may be written again after a crash or a retry."""

    async def write(self, items: Sequence[T_contra]) -> None: ...


class TransformProcessor(Processor, Generic[T]):
    """A processor made of a pure per-record `transform` and a `sink`.

    `transform(record)` returns the item to write, or None to skip the record; it does no I/O. If
    it raises `InvalidMessage`, or one of `invalid_errors` (wrapped into `InvalidMessage` with the
    error's text as the reason), that record is dead-lettered. All items of a batch go to one
    `sink.write` call. `start`/`stop` are delegated to the sink when it has them.
    """

    def __init__(
        self,
        name: str,
        source_topics: Sequence[str],
        transform: Callable[[Record], T | None],
        sink: Sink[T],
        *,
        invalid_errors: tuple[type[Exception], ...] = (),
    ) -> None:
        self.name = name
        self.source_topics = tuple(source_topics)
        self.transform = transform
        self.sink = sink
        self.invalid_errors = invalid_errors

    def items(self, batch: Sequence[Record]) -> list[T]:
        """The pure part: the items to write for `batch` (raises InvalidMessage for bad input)."""
        items: list[T] = []
        for record in batch:
            try:
                item = self.transform(record)
            except self.invalid_errors as exc:
                raise InvalidMessage(record, str(exc) or type(exc).__name__) from exc
            if item is not None:
                items.append(item)
        return items

    async def process(self, batch: Sequence[Record]) -> None:
        items = self.items(batch)
        if items:
            await self.sink.write(items)

    async def start(self) -> None:
        start = getattr(self.sink, "start", None)
        if start is not None:
            await start()

    async def stop(self) -> None:
        stop = getattr(self.sink, "stop", None)
        if stop is not None:
            await stop()


def group_id(name: str, settings: Settings) -> str:
    """The consumer group (and faust app id) of processor `name`: `<topic_prefix>memstream.<name>`."""
    return f"{settings.topic_prefix}memstream.{name}"
