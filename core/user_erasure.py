"""`UserErasure`: erasing one user of an account (`DELETE /v1/users/{user_id}`, `memstream
erase-user`), durable, resumable, with a report of what was erased where.

An erasure is a `core.stores.erasures.ErasureRecord` in the register, written first (the intent),
then driven through its steps in order, each idempotent, each recorded once done, so that an
erasure interrupted anywhere is finished by running it again (`finish`: the node calls `resume`
at start, after the thread deletions' own resume; the same erasure asked again does it too):

1. `threads`: every thread of the user in the account (the threads store's rows with that
   `user_id`), each deleted through `core.thread_deletion.ThreadDeletion` (its row, journal
   messages, `journal.deletions` tombstone and so every projection, summaries, Redis state, the
   memory entries extracted from it, its compaction rows), exactly as `DELETE /v1/threads/{id}`.
   Each deletion is added to the erasure before it runs (a stop midway finishes it next time).
   The threads are listed again until none is left, so a thread an append created meanwhile is
   deleted too; a thread that appends keep re-creating (`MAX_REPEATS` times) stops the erasure
   (`ErasureIncomplete`: stop those appends, then ask again). First, because the thread-memory
   processors write facts about the user into memory from the user's threads: once the threads
   are gone, nothing writes new ones.
2. `memory` (when agent memory is given): the user's private entries (every agent) and
   quarantine rows deleted, the entries they wrote for others kept without the author
   (`core.memory.erasure`), in one transaction with the outbox records the index follows.
3. then each further `ErasureStep` given (e.g. the node's in-process caches), in order.

An append racing the erasure either lands in a thread the erasure deletes (listed again until
none is left) or, once the erasure has listed no thread, starts a new thread: new data of the
user, kept, as anything the user writes after the erasure.

A repeated erasure of a user whose last erasure completed is a new erasure: it erases what the
user wrote since (nothing: a report of zeros). An erasure of a user the account never had
(no thread, no memory row, no earlier erasure) is NotFound. One process runs one erasure of a
user at a time (a second call waits for the first and answers its record).

Tenancy: the caller's environment and account scope every step: the same user id in another
account is another user, untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol

from core.auth import Principal
from core.errors import Conflict, ErasureIncomplete, NotFound
from core.ids import require_id
from core.memory.erasure import MemoryErasure
from core.stores.erasures import ErasureRecord, ErasureRegister
from core.thread_deletion import ThreadDeletion
from core.threads import ThreadStore

log = logging.getLogger("memstream.erasures")

FIRST_STEPS = ("threads", "memory")
PAGE = 100
"""Threads listed at a time."""
MAX_REPEATS = 3
"""Deletions of one thread id within one erasure before it gives up (appends keep re-creating it)."""

ThreadProgress = Callable[[int, str], None]
"""Called after each thread deleted: (threads deleted so far by this erasure, the thread id)."""

Scope = tuple[str, str, str]


class ErasureStep(Protocol):
    """One more place an erasure reaches: `run` erases the user there (idempotent) and returns its
    report (JSON)."""

    name: str

    async def run(self, record: ErasureRecord) -> Mapping[str, Any]: ...


def add_counts(totals: dict[str, dict[str, int]], report: Mapping[str, Any]) -> None:
    """Add a thread deletion's report (by step: `{"journal": {"messages": 3, "up_to_seq": 9}}`) to
    `totals`: every integer count, by step and name (`up_to_seq` is a position, not a count)."""
    for step, values in report.items():
        if not isinstance(values, Mapping):
            continue
        for name, value in values.items():
            if isinstance(value, int) and not isinstance(value, bool) and name != "up_to_seq":
                step_totals = totals.setdefault(step, {})
                step_totals[name] = step_totals.get(name, 0) + value


class _UserLocks:
    """One erasure of a user at a time in this process (the locks live while someone holds or waits)."""

    def __init__(self) -> None:
        self._locks: dict[Scope, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, scope: Scope) -> AsyncIterator[None]:
        lock, users = self._locks.get(scope, (asyncio.Lock(), 0))
        self._locks[scope] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[scope]
            if users == 1:
                del self._locks[scope]
            else:
                self._locks[scope] = (lock, users - 1)


class UserErasure:
    """See the module doc. `threads` should be the authority (lists go to it in any case)."""

    def __init__(
        self,
        threads: ThreadStore,
        deletions: ThreadDeletion,
        register: ErasureRegister,
        memory: MemoryErasure | None = None,
        steps: Sequence[ErasureStep] = (),
    ) -> None:
        names = [step.name for step in steps]
        if len(set(names)) != len(names) or set(names) & set(FIRST_STEPS):
            raise ValueError(f"step names must be unique and not one of {FIRST_STEPS}: {names}")
        self._threads = threads
        self._deletions = deletions
        self._register = register
        self._memory = memory
        self._steps = tuple(steps)
        self._locks = _UserLocks()

    async def erase(
        self, principal: Principal, user_id: str, *, progress: ThreadProgress | None = None
    ) -> ErasureRecord:
        """Erase the caller's account's user (module doc); the completed record."""
        return await self.erase_in(principal.environment, principal.account_id, user_id, progress=progress)

    async def erase_in(
        self, environment: str, account_id: str, user_id: str, *, progress: ThreadProgress | None = None
    ) -> ErasureRecord:
        """Erase the user of the account (module doc): `open`, then `finish`."""
        return await self.finish(await self.open(environment, account_id, user_id), progress=progress)

    async def open(self, environment: str, account_id: str, user_id: str) -> ErasureRecord:
        """The user's erasure to `finish`: its incomplete one, else a new one written to the register
        (the intent). InvalidInput on a bad user id, NotFound when the account never had the user."""
        require_id(user_id, "user_id")
        latest = await self._register.latest(environment, account_id, user_id)
        if latest is None and not await self._known(environment, account_id, user_id):
            raise NotFound(
                f"user {user_id!r} has nothing in account {account_id!r} (no thread, no memory entry) "
                "and was never erased there: check the id"
            )
        return await self._register.open(environment, account_id, user_id)

    async def finish(self, record: ErasureRecord, *, progress: ThreadProgress | None = None) -> ErasureRecord:
        """Run every step `record` has not done yet, then complete it; a completed one as it is.
        A step that fails raises ErasureIncomplete (caused by the failure): what was done stays
        recorded, and the next `finish` goes on from there."""
        if record.completed_at is not None:
            return record
        async with self._locks.hold((record.environment, record.account_id, record.user_id)):
            record = await self._register.get(record.erasure_id) or record  # another call may have run it
            if record.completed_at is not None:
                return record
            try:
                return await self._finish(record, progress)
            except Exception as exc:
                try:
                    latest = await self._register.get(record.erasure_id) or record
                except Exception:  # the register is away too
                    latest = record
                done = ", ".join(latest.report) or "none"
                raise ErasureIncomplete(
                    f"the erasure of user {record.user_id!r} (erasure {record.erasure_id}) stopped "
                    f"({type(exc).__name__}: {exc}); steps done: {done}, threads deleted so far: "
                    f"{len(latest.deletions)}. It is finished when the node starts, or by the same erasure "
                    "again"
                ) from exc

    async def resume(self) -> list[ErasureRecord]:
        """Finish every incomplete erasure (the node at start); one that fails again is logged and
        left for the next run (or a repeated erasure)."""
        finished: list[ErasureRecord] = []
        for record in await self._register.incomplete():
            try:
                finished.append(await self.finish(record))
            except Exception:
                log.exception(
                    "user erasure %s of %s could not be finished", record.erasure_id, record.user_id
                )
        return finished

    async def _known(self, environment: str, account_id: str, user_id: str) -> bool:
        if await self._threads.list_threads(environment, account_id, user_id=user_id, limit=1):
            return True
        if self._memory is None:
            return False
        return (await self._memory.user_rows(environment, account_id, user_id)).total > 0

    async def _finish(self, record: ErasureRecord, progress: ThreadProgress | None) -> ErasureRecord:
        erasure_id = record.erasure_id
        if "threads" not in record.report:
            record = await self._erase_threads(record, progress)
        if self._memory is not None and "memory" not in record.report:
            erased = await self._memory.erase_user(record.environment, record.account_id, record.user_id)
            record = await self._register.record_step(erasure_id, "memory", dataclasses.asdict(erased))
        for step in self._steps:
            if step.name not in record.report:
                record = await self._register.record_step(erasure_id, step.name, dict(await step.run(record)))
        return await self._register.complete(erasure_id)

    async def _erase_threads(self, record: ErasureRecord, progress: ThreadProgress | None) -> ErasureRecord:
        environment, account_id, user_id = record.environment, record.account_id, record.user_id
        for deletion_id in record.deletions:  # opened before a stop: finish them first
            deletion = await self._deletions.get(deletion_id)
            if deletion is not None and deletion.completed_at is None:
                await self._deletions.finish(deletion)
        repeats: Counter[str] = Counter()
        while page := await self._threads.list_threads(environment, account_id, user_id=user_id, limit=PAGE):
            progressed = False
            for thread in page:
                repeats[thread.thread_id] += 1
                if repeats[thread.thread_id] > MAX_REPEATS:
                    raise Conflict(
                        f"thread {thread.thread_id!r} of the user was there again after the erasure "
                        f"deleted it {MAX_REPEATS} times: stop the appends of this user, then erase again"
                    )
                opened = await self._deletions.open_of_user(
                    environment, account_id, thread.thread_id, user_id
                )
                if opened is None:  # deleted meanwhile (another DELETE)
                    continue
                record = await self._register.add_deletion(record.erasure_id, opened.deletion_id)
                await self._deletions.finish(opened)
                progressed = True
                if progress is not None:
                    progress(len(record.deletions), thread.thread_id)
            if not progressed:
                await asyncio.sleep(0.1)  # listed, then deleted by someone else: list again
        return await self._register.record_step(
            record.erasure_id, "threads", await self._threads_report(record)
        )

    async def _threads_report(self, record: ErasureRecord) -> dict[str, Any]:
        deletions: list[dict[str, Any]] = []
        totals: dict[str, dict[str, int]] = {}
        for deletion_id in record.deletions:
            deletion = await self._deletions.get(deletion_id)
            if deletion is None:
                continue
            deletions.append(
                {"thread_id": deletion.thread_id, "deletion_id": deletion_id, "up_to_seq": deletion.up_to_seq}
            )
            add_counts(totals, deletion.report)
        return {
            "threads": len({d["thread_id"] for d in deletions}),
            "deletions": deletions,
            "deleted": totals,
        }
