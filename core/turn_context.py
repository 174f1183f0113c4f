"""The context reader: what a model sees at the start of a turn.

`ContextReader.get_context(principal, thread_id)` returns, in this order:
1. the pinned-facts system message, when the `PinnedFactsProvider` returns facts;
2. the summary system message `"Previous conversation summary: <content>"`, when the thread has
   a summary in object storage;
3. the window: the last `min(20, metadata.config.max_working_memory_messages)` messages, read
   straight from the journal (`journal.last`), oldest first. Tool results at the start of the
   window whose call fell outside it are left out (`orphan_tool_results_dropped`): chat APIs
   reject a tool message that does not follow its assistant tool call.

`get_subagent_context(principal, parent_thread_id)` is the context of a sub-agent the thread's
agent delegates to: the parent's pinned facts (read in the parent thread's scope: its agent and
user) and nothing else - an empty conversation, no summary (`window_size` 0).

The pinned facts are a snapshot read once per call: the returned context never changes, so a
store during the turn shows only in the next context.

The three reads run concurrently. There is no cache and no fallback: when the journal (or the
summary store, or the pinned-facts provider) fails, the call fails with its typed error
(JournalUnavailable / JournalFenced / SummaryUnavailable) and the API answers 503. The thread
itself is looked up in the caller's account and environment only (NotFound otherwise).

Messages come out OpenAI-style: `{role, content}`; an assistant tool call as
`tool_calls=[{id, type: "function", function: {name, arguments}}]`; a tool result as
`{role: "tool", tool_call_id, content: <result>}`. Reasoning text is not part of the context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.auth import Principal
from core.errors import InvalidInput
from core.journal.models import Message
from core.journal.tokens import count_tokens
from core.memory.models import MemoryScope
from core.memory.pinned import PinnedFact, PinnedFactsProvider, render_pinned
from core.stores.journal import ThreadJournal
from core.summaries.models import Summary, SummaryHistory, SummaryReader
from core.threads import ThreadService, journal_call

SUMMARY_PREFIX = "Previous conversation summary: "


class ToolCallFunction(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str = Field(description="JSON-encoded arguments object")


class ContextToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


def _absent(value: object) -> bool:
    return value is None


class ContextMessage(BaseModel):
    """One chat message, shaped like the OpenAI chat-completions `messages` items: `content` is
    always there (null only on an assistant message that just calls a tool); `tool_calls` only on
    an assistant tool call, `tool_call_id` only on a tool result (left out elsewhere, not null)."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = Field(description="the text; null on an assistant message that only calls a tool")
    tool_calls: list[ContextToolCall] | None = Field(
        default=None, exclude_if=_absent, description="the assistant's tool call (only on such a message)"
    )
    tool_call_id: str | None = Field(
        default=None,
        exclude_if=_absent,
        description="the call a tool message answers (only on tool messages)",
    )


class ContextInfo(BaseModel):
    """How the context was assembled."""

    model_config = ConfigDict(frozen=True)

    thread_id: str
    agent_id: str
    user_id: str | None
    window_size: int = Field(
        description="the window limit used: min(20, max_working_memory_messages); 0 for a sub-agent context"
    )
    window_messages: int = Field(description="messages in the window (fewer when the thread is shorter)")
    first_offset: int | None = Field(description="journal offset of the window's first message")
    last_offset: int | None = Field(description="journal offset of the window's last message")
    window_created_at: list[datetime] = Field(
        default_factory=list,
        description=(
            "the time of each window message, in the order of `messages` (the last `window_messages` "
            "of them): the append's time, or the original time an import gave"
        ),
    )
    summary_version: int | None = Field(description="version of the summary included; null when none")
    summary_last_message_offset: int | None = Field(
        default=None, description="journal offset of the last message the summary covers; null when none"
    )
    orphan_tool_results_dropped: int = Field(
        default=0,
        description="tool results at the window's start left out because their call fell outside it",
    )
    pinned_count: int = Field(description="pinned facts included")
    at_offset: int | None = Field(
        default=None,
        description=(
            "set for a point-in-time context (`at_offset`): the context as it stood when the thread's "
            "last message had this offset, before the next one arrived; null for the current context"
        ),
    )
    pinned_left_out: int = Field(
        default=0,
        description=(
            "point-in-time contexts: facts pinned today but written after that time, left out (an edited "
            "fact's earlier text and deleted facts are not kept, so pinned facts are today's as far as "
            "they already existed then)"
        ),
    )
    token_count: int = Field(description="o200k tokens of all message texts (system messages included)")


class Context(BaseModel):
    model_config = ConfigDict(frozen=True)

    messages: list[ContextMessage]
    metadata: ContextInfo


def to_context_message(message: Message) -> ContextMessage:
    """A journal message as a chat message (see the module doc for the shapes)."""
    tc = message.tool_call
    if message.role == "assistant" and tc is not None:
        call = ContextToolCall(
            id=tc.id, function=ToolCallFunction(name=tc.name or "", arguments=tc.arguments or "{}")
        )
        return ContextMessage(role="assistant", content=message.content or None, tool_calls=[call])
    if message.role == "tool" and tc is not None:
        return ContextMessage(role="tool", content=tc.result or message.content, tool_call_id=tc.id)
    return ContextMessage(role=message.role, content=message.content)


