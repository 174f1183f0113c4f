"""API keys: issuing and verification.

A key looks like `msk_<43 url-safe random characters>` (256 bits of randomness). Only its SHA-256
and a short visible prefix (`msk_` + 8 characters, to recognise a key in listings) are stored;
the key itself is shown once, when issued. Every key belongs to exactly one account in one
environment, and a request authenticated with it acts as that `Principal`.

A key is issued for one surface (`Surface`): `agent` (the default: an agent platform calling
memstream directly) or `mcp` (an MCP gateway relaying for its clients). Tools offered on agent
surfaces only (the journal tools) do not exist for a caller with an `mcp` key. Data-access keys
(surface `data`, `core.sql.access`) are kept in the same store but work only on the SQL endpoint:
`verify` refuses them.

Keys are kept in an `ApiKeyStore` (`core.stores.api_keys`), passed to every function.
`verify` raises `Unauthorized` with a message that says what is wrong (missing, malformed,
unknown, revoked, or issued for another environment) and never echoes more than the prefix.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from typing import Literal, get_args

from core.errors import InvalidInput, NotFound, Unauthorized
from core.ids import is_api_key, require_api_key_id, require_environment, require_id
from core.inputs import check_text
from core.stores.api_keys import ApiKeyRecord, ApiKeyStore

KEY_PREFIX = "msk_"
VISIBLE_PREFIX_CHARS = len(KEY_PREFIX) + 8
MAX_LABEL_CHARS = 200

Surface = Literal["agent", "mcp"]
SURFACES: tuple[Surface, ...] = get_args(Surface)
AGENT_SURFACE: Surface = "agent"
MCP_SURFACE: Surface = "mcp"
DATA_SURFACE = "data"
"""The surface of data-access keys (`core.sql.access`): the SQL endpoint's, never the agent API's."""

__all__ = [
    "SURFACES",
    "ApiKeyRecord",
    "Principal",
    "Surface",
    "check_surface",
    "hash_key",
    "issue_key",
    "list_keys",
    "revoke_key",
    "verify",
]


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: one account in one environment, through one key issued for one
    surface (`agent` or `mcp`)."""

    account_id: str
    environment: str
    key_id: str
    surface: Surface = AGENT_SURFACE

    @property
    def on_agent_surface(self) -> bool:
        """True unless the key was issued to an MCP gateway."""
        return self.surface == AGENT_SURFACE


def check_surface(surface: str) -> Surface:
    """`surface` as a `Surface`; InvalidInput naming the known ones otherwise."""
    for known in SURFACES:
        if surface == known:
            return known
    raise InvalidInput(f"surface {surface!r} is unknown; use one of: {', '.join(SURFACES)}", field="surface")


def hash_key(key: str) -> bytes:
    """The stored form of a key: its SHA-256 digest."""
    return hashlib.sha256(key.encode("utf-8")).digest()


def visible_prefix(key: str) -> str:
    return key[:VISIBLE_PREFIX_CHARS]


def _check_scope(account_id: str, environment: str) -> None:
    require_id(account_id, "account_id")
    require_environment(environment)


async def issue_key(
    store: ApiKeyStore, account_id: str, environment: str, label: str = "", *, surface: str = AGENT_SURFACE
) -> str:
    """Create a key for `account_id` in `environment`, issued for `surface` (`agent` or `mcp`),
    and return it (the only time it is visible)."""
    _check_scope(account_id, environment)
    return await insert_new_key(store, environment, account_id, label, check_surface(surface))


async def insert_new_key(
    store: ApiKeyStore, environment: str, account_id: str, label: str, surface: str
) -> str:
    """Check `label`, make a new key, store its hash for (`environment`, `account_id` as checked by
    the caller) and `surface`, and return the key (the only time it is visible)."""
    if len(label) > MAX_LABEL_CHARS:
        raise InvalidInput(f"label is {len(label)} characters; the limit is {MAX_LABEL_CHARS}", field="label")
    check_text(label, "label")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    await store.insert(
        key_id=f"key_{uuid.uuid4().hex[:16]}",
        environment=environment,
        account_id=account_id,
        key_hash=hash_key(key),
        prefix=visible_prefix(key),
        label=label,
        surface=surface,
    )
    return key


async def verify(store: ApiKeyStore, key: str | None, environment: str) -> Principal:
    """The principal of a valid, unrevoked key of `environment`; Unauthorized otherwise."""
    if not key:
        raise Unauthorized("missing API key: send it as the header 'Authorization: Bearer msk_...'")
    if not is_api_key(key):
        raise Unauthorized("malformed API key: memstream keys look like 'msk_' followed by 43 characters")
    record = await store.find_by_hash(hash_key(key), environment=environment)
    if record is None:
        raise Unauthorized(
            f"unknown API key {visible_prefix(key)}...: no such key in environment {environment!r}"
        )
    if record.revoked:
        raise Unauthorized(f"API key {record.prefix}... ({record.key_id}) was revoked")
    if record.surface == DATA_SURFACE:
        raise Unauthorized(
            f"key {record.prefix}... ({record.key_id}) is a data-access key: it works only on the SQL "
            "endpoint; agents need an API key (`memstream keys create --account ACCOUNT`)"
        )
    return Principal(
        account_id=record.account_id,
        environment=record.environment,
        key_id=record.key_id,
        surface=check_surface(record.surface),
    )


async def list_keys(store: ApiKeyStore, account_id: str, environment: str) -> list[ApiKeyRecord]:
    """The keys of one account (prefixes and labels only; keys cannot be recovered)."""
    _check_scope(account_id, environment)
    return await store.list(environment=environment, account_id=account_id)


async def revoke_key(store: ApiKeyStore, account_id: str, environment: str, key_id: str) -> None:
    """Revoke one of the account's keys (idempotent); NotFound when the account has no such key."""
    _check_scope(account_id, environment)
    require_api_key_id(key_id)
    if not await store.revoke(environment=environment, account_id=account_id, key_id=key_id):
        raise NotFound(f"account {account_id!r} has no API key {key_id!r} in environment {environment!r}")
