"""Data-access keys: the credentials of the read-only SQL endpoint.

A data-access key has the shape of an API key (`msk_...`, `core.auth`) and is kept in the same
`ApiKeyStore`, issued for the surface `data`. It is scoped to one account of one environment, or
to every account of its environment (stored with the account id `ALL_ACCOUNTS`, which no account
id can be). The agent API refuses data-access keys (`core.auth.verify`), and `verify_data_key`
refuses every other key, so neither kind opens the other's door.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.auth import DATA_SURFACE, hash_key, insert_new_key, visible_prefix
from core.errors import NotFound, Unauthorized
from core.ids import is_api_key, require_api_key_id, require_environment, require_id
from core.stores.api_keys import ApiKeyRecord, ApiKeyStore

ALL_ACCOUNTS = "*"
"""The stored account of a key that reads every account of its environment."""


@dataclass(frozen=True)
class DataPrincipal:
    """Who a SQL query acts as: one environment, and one account of it (`account_id`) or all of
    them (`account_id` None)."""

    environment: str
    key_id: str
    account_id: str | None

    @property
    def scope(self) -> str:
        return f"account {self.account_id!r}" if self.account_id is not None else "every account"


def _scope(account_id: str | None) -> str:
    return ALL_ACCOUNTS if account_id is None else require_id(account_id, "account_id")


async def issue_data_key(
    store: ApiKeyStore, environment: str, account_id: str | None, label: str = ""
) -> str:
    """Create a data-access key for `account_id` (None: every account) in `environment` and return
    it (the only time it is visible)."""
    require_environment(environment)
    return await insert_new_key(store, environment, _scope(account_id), label, DATA_SURFACE)


async def verify_data_key(store: ApiKeyStore, key: str | None, environment: str) -> DataPrincipal:
    """The principal of a valid, unrevoked data-access key of `environment`; Unauthorized with a
    message saying what is wrong and what to do otherwise."""
    if not key:
        raise Unauthorized(
            "missing data-access key: send it as the password (HTTP Basic auth, or the header "
            "X-ClickHouse-Key); create one with `memstream keys create --data-access --account ACCOUNT`"
        )
    if not is_api_key(key):
        raise Unauthorized(
            "malformed data-access key: memstream keys look like 'msk_' followed by 43 characters"
        )
    record = await store.find_by_hash(hash_key(key), environment=environment)
    if record is None:
        raise Unauthorized(
            f"unknown data-access key {visible_prefix(key)}...: no such key in environment {environment!r}"
        )
    if record.revoked:
        raise Unauthorized(f"data-access key {record.prefix}... ({record.key_id}) was revoked")
    if record.surface != DATA_SURFACE:
        raise Unauthorized(
            f"key {record.prefix}... ({record.key_id}) is an API key for agents: the SQL endpoint takes "
            "data-access keys only (`memstream keys create --data-access --account ACCOUNT`)"
        )
    return DataPrincipal(
        environment=record.environment,
        key_id=record.key_id,
        account_id=None if record.account_id == ALL_ACCOUNTS else record.account_id,
    )


async def list_keys(store: ApiKeyStore, environment: str, account_id: str | None) -> list[ApiKeyRecord]:
    """The keys of one account (agent, mcp and data-access), or the data-access keys of every
    account (`account_id` None)."""
    require_environment(environment)
    return await store.list(environment=environment, account_id=_scope(account_id))


async def revoke_key(store: ApiKeyStore, environment: str, account_id: str | None, key_id: str) -> None:
    """Revoke a key of one account, or an every-account data-access key (`account_id` None);
    NotFound when there is no such key."""
    require_environment(environment)
    scope = _scope(account_id)
    require_api_key_id(key_id)
    if not await store.revoke(environment=environment, account_id=scope, key_id=key_id):
        owner = "no every-account key" if account_id is None else f"account {account_id!r} has no key"
        raise NotFound(f"{owner} {key_id!r} in environment {environment!r}")
