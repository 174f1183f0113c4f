"""Authentication: every `/v1` route acts as the `Principal` of the request's API key."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.auth import Principal, verify
from memstream.api.deps import ApiDeps

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key (`msk_...`) as `Authorization: Bearer msk_...`. Create one with "
    "`memstream keys create --account ACCOUNT`. The key decides the account every call acts on.",
)


def principal_dependency(deps: ApiDeps) -> Callable[..., Awaitable[Principal]]:
    """A FastAPI dependency resolving the caller's principal (401 `unauthorized` otherwise)."""

    async def principal(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        key = credentials.credentials if credentials is not None else None
        return await verify(deps.api_keys, key, deps.settings.environment)

    return principal