async def _gather(*calls: Awaitable[Any]) -> list[Any]:
    """Run concurrently; on the first failure cancel the rest and raise that failure."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class ContextReader:
    """Builds a thread's context from pinned facts, the summary and the journal window."""

    def __init__(
        self,
        journal: ThreadJournal,
        threads: ThreadService,
        pinned: PinnedFactsProvider,
        summaries: SummaryReader,
        history: SummaryHistory | None = None,
    ) -> None:
        """`history` answers point-in-time contexts (`get_context_at`); by default `summaries`
        when it keeps the versions itself."""
        self._journal = journal
        self._threads = threads
        self._pinned = pinned
        self._summaries = summaries
        self._history = (
            history if history is not None else summaries if isinstance(summaries, SummaryHistory) else None
        )

    async def get_context(self, principal: Principal, thread_id: str) -> Context:
        """The context of the caller's thread (NotFound when the caller's account has no such thread)."""
        thread = await self._threads.get(principal, thread_id)
        scope = MemoryScope(
            environment=thread.environment,
            account_id=thread.account_id,
            agent_id=thread.agent_id,
            user_id=thread.user_id,
        )
        window_size = thread.window_size
        facts, summary, window = await _gather(
            self._pinned.pinned(scope),
            self._summaries.read(thread.ref, thread.agent_id),
            journal_call(self._journal.last(thread.ref, window_size), "reading the context window"),
        )
        return assemble(
            thread.thread_id, thread.agent_id, thread.user_id, window_size, facts, summary, window
        )

    async def get_context_at(self, principal: Principal, thread_id: str, at_offset: int) -> Context:
        """The context as it stood when the thread's last message had offset `at_offset`, before the
        next message was appended (for audits): the window of the messages up to `at_offset` (the
        thread's window size today), the summary version in force then (`SummaryHistory.as_of`:
        covering nothing later and written before the next message's `created_at`), and today's
        pinned facts that were already written then (`metadata.pinned_left_out` counts the others).
        NotFound without such a thread; InvalidInput when the thread has no message `at_offset`."""
        if self._history is None:
            raise InvalidInput(
                "this node keeps no summary history: at_offset is not available", field="at_offset"
            )
        thread = await self._threads.get(principal, thread_id)
        scope = MemoryScope(
            environment=thread.environment,
            account_id=thread.account_id,
            agent_id=thread.agent_id,
            user_id=thread.user_id,
        )
        span = max(thread.window_size, 1)
        read = self._journal.after(thread.ref, max(-1, at_offset - span), span + 1)
        around = await journal_call(read, "reading the context window")
        if not any(m.offset == at_offset for m in around):
            raise InvalidInput(
                f"thread {thread_id!r} has no message at offset {at_offset}: at_offset must be the "
                "offset of one of its messages",
                field="at_offset",
            )
        window = [m for m in around if at_offset - thread.window_size < m.offset <= at_offset]
        following = next((m for m in around if m.offset == at_offset + 1), None)
        then = following.created_at if following is not None else None
        facts, summary = await _gather(
            self._pinned.pinned(scope),
            self._history.as_of(thread.ref, thread.agent_id, last_offset=at_offset, written_before=then),
        )
        kept = [f for f in facts if then is None or (f.updated_at is not None and f.updated_at < then)]
        context = assemble(
            thread.thread_id, thread.agent_id, thread.user_id, thread.window_size, kept, summary, window
        )
        info = context.metadata.model_copy(
            update={"at_offset": at_offset, "pinned_left_out": len(facts) - len(kept)}
        )
        return context.model_copy(update={"metadata": info})

    async def get_subagent_context(self, principal: Principal, parent_thread_id: str) -> Context:
        """The context a delegated sub-agent starts with: the parent thread's pinned facts only
        (NotFound when the caller's account has no such thread)."""
        thread = await self._threads.get(principal, parent_thread_id)
        scope = MemoryScope(
            environment=thread.environment,
            account_id=thread.account_id,
            agent_id=thread.agent_id,
            user_id=thread.user_id,
        )
        facts = await self._pinned.pinned(scope)
        return assemble(thread.thread_id, thread.agent_id, thread.user_id, 0, facts, None, [])


def drop_orphan_tool_results(window: Sequence[Message]) -> tuple[Sequence[Message], int]:
    """`window` without the tool results it starts with (their assistant call precedes the window,
    so they would reach the model without it), and how many were dropped. Pure."""
    start = 0
    while start < len(window) and window[start].role == "tool":
        start += 1
    return window[start:], start


def assemble(
    thread_id: str,
    agent_id: str,
    user_id: str | None,
    window_size: int,
    facts: Sequence[PinnedFact],
    summary: Summary | None,
    window: Sequence[Message],
) -> Context:
    """Order the parts (pinned, summary, window) and count their tokens. Pure."""
    window, dropped = drop_orphan_tool_results(window)
    messages: list[ContextMessage] = []
    tokens = 0
    if facts:
        text = render_pinned(facts)
        messages.append(ContextMessage(role="system", content=text))
        tokens += count_tokens(text)
    if summary is not None:
        text = SUMMARY_PREFIX + summary.content
        messages.append(ContextMessage(role="system", content=text))
        tokens += count_tokens(text)
    messages.extend(to_context_message(m) for m in window)
    tokens += sum(m.token_count for m in window)
    return Context(
        messages=messages,
        metadata=ContextInfo(
            thread_id=thread_id,
            agent_id=agent_id,
            user_id=user_id,
            window_size=window_size,
            window_messages=len(window),
            first_offset=window[0].offset if window else None,
            last_offset=window[-1].offset if window else None,
            window_created_at=[m.created_at for m in window],
            summary_version=summary.version if summary is not None else None,
            summary_last_message_offset=summary.last_message_offset if summary is not None else None,
            orphan_tool_results_dropped=dropped,
            pinned_count=len(facts),
            token_count=tokens,
        ),
    )
