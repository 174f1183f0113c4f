"""`DELETE /admin/v1/accounts/{account_id}/users/{user_id}`: erase a user of any account (`memstream
erase-user`), run inside the node like `DELETE /v1/users/{user_id}` (`core.user_erasure`); mounted
by `memstream.api.routes.admin.admin_router` when the node gives it the erasures. The admin token
is required as on every admin route.

A bad id (422) or a user the account never had (404) is refused before streaming, with the usual
JSON error. Then NDJSON as the other long operations: `{"progress": ...}` per thread deleted, then
one `{"result": ...}` (`erasure_json`: the report, as `DELETE /v1/users/{user_id}` answers it, with
the account) or `{"error": ...}` line (`erasure_incomplete`: what was done stays recorded; the same
command again, or the node's start, finishes it). One erasure of a user at a time per node
(another answers 409).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from core.ids import require_id
from core.stores.erasures import ErasureRecord
from core.user_erasure import UserErasure
from memstream.ops.progress import Progress, ProgressCallback


def erasure_json(record: ErasureRecord) -> dict[str, Any]:
    """An erasure as the admin API and the CLI report it."""
    return {
        "account_id": record.account_id,
        "user_id": record.user_id,
        "erasure_id": record.erasure_id,
        "requested_at": record.requested_at.isoformat(),
        "completed_at": None if record.completed_at is None else record.completed_at.isoformat(),
        "erased": dict(record.report),
    }


def add_erasure_routes(
    router: APIRouter,
    erasures: UserErasure,
    environment: str,
    stream: Callable[[str, Callable[[ProgressCallback], Any]], StreamingResponse],
) -> None:
    """Add the route of the module doc to the admin `router`; `stream(kind, operation)` runs an
    exclusive NDJSON operation (`memstream.api.routes.admin.Exclusive.stream`)."""

    @router.delete(
        "/accounts/{account_id}/users/{user_id}",
        summary="Erase a user of an account everywhere (NDJSON progress)",
    )
    async def erase_user(account_id: str, user_id: str) -> StreamingResponse:
        require_id(account_id, "account_id")
        record = await erasures.open(environment, account_id, user_id)

        async def operation(progress: ProgressCallback) -> Any:
            def deleted(done: int, thread_id: str) -> None:
                progress(Progress("threads", done, None, f"deleted thread {thread_id}"))

            return erasure_json(await erasures.finish(record, progress=deleted))

        return stream(f"erasure of user {user_id} of account {account_id}", operation)
