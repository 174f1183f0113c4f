"""Authentication: every `/v1` route acts as the `Principal` of the request's API key."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi.security import HTTPBearer
from starlette.requests import HTTPConnection

from core.auth import Principal, verify
from memstream.api.deps import ApiDeps


class ApiKeyBearer(HTTPBearer):
    """The OpenAPI security scheme `ApiKey` (`Authorization: Bearer msk_...`) that is also the
    dependency resolving the caller's principal: one dependency per request where a principal
    depending on `HTTPBearer` made FastAPI solve two."""

    def __init__(self, deps: ApiDeps) -> None:
        super().__init__(
            auto_error=False,
            scheme_name="ApiKey",
            description="An API key (`msk_...`) as `Authorization: Bearer msk_...`. Create one with "
            "`memstream keys create --account ACCOUNT`. The key decides the account every call acts on.",
        )
        self._deps = deps

    async def __call__(self, request: HTTPConnection) -> Principal:  # type: ignore[override]
        credentials = await super().__call__(request)
        key = credentials.credentials if credentials is not None else None
        return await verify(self._deps.api_keys, key, self._deps.settings.environment)


def principal_dependency(deps: ApiDeps) -> Callable[..., Awaitable[Principal]]:
    """A FastAPI dependency resolving the caller's principal (401 `unauthorized` otherwise)."""
    return ApiKeyBearer(deps)
