"""`/v1/agents/{agent_id}`: capability bindings, the tools they offer, and calling those tools."""

from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from memstream.api.deps import ApiDeps, MemoryDeps
from memstream.api.errors import error_responses
from memstream.api.schemas import (
    AgentResponse,
    InvokeToolRequest,
    InvokeToolResponse,
    PutAgentRequest,
    ToolsResponse,
)
from memstream.api.security import principal_dependency
from memstream.auth import Principal
from memstream.errors import Conflict
from memstream.journal.models import ID_PATTERN, Id
from memstream.memory.agents import AgentRef
from memstream.memory.models import MEMORY_CAPABILITY
from memstream.memory.tools import TOOL_NAMES, MemoryNotBound, ToolContext, UnknownTool, tools_for
from memstream.pinned import MemoryScope

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


def memory_scope(caller: Principal, agent_id: str, user_id: str | None) -> MemoryScope:
    """The memory scope of a request: the caller's environment and account, the agent, the user."""
    return MemoryScope(
        environment=caller.environment, account_id=caller.account_id, agent_id=agent_id, user_id=user_id
    )


def agents_router(deps: ApiDeps, memory: MemoryDeps) -> APIRouter:
    router = APIRouter(prefix="/v1/agents", tags=["agents"])
    # Local alias: route modules do not use `from __future__ import annotations`, because FastAPI
    # must resolve this closure-local annotation at runtime.
    Caller = Annotated[Principal, Depends(principal_dependency(deps))]

    def agent_ref(caller: Principal, agent_id: str) -> AgentRef:
        return AgentRef(environment=caller.environment, account_id=caller.account_id, agent_id=agent_id)

    async def capabilities(caller: Principal, agent_id: str) -> list[str]:
        return sorted(await memory.agents.capabilities(agent_ref(caller, agent_id)))

    def agent_response(agent_id: str, bound: Iterable[str]) -> AgentResponse:
        names = sorted(bound)
        return AgentResponse(
            agent_id=agent_id, capabilities=names, tools=[t.function.name for t in tools_for(names)]
        )

    @router.put(
        "/{agent_id}",
        response_model=AgentResponse,
        summary="Bind capabilities to an agent",
        responses=error_responses(401, 422),
    )
    async def put_agent(agent_id: AgentIdPath, body: PutAgentRequest, caller: Caller) -> AgentResponse:
        """Replace the agent's capability bindings. Binding `memory` offers exactly three tools:
        `memory_store`, `memory_recall`, `memory_forget`. Pinned facts reach the context whether or
        not `memory` is bound."""
        record = await memory.agents.bind(agent_ref(caller, agent_id), body.capabilities)
        return agent_response(agent_id, record.capabilities)

    @router.get(
        "/{agent_id}",
        response_model=AgentResponse,
        summary="Read an agent's bindings",
        responses=error_responses(401, 422),
    )
    async def get_agent(agent_id: AgentIdPath, caller: Caller) -> AgentResponse:
        """The agent's capabilities (empty when nothing was ever bound) and the tools they offer."""
        return agent_response(agent_id, await capabilities(caller, agent_id))

    @router.get(
        "/{agent_id}/tools",
        response_model=ToolsResponse,
        summary="The tool definitions to offer the model",
        responses=error_responses(401, 422),
    )
    async def get_tools(agent_id: AgentIdPath, caller: Caller, user_id: UserIdQuery = None) -> ToolsResponse:
        """OpenAI function-calling definitions of the agent's tools (pass them as `tools=`): the three
        memory tools when `memory` is bound, none otherwise."""
        return ToolsResponse(agent_id=agent_id, tools=tools_for(await capabilities(caller, agent_id)))

    @router.post(
        "/{agent_id}/tools/{tool_name}",
        response_model=InvokeToolResponse,
        summary="Run one of the agent's tools",
        responses=error_responses(401, 404, 409, 422),
    )
    async def invoke_tool(
        agent_id: AgentIdPath, tool_name: str, body: InvokeToolRequest, caller: Caller
    ) -> InvokeToolResponse:
        """Run a tool call of the model and return its result (give it back to the model as the tool
        message). 409 `capability_not_bound` when the agent has no `memory` binding; 404
        `unknown_tool` for another tool name; 422 naming the argument (`arguments.limit`) when the
        arguments are invalid, or when screening/capacity refuse a store (nothing is written).

        `thread_id`, when given, must be a thread of this agent; the call then acts for the thread's
        user (`user_id`, when also given, must match it)."""
        if tool_name not in TOOL_NAMES:
            raise UnknownTool(f"no tool {tool_name!r}: the agent tools are {', '.join(TOOL_NAMES)}")
        bound = await capabilities(caller, agent_id)
        if MEMORY_CAPABILITY not in bound:
            raise MemoryNotBound(
                f"agent {agent_id!r} has no {MEMORY_CAPABILITY!r} capability binding: bind it with "
                f"PUT /v1/agents/{agent_id} before calling {tool_name}"
            )
        user_id = body.user_id
        if body.thread_id is not None:
            thread = await deps.threads.get(caller, body.thread_id)
            if thread.agent_id != agent_id:
                raise Conflict(
                    f"thread {body.thread_id!r} belongs to agent {thread.agent_id!r}, not {agent_id!r}"
                )
            if user_id is not None and user_id != thread.user_id:
                raise Conflict(
                    f"thread {body.thread_id!r} belongs to user {thread.user_id!r}, not {user_id!r}"
                )
            user_id = thread.user_id
        context = ToolContext(scope=memory_scope(caller, agent_id, user_id), thread_id=body.thread_id)
        result = await memory.tools.invoke(tool_name, body.arguments, context)
        return InvokeToolResponse(tool=tool_name, result=result)

    return router
