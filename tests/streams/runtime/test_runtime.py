"""The runtime against a real broker and Postgres: effects, commits, dead letters, outages waited
out, poison records isolated, crashes, restarts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from dataclasses import replace

import pytest

from core.config import Settings
from streams.runtime import ProcessorCrashed, ProcessorRuntime, Record, RuntimeOptions, run_processors
from streams.runtime.errors import DeadLetterLimitExceeded
from streams.runtime.processor import Processor
from streams.topics import TopicRegistry
from tests.streams.runtime.support import (
    PgWriter,
    committed,
    consume_all,
    effect_ids,
    produce,
    wait_for_effects,
)


async def run_until(
    processors: Sequence[Processor],
    settings: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    done: Awaitable[object] | None = None,
) -> None:
    """Run `processors` until `done` resolves (then stop them); propagate a crash."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_processors(processors, settings, stop, options=options, registry=registry))
    try:
        if done is not None:
            waiter = asyncio.ensure_future(done)
            finished, _ = await asyncio.wait({task, waiter}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            assert finished, "timed out"
        stop.set()
        await asyncio.wait_for(task, 30)
    finally:
        stop.set()
        if not task.done():
            task.cancel()


async def test_every_record_is_processed_and_committed(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    pg_dsn = effects_dsn
    positions = produce(rt_settings, [{"id": i} for i in range(200)])
    writer = PgWriter("writer", pg_dsn)
    await run_until([writer], rt_settings, rt_options, registry, wait_for_effects(pg_dsn, "writer", 200))
    assert await effect_ids(pg_dsn, "writer") == list(range(200))
    # committed offsets = one past the last record of each partition: everything, nothing more
    last: dict[int, int] = {}
    for partition, offset in positions.values():
        last[partition] = max(last.get(partition, -1), offset)
    assert committed(rt_settings, "writer") == {p: o + 1 for p, o in last.items()}


def last_offsets(positions: dict[int, tuple[int, int]]) -> dict[int, int]:
    last: dict[int, int] = {}
    for partition, offset in positions.values():
        last[partition] = max(last.get(partition, -1), offset)
    return last


async def test_two_processors_on_one_topic_each_consume_everything(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    produce(rt_settings, [{"id": i} for i in range(100)])
    alpha, beta = PgWriter("alpha", effects_dsn), PgWriter("beta", effects_dsn)

    async def both() -> None:
        await wait_for_effects(effects_dsn, "alpha", 100)
        await wait_for_effects(effects_dsn, "beta", 100)

    await run_until([alpha, beta], rt_settings, rt_options, registry, both())
    assert await effect_ids(effects_dsn, "alpha") == list(range(100))
    assert await effect_ids(effects_dsn, "beta") == list(range(100))
    assert sorted(alpha.seen) == sorted(beta.seen) and len(alpha.seen) == 100


async def test_poison_records_go_to_the_dead_letter_topic_and_the_rest_is_processed(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    poison = {10, 37, 38}
    positions = produce(rt_settings, [{"id": i, "poison": i in poison} for i in range(60)])
    writer = PgWriter("writer", effects_dsn)
    await run_until([writer], rt_settings, rt_options, registry, wait_for_effects(effects_dsn, "writer", 57))
    assert await effect_ids(effects_dsn, "writer") == [i for i in range(60) if i not in poison]

    spec = registry.dlq_topic("writer")
    records = consume_all(rt_settings, spec.broker_name(rt_settings), len(poison))
    payloads = [json.loads(m.value()) for m in records]
    for message, payload in zip(records, payloads, strict=True):
        spec.validate(payload)
        assert message.key() == f"k{json.loads(payload['value_text'])['id'] % 5}".encode()
    by_id = {json.loads(p["value_text"])["id"]: p for p in payloads}
    assert set(by_id) == poison  # each poison record exactly once
    first = by_id[10]
    assert first["processor"] == "writer"
    assert first["original_topic"] == rt_settings.topic("journal.messages")
    assert (first["partition"], first["offset"]) == positions[10]
    assert first["reason"] == "poison record 10"
    assert first["error_type"] == "builtins.ValueError"
    assert first["headers"] == [{"key": "message_id", "value_base64": "bTEw"}]
    # the dead-lettered records are committed too: the group is done with the topic
    assert committed(rt_settings, "writer") == {p: o + 1 for p, o in last_offsets(positions).items()}


async def test_transient_errors_are_retried_and_nothing_is_lost(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    produce(rt_settings, [{"id": i} for i in range(100)])
    plan = [True, True, False, True]  # before each write: fail twice in a row, write, fail once more
    failures = 0

    async def flaky(batch: Sequence[Record]) -> None:
        nonlocal failures
        if plan and plan.pop(0):
            failures += 1
            raise ConnectionError("database away")

    writer = PgWriter("writer", effects_dsn, before_write=flaky)
    await run_until([writer], rt_settings, rt_options, registry, wait_for_effects(effects_dsn, "writer", 100))
    assert await effect_ids(effects_dsn, "writer") == list(range(100))
    assert failures == 3


async def test_a_record_failing_for_good_is_dead_lettered_and_everything_is_committed(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    """Regression (issue 9, finding 1): a record the processor can never handle, with an error that
    is not InvalidMessage (here a ValueError, like the thresholds processor's for a thread id ending
    in a newline), failed its batch `max_attempts` times and crashed the processor - and the node.
    Now it is isolated and dead-lettered with the error as its reason, the other records are
    processed, every offset is committed, and nothing crashes."""
    positions = produce(rt_settings, [{"id": i} for i in range(60)])

    async def cannot_handle_13(batch: Sequence[Record]) -> None:
        if any(json.loads(r.value or b"")["id"] == 13 for r in batch):
            raise ValueError("cannot build the summary path for record 13")

    writer = PgWriter("writer", effects_dsn, before_write=cannot_handle_13)
    spec = registry.dlq_topic("writer")

    async def dead_lettered_and_committed() -> None:
        await wait_for_effects(effects_dsn, "writer", 59)
        expected = {p: o + 1 for p, o in last_offsets(positions).items()}
        for _ in range(100):
            if await asyncio.to_thread(committed, rt_settings, "writer") == expected:
                return
            await asyncio.sleep(0.2)

    await run_until([writer], rt_settings, rt_options, registry, dead_lettered_and_committed())
    assert await effect_ids(effects_dsn, "writer") == [i for i in range(60) if i != 13]
    (dead,) = [json.loads(m.value()) for m in consume_all(rt_settings, spec.broker_name(rt_settings), 1)]
    spec.validate(dead)
    assert json.loads(dead["value_text"])["id"] == 13
    assert (dead["partition"], dead["offset"]) == positions[13]
    assert "ValueError: cannot build the summary path for record 13" in dead["reason"]
    assert dead["error_type"] == "builtins.ValueError"
    assert dead["attempts"] == rt_options.max_attempts
    assert committed(rt_settings, "writer") == {p: o + 1 for p, o in last_offsets(positions).items()}


async def test_an_outage_longer_than_every_attempt_is_waited_out_without_dead_letters(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    """Regression: the store unavailable for longer than `max_attempts` tries (0.05-0.1 s apart
    here) crashed the processor. Now the batch waits until the store is back: no dead letter, no
    crash, everything processed once."""
    produce(rt_settings, [{"id": i} for i in range(50)])
    outage_until: float | None = None  # 3 s from the first attempt (joining the group may be slow)
    refused = 0

    async def store_away(batch: Sequence[Record]) -> None:
        nonlocal refused, outage_until
        now = asyncio.get_running_loop().time()
        if outage_until is None:
            outage_until = now + 3.0
        if now < outage_until:
            refused += 1
            raise ConnectionRefusedError("database away")

    writer = PgWriter("writer", effects_dsn, before_write=store_away)
    await run_until([writer], rt_settings, rt_options, registry, wait_for_effects(effects_dsn, "writer", 50))
    assert refused > rt_options.max_attempts
    assert await effect_ids(effects_dsn, "writer") == list(range(50))
    spec = registry.dlq_topic("writer")
    assert consume_all(rt_settings, spec.broker_name(rt_settings), 0, timeout=1.0) == []


async def test_a_crash_before_commit_redelivers_and_a_restart_resumes_from_the_commit(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    first = produce(rt_settings, [{"id": i} for i in range(40)])
    await run_until(
        [PgWriter("writer", effects_dsn)],
        rt_settings,
        rt_options,
        registry,
        wait_for_effects(effects_dsn, "writer", 40),
    )
    committed_before = committed(rt_settings, "writer")
    assert committed_before == {p: o + 1 for p, o in last_offsets(first).items()}

    # new records; the processor fails before any effect, every time, and may not dead-letter
    # anything (limit 0): it must crash, not commit
    second = produce(rt_settings, [{"id": i} for i in range(40, 60)])

    async def broken(batch: Sequence[Record]) -> None:
        raise ValueError("a bug")

    crashing = PgWriter("writer", effects_dsn, before_write=broken)
    with pytest.raises(ProcessorCrashed) as raised:
        await run_until(
            [crashing], rt_settings, replace(rt_options, dlq_limit=0), registry, asyncio.sleep(30)
        )
    assert isinstance(raised.value.__cause__, DeadLetterLimitExceeded)
    assert crashing.calls >= rt_options.max_attempts
    assert set(crashing.seen) <= set(second.values())  # it only ever saw the new records
    assert await effect_ids(effects_dsn, "writer") == list(range(40))
    assert committed(rt_settings, "writer") == committed_before

    # restart: exactly the uncommitted records come again, none of the committed ones
    healthy = PgWriter("writer", effects_dsn)
    await run_until([healthy], rt_settings, rt_options, registry, wait_for_effects(effects_dsn, "writer", 60))
    assert await effect_ids(effects_dsn, "writer") == list(range(60))
    assert sorted(healthy.seen) == sorted(second.values())
    assert committed(rt_settings, "writer") == {p: o + 1 for p, o in last_offsets(first | second).items()}


async def test_after_a_crash_records_no_processor_saw_are_never_committed(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    """Regression: once the batch loop ended, faust's stream acked what it still drained through
    its Cython iterator, which bypasses `Consumer.ack`; the next commit went past records that were
    never processed (lost on restart). Here the crashed runtime stays up for several commit
    intervals while records keep arriving: not one offset may be committed."""
    first = produce(rt_settings, [{"id": i} for i in range(20)])

    async def broken(batch: Sequence[Record]) -> None:
        raise ValueError("a bug")

    runtime = ProcessorRuntime(
        PgWriter("writer", effects_dsn, before_write=broken),
        rt_settings,
        replace(rt_options, dlq_limit=0),  # crashes at the first record it would dead-letter
        registry=registry,
    )
    await runtime.start()
    try:
        await asyncio.wait_for(runtime.crashed.wait(), 30)
        second = produce(rt_settings, [{"id": i} for i in range(20, 60)])
        await asyncio.sleep(6 * rt_options.commit_interval_s)  # background commits run meanwhile
    finally:
        await runtime.stop()
    assert isinstance(runtime.error, ProcessorCrashed)
    assert await effect_ids(effects_dsn, "writer") == []
    assert committed(rt_settings, "writer") == {}

    # nothing was skipped: a healthy restart processes every record
    healthy = PgWriter("writer", effects_dsn)
    await run_until([healthy], rt_settings, rt_options, registry, wait_for_effects(effects_dsn, "writer", 60))
    assert await effect_ids(effects_dsn, "writer") == list(range(60))
    assert set(healthy.seen) == set(first.values()) | set(second.values())


async def test_a_stop_cancels_a_stuck_batch_without_committing_it(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    positions = produce(rt_settings, [{"id": i} for i in range(30)])
    entered = asyncio.Event()

    async def stuck(batch: Sequence[Record]) -> None:
        entered.set()
        await asyncio.Event().wait()  # never returns: the stop must cancel it

    options = replace(rt_options, drain_timeout_s=0.3)
    await run_until(
        [PgWriter("writer", effects_dsn, before_write=stuck)], rt_settings, options, registry, entered.wait()
    )
    assert await effect_ids(effects_dsn, "writer") == []
    assert committed(rt_settings, "writer") == {}

    healthy = PgWriter("writer", effects_dsn)
    await run_until([healthy], rt_settings, rt_options, registry, wait_for_effects(effects_dsn, "writer", 30))
    assert sorted(healthy.seen) == sorted(positions.values())
    assert await effect_ids(effects_dsn, "writer") == list(range(30))


async def test_a_stop_lets_the_batch_in_progress_finish_and_commits_it(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    produce(rt_settings, [{"id": i} for i in range(30)])
    entered, release = asyncio.Event(), asyncio.Event()
    first_batch: list[tuple[int, int]] = []

    async def slow(batch: Sequence[Record]) -> None:
        if not entered.is_set():
            first_batch.extend((r.partition, r.offset) for r in batch)
            entered.set()
            await release.wait()

    async def stop_then_release() -> None:
        await entered.wait()
        asyncio.get_running_loop().call_later(0.3, release.set)

    writer = PgWriter("writer", effects_dsn, before_write=slow)
    await run_until([writer], rt_settings, rt_options, registry, stop_then_release())
    # the stop came while the first batch was blocked; it was finished, written and committed
    assert len(await effect_ids(effects_dsn, "writer")) >= len(first_batch) > 0
    offsets = committed(rt_settings, "writer")
    assert all(offset < offsets.get(partition, 0) for partition, offset in first_batch)


async def test_the_dead_letter_limit_stops_the_processor(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    poison = set(range(0, 40, 4))
    positions = produce(rt_settings, [{"id": i, "poison": i in poison} for i in range(40)])
    options = replace(rt_options, dlq_limit=2, dlq_window_s=60)
    with pytest.raises(ProcessorCrashed) as raised:
        await run_until([PgWriter("writer", effects_dsn)], rt_settings, options, registry, asyncio.sleep(30))
    assert isinstance(raised.value.__cause__, DeadLetterLimitExceeded)

    spec = registry.dlq_topic("writer")
    dead = [json.loads(m.value()) for m in consume_all(rt_settings, spec.broker_name(rt_settings), 2)]
    assert len(dead) == 2
    dead_ids = {json.loads(p["value_text"])["id"] for p in dead}
    assert dead_ids < poison
    done = set(await effect_ids(effects_dsn, "writer")) | dead_ids
    offsets = committed(rt_settings, "writer")
    for i, (partition, offset) in positions.items():
        if i not in done:  # neither written nor dead-lettered, so not committed either
            assert offset >= offsets.get(partition, 0), f"record {i} at {partition}@{offset} committed"


async def test_a_second_instance_joining_the_group_shares_the_work_and_nothing_is_lost(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    first = produce(rt_settings, [{"id": i} for i in range(300)])

    async def slow(batch: Sequence[Record]) -> None:
        await asyncio.sleep(0.05)  # still busy when the second instance joins

    one, two = PgWriter("writer", effects_dsn, before_write=slow), PgWriter("writer", effects_dsn)
    stop, started_one, started_two = asyncio.Event(), asyncio.Event(), asyncio.Event()

    def run(writer: PgWriter, started: asyncio.Event) -> asyncio.Task[None]:
        return asyncio.create_task(
            run_processors(
                [writer], rt_settings, stop, options=rt_options, registry=registry, started=started
            )
        )

    tasks = [run(one, started_one)]
    try:
        await asyncio.wait_for(started_one.wait(), 30)
        tasks.append(run(two, started_two))
        await asyncio.wait_for(started_two.wait(), 30)
        second = produce(rt_settings, [{"id": i} for i in range(300, 600)])
        assert len(await wait_for_effects(effects_dsn, "writer", 600)) == 600
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert len(set(one.seen)) < 600, "the first instance gave partitions away"
    assert two.seen, "the second instance got partitions"
    assert set(one.seen) | set(two.seen) == set(first.values()) | set(second.values())
    assert committed(rt_settings, "writer") == {p: o + 1 for p, o in last_offsets(first | second).items()}


async def test_a_processor_failing_to_start_stops_the_others(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    class Unstartable(PgWriter):
        async def start(self) -> None:
            raise OSError("cannot reach the sink")

    healthy = PgWriter("alpha", effects_dsn)
    stop = asyncio.Event()
    with pytest.raises(OSError, match="cannot reach the sink"):
        await asyncio.wait_for(
            run_processors(
                [healthy, Unstartable("beta", effects_dsn)],
                rt_settings,
                stop,
                options=rt_options,
                registry=registry,
            ),
            30,
        )
    assert healthy._pool is not None and healthy._pool.is_closing()  # stopped, not leaked
