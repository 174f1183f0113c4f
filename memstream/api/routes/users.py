"""`/v1/users/{user_id}`: erase a user of the caller's account everywhere (DELETE)."""

from typing import Annotated

from fastapi import APIRouter, Depends

from core.auth import Principal
from core.errors import Forbidden
from memstream.api.deps import ApiDeps
from memstream.api.errors import ErrorResponse, error_responses
from memstream.api.request_guard import GuardedRoute
from memstream.api.routes.params import UserIdPath
from memstream.api.schemas import UserErasureResponse
from memstream.api.security import principal_dependency

_RESPONSES = {
    **error_responses(401, 403, 422, 503),
    404: {
        "model": ErrorResponse,
        "description": "The caller's account has nothing of this user (no thread, no memory entry) and "
        "never erased them.",
    },
}


def users_router(deps: ApiDeps) -> APIRouter:
    router = APIRouter(prefix="/v1/users", tags=["users"], route_class=GuardedRoute)
    # Local alias: route modules do not use `from __future__ import annotations`, because FastAPI
    # must resolve this closure-local annotation at runtime.
    Caller = Annotated[Principal, Depends(principal_dependency(deps))]

    erasures = deps.erasures
    if erasures is not None:

        @router.delete(
            "/{user_id}",
            response_model=UserErasureResponse,
            summary="Erase a user everywhere",
            responses=_RESPONSES,
        )
        async def erase_user(user_id: UserIdPath, caller: Caller) -> UserErasureResponse:
            """Erases what the caller's account holds of the user: every thread of the user (each
            deleted as `DELETE /v1/threads/{thread_id}` deletes one: messages, row, projections,
            summaries, state), their private memory entries and quarantined entries; the shared
            entries they wrote keep their content and lose the author. Answers what was erased
            where. Resumable: a 503 `erasure_incomplete` says what was done; the same call again (or
            the node's restart) finishes it. Again once complete, it is a new erasure of what the user
            wrote since (a report of zeros when nothing). Keys issued for an MCP gateway may not
            erase (403). 404 when the account never had the user."""
            if not caller.on_agent_surface:
                raise Forbidden(
                    f"API key {caller.key_id} was issued for an MCP gateway (surface mcp): erasing a user "
                    "needs an agent key (`memstream keys create --account ACCOUNT`) or `memstream erase-user`"
                )
            return UserErasureResponse.of(await erasures.erase(caller, user_id))

    return router
