"""`MemstreamClient`: the synchronous client of the memstream HTTP API.

Typed methods over `memstream.client.calls` (request building, idempotence), with the retry rules
of `memstream.client.retry` and the typed errors of `memstream.client.errors`.
`AsyncMemstreamClient` (`memstream.client.aio`) has the same methods, awaitable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from core.memory.models import Category, MemoryEntry, Visibility
from core.memory.tools import FORGET, RECALL, STORE, ToolSpec
from core.turn_context import Context
from memstream.client import calls
from memstream.client.calls import JOURNAL_SEARCH, JOURNAL_VIEW, Call, MessageInput, tool_arguments
from memstream.client.errors import MemstreamApiError, error_from_response, network_error
from memstream.client.models import (
    Agent,
    AppendResult,
    EditResult,
    MemoryPage,
    MessagesPage,
    Thread,
    ThreadDeletion,
    ToolResult,
    UserErasure,
)
from memstream.client.retry import RetryPolicy, RetryState
from memstream.client.session import http_options

T = TypeVar("T")


class MemstreamClient:
    """A client of one memstream node (or load balancer) with one API key.

    `base_url` is the node's (`http://127.0.0.1:8080`); `retry` the retry rules (`NO_RETRY` to
    never retry); `timeout` per attempt, in seconds. `transport` and `sleep` replace the network
    and the waits (tests). Use as a context manager, or call `close()`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._http = httpx.Client(**http_options(base_url, api_key, timeout), transport=transport)
        self._retry = retry or RetryPolicy()
        self._sleep = sleep

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemstreamClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        """Send `call`, retrying by the rules; its parsed answer, or the last typed error."""
        state = RetryState(self._retry, call.idempotent)
        while True:
            error: MemstreamApiError
            try:
                response = self._http.request(call.method, call.path, params=call.params, json=call.body)
            except httpx.TransportError as exc:
                error = network_error(exc)
            else:
                if response.is_success:
                    return call.parse(response)
                error = error_from_response(response)
            delay = state.next_delay(error)
            if delay is None:
                raise error
            self._sleep(delay)

    # ---- threads and messages -------------------------------------------------------------------

    def append(
        self,
        thread_id: str,
        messages: Sequence[MessageInput],
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
    ) -> AppendResult:
        """Append 1..1000 messages durably (a message without `message_id` gets a generated one, so
        retries are safe). `agent_id` (and `user_id`) create the thread when it does not exist."""
        return self._run(calls.append(thread_id, messages, agent_id=agent_id, user_id=user_id))

    def read_messages(self, thread_id: str, *, after: int = -1, limit: int = 100) -> MessagesPage:
        """Messages with offset > `after`, oldest first (at most `limit`)."""
        return self._run(calls.read_messages(thread_id, after=after, limit=limit))

    def get_context(
        self, thread_id: str, *, as_subagent: bool = False, at_offset: int | None = None
    ) -> Context:
        """The messages to send the model this turn (`chat_messages(context)` gives the plain dicts);
        with `at_offset`, the context as it stood when the thread's last message had that offset."""
        return self._run(calls.get_context(thread_id, as_subagent=as_subagent, at_offset=at_offset))

    def put_thread(
        self,
        thread_id: str,
        *,
        agent_id: str,
        user_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Create the thread (`created` True) or replace its metadata; agent and user never change."""
        return self._run(calls.put_thread(thread_id, agent_id=agent_id, user_id=user_id, metadata=metadata))

    def delete_thread(self, thread_id: str) -> ThreadDeletion:
        """Delete the thread everywhere (its messages, row, projections, state): what was deleted
        where. Idempotent: again, the same report."""
        return self._run(calls.delete_thread(thread_id))

    def erase_user(self, user_id: str) -> UserErasure:
        """Erase the user from the account everywhere: every thread of the user (deleted as
        `delete_thread` does), their private memory entries; the shared entries they wrote lose the
        author. What was erased where. Again, a new erasure of what came since (zeros when nothing)."""
        return self._run(calls.erase_user(user_id))

    def get_thread(self, thread_id: str) -> Thread:
        return self._run(calls.get_thread(thread_id))

    def update_thread(self, thread_id: str, metadata: Mapping[str, Any]) -> Thread:
        """Merge into the metadata (JSON Merge Patch: objects merge, None removes a key)."""
        return self._run(calls.patch_thread(thread_id, metadata))

    # ---- agents and tools -----------------------------------------------------------------------

    def bind_agent(self, agent_id: str, capabilities: Sequence[str]) -> Agent:
        """Replace the agent's capability bindings (`["memory"]` offers the memory tools)."""
        return self._run(calls.bind_agent(agent_id, capabilities))

    def get_agent(self, agent_id: str) -> Agent:
        return self._run(calls.get_agent(agent_id))

    def list_tools(self, agent_id: str, *, user_id: str | None = None) -> list[ToolSpec]:
        """The tool definitions to offer the model (`tool_definitions(tools)` gives plain dicts)."""
        return self._run(calls.list_tools(agent_id, user_id=user_id))

    def call_tool(
        self,
        agent_id: str,
        tool: str,
        arguments: Mapping[str, Any] | str,
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> ToolResult:
        """Run a tool call of the model (`arguments` as a dict or as the model's JSON text)."""
        return self._run(calls.call_tool(agent_id, tool, arguments, user_id=user_id, thread_id=thread_id))

    def memory_store(
        self,
        agent_id: str,
        *,
        key: str,
        content: str,
        category: Category,
        scope: Visibility | None = None,
        importance: float | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> ToolResult:
        args = tool_arguments(key=key, content=content, category=category, scope=scope, importance=importance)
        return self.call_tool(agent_id, STORE, args, user_id=user_id, thread_id=thread_id)

    def memory_recall(
        self,
        agent_id: str,
        query: str,
        *,
        limit: int | None = None,
        category: Category | None = None,
        key_prefix: str | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> ToolResult:
        args = tool_arguments(query=query, limit=limit, category=category, key_prefix=key_prefix)
        return self.call_tool(agent_id, RECALL, args, user_id=user_id, thread_id=thread_id)

    def memory_forget(
        self,
        agent_id: str,
        key: str,
        *,
        scope: Visibility | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> ToolResult:
        """Forget the entry under `key` (without `scope`: the private one when there is one, else
        the shared one; such a call is retried only when it surely did not run)."""
        args = tool_arguments(key=key, scope=scope)
        return self.call_tool(agent_id, FORGET, args, user_id=user_id, thread_id=thread_id)

    def journal_message_search(
        self,
        agent_id: str,
        query: str,
        *,
        scope: str | None = None,
        limit: int | None = None,
        summarize: bool | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> ToolResult:
        args = tool_arguments(query=query, scope=scope, limit=limit, summarize=summarize)
        return self.call_tool(agent_id, JOURNAL_SEARCH, args, user_id=user_id, thread_id=thread_id)

    def journal_tool_call_view(
        self,
        agent_id: str,
        tool_call_id: str,
        *,
        part: str | None = None,
        offset: int | None = None,
        length: int | None = None,
        in_thread: str | None = None,
        occurrence: int | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> ToolResult:
        """`in_thread` is the tool's own `thread_id` argument (needed only when the id occurs in
        several threads); `thread_id` is the thread the call comes from."""
        args = tool_arguments(
            tool_call_id=tool_call_id,
            part=part,
            offset=offset,
            length=length,
            thread_id=in_thread,
            occurrence=occurrence,
        )
        return self.call_tool(agent_id, JOURNAL_VIEW, args, user_id=user_id, thread_id=thread_id)

    # ---- memory entries -------------------------------------------------------------------------

    def list_memory(
        self,
        agent_id: str,
        *,
        user_id: str | None = None,
        category: Category | None = None,
        key_prefix: str | None = None,
        visibility: Visibility | None = None,
        include_expired: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> MemoryPage:
        """Visible entries, newest first; pass `next_cursor` as `cursor` for the next page."""
        call = calls.list_memory(
            agent_id,
            user_id=user_id,
            category=category,
            key_prefix=key_prefix,
            visibility=visibility,
            include_expired=include_expired,
            limit=limit,
            cursor=cursor,
        )
        return self._run(call)

    def get_memory(self, agent_id: str, entry_id: str, *, user_id: str | None = None) -> MemoryEntry:
        return self._run(calls.get_memory(agent_id, entry_id, user_id=user_id))

    def edit_memory(
        self,
        agent_id: str,
        entry_id: str,
        *,
        user_id: str | None = None,
        key: str | None = None,
        content: str | None = None,
        category: Category | None = None,
        importance: float | None = None,
    ) -> EditResult:
        """Change the given fields (the same screening and capacity rules as a store)."""
        call = calls.edit_memory(
            agent_id,
            entry_id,
            user_id=user_id,
            key=key,
            content=content,
            category=category,
            importance=importance,
        )
        return self._run(call)

    def delete_memory(self, agent_id: str, entry_id: str, *, user_id: str | None = None) -> None:
        """Delete the entry (`NotFoundError` when the caller cannot see it)."""
        self._run(calls.delete_memory(agent_id, entry_id, user_id=user_id))

    def export_memory(
        self, agent_id: str, *, user_id: str | None = None, include_expired: bool = False
    ) -> list[MemoryEntry]:
        """Every visible entry, newest first (the JSON Lines export, parsed)."""
        return self._run(calls.export_memory(agent_id, user_id=user_id, include_expired=include_expired))
