"""The record headers that carry the journal relay's sequencing stamps (`core.sequencing.Stamp`:
what they mean, and why they stay true on any broker, is in `core.sequencing`).

Three headers, decimal ASCII: `seq` (the journal seq), `prev_seq` (the stamp's `prev`) and
`partitions` (the partition count of the mapping). `stamp_headers` writes them, `stamp_of` reads
them back (None when one is missing or malformed).
"""

from __future__ import annotations

from core.sequencing import Stamp
from streams.codecs.records import Headers, header

SEQ_HEADER = "seq"
PREV_HEADER = "prev_seq"
PARTITIONS_HEADER = "partitions"


def stamp_headers(stamp: Stamp) -> list[tuple[str, str | bytes | None]]:
    """The headers that carry `stamp` (decimal ASCII)."""
    return [
        (SEQ_HEADER, str(stamp.seq).encode("ascii")),
        (PREV_HEADER, str(stamp.prev).encode("ascii")),
        (PARTITIONS_HEADER, str(stamp.partitions).encode("ascii")),
    ]


def stamp_of(headers: Headers | None) -> Stamp | None:
    """The stamp in `headers`, or None when any of the three is missing or malformed."""
    values: list[int] = []
    for name in (SEQ_HEADER, PREV_HEADER, PARTITIONS_HEADER):
        raw = header(headers, name)
        if raw is None or not raw.isdigit() or len(raw) > 20:
            return None
        values.append(int(raw))
    seq, prev, partitions = values
    if partitions < 1 or prev >= seq:
        return None
    return Stamp(seq=seq, prev=prev, partitions=partitions)
