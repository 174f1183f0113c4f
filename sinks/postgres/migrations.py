"""A tiny ordered SQL migration runner.

Migrations are the files `migrations/NNNN_name.sql` beside this module, applied in version order,
each in its own transaction together with its row in `schema_migrations` (version, name, SHA-256
checksum, applied_at), so a migration is either fully applied and recorded or not at all.

Concurrency: the whole run holds a session-level advisory lock on one connection, so any number
of nodes may call `migrate` at the same time: one applies the pending migrations, the others wait
and then find nothing left to do. The lock is released when the run ends (or the connection dies;
when the unlock fails the connection is terminated: the pool does not unlock on release).

Safety: a recorded migration whose file has changed since it was applied (checksum mismatch)
stops the run with `MigrationError` before anything is applied. Versions recorded in the database
but unknown to this code (written by a newer release) are left alone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import asyncpg

_FILE_RE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

# One fixed 64-bit key for pg_advisory_lock (advisory locks are per database).
LOCK_KEY = int.from_bytes(hashlib.sha256(b"memstream.schema_migrations").digest()[:8], "big", signed=True)

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(RuntimeError):
    """The migrations on disk and in the database disagree, or a migration file is malformed."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(directory: Traversable | None = None) -> list[Migration]:
    """The migrations in `directory` (default: this package's `migrations/`), in version order."""
    folder = directory if directory is not None else resources.files("sinks.postgres") / "migrations"
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_RE.fullmatch(entry.name)
        if match is None:
            raise MigrationError(f"migration file {entry.name!r} must be named NNNN_lower_case_name.sql")
        version = int(match["version"])
        if version in found:
            raise MigrationError(f"two migration files share version {version:04d}")
        found[version] = Migration(version, match["name"], entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


async def migrate(pool: asyncpg.Pool, migrations: Sequence[Migration] | None = None) -> list[Migration]:
    """Apply every pending migration; returns those this call applied (empty when up to date)."""
    todo = list(migrations) if migrations is not None else load_migrations()
    applied_now: list[Migration] = []
    async with pool.acquire() as conn:
        try:
            await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)  # possibly taken if interrupted
            await conn.execute(_CREATE_TABLE)
            recorded = {
                row["version"]: row["checksum"]
                for row in await conn.fetch("SELECT version, checksum FROM schema_migrations")
            }
            for migration in todo:
                checksum = recorded.get(migration.version)
                if checksum is not None and checksum != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version:04d}_{migration.name} was changed after it was "
                        "applied: add a new migration instead of editing an applied one"
                    )
            for migration in todo:
                if migration.version in recorded:
                    continue
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        migration.version,
                        migration.name,
                        migration.checksum,
                    )
                applied_now.append(migration)
        finally:
            try:
                await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
            except BaseException:
                conn.terminate()  # the pool does not unlock on release (sinks.postgres.pool)
                raise
    return applied_now


async def applied_versions(pool: asyncpg.Pool) -> list[int]:
    """Versions recorded in `schema_migrations`, ascending (empty when the table does not exist)."""
    exists = await pool.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return []
    return [row["version"] for row in await pool.fetch("SELECT version FROM schema_migrations ORDER BY 1")]
