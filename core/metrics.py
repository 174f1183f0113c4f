"""The node's Prometheus metrics (`/metrics`, README "Metrics"): their definitions, in one registry.

Recorded where they happen, at a small constant cost per request or per journal write (a labelled
child is looked up once per label set and kept, `child`):
- `memstream_http_request_duration_seconds{method,route,status}`: every API request, by route
  template (`memstream.api.request_metrics`);
- `memstream_journal_append_duration_seconds`: from an append reaching the journal writer to its
  messages being durable; `memstream_journal_group_messages`: messages per SlateDB write (the
  group commit); `memstream_messages_appended_total{environment,account}`: messages made durable
  (a retried append's messages count once) (`sinks.slatedb.group_commit`);
- `memstream_memory_recalls_total{path}`: `memory_recall` answers by the path that answered
  (`qdrant`, `postgres_fts`) (`core.memory.recall`).
The figures that live outside the node process (consumer lag of every processor, dead letters,
summaries written, relay lag) are read when scraped (`memstream.metrics`).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

HTTP_DURATION = Histogram(
    "memstream_http_request_duration_seconds",
    "API requests: time from the request's arrival to its response's end, by route template.",
    ["method", "route", "status"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
JOURNAL_APPEND_DURATION = Histogram(
    "memstream_journal_append_duration_seconds",
    "Appends: time from reaching the journal writer to their messages being durable.",
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
JOURNAL_GROUP_MESSAGES = Histogram(
    "memstream_journal_group_messages",
    "Messages per SlateDB write of the journal's group commit.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    registry=REGISTRY,
)
MESSAGES_APPENDED = Counter(
    "memstream_messages_appended",
    "Messages made durable in the journal, per account (a retried append's messages count once).",
    ["environment", "account"],
    registry=REGISTRY,
)
MEMORY_RECALLS = Counter(
    "memstream_memory_recalls",
    "memory_recall answers, by the path that answered (qdrant, postgres_fts).",
    ["path"],
    registry=REGISTRY,
)

_CHILDREN: dict[tuple[int, tuple[str, ...]], Any] = {}


def child(metric: Any, *labels: str) -> Any:
    """`metric.labels(*labels)`, looked up once per label set (prometheus_client's `labels` takes
    a lock and builds a tuple each call)."""
    key = (id(metric), labels)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = metric.labels(*labels)
    return found
