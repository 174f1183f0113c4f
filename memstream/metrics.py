"""The figures of `/metrics` that live outside the node's process, read in the background and
served from memory when scraped (`NodeFigures`, a prometheus_client collector of
`core.metrics.REGISTRY`); the rest is recorded where it happens (`core.metrics`).

Every `settings.metrics_refresh_s` one pass reads:
- `memstream_processor_lag_messages{processor}`: each registered processor's consumer lag (end
  offsets minus its group's committed offsets, summed over its source topics' partitions), also
  of the processors a worker runs (they commit to the same broker);
- `memstream_dead_letter_records{processor}`: records in each processor's dead-letter topic;
- `memstream_summaries_written_total` and `memstream_compactions_in_flight` (Postgres,
  `thread_compactions`), `memstream_relay_lag_messages` (durable journal seqs not yet confirmed on
  `journal.messages`);
- `memstream_metrics_refresh_age_seconds`: how old these figures are.
A figure whose read failed (broker or Postgres away, a topic missing) is left out of the scrape
until a pass reads it again (Prometheus shows the gap), and the failure is logged once per cause;
the broker reads of a pass stop at the first failure (each waits up to 3 s) and when the node
stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.config import Settings
from memstream.ops.replay import GroupOffsets, total_lag
from streams.runtime.processor import group_id
from streams.topics import dlq_topic, topic_name

log = logging.getLogger("memstream.metrics")


_LAG_DOC = "Records of a processor's source topics its consumer group has not committed yet."
_SUMMARIES_DOC = "Thread summaries written (the sum of the threads' summary versions)."
_IN_FLIGHT_DOC = "Threads with a compaction (flush, then summary) requested and not finished."


@dataclass
class Figures:
    lag: dict[str, int] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)
    summaries: int | None = None
    in_flight: int | None = None
    relay_lag: int | None = None
    refreshed_at: float | None = None


class NodeFigures(Collector):
    """Reads the figures (module doc) with `refresh()`, every `settings.metrics_refresh_s` in
    `run(stop)`, and hands the last ones to Prometheus in `collect()`.

    `sources` maps each processor to its source topics (unprefixed); `relay_lag` and `totals`
    (summaries written, compactions in flight) are read from the node's relay and Postgres.
    """

    def __init__(
        self,
        settings: Settings,
        sources: Mapping[str, Sequence[str]],
        *,
        relay_lag: Callable[[], Awaitable[int]],
        totals: Callable[[], Awaitable[tuple[int, int]]],
        offsets: Callable[[], GroupOffsets] | None = None,
    ) -> None:
        self.settings = settings
        self.sources = {name: tuple(topics) for name, topics in sorted(sources.items())}
        self._relay_lag = relay_lag
        self._totals = totals
        self._offsets_factory = offsets or (lambda: GroupOffsets(settings.broker_bootstrap, timeout_s=3.0))
        self._offsets: GroupOffsets | None = None
        self.figures = Figures()
        self._logged: set[str] = set()
        self._stopping = threading.Event()

    # ---- reading ----------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh until `stop` is set; a pass under way then is given up at once (its broker reads
        in a worker thread end after the call in flight) and nothing here ever raises."""
        while not stop.is_set():
            refreshing = asyncio.ensure_future(self.refresh())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({refreshing, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if stop.is_set():
                self._stopping.set()
                refreshing.cancel()
                with contextlib.suppress(BaseException):
                    await refreshing
                return
            if refreshing.exception() is not None:
                self._failed("the figures", refreshing.exception())  # type: ignore[arg-type]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.metrics_refresh_s)
        self._stopping.set()

    async def refresh(self) -> None:
        """One pass: every figure read again (a failed one is left out, module doc)."""
        figures = Figures()
        try:
            figures.relay_lag = await self._relay_lag()
        except Exception as exc:
            self._failed("the relay's lag", exc)
        try:
            figures.summaries, figures.in_flight = await self._totals()
        except Exception as exc:
            self._failed("the compaction totals", exc)
        figures.lag, figures.dead_letters = await asyncio.to_thread(self._broker_figures)
        figures.refreshed_at = time.monotonic()
        self.figures = figures

    def _broker_figures(self) -> tuple[dict[str, int], dict[str, int]]:
        """Every processor's lag and dead letters, until the first read that fails (the broker is
        most likely away: the rest would each wait out the timeout) or the node stops."""
        lag: dict[str, int] = {}
        dead: dict[str, int] = {}
        if self._offsets is None:
            self._offsets = self._offsets_factory()
        offsets = self._offsets
        for name, topics in self.sources.items():
            if self._stopping.is_set():
                break
            try:
                broker_topics = [topic_name(self.settings, t) for t in topics]
                lag[name] = total_lag(offsets.lag(group_id(name, self.settings), broker_topics))
                tps = offsets.partitions([topic_name(self.settings, dlq_topic(name).name)])
                ends, starts = offsets.end_offsets(tps), offsets.earliest(tps)
                dead[name] = sum(max(0, ends[tp] - starts[tp]) for tp in tps)
            except Exception as exc:
                self._failed(
                    f"the consumer lag and dead letters of {name} (and the processors after it)", exc
                )
                break
        return lag, dead

    def _failed(self, what: str, exc: Exception) -> None:
        cause = f"{what}: {exc}"
        if cause not in self._logged:
            self._logged.add(cause)
            log.warning("/metrics cannot read %s (left out until it can)", cause)

    # ---- serving ----------------------------------------------------------------------------------

    def age_s(self) -> float | None:
        """How old the figures are (None before the first pass)."""
        at = self.figures.refreshed_at
        return None if at is None else time.monotonic() - at

    def collect(self) -> Iterator[Metric]:
        f = self.figures
        for name, doc, values in (
            ("memstream_processor_lag_messages", _LAG_DOC, f.lag),
            (
                "memstream_dead_letter_records",
                "Records in a processor's dead-letter topic (dlq.<processor>).",
                f.dead_letters,
            ),
        ):
            family = GaugeMetricFamily(name, doc, labels=["processor"])
            for processor, value in values.items():
                family.add_metric([processor], value)
            yield family
        if f.summaries is not None:
            yield CounterMetricFamily("memstream_summaries_written", _SUMMARIES_DOC, value=f.summaries)
        age = self.age_s()
        for name, doc, scalar in (
            ("memstream_compactions_in_flight", _IN_FLIGHT_DOC, f.in_flight),
            (
                "memstream_relay_lag_messages",
                "Durable journal messages not yet confirmed on journal.messages.",
                f.relay_lag,
            ),
            ("memstream_metrics_refresh_age_seconds", "How old the figures read in the background are.", age),
        ):
            if scalar is not None:
                yield GaugeMetricFamily(name, doc, value=scalar)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names vary with what was read: not checked for clashes at registration
