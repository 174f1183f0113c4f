"""Apply topics.yaml to a broker: create missing topics, correct config and partition drift.

`apply_topics(settings, registry)` is idempotent: a second run changes nothing and reports every
topic as unchanged. Per topic it
- creates a missing topic with its partitions, replication factor and config;
- for an existing topic, sets every declared config whose value differs on the broker
  (incremental AlterConfigs; the legacy AlterConfigs as a fallback, keeping the topic's other
  dynamic configs), and raises the partition count when the declaration asks for more.
Configs not declared in topics.yaml are left alone. What the broker refuses as unsupported (Tansu
refuses CreatePartitions; some brokers AlterConfigs) and what cannot be done at all (fewer
partitions, another replication factor) is reported under `unsupported` without failing.

The embedded Tansu broker keeps topics in memory: after it restarts, `journal.messages` is new
(`report.was_created("journal.messages")`), and the relay must republish from seq 0.

The function is synchronous (confluent-kafka's admin client); from async code run it with
`asyncio.to_thread`. An unreachable broker or a rejected creation raises `TopicAdminError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported from cimpl
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from core.config import Settings
from core.errors import MemstreamError
from streams.topics import TopicRegistry, TopicSpec, default_registry

Action = Literal["created", "updated", "unchanged"]

_UNSUPPORTED = {KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION}


class TopicAdminError(MemstreamError):
    """The broker could not be reached, or refused to create/alter a topic for a reason other
    than not supporting the operation. The message names the topic and the broker's answer."""

    code = "topic_admin_failed"


@dataclass(frozen=True)
class TopicResult:
    """What `apply_topics` did to one topic. `changes` and `unsupported` are readable sentences."""

    name: str
    broker_name: str
    action: Action
    changes: tuple[str, ...] = ()
    unsupported: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApplyReport:
    """Per-topic outcome of `apply_topics`; names are the unprefixed topic names."""

    bootstrap: str
    results: tuple[TopicResult, ...] = field(default_factory=tuple)

    def _names(self, action: Action) -> tuple[str, ...]:
        return tuple(r.name for r in self.results if r.action == action)

    @property
    def created(self) -> tuple[str, ...]:
        """Topics that did not exist and were created by this run."""
        return self._names("created")

    @property
    def updated(self) -> tuple[str, ...]:
        """Existing topics whose configs or partition count this run changed."""
        return self._names("updated")

    @property
    def unchanged(self) -> tuple[str, ...]:
        return self._names("unchanged")

    @property
    def unsupported(self) -> tuple[str, ...]:
        """Topics with drift this run could not correct (see each result's `unsupported`)."""
        return tuple(r.name for r in self.results if r.unsupported)

    @property
    def changed(self) -> bool:
        """True when this run created or altered anything (False on a no-op re-run)."""
        return any(r.action != "unchanged" for r in self.results)

    def was_created(self, name: str) -> bool:
        return name in self.created

    def result(self, name: str) -> TopicResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def render(self) -> str:
        """`lines()` joined: what `memstream topics apply` prints."""
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """A human-readable report, one line per topic plus one per change or unsupported item."""
        out = [f"topics on {self.bootstrap}:"]
        for r in self.results:
            out.append(f"  {r.broker_name}: {r.action}")
            out.extend(f"    - {c}" for c in r.changes)
            out.extend(f"    ! {u}" for u in r.unsupported)
        return out


def _wait(future: Future[Any], timeout: float) -> Any:
    return future.result(timeout=timeout)


def _error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def _is_unsupported(exc: BaseException) -> bool:
    err = _error(exc)
    return err is not None and err.code() in _UNSUPPORTED


