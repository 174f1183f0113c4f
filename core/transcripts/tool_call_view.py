"""`journal_tool_call_view`: the full arguments or result of an earlier tool call, by its id, in
byte-range pages of at most MAX_PAGE_BYTES.

Arguments (`parse_view_arguments`; each problem is an `InvalidInput` naming the argument):
`tool_call_id` (required, an id), `part` `result` (default) | `arguments`, `offset` (UTF-8
bytes, >= 0, default 0), `length` (1..MAX_PAGE_BYTES, default MAX_PAGE_BYTES), `thread_id`
(optional: the thread holding the call), `occurrence` (optional, >= 1: which call with this id
in the thread, module doc). Optional arguments sent as null count as absent.

Result: tool_call_id, thread_id, tool_name, part, `occurrence` and `occurrences` (which call of
how many with this id in the thread), offset, `length` (bytes returned), total_bytes,
`next_offset` (pass it as `offset` for the next page; null at the end) and `content` (the text
of the page). Pages never split a UTF-8 character: a page that would end
inside one ends before it (`length` is then smaller than asked, and `next_offset` points at the
character). An `offset` inside a character, an `offset` past the end, or a `length` too small
for the character at `offset` are `InvalidInput` errors saying what to send instead.

Lookup, scoped like search (environment, account, agent, and the user: without one, only the
threads without a user), also when `thread_id` names a thread outside the scope: an id
unknown in the scope is `ToolCallNotFound` (404 `tool_call_not_found`); a call without the part
asked for (no result recorded) is `ToolCallPartNotFound`; the same id in several threads picks
the caller's current thread when it is one of them, else `AmbiguousToolCall` (409) lists the
threads (up to MAX_LISTED_THREADS) and asks for `thread_id`.

A repeated id within one thread is several calls (some servers emit `call_0` every turn;
`core/transcripts/tool_calls.py` pairs each call with its result): they are numbered from 1 in
the order of the thread, and the view reads the most recent one unless `occurrence` names
another (an occurrence the thread does not have is `ToolCallNotFound`). The size and the bytes
of a page always come from the same message. A page that comes back shorter than the size
promised (the projection was rebuilt between the lookup and the read) is `ToolCallChanged`
(409): read again from offset 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import Conflict, InvalidInput, NotFound
from core.stores.transcripts import ToolCallInfo, ToolCallPart, TranscriptStore
from core.transcripts.arguments import (
    arguments_object,
    choice,
    id_value,
    integer,
    optional_id,
    optional_integer,
)
from core.transcripts.caller import JournalContext

VIEW = "journal_tool_call_view"
MAX_PAGE_BYTES = 32_768
MAX_LISTED_THREADS = 10
PARTS: tuple[ToolCallPart, ...] = ("result", "arguments")
VIEW_ARGUMENTS = ("tool_call_id", "part", "offset", "length", "thread_id", "occurrence")
_LOOKBACK = 3  # a UTF-8 character is at most 4 bytes: its start is at most 3 bytes back


class ToolCallNotFound(NotFound):
    code = "tool_call_not_found"


class ToolCallPartNotFound(NotFound):
    code = "tool_call_part_not_found"


class AmbiguousToolCall(Conflict):
    code = "ambiguous_tool_call"


class ToolCallChanged(Conflict):
    code = "tool_call_changed"


@dataclass(frozen=True)
class ViewArgs:
    tool_call_id: str
    part: ToolCallPart = "result"
    offset: int = 0
    length: int = MAX_PAGE_BYTES
    thread_id: str | None = None
    occurrence: int | None = None  # None: the most recent call with the id in the thread


def parse_view_arguments(arguments: str | Mapping[str, Any]) -> ViewArgs:
    """The validated arguments (module doc); InvalidInput naming the first bad one."""
    args = arguments_object(VIEW, arguments, VIEW_ARGUMENTS)
    if args.get("tool_call_id") is None:
        raise InvalidInput(f"arguments.tool_call_id: required by {VIEW}", field="arguments.tool_call_id")
    return ViewArgs(
        tool_call_id=id_value("tool_call_id", args["tool_call_id"]),
        part=choice(args, "part", PARTS, "result"),
        offset=integer(args, "offset", default=0, minimum=0, maximum=None),
        length=integer(args, "length", default=MAX_PAGE_BYTES, minimum=1, maximum=MAX_PAGE_BYTES),
        thread_id=optional_id(args, "thread_id"),
        occurrence=optional_integer(args, "occurrence", minimum=1, maximum=None),
    )


# ---- UTF-8 boundaries (pure) ------------------------------------------------------------------


def is_continuation(byte: int) -> bool:
    """True for a UTF-8 continuation byte (10xxxxxx): not the start of a character."""
    return byte & 0xC0 == 0x80


def char_length(lead: int) -> int:
    """Bytes of the UTF-8 character starting with `lead` (1 for an invalid lead byte)."""
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    if lead >= 0xC0:
        return 2
    return 1


def complete_prefix(chunk: bytes) -> int:
    """The length of the longest prefix of `chunk` that ends on a character boundary (so that
    a character cut off at the end of `chunk` is left out whole)."""
    start = len(chunk) - 1
    while start >= 0 and is_continuation(chunk[start]):
        start -= 1
    if start < 0:
        return 0
    return start if start + char_length(chunk[start]) > len(chunk) else len(chunk)


def character_start(before: bytes, offset: int) -> int:
    """The offset where the character containing byte `offset` starts, given the bytes just
    before it (`before` ends at `offset`)."""
    back = 0
    for byte in reversed(before):
        back += 1
        if not is_continuation(byte):
            return offset - back
    return offset - back


# ---- the tool ---------------------------------------------------------------------------------


def choose_call(calls: Sequence[ToolCallInfo], args: ViewArgs, context: JournalContext) -> ToolCallInfo:
    """The one call the arguments mean (module doc: not found, current thread, ambiguity, the
    occurrence within the thread). `calls` are most recent first."""
    if not calls:
        where = "the threads" if args.thread_id is None else f"thread {args.thread_id!r}"
        user = (
            f" for user {context.scope.user_id!r}" if context.scope.user_id is not None else " without a user"
        )
        raise ToolCallNotFound(
            f"no tool call {args.tool_call_id!r} in {where} of agent {context.scope.agent_id!r}{user}: "
            "check the id (it is the `id` of the tool call in the assistant message)"
        )
    threads = list(dict.fromkeys(call.thread_id for call in calls))
    if len(threads) == 1:
        thread_id = threads[0]
    elif context.thread_id in threads:
        thread_id = context.thread_id
    else:
        shown = ", ".join(threads[:MAX_LISTED_THREADS]) + (
            f" and {len(threads) - MAX_LISTED_THREADS} more" if len(threads) > MAX_LISTED_THREADS else ""
        )
        raise AmbiguousToolCall(
            f"tool call id {args.tool_call_id!r} occurs in {len(threads)} threads ({shown}): pass "
            "`thread_id` to say which one"
        )
    in_thread = [call for call in calls if call.thread_id == thread_id]
    if args.occurrence is None:
        return max(in_thread, key=lambda call: call.occurrence)
    for call in in_thread:
        if call.occurrence == args.occurrence:
            return call
    raise ToolCallNotFound(
        f"thread {thread_id!r} has {len(in_thread)} tool call(s) with id {args.tool_call_id!r}: "
        f"occurrence must be 1..{len(in_thread)} (omit it for the most recent), got {args.occurrence}"
    )


def occurrences(calls: Sequence[ToolCallInfo], call: ToolCallInfo) -> int:
    """How many calls with `call`'s id its thread has."""
    return sum(1 for other in calls if other.thread_id == call.thread_id)


