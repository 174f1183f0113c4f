"""The binding speed-up (one memmove per value instead of a Python loop per byte) is exact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from slatedb.uniffi import DbBuilder

from sinks.slatedb.binding import fast_write, speed_up_byte_copy
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


@pytest.mark.parametrize(
    "value", [b"", b"k", bytes(range(256)), bytearray(b"ab" * 700), memoryview(b"xyz" * 9)]
)
def test_the_lowered_argument_is_the_generated_buffer(journal_url: str, value: bytes) -> None:
    speed_up_byte_copy()
    from slatedb.uniffi._slatedb_uniffi import slatedb as generated

    converter = generated._UniffiFfiConverterBytes
    assert converter.lower.__name__ == "_memstream_fast_lower"
    ours = converter.lower(value)
    with generated._UniffiRustBuffer.alloc_with_builder() as builder:  # the generated lowering
        converter.write(value, builder)
        theirs = builder.finalize()
    try:
        assert ours.len == theirs.len == len(value) + 4
        assert ours.capacity >= ours.len
        assert ours.data[0 : ours.len] == theirs.data[0 : theirs.len]
    finally:
        ours.free()
        theirs.free()


def test_every_call_starts_from_a_success_status(journal_url: str) -> None:
    speed_up_byte_copy()
    from slatedb.uniffi._slatedb_uniffi import slatedb as generated

    status = generated._UniffiRustCallStatus.default()
    assert status.code == generated._UniffiRustCallStatus.CALL_SUCCESS
    assert (status.error_buf.capacity, status.error_buf.len, bool(status.error_buf.data)) == (0, 0, False)
    assert status is not generated._UniffiRustCallStatus.default()  # a new one per call
