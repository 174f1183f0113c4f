"""The asyncpg connection pool every Postgres adapter shares.

`create_pool(dsn)` opens a pool whose connections decode `json`/`jsonb` columns to Python values
and encode Python values to JSON for them, so adapters pass and receive plain dicts. Callers own
the pool: `await pool.close()` when done. Creating the pool connects (`min_size` connections), so
an unreachable server fails here with the driver's error.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg


def _encode_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=_encode_json, decoder=json.loads, schema="pg_catalog")


async def create_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 10, command_timeout: float = 30.0
) -> asyncpg.Pool:
    """An open pool on `dsn` with JSON codecs installed on every connection."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        command_timeout=command_timeout,
        init=_init_connection,
    )
    assert pool is not None
    return pool