class ToolCallViewer:
    """Runs `journal_tool_call_view` over a transcript store (module doc)."""

    def __init__(self, store: TranscriptStore) -> None:
        self._store = store

    async def invoke(self, arguments: str | Mapping[str, Any], context: JournalContext) -> dict[str, Any]:
        """Validate `arguments` and read one page; the JSON result for the model."""
        return await self.view(parse_view_arguments(arguments), context)

    async def view(self, args: ViewArgs, context: JournalContext) -> dict[str, Any]:
        calls = await self._lookup(args, context)
        call = choose_call(calls, args, context)
        present = call.result_offset if args.part == "result" else call.call_offset
        if present is None:
            missing = "no result" if args.part == "result" else "no call message (arguments)"
            raise ToolCallPartNotFound(
                f"tool call {args.tool_call_id!r} in thread {call.thread_id!r} has {missing} recorded"
            )
        total = call.result_bytes if args.part == "result" else call.arguments_bytes
        if args.offset > total:
            raise InvalidInput(
                f"arguments.offset: {args.offset} is past the end of the {args.part} ({total} bytes)",
                field="arguments.offset",
            )
        chunk = b""
        if args.offset < total:
            chunk = await self._read(context, call, args, args.offset, args.length)
            expected = min(args.length, total - args.offset)
            if len(chunk) != expected:
                raise ToolCallChanged(
                    f"the {args.part} of tool call {args.tool_call_id!r} in thread {call.thread_id!r} "
                    f"changed while it was read ({len(chunk)} bytes at offset {args.offset} where "
                    f"{expected} were expected; the transcript projection was probably rebuilt): "
                    "read it again from offset 0"
                )
            await self._check_start(context, call, args, chunk)
            if args.offset + len(chunk) < total:
                keep = complete_prefix(chunk)
                if keep == 0:
                    need = char_length(chunk[0])
                    raise InvalidInput(
                        f"arguments.length: {args.length} bytes cannot hold the {need}-byte character at "
                        f"offset {args.offset}; ask for at least {need}",
                        field="arguments.length",
                    )
                chunk = chunk[:keep]
        end = args.offset + len(chunk)
        return {
            "tool_call_id": call.tool_call_id,
            "thread_id": call.thread_id,
            "tool_name": call.tool_name,
            "part": args.part,
            "occurrence": call.occurrence,
            "occurrences": occurrences(calls, call),
            "offset": args.offset,
            "length": len(chunk),
            "total_bytes": total,
            "next_offset": end if end < total else None,
            "content": chunk.decode("utf-8"),
        }

    async def _lookup(self, args: ViewArgs, context: JournalContext) -> list[ToolCallInfo]:
        """The calls with the id: in `thread_id` when given; else in the caller's thread when it
        has any (the common case, one small read), else in every thread of the scope."""
        if args.thread_id is None and context.thread_id is not None:
            here = await self._store.tool_call(context.scope, args.tool_call_id, thread_id=context.thread_id)
            if here:
                return here
        return await self._store.tool_call(context.scope, args.tool_call_id, thread_id=args.thread_id)

    async def _read(
        self, context: JournalContext, call: ToolCallInfo, args: ViewArgs, offset: int, length: int
    ) -> bytes:
        return await self._store.tool_call_bytes(context.scope, call, args.part, offset, length)

    async def _check_start(
        self, context: JournalContext, call: ToolCallInfo, args: ViewArgs, chunk: bytes
    ) -> None:
        if not chunk or not is_continuation(chunk[0]):
            return
        back = min(_LOOKBACK, args.offset)
        before = await self._read(context, call, args, args.offset - back, back)
        start = character_start(before, args.offset)
        raise InvalidInput(
            f"arguments.offset: {args.offset} falls inside a UTF-8 character (it starts at byte {start}); "
            f"use an offset from `next_offset`, e.g. {start}",
            field="arguments.offset",
        )
