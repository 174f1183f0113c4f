"""`/v1/threads/{thread_id}/messages`: durable append (POST) and paged reads (GET)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, status

from core.auth import Principal
from core.inputs import MAX_INT64
from memstream.api.deps import ApiDeps
from memstream.api.errors import error_responses
from memstream.api.request_guard import GuardedRoute
from memstream.api.routes.params import ThreadIdPath
from memstream.api.schemas import AppendRequest, AppendResponse, MessagesPage
from memstream.api.security import principal_dependency


def messages_router(deps: ApiDeps) -> APIRouter:
    router = APIRouter(prefix="/v1/threads", tags=["messages"], route_class=GuardedRoute)
    # Local alias: route modules do not use `from __future__ import annotations`, because FastAPI
    # must resolve this closure-local annotation at runtime.
    Caller = Annotated[Principal, Depends(principal_dependency(deps))]

    @router.post(
        "/{thread_id}/messages",
        response_model=AppendResponse,
        status_code=status.HTTP_201_CREATED,
        summary="Append messages (durable)",
        responses=error_responses(401, 404, 409, 422, 503),
    )
    async def append_messages(thread_id: ThreadIdPath, body: AppendRequest, caller: Caller) -> AppendResponse:
        """Appends 1..1000 messages atomically and answers 201 only once they are durable in the
        journal. Retrying with the same `message_id`s returns the same stored messages (same offsets);
        a `message_id` reused with other content is 409.

        When the thread does not exist, `agent_id` (and optionally `user_id`) in the body create it;
        without `agent_id` the answer is 404. An `agent_id`/`user_id` that contradicts the thread is 409.
        """
        stored = await deps.threads.append(
            caller, thread_id, agent_id=body.agent_id, user_id=body.user_id, messages=body.messages
        )
        return AppendResponse(thread_id=thread_id, messages=stored)

    @router.get(
        "/{thread_id}/messages",
        response_model=MessagesPage,
        summary="Read messages in offset order",
        responses=error_responses(401, 404, 422, 503),
    )
    async def read_messages(
        thread_id: ThreadIdPath,
        caller: Caller,
        after: Annotated[
            int,
            Query(
                ge=-1, le=MAX_INT64, description="return messages with offset > after; -1 = from the start"
            ),
        ] = -1,
        limit: Annotated[int, Query(ge=1, le=1000, description="at most this many messages")] = 100,
    ) -> MessagesPage:
        """Messages of the thread with offset greater than `after`, oldest first, read from the journal."""
        found = await deps.threads.messages_after(caller, thread_id, after, limit)
        return MessagesPage(
            thread_id=thread_id, messages=found, next_after=found[-1].offset if found else after
        )

    return router
