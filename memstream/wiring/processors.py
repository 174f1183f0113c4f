"""The processors memstream ships, by name: what `memstream worker NAME` and the node can run.

Each entry maps a processor name (its step id and consumer group `memstream.<name>`) to a factory
building the processor from the settings. A processor listed here must also be listed under
`dead_letter.processors` in topics.yaml, so that its dead-letter topic exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from core.config import Settings
from streams.runtime.errors import UnknownProcessor
from streams.runtime.processor import Processor

if TYPE_CHECKING:
    from memstream.wiring.engines import Engines

ProcessorFactory = Callable[[Settings, "Engines | None"], Processor]
"""Builds a processor. With `engines` (the node), shared engines are used and left open; without
(a worker alone), the processor builds its own and closes them when it stops."""


def _clickhouse_projection(settings: Settings, engines: Engines | None) -> Processor:
    from processors.clickhouse_projection import create  # imported on use: it loads clickhouse-connect

    return create(settings, engines=engines)  # a worker alone owns a chdb path: fine


def _flush(settings: Settings, engines: Engines | None) -> Processor:
    from processors.flush import create

    return create(settings, engines=engines)  # needs engines.journal and engines.pool (the node)


def _qdrant_projection(settings: Settings, engines: Engines | None) -> Processor:
    from processors.qdrant_projection import create  # imported on use: it loads the index engines

    return create(settings, engines=engines)


def _summarizer(settings: Settings, engines: Engines | None) -> Processor:
    from processors.summarizer import create

    return create(settings, engines=engines)  # needs engines.journal (the node) to start


def _thresholds(settings: Settings, engines: Engines | None) -> Processor:
    from processors.thresholds import create

    return create(settings, engines=engines)  # needs engines.journal (the node) to start


PROCESSORS: Mapping[str, ProcessorFactory] = {
    "clickhouse-projection": _clickhouse_projection,
    "flush": _flush,
    "qdrant-projection": _qdrant_projection,
    "summarizer": _summarizer,
    "thresholds": _thresholds,
}
"""Registered processors, by name."""

SOURCES: Mapping[str, tuple[str, ...]] = {
    "clickhouse-projection": ("journal.messages",),
    "flush": ("compaction.requested",),
    "qdrant-projection": ("memory.entries",),
    "summarizer": ("compaction.flushed",),
    "thresholds": ("journal.messages",),
}
"""The topics each registered processor consumes (as its `source_topics`; a test keeps them equal),
known without building the processor: the node republishes a topic from the lowest progress of
the groups that consume it."""


def consumers_of(topic: str) -> list[str]:
    """The registered processors that consume `topic` (unprefixed), sorted."""
    return sorted(name for name, topics in SOURCES.items() if topic in topics)


def processor_names(registry: Mapping[str, ProcessorFactory] | None = None) -> list[str]:
    """The registered names, sorted."""
    return sorted(PROCESSORS if registry is None else registry)


def create_processor(
    name: str,
    settings: Settings,
    *,
    registry: Mapping[str, ProcessorFactory] | None = None,
    engines: Engines | None = None,
) -> Processor:
    """Build the registered processor `name`; `UnknownProcessor` (listing the names) otherwise."""
    factories = PROCESSORS if registry is None else registry
    try:
        factory = factories[name]
    except KeyError:
        raise UnknownProcessor(name, list(factories)) from None
    processor = factory(settings, engines)
    if processor.name != name:
        raise ValueError(
            f"processor factory registered as {name!r} built a processor named {processor.name!r}"
        )
    return processor