class _Applier:
    def __init__(self, settings: Settings, timeout: float, replication_factor: int | None) -> None:
        self.settings = settings
        self.timeout = timeout
        self.replication_factor = replication_factor
        self.admin = AdminClient({"bootstrap.servers": settings.broker_bootstrap, "log_level": 3})

    def existing(self) -> dict[str, tuple[int, int]]:
        """broker name -> (partitions, replicas of partition 0) for every topic on the broker."""
        try:
            meta = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise TopicAdminError(
                f"cannot reach the broker at {self.settings.broker_bootstrap} to apply topics: {exc}. "
                "Is it running (`memstream up`, or check settings.broker_url)?"
            ) from None
        out: dict[str, tuple[int, int]] = {}
        for name, topic in meta.topics.items():
            replicas = len(topic.partitions[0].replicas) if 0 in topic.partitions else 0
            out[name] = (len(topic.partitions), replicas)
        return out

    def rf(self, spec: TopicSpec) -> int:
        return self.replication_factor or spec.replication_factor

    def create(self, specs: list[TopicSpec]) -> set[str]:
        """Create `specs`; returns the broker names that already existed (a concurrent creator)."""
        if not specs:
            return set()
        new = [
            NewTopic(s.broker_name(self.settings), s.partitions, self.rf(s), config=dict(s.config))
            for s in specs
        ]
        futures = self.admin.create_topics(new, request_timeout=self.timeout, operation_timeout=self.timeout)
        raced: set[str] = set()
        for name, future in futures.items():
            try:
                _wait(future, self.timeout)
            except KafkaException as exc:
                err = _error(exc)
                if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    raced.add(name)
                    continue
                raise TopicAdminError(f"creating topic {name!r} failed: {exc}") from None
        return raced

    def describe(self, broker_name: str) -> dict[str, tuple[str | None, int]]:
        """config name -> (value, source) as the broker reports it."""
        resource = ConfigResource(ResourceType.TOPIC, broker_name)
        try:
            entries = _wait(self.admin.describe_configs([resource])[resource], self.timeout)
        except KafkaException as exc:
            raise TopicAdminError(f"describing the configs of topic {broker_name!r} failed: {exc}") from None
        return {name: (entry.value, int(entry.source)) for name, entry in entries.items()}

    def alter_configs(
        self, broker_name: str, drift: Mapping[str, str], current: Mapping[str, tuple[str | None, int]]
    ) -> bool:
        """Set `drift`; False when the broker supports neither AlterConfigs API."""
        ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in drift.items()]
        resource = ConfigResource(ResourceType.TOPIC, broker_name, incremental_configs=ops)
        try:
            _wait(self.admin.incremental_alter_configs([resource])[resource], self.timeout)
            return True
        except KafkaException as exc:
            if not _is_unsupported(exc):
                raise TopicAdminError(f"updating configs of topic {broker_name!r} failed: {exc}") from None
        # Legacy AlterConfigs replaces the topic's whole dynamic config: keep the others.
        dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        full = {k: v for k, (v, source) in current.items() if source == dynamic and v is not None}
        full.update(drift)
        legacy = ConfigResource(ResourceType.TOPIC, broker_name, set_config=full)
        try:
            _wait(self.admin.alter_configs([legacy])[legacy], self.timeout)
            return True
        except KafkaException as exc:
            if _is_unsupported(exc):
                return False
            raise TopicAdminError(f"updating configs of topic {broker_name!r} failed: {exc}") from None

    def add_partitions(self, broker_name: str, total: int) -> bool:
        """Raise the partition count to `total`; False when the broker does not support it."""
        futures = self.admin.create_partitions(
            [NewPartitions(broker_name, total)], request_timeout=self.timeout, operation_timeout=self.timeout
        )
        try:
            _wait(futures[broker_name], self.timeout)
            return True
        except KafkaException as exc:
            if _is_unsupported(exc):
                return False
            raise TopicAdminError(f"adding partitions to topic {broker_name!r} failed: {exc}") from None

    def reconcile(self, spec: TopicSpec, partitions: int, replicas: int) -> TopicResult:
        broker_name = spec.broker_name(self.settings)
        changes: list[str] = []
        unsupported: list[str] = []
        current = self.describe(broker_name)
        drift = {k: v for k, v in spec.config.items() if current.get(k, (None, 0))[0] != v}
        if drift:
            described = ", ".join(f"{k} {current.get(k, (None, 0))[0]} -> {v}" for k, v in drift.items())
            if self.alter_configs(broker_name, drift, current):
                changes.append(f"config {described}")
            else:
                unsupported.append(f"config update not supported by this broker ({described})")
        if partitions < spec.partitions:
            step = f"partitions {partitions} -> {spec.partitions}"
            if self.add_partitions(broker_name, spec.partitions):
                changes.append(step)
            else:
                unsupported.append(f"partition increase not supported by this broker ({step})")
        elif partitions > spec.partitions:
            unsupported.append(
                f"has {partitions} partitions, {spec.partitions} declared: partitions cannot be removed"
            )
        wanted_rf = self.rf(spec)
        if replicas and replicas != wanted_rf:
            unsupported.append(
                f"replication factor is {replicas}, {wanted_rf} declared: change it with a partition "
                "reassignment (kafka-reassign-partitions), not here"
            )
        action: Action = "updated" if changes else "unchanged"
        return TopicResult(spec.name, broker_name, action, tuple(changes), tuple(unsupported))


def apply_topics(
    settings: Settings,
    registry: TopicRegistry | None = None,
    *,
    topics: Iterable[TopicSpec] | None = None,
    replication_factor: int | None = None,
    timeout: float = 30.0,
) -> ApplyReport:
    """Make the broker at `settings.broker_bootstrap` match the declared topics (module doc).

    `topics` defaults to every topic of `registry` (default: the shipped topics.yaml), dead-letter
    topics of listed processors included. `replication_factor` overrides the declared one for
    topics this run creates (production clusters: 3); it defaults to
    `settings.topic_replication_factor`. Raises `TopicAdminError`.
    """
    if replication_factor is None:
        replication_factor = settings.topic_replication_factor
    if replication_factor is not None and replication_factor < 1:
        raise ValueError("replication_factor must be >= 1")
    specs = list(topics if topics is not None else (registry or default_registry()).topics)
    applier = _Applier(settings, timeout, replication_factor)
    existing = applier.existing()
    missing = [s for s in specs if s.broker_name(settings) not in existing]
    missing_names = {s.name for s in missing}
    raced = applier.create(missing)
    if raced:
        existing = applier.existing()
    results: list[TopicResult] = []
    for spec in specs:
        broker_name = spec.broker_name(settings)
        if spec.name in missing_names and broker_name not in raced:
            created = f"created with {spec.partitions} partitions, replication factor {applier.rf(spec)}"
            results.append(TopicResult(spec.name, broker_name, "created", (created,)))
        else:
            partitions, replicas = existing[broker_name]
            results.append(applier.reconcile(spec, partitions, replicas))
    return ApplyReport(settings.broker_bootstrap, tuple(results))
