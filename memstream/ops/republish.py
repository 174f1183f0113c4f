"""`memstream republish --from-seq N`: publish the journal's appends again, from the journal itself.

For a broker that lost its data (the memory-only embedded one). Runs in the node, on its relay:
every message with seq >= N (inclusive; N = 0 or 1 means the whole journal) is published to
`journal.messages` again, by rewinding the relay's durable cursor to N - 1. Consumers are idempotent
per (thread, offset), so the copies change no projection.

Shards (`core.sharding.shards`): seqs count within a journal shard, so a republish acts on the
shards' own relays (`republish_shards`, what the admin route runs): one shard (`shard`, or the only
one) from seq N, or, with several shards and N = 0 or 1, every local shard from its start, one
after the other (`ShardsRepublished`, a report per shard). `shards_to_republish` refuses a seq N > 1
without a shard when there are several (N would name a message of each of them).

`check_from_seq` validates N against the journal (0 <= N <= last seq; specific `InvalidInput`,
nothing changed). When the relay has not yet published up to N - 1, nothing is rewound (those
messages are about to be published anyway) and the progress simply follows the relay. `republish`
reports progress as the relay's cursor advances to the journal's last seq L at the start, and returns
when it got there (the relay keeps running and publishing newer appends as always). Its report
counts what the relay actually published meanwhile (`RelayStats.published`, appends made during
the republish included); a relay that reached L having published fewer than the L - N + 1 messages
of the range (its cursor was moved by something else) raises `RepublishIncomplete`.
When the relay's cursor does not move for `idle_timeout_s` (broker down, relay stopped) it raises
`RepublishStalled` naming the relay's last error; the rewind stays in place (the relay goes on
publishing from its cursor once it can).

Shards across nodes (`MEMSTREAM_MEMBERSHIP`): a shard may move to another node while it is being
republished (`moved()` turns true: the node closed it). `republish` then raises `RepublishMoved`
at once rather than waiting on a relay that stopped. The relay's cursor is stored in the shard's
journal, so a rewind made here moved with the shard: the new owner's relay publishes the rest of
the range from that cursor, once (SlateDB fences the old writer, so two writers never publish the
shard at once). A shard that moved before its rewind was written is not rewound at all (the error
says so: ask again, the new owner then republishes it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from core.errors import InvalidInput, JournalFenced, MemstreamError
from core.stores.journal import Journal
from memstream.ops.progress import Progress, ProgressCallback, no_progress
from streams.journal_shards import LocalShard, LocalShards
from streams.relays.journal import Relay


class RepublishStalled(MemstreamError):
    """The relay's cursor did not move for the idle timeout (module doc)."""

    code = "republish_stalled"


class RepublishIncomplete(MemstreamError):
    """The relay's cursor reached the end having published fewer messages than the range (module doc)."""

    code = "republish_incomplete"


class RepublishMoved(MemstreamError):
    """The shard moved to another node during its republish (module doc)."""

    code = "shard_moved"


def _never_moved() -> bool:
    return False


@dataclass(frozen=True)
class RepublishReport:
    from_seq: int  # first seq published again
    last_seq: int  # the journal's last seq when the republish started
    range_messages: int  # messages in from_seq..last_seq
    published: int  # messages the relay published until its cursor reached last_seq (new appends too)
    rewound: bool  # False when the relay had not yet published that far
    seconds: float
    shard: int = 0


@dataclass(frozen=True)
class ShardsRepublished:
    """A republish of several journal shards: one report per shard republished (module doc)."""

    shards: tuple[RepublishReport, ...]
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
    idle_timeout_s: float = 60.0,
    moved: Callable[[], bool] = _never_moved,
) -> RepublishReport:
    """See the module doc. Returns once the relay's cursor reached the journal's last seq; raises
    `RepublishMoved` when `moved()` turns true (the shard left this node)."""
    last = await journal.last_seq()
    check_from_seq(from_seq, last)
    started = time.monotonic()
    first = max(from_seq, 1)
    total = max(0, last - first + 1)
    rewound = False
    if await relay.cursor() >= first - 1:
        try:
            if moved():
                raise RepublishMoved(_moved_message(relay, first, last, None))
            await relay.rewind(first - 1)  # waits for a round in progress: it is not counted below
        except RepublishMoved:
            raise
        except Exception as exc:
            if moved() or isinstance(exc, JournalFenced):
                raise RepublishMoved(_moved_message(relay, first, last, None)) from exc
            raise
        rewound = True
    published_before = relay.stats.published
    seen, moved_at = await relay.cursor(), time.monotonic()
    while True:
        cursor = await relay.cursor()
        published = relay.stats.published - published_before
        now = time.monotonic()
        if cursor != seen:
            seen, moved_at = cursor, now
        done = min(total, max(0, cursor - (first - 1)))
        elapsed = now - started
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
        if moved():
            raise RepublishMoved(_moved_message(relay, first, last, cursor))
        if now - moved_at >= idle_timeout_s:
            raise RepublishStalled(
                f"the relay's cursor has not moved from seq {cursor} for {idle_timeout_s:g}s while "
                f"republishing seq {first}..{last} (last relay error: {relay.stats.last_error or 'none'}). "
                "The rewind stays: the relay publishes from there once it can. Check the broker "
                f"(`memstream status`), then follow it with `memstream republish --from-seq {cursor + 1}"
                f"{f' --shard {relay.shard}' if relay.sharded else ''}`; "
                "if the node's log says the relay stopped (journal fenced), restart the node"
            )
        await asyncio.sleep(poll_s)
    if published < total:
        raise RepublishIncomplete(
            f"the relay's cursor reached seq {last} but the relay published only {published} of the {total} "
            f"message(s) of seq {first}..{last}: its cursor was moved by something else (another relay "
            "on this journal?). Run `memstream republish` again"
        )
    return RepublishReport(
        from_seq=first,
        last_seq=last,
        range_messages=total,
        published=published,
        rewound=rewound,
        seconds=round(time.monotonic() - started, 3),
    )


