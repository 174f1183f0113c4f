"""`/v1/threads/{thread_id}/context`: the messages to send the model this turn."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from core.auth import Principal
from core.errors import InvalidInput
from core.inputs import MAX_INT64
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
        at_offset: Annotated[
            int | None,
            Query(
                ge=0,
                le=MAX_INT64,
                description="audit: the context as it stood when the thread's last message had this "
                "offset, before the next one arrived (the summary version in force then, the window "
                "up to it, pinned facts already written then)",
            ),
        ] = None,
    ) -> Context:
        """An OpenAI-style `messages` list: the pinned-facts system message (when there are pinned
        facts), the summary system message (`Previous conversation summary: ...`, when a summary
        exists), then the last min(20, `metadata.config.max_working_memory_messages`) messages read
        straight from the journal. `metadata` tells the window size used, the summary version, the
        pinned count and the total token count. No cache, no fallback: 503 when the journal fails.

        With `as_subagent=true`: the context a delegated sub-agent starts with - the thread's pinned
        facts (its agent's and user's) and nothing else: an empty conversation and no summary.

        With `at_offset=N`: the context the model got when the thread had N + 1 messages, for an
        audit of an answer (`metadata.at_offset`, `metadata.pinned_left_out`); 422 when the thread
        has no message N or together with `as_subagent`."""
        if at_offset is not None:
            if as_subagent:
                raise InvalidInput("at_offset and as_subagent cannot be combined", field="at_offset")
            return await deps.context_reader.get_context_at(caller, thread_id, at_offset)
        if as_subagent:
            return await deps.context_reader.get_subagent_context(caller, thread_id)
        return await deps.context_reader.get_context(caller, thread_id)

    return router
