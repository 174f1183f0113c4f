"""The account export format (JSON Lines, versioned; documented in docs/export-format.md).

A file is one `header` line, then the account's records, then one `end` line with the count of
each type (a truncated file is refused). Every line is one JSON object with a `type`, written
canonically (`dump`: keys sorted, no spaces, UTF-8 as is but for U+0085, U+2028 and U+2029,
which are escaped; times in UTC as
`YYYY-MM-DDTHH:MM:SS.ffffffZ`), in a fixed order (`memstream.ops.account_export`), so the same
account always gives the same bytes. Nothing that differs between nodes is written: no
environment, no account id (the import names its target), no journal-wide `seq`, no node-derived
values (token counts of messages, content hashes, change counters).

`read_export(lines)` parses and checks a whole file before anything is written
(`InvalidExport` naming the line): the header and its `format_version`, each line's fields, that
each message and summary follows its thread's line, dense offsets from 0 and increasing summary
versions per thread, no duplicate ids, and the `end` counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import InvalidInput
from core.ids import Id
from core.journal.models import NewMessage, Role, ToolCall
from core.memory.agents import normalise_capabilities
from core.memory.models import Category, Provenance, Visibility

FORMAT = "memstream.account"
FORMAT_VERSION = 1
TYPES = ("agent", "thread", "message", "summary", "memory_entry")


class InvalidExport(InvalidInput):
    """The file is not an account export this node reads; nothing was imported."""

    code = "invalid_export"

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}", field=f"line {line}")
        self.line = line


def time_text(value: datetime) -> str:
    """A time as the format writes it (UTC, microseconds, `Z`)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_LINE_BREAKS = str.maketrans({"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})
"""Characters some line readers (Python's `splitlines`, httpx's `iter_lines`) take for line ends:
written escaped, so a line is always exactly what lies between two `\\n`."""


def dump(record: dict[str, Any]) -> str:
    """One canonical line (without its newline): keys sorted, compact, UTF-8 kept except the
    escaped line-break characters of `_LINE_BREAKS`."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.translate(_LINE_BREAKS)


def split_lines(text: str) -> list[str]:
    """The lines of a file's text: split at `\\n` only (a final newline ends the last line)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HeaderLine(_Line):
    type: Literal["header"]
    format: Literal["memstream.account"]
    format_version: int


class AgentLine(_Line):
    type: Literal["agent"]
    agent_id: Id
    capabilities: list[str]
    created_at: datetime
    updated_at: datetime

    @field_validator("capabilities")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        """Today's capability names only (`core.memory.agents.normalise_capabilities`)."""
        try:
            return sorted(normalise_capabilities(value))
        except InvalidInput as exc:
            raise ValueError(exc.message) from None


class ThreadLine(_Line):
    type: Literal["thread"]
    thread_id: Id
    agent_id: Id
    user_id: Id | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class MessageLine(_Line):
    type: Literal["message"]
    thread_id: Id
    offset: int = Field(ge=0)
    message_id: Id
    agent_id: Id
    user_id: Id | None
    role: Role
    content: str
    reasoning: str | None
    tool_call: ToolCall | None
    created_at: datetime

    def new_message(self) -> NewMessage:
        """The append that recreates it (NewMessage's rules; ValueError when they refuse it)."""
        return NewMessage(
            message_id=self.message_id,
            role=self.role,
            content=self.content,
            reasoning=self.reasoning,
            tool_call=self.tool_call,
            created_at=self.created_at,
        )


class SummaryLine(_Line):
    type: Literal["summary"]
    thread_id: Id
    version: int = Field(ge=1)
    timestamp: datetime
    last_message_offset: int = Field(ge=0)
    last_message_id: str
    content: str
    token_count: int = Field(ge=0)
    message_count: int = Field(ge=0)


class MemoryEntryLine(_Line):
    type: Literal["memory_entry"]
    entry_id: str = Field(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    agent_id: Id
    user_id: Id | None
    author_user_id: Id | None
    key: str
    content: str
    category: Category
    visibility: Visibility
    importance: float = Field(ge=0.0, le=1.0)
    expires_at: datetime | None
    recall_count: int = Field(ge=0)
    last_recalled_at: datetime | None
    created_at: datetime
    updated_at: datetime
    source: Provenance | None


class EndLine(_Line):
    type: Literal["end"]
    counts: dict[str, int]


_MODELS: dict[str, type[_Line]] = {
    "agent": AgentLine,
    "thread": ThreadLine,
    "message": MessageLine,
    "summary": SummaryLine,
    "memory_entry": MemoryEntryLine,
    "end": EndLine,
}


def header() -> dict[str, Any]:
    return {"type": "header", "format": FORMAT, "format_version": FORMAT_VERSION}


@dataclass
class ThreadRecords:
    """A thread's line with its messages (by offset) and summary versions (ascending)."""

    thread: ThreadLine
    messages: list[MessageLine] = field(default_factory=list)
    summaries: list[SummaryLine] = field(default_factory=list)


@dataclass
class ParsedExport:
    agents: list[AgentLine] = field(default_factory=list)
    threads: list[ThreadRecords] = field(default_factory=list)
    entries: list[MemoryEntryLine] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "agent": len(self.agents),
            "thread": len(self.threads),
            "message": sum(len(t.messages) for t in self.threads),
            "summary": sum(len(t.summaries) for t in self.threads),
            "memory_entry": len(self.entries),
        }


def _problem(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(line)'}: {err['msg']}" for err in exc.errors()
    )


def _parse_line(number: int, text: str) -> _Line:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise InvalidExport(number, f"not a JSON object ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidExport(number, "not a JSON object")
    kind = data.get("type")
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidExport(number, f"unknown type {kind!r} (expected one of {', '.join(TYPES)}, end)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidExport(number, f"invalid {kind}: {_problem(exc)}") from None


def _check_header(number: int, text: str) -> None:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("type") != "header" or data.get("format") != FORMAT:
        raise InvalidExport(
            number, f"not a memstream account export: the first line must be {dump(header())}"
        )
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise InvalidExport(
            number,
            f"unsupported format_version {version!r}: this node reads format_version {FORMAT_VERSION}",
        )
    try:
        HeaderLine.model_validate(data)
    except ValidationError as exc:
        raise InvalidExport(number, f"invalid header: {_problem(exc)}") from None


class _Reader:
    def __init__(self) -> None:
        self.parsed = ParsedExport()
        self.threads: dict[str, ThreadRecords] = {}
        self.message_ids: set[str] = set()
        self.entry_ids: set[str] = set()
        self.agent_ids: set[str] = set()

    def add(self, number: int, line: _Line) -> None:
        if isinstance(line, AgentLine):
            self._unique(number, self.agent_ids, line.agent_id, "agent")
            self.parsed.agents.append(line)
        elif isinstance(line, ThreadLine):
            if line.thread_id in self.threads:
                raise InvalidExport(number, f"thread {line.thread_id} appears twice")
            records = ThreadRecords(line)
            self.threads[line.thread_id] = records
            self.parsed.threads.append(records)
        elif isinstance(line, MessageLine):
            self._message(number, line)
        elif isinstance(line, SummaryLine):
            records = self._thread_of(number, line.thread_id, "summary")
            if records.summaries and line.version <= records.summaries[-1].version:
                raise InvalidExport(number, f"summary versions of thread {line.thread_id} must increase")
            records.summaries.append(line)
        elif isinstance(line, MemoryEntryLine):
            self._unique(number, self.entry_ids, line.entry_id, "memory entry")
            self.parsed.entries.append(line)

    def _message(self, number: int, line: MessageLine) -> None:
        records = self._thread_of(number, line.thread_id, "message")
        if line.offset != len(records.messages):
            raise InvalidExport(
                number,
                f"message {line.message_id} of thread {line.thread_id} has offset {line.offset}, "
                f"expected {len(records.messages)} (offsets are dense from 0, in order)",
            )
        self._unique(number, self.message_ids, line.message_id, "message id")
        try:
            line.new_message()
        except ValidationError as exc:
            raise InvalidExport(number, f"message {line.message_id}: {_problem(exc)}") from None
        records.messages.append(line)

    def _thread_of(self, number: int, thread_id: str, what: str) -> ThreadRecords:
        records = self.threads.get(thread_id)
        if records is None:
            raise InvalidExport(number, f"{what} of thread {thread_id} comes before that thread's line")
        return records

    @staticmethod
    def _unique(number: int, seen: set[str], value: str, what: str) -> None:
        if value in seen:
            raise InvalidExport(number, f"{what} {value} appears twice")
        seen.add(value)


def read_export(lines: Iterable[str]) -> ParsedExport:
    """Parse and check a whole export (module doc); `InvalidExport` on the first problem."""
    reader = _Reader()
    number = 0
    ended = False
    for number, raw in enumerate(lines, start=1):
        text = raw.rstrip("\r\n")
        if ended:
            raise InvalidExport(number, "content after the end line")
        if number == 1:
            _check_header(number, text)
            continue
        line = _parse_line(number, text)
        if isinstance(line, EndLine):
            counts = reader.parsed.counts()
            if line.counts != counts:
                raise InvalidExport(number, f"the end line counts {line.counts}, the file holds {counts}")
            ended = True
            continue
        reader.add(number, line)
    if number == 0:
        raise InvalidExport(1, "the file is empty")
    if not ended:
        raise InvalidExport(number, "the file ends without its end line (truncated?)")
    return reader.parsed
