"""The topic registry: topics.yaml loaded, checked and typed.

topics.yaml is the single source of truth for every topic the code uses. Its canonical copy is
`streams/topics.yaml` (package data, so it ships with a non-editable install); the repo root's
`topics.yaml` is a symlink to it. Code never spells a broker topic name itself: it calls
`topic_name(settings, "journal.messages")`, which raises `UndeclaredTopic` for a name topics.yaml
does not declare (a test scans memstream/, streams/, processors/ and sinks/ for bypasses).

Dead-letter topics are built from one template (`dead_letter` in topics.yaml): `dlq_topic(processor)`
returns the `TopicSpec` of `dlq.<processor>` for a processor listed under `dead_letter.processors`
(that listing is what makes `memstream topics apply` create it). Its records follow the
dead-letter schema; `streams.codecs.dead_letter.payload` builds one.

Loading fails with `TopicsFileError` (naming the entry and the problem) when the file is malformed,
a schema is not valid Draft 2020-12, or an example payload does not validate against its schema.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, best_match
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.config import Settings
from core.errors import InvalidInput, MemstreamError

DEFAULT_TOPICS_PATH = Path(__file__).resolve().with_name("topics.yaml")
"""streams/topics.yaml, shipped with the package (the repo root's topics.yaml links to it)."""

TOPIC_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*$")
"""Unprefixed topic names: lowercase, dot-separated words (e.g. `journal.messages`)."""


class UndeclaredTopic(MemstreamError):
    """A topic name (or a processor's dead-letter topic) that topics.yaml does not declare."""

    code = "undeclared_topic"


class TopicsFileError(MemstreamError):
    """topics.yaml is malformed; the message names the entry and what is wrong."""

    code = "topics_file_invalid"


class InvalidPayload(InvalidInput):
    """A payload does not match its topic's schema. `field` is the JSON path of the first error."""

    code = "invalid_payload"

    def __init__(self, message: str, *, topic: str, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.topic = topic


# ---------------------------------------------------------------- the file's shape


def _config_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise ValueError(f"broker config values must be strings, integers or booleans, not {value!r}")


class _Entry(BaseModel):
    """Fields shared by a topic entry and the dead-letter template."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = Field(min_length=1)
    partitions: int = Field(ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    key: str = Field(min_length=1)
    headers: dict[str, str] = {}
    config: dict[str, str] = {}
    producers: list[str] = []
    consumers: list[str] = []
    schema_version: int = Field(ge=1)
    schema_: dict[str, Any] = Field(alias="schema")
    examples: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("config", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(k): _config_value(v) for k, v in value.items()}
        return value


class _TopicEntry(_Entry):
    name: str

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not TOPIC_NAME_RE.fullmatch(value) or len(value) > 200:
            raise ValueError("must be lowercase dot-separated words of a-z 0-9 _ - (at most 200 chars)")
        return value


class _DeadLetterEntry(_Entry):
    name_pattern: str
    processor_pattern: str
    processors: list[str] = []

    @field_validator("name_pattern")
    @classmethod
    def _check_pattern(cls, value: str) -> str:
        if value.count("{processor}") != 1:
            raise ValueError("must contain '{processor}' exactly once, e.g. 'dlq.{processor}'")
        return value


class _TopicsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    defaults: dict[str, int] = {}
    topics: list[_TopicEntry]
    dead_letter: _DeadLetterEntry


# ---------------------------------------------------------------- the typed registry


@dataclass(frozen=True)
class TopicSpec:
    """One declared topic. `name` is unprefixed; `broker_name(settings)` is what the broker sees."""

    name: str
    description: str
    partitions: int
    replication_factor: int
    key: str
    headers: Mapping[str, str]
    config: Mapping[str, str]
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    schema_version: int
    schema: Mapping[str, Any]
    examples: tuple[Mapping[str, Any], ...]
    dead_letter_of: str | None = None
    """The processor whose dead-letter topic this is; None for ordinary topics."""
    _validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validator = Draft202012Validator(self.schema, format_checker=FormatChecker())
        object.__setattr__(self, "_validator", validator)

    def broker_name(self, settings: Settings) -> str:
        """The prefixed name on the broker (`settings.topic(name)`)."""
        return settings.topic(self.name)

    @property
    def max_message_bytes(self) -> int | None:
        """`max.message.bytes` from the config, when declared."""
        value = self.config.get("max.message.bytes")
        return int(value) if value is not None else None

    def validate(self, payload: object) -> None:
        """Raise `InvalidPayload` (naming the JSON path) unless `payload` matches the schema."""
        error = best_match(self._validator.iter_errors(payload))
        if error is not None:
            path = "$" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            raise InvalidPayload(
                f"payload for topic {self.name!r} (schema_version {self.schema_version}) is invalid at "
                f"{path}: {error.message}",
                topic=self.name,
                field=path,
            )


@dataclass(frozen=True)
class DeadLetterTemplate:
    """The `dead_letter` section: how `dlq.<processor>` topics are built."""

    name_pattern: str
    processor_pattern: re.Pattern[str]
    processors: tuple[str, ...]
    template: TopicSpec

    def name_for(self, processor: str) -> str:
        """`dlq.<processor>` (unprefixed). Raises ValueError for an ill-formed processor name."""
        if not self.processor_pattern.fullmatch(processor):
            raise ValueError(
                f"processor name {processor!r} does not match {self.processor_pattern.pattern!r} "
                "(lowercase letters, digits, '_' and '-', starting with a letter)"
            )
        return self.name_pattern.format(processor=processor)

    def spec_for(self, processor: str) -> TopicSpec:
        """The template instantiated for `processor`, whether or not it is declared."""
        return replace(self.template, name=self.name_for(processor), dead_letter_of=processor)


class TopicRegistry:
    """Every declared topic, including the dead-letter topics of the listed processors."""

    def __init__(self, path: Path, topics: Iterable[TopicSpec], dead_letter: DeadLetterTemplate) -> None:
        self.path = path
        self.dead_letter = dead_letter
        specs = [*topics, *(dead_letter.spec_for(p) for p in dead_letter.processors)]
        self._topics: dict[str, TopicSpec] = {}
        for spec in specs:
            if spec.name in self._topics:
                raise TopicsFileError(f"{path}: topic {spec.name!r} is declared twice")
            self._topics[spec.name] = spec

    @property
    def topics(self) -> tuple[TopicSpec, ...]:
        """All declared topics, in file order, dead-letter topics last."""
        return tuple(self._topics.values())

    def names(self) -> tuple[str, ...]:
        return tuple(self._topics)

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def __iter__(self) -> Iterator[TopicSpec]:
        return iter(self._topics.values())

    def get(self, name: str) -> TopicSpec:
        """The spec of a declared topic (unprefixed name); `UndeclaredTopic` otherwise."""
        try:
            return self._topics[name]
        except KeyError:
            raise UndeclaredTopic(
                f"topic {name!r} is not declared in {self.path}; declared: {', '.join(self._topics)}. "
                "Declare it there (name, partitions, config, schema, examples) before using it."
            ) from None

    def validate(self, name: str, payload: object) -> None:
        """Check `payload` against topic `name`'s schema: `InvalidPayload` or `UndeclaredTopic`."""
        self.get(name).validate(payload)

    def dlq_topic(self, processor: str) -> TopicSpec:
        """The dead-letter topic of `processor` (`dlq.<processor>`).

        Raises `UndeclaredTopic` unless `processor` is listed under `dead_letter.processors` in
        topics.yaml (listing it is what makes `memstream topics apply` create the topic), and
        ValueError for an ill-formed processor name.
        """
        name = self.dead_letter.name_for(processor)
        if processor not in self.dead_letter.processors:
            raise UndeclaredTopic(
                f"dead-letter topic {name!r}: processor {processor!r} is not listed under "
                f"dead_letter.processors in {self.path}; add it there."
            )
        return self._topics[name]

    def with_dead_letter(self, *processors: str) -> TopicRegistry:
        """A copy of this registry that also declares the dead-letter topics of `processors`."""
        for processor in processors:
            self.dead_letter.name_for(processor)  # validates the name
        listed = tuple(dict.fromkeys([*self.dead_letter.processors, *processors]))
        ordinary = [spec for spec in self._topics.values() if spec.dead_letter_of is None]
        return TopicRegistry(self.path, ordinary, replace(self.dead_letter, processors=listed))


# ---------------------------------------------------------------- loading


def _build_spec(
    where: str, name: str, entry: _Entry, replication_factor: int, dead_letter_of: str | None = None
) -> TopicSpec:
    schema = entry.schema_
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise TopicsFileError(f"{where}: schema is not valid JSON Schema 2020-12: {exc.message}") from None
    version = schema.get("properties", {}).get("schema_version", {}).get("const")
    if version != entry.schema_version:
        raise TopicsFileError(
            f"{where}: schema must require `schema_version: {{const: {entry.schema_version}}}` "
            f"(it says {version!r})"
        )
    spec = TopicSpec(
        name=name,
        description=entry.description,
        partitions=entry.partitions,
        replication_factor=entry.replication_factor or replication_factor,
        key=entry.key,
        headers=dict(entry.headers),
        config=dict(entry.config),
        producers=tuple(entry.producers),
        consumers=tuple(entry.consumers),
        schema_version=entry.schema_version,
        schema=schema,
        examples=tuple(entry.examples),
        dead_letter_of=dead_letter_of,
    )
    for i, example in enumerate(spec.examples):
        try:
            spec.validate(example)
        except InvalidPayload as exc:
            raise TopicsFileError(
                f"{where}: examples[{i}] does not match the schema: {exc.message}"
            ) from None
    return spec


def load_topics(path: Path | str | None = None) -> TopicRegistry:
    """Load and check topics.yaml (default: `DEFAULT_TOPICS_PATH`); `TopicsFileError` if it is bad."""
    file = Path(path) if path is not None else DEFAULT_TOPICS_PATH
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TopicsFileError(f"cannot read the topics file {file}: {exc}") from None
    except yaml.YAMLError as exc:
        raise TopicsFileError(f"{file} is not valid YAML: {exc}") from None
    try:
        parsed = _TopicsFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = ".".join(str(p) for p in first["loc"])
        raise TopicsFileError(f"{file}: {location}: {first['msg']}") from None
    default_rf = parsed.defaults.get("replication_factor", 1)
    specs = [
        _build_spec(f"{file}: topic {entry.name!r}", entry.name, entry, default_rf) for entry in parsed.topics
    ]
    dl = parsed.dead_letter
    try:
        processor_re = re.compile(dl.processor_pattern)
    except re.error as exc:
        raise TopicsFileError(f"{file}: dead_letter.processor_pattern is not a regex: {exc}") from None
    template = _build_spec(f"{file}: dead_letter", dl.name_pattern, dl, default_rf)
    dead_letter = DeadLetterTemplate(dl.name_pattern, processor_re, tuple(dl.processors), template)
    for processor in dead_letter.processors:
        try:
            dead_letter.name_for(processor)
        except ValueError as exc:
            raise TopicsFileError(f"{file}: dead_letter.processors: {exc}") from None
    return TopicRegistry(file, specs, dead_letter)


@functools.cache
def default_registry() -> TopicRegistry:
    """The registry of the shipped topics.yaml, loaded once per process."""
    return load_topics()


def topic_name(settings: Settings, name: str, *, registry: TopicRegistry | None = None) -> str:
    """The broker-side name of declared topic `name`; `UndeclaredTopic` if topics.yaml lacks it.

    This is how code names topics: `topic_name(settings, "journal.messages")`.
    """
    return (registry or default_registry()).get(name).broker_name(settings)


def dlq_topic(processor: str, *, registry: TopicRegistry | None = None) -> TopicSpec:
    """The dead-letter `TopicSpec` of `processor` (see `TopicRegistry.dlq_topic`).

    Broker name: `dlq_topic("summarizer").broker_name(settings)`; records: validate with
    `spec.validate(payload)`, build with `streams.codecs.dead_letter.payload(...)`.
    """
    return (registry or default_registry()).dlq_topic(processor)