def _moved_message(relay: Relay, first: int, last: int, cursor: int | None) -> str:
    """What `RepublishMoved` says (module doc): `cursor` None when nothing was rewound."""
    name = f"journal shard {relay.shard}" if relay.sharded else "the journal"
    head = f"{name} moved to another node while seq {first}..{last} was being republished"
    if cursor is None:
        return (
            f"{head}, before its relay was rewound: nothing was republished. Run `memstream republish` "
            f"again{f' with --shard {relay.shard}' if relay.sharded else ''} (any node): the new owner "
            "republishes it"
        )
    return (
        f"{head} (its relay's cursor was at seq {cursor} here). The rewind moved with the shard: its new "
        f"owner's relay publishes seq {cursor + 1}..{last} from that cursor, once; nothing more to do "
        "(its relay lag, `memstream_relay_lag_messages` in the new owner's /metrics, reaches 0 when done)"
    )


async def shards_to_republish(shards: LocalShards, from_seq: int, shard: int | None) -> list[LocalShard]:
    """The local shards a republish from `from_seq` acts on (module doc), `from_seq` checked against
    each (`check_from_seq`); InvalidInput (field `shard` or `from_seq`) when they do not fit."""
    by_shard = {local.shard: local for local in shards}
    if shard is not None:
        if shard not in by_shard:
            raise InvalidInput(
                f"--shard {shard} is not a journal shard of this node (it has {_names(by_shard)})",
                field="shard",
            )
        chosen = [by_shard[shard]]
    elif len(shards) == 1:
        chosen = list(shards)
    elif from_seq > 1:
        raise InvalidInput(
            f"the journal has {len(shards)} shards, each numbering its own seqs: add --shard K "
            f"({_names(by_shard)}) to republish one from seq {from_seq}, or use --from-seq 0 to "
            "republish every shard from its start",
            field="shard",
        )
    else:  # every shard from its start: an empty one has nothing to republish
        lasts = [await local.journal.last_seq() for local in shards]
        chosen = [local for local, last in zip(shards, lasts, strict=True) if last > 0]
        if not chosen:
            check_from_seq(from_seq, 0)  # "the journal is empty"
        return chosen
    check_from_seq(from_seq, await chosen[0].journal.last_seq())
    return chosen


def _names(by_shard: dict[int, LocalShard]) -> str:
    return "shard " + ", ".join(str(k) for k in sorted(by_shard))


async def republish_shards(
    chosen: Sequence[LocalShard],
    from_seq: int,
    *,
    progress: ProgressCallback = no_progress,
    idle_timeout_s: float = 60.0,
) -> RepublishReport | ShardsRepublished:
    """Republish each of `chosen` (`shards_to_republish`) from `from_seq`, one after the other; the
    report of the one shard, or of each (module doc)."""
    started = time.monotonic()
    reports: list[RepublishReport] = []
    for local in chosen:

        def shard_progress(step: Progress, shard: int = local.shard) -> None:
            progress(replace(step, detail=f"shard {shard}: {step.detail}") if len(chosen) > 1 else step)

        report = await republish(
            local.journal, local.relay, from_seq, progress=shard_progress, idle_timeout_s=idle_timeout_s
        )
        reports.append(replace(report, shard=local.shard))
    if len(reports) == 1:
        return reports[0]
    return ShardsRepublished(shards=tuple(reports), seconds=round(time.monotonic() - started, 3))
