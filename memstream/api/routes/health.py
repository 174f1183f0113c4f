"""`/healthz` (liveness: the process answers) and `/readyz` (Postgres, the journal and the object
store answer; the processors run)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from memstream.api.deps import ApiDeps
from memstream.api.processor_health import processors_check
from memstream.api.schemas import CheckResult, Liveness, ProcessorHealth, Readiness


def health_router(deps: ApiDeps) -> APIRouter:
    router = APIRouter(tags=["health"])

    async def check(call: Awaitable[Any]) -> CheckResult:
        try:
            await asyncio.wait_for(call, timeout=deps.readiness_timeout_s)
        except TimeoutError:
            return CheckResult(ok=False, error=f"no answer within {deps.readiness_timeout_s} s")
        except Exception as exc:
            return CheckResult(ok=False, error=f"{type(exc).__name__}: {exc}")
        return CheckResult(ok=True)

    @router.get("/healthz", response_model=Liveness, summary="Liveness")
    async def healthz() -> Liveness:
        """Answers 200 while the process serves requests; checks nothing else."""
        return Liveness()

    @router.get(
        "/readyz",
        response_model=Readiness,
        summary="Readiness",
        responses={
            503: {
                "model": Readiness,
                "description": "Postgres, the journal or the object store does not answer.",
            }
        },
    )
    async def readyz() -> JSONResponse:
        """200 when Postgres answers `SELECT 1`, the journal is ready (every local shard's: `ready()`,
        not fenced, not closed) and the object
        store's root can be listed (`object_store`: a missing S3 bucket fails it, named in the
        error; a missing local directory is created again, so it recovers by itself, and every
        call checks again); 503 otherwise, with the failing check's error. With processors (the
        node), the `processors` check fails while one is crashed, failed, restarting or waiting
        out an outage (the error names them; `processors` details each): the status is then
        `degraded` but the code stays 200, because the API and the journal take appends (a load
        balancer must keep sending them) and the processors catch up from the topics once they
        run again."""
        calls: dict[str, Awaitable[Any]] = {
            "postgres": deps.pool.fetchval("SELECT 1"),
            "journal": deps.journal.ready(),
        }
        if deps.object_store is not None:
            calls["object_store"] = deps.object_store.check()
        results = await asyncio.gather(*(check(call) for call in calls.values()))
        checks = dict(zip(calls, results, strict=True))
        ready = all(result.ok for result in checks.values())
        processors: dict[str, ProcessorHealth] | None = None
        if deps.processors is not None:
            checks["processors"], processors = processors_check(deps.processors.statuses())
        status = "unavailable" if not ready else "ready" if all(r.ok for r in checks.values()) else "degraded"
        body = Readiness(status=status, checks=checks, processors=processors)
        return JSONResponse(
            body.model_dump(mode="json", exclude_none=True), status_code=200 if ready else 503
        )

    return router
