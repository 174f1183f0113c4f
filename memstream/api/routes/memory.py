"""`/v1/agents/{agent_id}/memory`: browse, read, edit, delete and export an agent's memory entries.

Every call is scoped by the caller's account and environment and by the agent; `user_id` says which
user the caller acts for: that user's private entries are visible along with the agent's shared
ones; without it, only shared entries are. Another user's private entries are never listed,
read, changed or exported.
"""

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response, status
from fastapi.responses import StreamingResponse

from core.auth import Principal
from core.memory.checks import MAX_LIST_LIMIT
from core.memory.models import Category, MemoryEntry, Visibility
from core.memory.reads import EntryPage
from memstream.api.agent_tools import memory_scope
from memstream.api.deps import ApiDeps, MemoryDeps
from memstream.api.errors import error_responses
from memstream.api.request_guard import GuardedRoute
from memstream.api.routes.agents import AgentIdPath, UserIdQuery
from memstream.api.schemas import EditResponse, MemoryPage, PatchMemoryRequest
from memstream.api.security import principal_dependency

EXPORT_PAGE = MAX_LIST_LIMIT
JSONL = "application/jsonl"


def memory_router(deps: ApiDeps, memory: MemoryDeps) -> APIRouter:
    router = APIRouter(prefix="/v1/agents", tags=["memory"], route_class=GuardedRoute)
    # Local alias: route modules do not use `from __future__ import annotations`, because FastAPI
    # must resolve this closure-local annotation at runtime.
    Caller = Annotated[Principal, Depends(principal_dependency(deps))]
    service = memory.service

    @router.get(
        "/{agent_id}/memory",
        response_model=MemoryPage,
        summary="List an agent's memory entries",
        responses=error_responses(401, 422),
    )
    async def list_entries(
        agent_id: AgentIdPath,
        caller: Caller,
        user_id: UserIdQuery = None,
        category: Category | None = None,
        key_prefix: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        visibility: Visibility | None = None,
        include_expired: bool = False,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 50,
        cursor: str | None = None,
    ) -> MemoryPage:
        """Visible entries, newest first, filtered by category, key prefix and visibility; pass
        `next_cursor` back as `cursor` for the next page."""
        page = await service.list(
            memory_scope(caller, agent_id, user_id),
            category=category,
            key_prefix=key_prefix,
            visibility=visibility,
            include_expired=include_expired,
            limit=limit,
            cursor=cursor,
        )
        return MemoryPage(entries=page.entries, next_cursor=page.next_cursor)

    @router.get(
        "/{agent_id}/memory/export",
        summary="Export an agent's memory entries (JSON Lines)",
        response_class=StreamingResponse,
        responses={
            200: {"content": {JSONL: {}}, "description": "one MemoryEntry JSON object per line"},
            **error_responses(401, 422),
        },
    )
    async def export_entries(
        agent_id: AgentIdPath,
        caller: Caller,
        user_id: UserIdQuery = None,
        include_expired: bool = False,
    ) -> StreamingResponse:
        """Every visible entry (the same visibility as the listing), newest first, one JSON object
        per line, streamed page by page."""
        scope = memory_scope(caller, agent_id, user_id)
        # The first page is read before answering, so that errors still get their status code.
        first = await service.list(scope, include_expired=include_expired, limit=EXPORT_PAGE)

        async def lines() -> AsyncIterator[bytes]:
            page: EntryPage = first
            while True:
                for entry in page.entries:
                    yield entry.model_dump_json().encode() + b"\n"
                if page.next_cursor is None:
                    return
                page = await service.list(
                    scope, include_expired=include_expired, limit=EXPORT_PAGE, cursor=page.next_cursor
                )

        filename = f"memory-{agent_id}{'-' + user_id if user_id else ''}.jsonl"
        return StreamingResponse(
            lines(), media_type=JSONL, headers={"Content-Disposition": f'attachment; filename="{filename}"'}
        )

    @router.get(
        "/{agent_id}/memory/{entry_id}",
        response_model=MemoryEntry,
        summary="Read one memory entry",
        responses=error_responses(401, 404, 422),
    )
    async def get_entry(
        agent_id: AgentIdPath, entry_id: str, caller: Caller, user_id: UserIdQuery = None
    ) -> MemoryEntry:
        """The entry when the caller may see it (404 otherwise, also for another user's private entry)."""
        return await service.get(memory_scope(caller, agent_id, user_id), entry_id)

    @router.patch(
        "/{agent_id}/memory/{entry_id}",
        response_model=EditResponse,
        summary="Edit a memory entry",
        responses=error_responses(401, 404, 409, 422),
    )
    async def patch_entry(
        agent_id: AgentIdPath,
        entry_id: str,
        body: PatchMemoryRequest,
        caller: Caller,
        user_id: UserIdQuery = None,
    ) -> EditResponse:
        """Change key, content, category or importance. The result goes through the same screening
        (422 `screening_rejected`; sensitive content makes a shared entry private to `user_id`) and
        capacity rules (422 `capacity_exceeded`) as a store; 409 when the new key is taken. `notes`
        explain every side effect."""
        result = await service.edit(
            memory_scope(caller, agent_id, user_id),
            entry_id,
            content=body.content,
            importance=body.importance,
            category=body.category,
            key=body.key,
        )
        return EditResponse(entry=result.entry, changed=result.changed, notes=list(result.notes))

    @router.delete(
        "/{agent_id}/memory/{entry_id}",
        status_code=status.HTTP_204_NO_CONTENT,
        response_class=Response,
        summary="Delete a memory entry",
        responses=error_responses(401, 404, 422),
    )
    async def delete_entry(
        agent_id: AgentIdPath, entry_id: str, caller: Caller, user_id: UserIdQuery = None
    ) -> Response:
        """Delete the entry (404 when the caller cannot see it). The deletion reaches the index
        through the entries topic like every change."""
        await service.forget_entry(memory_scope(caller, agent_id, user_id), entry_id)
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    return router
