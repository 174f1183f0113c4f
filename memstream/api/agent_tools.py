"""`AgentTools`: the tools an agent is offered and running one of its calls, for every surface that
serves them (the REST routes of `memstream.api.routes.agents` and the MCP server of
`memstream.mcp_server`), so that both apply the same rules.

Two groups of tools: the memory tools (offered when the agent has `memory` bound and the server
serves agent memory) and the journal tools (`journal_message_search`, `journal_tool_call_view`:
offered whenever the server has a transcript store, whether or not Memory is bound, to callers on
an agent surface only; for a caller with an `mcp` key they do not exist: `UnknownTool`, exactly as
for a name that does not exist).

Every read and write acts within the caller's environment and account (`Principal`), for one agent
and at most one user: `thread_id`, when given, must be a thread of this agent (`Conflict`
otherwise, `NotFound` when the account has no such thread) and the call then acts for the
thread's user (`user_id`, when also given, must match it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.auth import Principal
from core.errors import Conflict
from core.memory.agents import AgentRef, AgentService
from core.memory.models import MEMORY_CAPABILITY, MemoryScope
from core.memory.tools import TOOL_NAMES, MemoryNotBound, ToolContext, ToolSpec, UnknownTool, tools_for
from core.stores.transcripts import TranscriptScope
from core.threads import ThreadService
from core.transcripts.caller import JournalContext
from core.transcripts.tools import JournalTools
from memstream.api.deps import MemoryDeps


def memory_scope(caller: Principal, agent_id: str, user_id: str | None) -> MemoryScope:
    """The memory scope of a request: the caller's environment and account, the agent, the user."""
    return MemoryScope(
        environment=caller.environment, account_id=caller.account_id, agent_id=agent_id, user_id=user_id
    )


def agent_ref(caller: Principal, agent_id: str) -> AgentRef:
    return AgentRef(environment=caller.environment, account_id=caller.account_id, agent_id=agent_id)


class AgentTools:
    """The agent tools over `memory` (None: no memory tools) and `journal` (None: no journal tools)."""

    def __init__(
        self,
        agents: AgentService,
        threads: ThreadService,
        memory: MemoryDeps | None,
        journal: JournalTools | None,
    ) -> None:
        self.agents = agents
        self.threads = threads
        self.memory = memory
        self.journal = journal
        self.memory_names: tuple[str, ...] = TOOL_NAMES if memory is not None else ()

    async def capabilities(self, caller: Principal, agent_id: str) -> list[str]:
        """The agent's bound capabilities, sorted (empty when nothing was ever bound)."""
        return sorted(await self.agents.capabilities(agent_ref(caller, agent_id)))

    def offered_for(self, caller: Principal, bound: Sequence[str]) -> list[ToolSpec]:
        """The memory tools when Memory is among `bound`, then the journal tools on an agent surface."""
        memory_tools = tools_for(bound) if self.memory is not None else []
        return memory_tools + (self.journal.offered(caller) if self.journal is not None else [])

    async def offered(self, caller: Principal, agent_id: str) -> list[ToolSpec]:
        """The definitions of the tools `caller` is offered for agent `agent_id`."""
        return self.offered_for(caller, await self.capabilities(caller, agent_id))

    def journal_names(self, caller: Principal) -> tuple[str, ...]:
        return self.journal.names_for(caller) if self.journal is not None else ()

    async def invoke(
        self,
        caller: Principal,
        agent_id: str,
        tool_name: str,
        arguments: str | Mapping[str, Any],
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> dict[str, Any]:
        """Run one tool call of agent `agent_id` for `caller` (module doc) and return its JSON result.
        `UnknownTool` for a name the caller is not offered on this server, `MemoryNotBound` for a
        memory tool without the binding, the tool's own errors (`InvalidInput` naming the argument,
        ...) otherwise."""
        journal_tools = self.journal_names(caller)
        if tool_name not in self.memory_names and tool_name not in journal_tools:
            known = ", ".join(self.memory_names + journal_tools) or "none"
            raise UnknownTool(f"no tool {tool_name!r}: the agent tools are {known}")
        if tool_name in self.memory_names:
            bound = await self.capabilities(caller, agent_id)
            if MEMORY_CAPABILITY not in bound:
                raise MemoryNotBound(
                    f"agent {agent_id!r} has no {MEMORY_CAPABILITY!r} capability binding: bind it with "
                    f"PUT /v1/agents/{agent_id} before calling {tool_name}"
                )
        if thread_id is not None:
            thread = await self.threads.get(caller, thread_id)
            if thread.agent_id != agent_id:
                raise Conflict(f"thread {thread_id!r} belongs to agent {thread.agent_id!r}, not {agent_id!r}")
            if user_id is not None and user_id != thread.user_id:
                owner = "has no user" if thread.user_id is None else f"belongs to user {thread.user_id!r}"
                raise Conflict(
                    f"thread {thread_id!r} {owner}, not {user_id!r}: send the thread's own user_id, or none"
                )
            user_id = thread.user_id
        if tool_name in journal_tools:
            assert self.journal is not None
            scope = TranscriptScope(
                environment=caller.environment,
                account_id=caller.account_id,
                agent_id=agent_id,
                user_id=user_id,
            )
            context = JournalContext(scope=scope, thread_id=thread_id)
            return await self.journal.invoke(tool_name, arguments, context)
        assert self.memory is not None
        tool_context = ToolContext(scope=memory_scope(caller, agent_id, user_id), thread_id=thread_id)
        return await self.memory.tools.invoke(tool_name, arguments, tool_context)
