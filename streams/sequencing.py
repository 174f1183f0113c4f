"""The record headers that carry the journal relay's sequencing stamps (`core.sequencing.Stamp`:
what they mean, and why they stay true on any broker, is in `core.sequencing`).

Four headers, decimal ASCII: `shard` (the journal shard whose seqs the others count), `seq` (the
journal seq), `prev_seq` (the stamp's `prev`) and `partitions` (the partition count of the
mapping). `stamp_headers` writes them, `stamp_of` reads them back (None when `seq`, `prev_seq` or
`partitions` is missing, or any of the four is malformed). A record without `shard` is of shard 0:
relays wrote no shard before shards existed.
"""

from __future__ import annotations

from core.sequencing import Stamp
from core.sharding.shards import MAX_SHARDS
from streams.codecs.records import Headers, header

SHARD_HEADER = "shard"
SEQ_HEADER = "seq"
PREV_HEADER = "prev_seq"
PARTITIONS_HEADER = "partitions"


def stamp_headers(stamp: Stamp) -> list[tuple[str, str | bytes | None]]:
    """The headers that carry `stamp` (decimal ASCII)."""
    return [
        (SHARD_HEADER, str(stamp.shard).encode("ascii")),
        (SEQ_HEADER, str(stamp.seq).encode("ascii")),
        (PREV_HEADER, str(stamp.prev).encode("ascii")),
        (PARTITIONS_HEADER, str(stamp.partitions).encode("ascii")),
    ]


def _number(raw: bytes | None) -> int | None:
    if raw is None or not raw.isdigit() or len(raw) > 20:
        return None
    return int(raw)


def stamp_of(headers: Headers | None) -> Stamp | None:
    """The stamp in `headers`, or None when it is missing or malformed (module doc)."""
    values: list[int] = []
    for name in (SEQ_HEADER, PREV_HEADER, PARTITIONS_HEADER):
        value = _number(header(headers, name))
        if value is None:
            return None
        values.append(value)
    seq, prev, partitions = values
    if partitions < 1 or prev >= seq:
        return None
    raw_shard = header(headers, SHARD_HEADER)
    shard = 0 if raw_shard is None else _number(raw_shard)
    if shard is None or shard >= MAX_SHARDS:
        return None
    return Stamp(seq=seq, prev=prev, partitions=partitions, shard=shard)


def shard_of_record(headers: Headers | None) -> int | None:
    """The journal shard a record names in its `shard` header: 0 without one, None when malformed."""
    raw = header(headers, SHARD_HEADER)
    if raw is None:
        return 0
    shard = _number(raw)
    return shard if shard is not None and shard < MAX_SHARDS else None
