"""`/v1/agents/{agent_id}`: capability bindings, the tools offered to the agent, and calling them.

Two groups of tools: the memory tools (offered when the agent has `memory` bound and the server
serves agent memory) and the journal tools (`journal_message_search`, `journal_tool_call_view`:
offered whenever the server has a transcript store, whether or not Memory is bound, to callers on
an agent surface only; a caller with an `mcp` key never sees them and calling one is 404
`unknown_tool`, exactly as for a name that does not exist).
"""

from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from core.auth import Principal
from core.journal.models import ID_PATTERN, Id
from memstream.api.agent_tools import AgentTools, agent_ref
from memstream.api.deps import ApiDeps, MemoryDeps
from memstream.api.errors import error_responses
from memstream.api.request_guard import GuardedRoute
from memstream.api.schemas import (
    AgentResponse,
    AgentsResponse,
    InvokeToolRequest,
    InvokeToolResponse,
    PutAgentRequest,
    ToolsResponse,
)
from memstream.api.security import principal_dependency

AgentIdPath = Annotated[
    Id,
    Path(
        description="Your id of the agent (1-128 of A-Z a-z 0-9 . _ : @ -), per account.",
        examples=["support-bot"],
        json_schema_extra={"pattern": ID_PATTERN},
    ),
]
UserIdQuery = Annotated[
    Id | None,
    Query(
        description="the user the caller acts for: their private entries are visible; without it, "
        "only the agent's shared entries are",
        json_schema_extra={"pattern": ID_PATTERN},
    ),
]


def agents_router(deps: ApiDeps, memory: MemoryDeps | None) -> APIRouter:
    """The agent routes over `memory` (None: no memory tools) and `deps.transcripts` (None: no
    journal tools); the tools' rules are `AgentTools`'."""
    router = APIRouter(prefix="/v1/agents", tags=["agents"], route_class=GuardedRoute)
    # Local alias: route modules do not use `from __future__ import annotations`, because FastAPI
    # must resolve this closure-local annotation at runtime.
    Caller = Annotated[Principal, Depends(principal_dependency(deps))]
    agents = deps.agents
    tools = AgentTools(agents, deps.threads, memory, deps.transcripts)

    def agent_response(caller: Principal, agent_id: str, bound: Iterable[str]) -> AgentResponse:
        names = sorted(bound)
        return AgentResponse(
            agent_id=agent_id,
            capabilities=names,
            tools=[t.function.name for t in tools.offered_for(caller, names)],
        )

    @router.get(
        "",
        response_model=AgentsResponse,
        summary="List the account's agents",
        responses=error_responses(401),
    )
    async def list_agents(caller: Caller) -> AgentsResponse:
        """Every agent of the caller's account that has a thread or a binding, with its capabilities
        and the tools offered to it."""
        records = {r.agent_id: r for r in await agents.list(caller.environment, caller.account_id)}
        names = sorted(set(records) | set(await deps.threads.agent_ids(caller)))
        bound = {name: records[name].capabilities if name in records else frozenset() for name in names}
        return AgentsResponse(agents=[agent_response(caller, name, bound[name]) for name in names])

    @router.put(
        "/{agent_id}",
        response_model=AgentResponse,
        summary="Bind capabilities to an agent",
        responses=error_responses(401, 422),
    )
    async def put_agent(agent_id: AgentIdPath, body: PutAgentRequest, caller: Caller) -> AgentResponse:
        """Replace the agent's capability bindings. Binding `memory` offers exactly three tools:
        `memory_store`, `memory_recall`, `memory_forget`. Pinned facts reach the context whether or
        not `memory` is bound. `tools` also lists the journal tools, which need no binding."""
        record = await agents.bind(agent_ref(caller, agent_id), body.capabilities)
        return agent_response(caller, agent_id, record.capabilities)

    @router.get(
        "/{agent_id}",
        response_model=AgentResponse,
        summary="Read an agent's bindings",
        responses=error_responses(401, 422),
    )
    async def get_agent(agent_id: AgentIdPath, caller: Caller) -> AgentResponse:
        """The agent's capabilities (empty when nothing was ever bound) and the tools offered to it."""
        return agent_response(caller, agent_id, await tools.capabilities(caller, agent_id))

    @router.get(
        "/{agent_id}/tools",
        response_model=ToolsResponse,
        summary="The tool definitions to offer the model",
        responses=error_responses(401, 422),
    )
    async def get_tools(agent_id: AgentIdPath, caller: Caller, user_id: UserIdQuery = None) -> ToolsResponse:
        """OpenAI function-calling definitions of the agent's tools (pass them as `tools=`): the three
        memory tools when `memory` is bound, and the two journal tools (`journal_message_search`,
        `journal_tool_call_view`) for callers on an agent surface, bound or not. A caller whose key
        was issued to an MCP gateway (`surface` `mcp`) is never offered the journal tools."""
        return ToolsResponse(agent_id=agent_id, tools=await tools.offered(caller, agent_id))

    @router.post(
        "/{agent_id}/tools/{tool_name}",
        response_model=InvokeToolResponse,
        summary="Run one of the agent's tools",
        responses=error_responses(401, 404, 409, 422, 503),
    )
    async def invoke_tool(
        agent_id: AgentIdPath, tool_name: str, body: InvokeToolRequest, caller: Caller
    ) -> InvokeToolResponse:
        """Run a tool call of the model and return its result (give it back to the model as the tool
        message). Memory tools: 409 `capability_not_bound` when the agent has no `memory` binding.
        Journal tools need no binding (callers on an agent surface only). 404 `unknown_tool` for any
        other name (and for the journal tools when the key's surface is `mcp`); 422 naming the
        argument (`arguments.limit`) when the arguments are invalid, or when screening/capacity
        refuse a store (nothing is written). `journal_tool_call_view`: 404 `tool_call_not_found`
        for an id unknown to the agent (and user); 409 `ambiguous_tool_call` when the id occurs in
        several threads and none is given; 503 `transcripts_unavailable` when the transcript store
        cannot be read right now (retry).

        `thread_id`, when given, must be a thread of this agent; the call then acts for the thread's
        user (`user_id`, when also given, must match it: a thread without a user takes none). The
        journal tools search and read only the threads of this agent, and only the user's threads
        when the call acts for a user; a call without a user reads only the threads without one."""
        result = await tools.invoke(
            caller, agent_id, tool_name, body.arguments, user_id=body.user_id, thread_id=body.thread_id
        )
        return InvokeToolResponse(tool=tool_name, result=result)

    return router
