"""`/admin/v1/accounts/{account_id}`: account export and import, run inside the node (it owns the
journal writer); mounted by `memstream.api.routes.admin.admin_router` when the node gives it the
account stores. The admin token is required as on every admin route.

- `GET  /admin/v1/accounts/{account_id}/export`: NDJSON: one `{"line": "..."}` per line of the
  export (`memstream.ops.account_export`; the CLI writes each `line` as it is, so the file is the
  node's bytes), `{"progress": ...}` lines between them, then one `{"result": {"counts": ...}}` or
  `{"error": ...}` line. An account with nothing stored exports a header and an end line.
- `POST /admin/v1/accounts/{account_id}/import`: the body is an export file
  (`application/x-ndjson`). It is read and checked whole first: a bad file (not UTF-8, wrong
  `format_version`, a malformed line, a truncated file) is refused with 422 `invalid_export`
  naming the line, and nothing is written. Then the import streams as the other long operations
  do (`memstream.api.routes.admin.Exclusive`: one import at a time per node), its result being
  the import report (`memstream.ops.account_import.report_json`: conflicts and screened entries
  listed, `ok` false when there is a conflict).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from core.errors import MemstreamError
from core.ids import require_id
from memstream.ops.account_export import AccountStores, export_account
from memstream.ops.account_import import AccountImport, report_json
from memstream.ops.export_format import InvalidExport, read_export, split_lines
from memstream.ops.progress import Progress, ProgressCallback

log = logging.getLogger("memstream.admin")


def _line(kind: str, body: Any) -> bytes:
    """One NDJSON item, ASCII only (an export line's text travels escaped, and the client's line
    reader splits at nothing but the item's `\\n`)."""
    return (json.dumps({kind: body}) + "\n").encode()


async def export_stream(stores: AccountStores, environment: str, account_id: str) -> AsyncIterator[bytes]:
    """The export route's body (module doc)."""
    pending: list[Progress] = []
    counts: dict[str, Any] = {}
    try:
        async for text in export_account(stores, environment, account_id, progress=pending.append):
            yield _line("line", text)
            while pending:
                yield _line("progress", pending.pop(0).as_json())
            if text.startswith('{"counts":'):
                counts = json.loads(text)["counts"]
        yield _line("result", {"account_id": account_id, "counts": counts})
    except MemstreamError as exc:
        yield _line("error", {"code": exc.code, "message": exc.message})
    except Exception as exc:
        log.error("account export failed", exc_info=exc)
        yield _line("error", {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"})


def _lines(body: bytes) -> list[str]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = body[: exc.start].count(b"\n") + 1
        raise InvalidExport(line, "the file is not UTF-8") from None
    return split_lines(text)


def add_account_routes(
    router: APIRouter,
    stores: AccountStores,
    environment: str,
    stream: Callable[[str, Callable[[ProgressCallback], Any]], StreamingResponse],
) -> None:
    """Add the routes of the module doc to the admin `router`; `stream(kind, operation)` runs an
    exclusive NDJSON operation (`Exclusive.stream`)."""

    @router.get("/accounts/{account_id}/export", summary="Export an account as JSON Lines (NDJSON stream)")
    async def export(account_id: str) -> StreamingResponse:
        require_id(account_id, "account_id")
        return StreamingResponse(
            export_stream(stores, environment, account_id), media_type="application/x-ndjson"
        )

    @router.post(
        "/accounts/{account_id}/import", summary="Import an account export into an account (NDJSON progress)"
    )
    async def import_(account_id: str, request: Request) -> StreamingResponse:
        require_id(account_id, "account_id")
        parsed = read_export(_lines(await request.body()))

        async def operation(progress: ProgressCallback) -> Any:
            run = AccountImport(stores, environment, account_id, progress=progress)
            return report_json(await run.run(parsed))

        return stream(f"import into account {account_id}", operation)
