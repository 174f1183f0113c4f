"""`memstream republish --from-seq N`: publish the journal's appends again, from the journal itself.

For a broker that lost its data (the memory-only embedded one). Runs in the node, on its relay:
every message with seq >= N (inclusive; N = 0 or 1 means the whole journal) is published to
`journal.messages` again, by rewinding the relay's durable cursor to N - 1. Consumers are idempotent
per (thread, offset), so the copies change no projection.

`check_from_seq` validates N against the journal (0 <= N <= last seq; specific `InvalidInput`,
nothing changed). When the relay has not yet published up to N - 1, nothing is rewound (those
messages are about to be published anyway) and the progress simply follows the relay. `republish`
reports progress as the relay's cursor advances to the journal's last seq at the start, and returns
when it got there (the relay keeps running and publishing newer appends as always).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from memstream.errors import InvalidInput
from memstream.journal.base import Journal
from memstream.ops.progress import Progress, ProgressCallback, no_progress
from memstream.relay import Relay


@dataclass(frozen=True)
class RepublishReport:
    from_seq: int  # first seq published again
    last_seq: int  # the journal's last seq when the republish started
    messages: int  # messages published again (from_seq..last_seq)
    rewound: bool  # False when the relay had not yet published that far
    seconds: float


def check_from_seq(from_seq: int, last_seq: int) -> None:
    """0 <= from_seq <= last_seq (the journal's); InvalidInput(field="from_seq") otherwise."""
    if from_seq < 0:
        raise InvalidInput(f"--from-seq must be >= 0 (got {from_seq})", field="from_seq")
    if from_seq > last_seq:
        raise InvalidInput(
            f"--from-seq {from_seq} is past the journal's last seq {last_seq}: nothing to republish"
            + (" (the journal is empty)" if last_seq == 0 else f"; use 0..{last_seq}"),
            field="from_seq",
        )


async def republish(
    journal: Journal,
    relay: Relay,
    from_seq: int,
    *,
    progress: ProgressCallback = no_progress,
    poll_s: float = 0.2,
) -> RepublishReport:
    """See the module doc. Returns once the relay's cursor reached the journal's last seq."""
    last = await journal.last_seq()
    check_from_seq(from_seq, last)
    started = time.monotonic()
    first = max(from_seq, 1)
    total = max(0, last - first + 1)
    rewound = False
    if await relay.cursor() >= first - 1:
        await relay.rewind(first - 1)
        rewound = True
    while True:
        cursor = await relay.cursor()
        done = min(total, max(0, cursor - (first - 1)))
        elapsed = time.monotonic() - started
        detail = f"relay cursor at seq {cursor} of {last}"
        if relay.stats.last_error and done < total:
            detail += f" (last relay error: {relay.stats.last_error})"
        progress(
            Progress(
                "republish", done, total, detail, {"messages_per_s": round(done / elapsed) if elapsed else 0}
            )
        )
        if cursor >= last:
            break
        await asyncio.sleep(poll_s)
    return RepublishReport(
        from_seq=first,
        last_seq=last,
        messages=total,
        rewound=rewound,
        seconds=round(time.monotonic() - started, 3),
    )
