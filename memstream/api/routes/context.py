"""`/v1/threads/{thread_id}/context`: the messages to send the model this turn."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from core.auth import Principal
from core.turn_context import Context
from memstream.api.deps import ApiDeps
from memstream.api.errors import error_responses
from memstream.api.routes.params import ThreadIdPath
from memstream.api.security import principal_dependency


def context_router(deps: ApiDeps) -> APIRouter:
    router = APIRouter(prefix="/v1/threads", tags=["context"])
    # Local alias: route modules do not use `from __future__ import annotations`, because FastAPI
    # must resolve this closure-local annotation at runtime.
    Caller = Annotated[Principal, Depends(principal_dependency(deps))]

    @router.get(
        "/{thread_id}/context",
        response_model=Context,
        summary="Get the context for the next turn",
        responses=error_responses(401, 404, 422, 503),
    )
    async def get_context(
        thread_id: ThreadIdPath,
        caller: Caller,
        as_subagent: Annotated[
            bool,
            Query(
                description="the context of a sub-agent this thread's agent delegates to: the "
                "thread's pinned facts only (no summary, no messages)"
            ),
        ] = False,
    ) -> Context:
        """An OpenAI-style `messages` list: the pinned-facts system message (when there are pinned
        facts), the summary system message (`Previous conversation summary: ...`, when a summary
        exists), then the last min(20, `metadata.config.max_working_memory_messages`) messages read
        straight from the journal. `metadata` tells the window size used, the summary version, the
        pinned count and the total token count. No cache, no fallback: 503 when the journal fails.

        With `as_subagent=true`: the context a delegated sub-agent starts with - the thread's pinned
        facts (its agent's and user's) and nothing else: an empty conversation and no summary."""
        if as_subagent:
            return await deps.context_reader.get_subagent_context(caller, thread_id)
        return await deps.context_reader.get_context(caller, thread_id)

    return router
