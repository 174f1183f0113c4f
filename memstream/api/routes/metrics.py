"""`GET /metrics`: the node's Prometheus metrics (`core.metrics`, `memstream.metrics`), in the text
exposition format. It needs the admin token (`Authorization: Bearer`, as `/admin/v1`): the figures
name every account and processor of the node, so no API key (one account's) may read them."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from core.config import Settings
from core.metrics import REGISTRY
from memstream.api.routes.admin import admin_authorization


def metrics_router(token: str, settings: Settings) -> APIRouter:
    router = APIRouter(tags=["health"], dependencies=[Depends(admin_authorization(token, settings))])

    @router.get(
        "/metrics",
        response_class=Response,
        summary="Prometheus metrics (admin token)",
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
    )
    async def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return router
