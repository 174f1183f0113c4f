"""The binding speed-up (one memmove per value instead of a Python loop per byte) is exact."""

from __future__ import annotations

import os
from pathlib import Path

from slatedb.uniffi import DbBuilder

from sinks.slatedb.binding import fast_write
from sinks.slatedb.journal import SlateJournal
from sinks.slatedb.objectstore import build_object_store


async def test_arbitrary_bytes_round_trip_through_the_patched_binding(
    tmp_path: Path, journal_url: str
) -> None:
    journal = await SlateJournal.open(journal_url)  # installs the speed-up
    await journal.close()
    from slatedb.uniffi._slatedb_uniffi import slatedb as generated

    assert generated._UniffiRustBufferBuilder.write is fast_write

    location = build_object_store(f"file://{tmp_path / 'raw'}")
    db = await DbBuilder(location.db_path, location.store).build()
    try:
        values = {b"empty": b"", b"all-bytes": bytes(range(256)) * 300, b"random": os.urandom(100_003)}
        for key, value in values.items():
            await (await db.put(key, value)).await_durable()
        for key, value in values.items():
            assert await db.get(key) == value
    finally:
        await db.shutdown()
