"""`/v1/threads`: list (GET); `/v1/threads/{thread_id}`: create/replace (PUT), read (GET), merge
metadata (PATCH), delete everywhere (DELETE)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response, status

from core.auth import Principal
from core.errors import Forbidden
from core.journal.models import ID_PATTERN, Id
from core.threads import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT
from memstream.api.deps import ApiDeps
from memstream.api.errors import error_responses
from memstream.api.request_guard import GuardedRoute
from memstream.api.routes.params import ThreadIdPath
from memstream.api.schemas import (
    PatchThreadRequest,
    PutThreadRequest,
    ThreadDeletionResponse,
    ThreadResponse,
    ThreadsPage,
)
from memstream.api.security import principal_dependency


def threads_router(deps: ApiDeps) -> APIRouter:
    router = APIRouter(prefix="/v1/threads", tags=["threads"], route_class=GuardedRoute)
    # Local alias: route modules do not use `from __future__ import annotations`, because FastAPI
    # must resolve this closure-local annotation at runtime.
    Caller = Annotated[Principal, Depends(principal_dependency(deps))]

    IdQuery = Annotated[Id | None, Query(json_schema_extra={"pattern": ID_PATTERN})]

    @router.get(
        "",
        response_model=ThreadsPage,
        summary="List the account's threads",
        responses=error_responses(401, 422),
    )
    async def list_threads(
        caller: Caller,
        agent_id: IdQuery = None,
        user_id: IdQuery = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
        cursor: IdQuery = None,
    ) -> ThreadsPage:
        """The caller's account's threads in the order of their ids, only `agent_id`'s and
        `user_id`'s when given; pass `next_cursor` back as `cursor` for the next page."""
        page = await deps.threads.list_threads(
            caller, agent_id=agent_id, user_id=user_id, cursor=cursor, limit=limit
        )
        return ThreadsPage(threads=[ThreadResponse.of(t) for t in page.threads], next_cursor=page.next_cursor)

    @router.put(
        "/{thread_id}",
        response_model=ThreadResponse,
        status_code=status.HTTP_200_OK,
        summary="Create a thread or replace its metadata",
        responses={
            201: {"model": ThreadResponse, "description": "The thread was created."},
            **error_responses(401, 409, 422),
        },
    )
    async def put_thread(
        thread_id: ThreadIdPath, body: PutThreadRequest, caller: Caller, response: Response
    ) -> ThreadResponse:
        """Upsert: creates the thread (201) or replaces its metadata (200).

        `agent_id` and `user_id` of an existing thread never change: a PUT naming others is 409
        (omitting `user_id` means "no user"). Use PATCH to change part of the metadata.
        """
        thread, created = await deps.threads.put(
            caller, thread_id, agent_id=body.agent_id, user_id=body.user_id, metadata=body.metadata
        )
        if created:
            response.status_code = status.HTTP_201_CREATED
        return ThreadResponse.of(thread)

    @router.get(
        "/{thread_id}",
        response_model=ThreadResponse,
        summary="Read a thread",
        responses=error_responses(401, 404, 422),
    )
    async def get_thread(thread_id: ThreadIdPath, caller: Caller) -> ThreadResponse:
        """The thread with this id in the caller's account."""
        return ThreadResponse.of(await deps.threads.get(caller, thread_id))

    @router.patch(
        "/{thread_id}",
        response_model=ThreadResponse,
        summary="Merge into a thread's metadata",
        responses=error_responses(401, 404, 422),
    )
    async def patch_thread(
        thread_id: ThreadIdPath, body: PatchThreadRequest, caller: Caller
    ) -> ThreadResponse:
        """JSON Merge Patch of `metadata`: nested objects merge, `null` removes a key. The merged
        metadata must be valid (size, `config.max_working_memory_messages` 1..20) or nothing changes."""
        return ThreadResponse.of(await deps.threads.patch_metadata(caller, thread_id, body.metadata))

    deletions = deps.deletions
    if deletions is not None:

        @router.delete(
            "/{thread_id}",
            response_model=ThreadDeletionResponse,
            summary="Delete a thread everywhere",
            responses=error_responses(401, 403, 404, 422, 503),
        )
        async def delete_thread(thread_id: ThreadIdPath, caller: Caller) -> ThreadDeletionResponse:
            """Deletes the thread's messages (journal and indexes), its row, and asks every projection
            to drop them (`journal.deletions`: the transcript store's rows; a replay or rebuild never
            brings them back), then the thread's other state. Answers what was deleted where.
            Idempotent: again, it answers the same report (finishing first a deletion that was
            interrupted). A thread id used again later is a new thread. Keys issued for an MCP
            gateway may not delete (403). 404 when the caller's account has no such thread (and
            deleted none)."""
            if not caller.on_agent_surface:
                raise Forbidden(
                    f"API key {caller.key_id} was issued for an MCP gateway (surface mcp): deleting a thread "
                    "needs an agent key (`memstream keys create --account ACCOUNT`)"
                )
            return ThreadDeletionResponse.of(await deletions.delete(caller, thread_id))

    return router
