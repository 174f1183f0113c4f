"""`ThreadDeletion`: deleting a thread everywhere (`DELETE /v1/threads/{id}`), durable and resumable.

A deletion is a `core.stores.deletions.DeletionRecord` in the register, written first (the intent),
then driven through its steps in order, each idempotent, each recorded in the register (its report
under its name) once done, so that a deletion interrupted anywhere (a crash, a store away) is
finished by running it again (`finish`: the node calls `resume` at start; a repeated DELETE does it
too) and a finished one answers its report again:

1. `thread`: the Postgres `threads` row (its NOTIFY evicts the nodes' cached copies). First, so an
   append racing the deletion either recreates the row (and, if the journal step follows, loses
   its messages with it: an empty thread) or comes after the journal step (a new thread).
2. `journal`: `ThreadJournal.delete_thread` deletes the messages in the writer (serialized with appends)
   and gives the tombstone's `up_to_seq`; the register adds up the runs (two DELETEs racing).
3. `event`: the tombstone is published on `journal.deletions` (the ClickHouse projection deletes
   the thread's rows and never projects a deleted message again).
4. then each further `DeletionStep` given (summaries, Redis state, memory entries, ...), in order.

Tenancy: a caller reaches only its own account's threads (environment and account from the
`Principal`): a thread it does not have is NotFound, whether or not another account has one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from core.auth import Principal
from core.errors import DeletionIncomplete, NotFound
from core.journal.models import ThreadRef
from core.stores.deletions import DeletionRecord, DeletionRegister, Tombstone
from core.stores.journal import ThreadJournal
from core.threads import ThreadStore, check_thread_id, journal_call

log = logging.getLogger("memstream.deletions")

Publish = Callable[[int, Tombstone, datetime], Awaitable[None]]
"""Publishes a deletion's tombstone (`streams.deletions.DeletionEvents.publish`); returns once durable."""

FIRST_STEPS = ("thread", "journal", "event")


class DeletionStep(Protocol):
    """One more store a deletion reaches: `run` deletes the thread's data there (idempotent: again
    after a crash, it deletes what is left) and returns its report (JSON)."""

    name: str

    async def run(self, record: DeletionRecord) -> Mapping[str, Any]: ...


class ThreadDeletion:
    """See the module doc. `threads` should be the authority (or the cache that evicts on delete)."""

    def __init__(
        self,
        threads: ThreadStore,
        journal: ThreadJournal,
        register: DeletionRegister,
        publish: Publish,
        steps: Sequence[DeletionStep] = (),
    ) -> None:
        names = [step.name for step in steps]
        if len(set(names)) != len(names) or set(names) & set(FIRST_STEPS):
            raise ValueError(f"step names must be unique and not one of {FIRST_STEPS}: {names}")
        self._threads = threads
        self._journal = journal
        self._register = register
        self._publish = publish
        self._steps = tuple(steps)

    async def delete(self, principal: Principal, thread_id: str) -> DeletionRecord:
        """Delete the caller's thread everywhere and return the completed record (module doc).
        NotFound when the caller's account has no such thread and never deleted one."""
        check_thread_id(thread_id, "thread_id")
        environment, account_id = principal.environment, principal.account_id
        thread = await self._threads.get(environment, account_id, thread_id)
        if thread is None:
            latest = await self._register.latest(environment, account_id, thread_id)
            if latest is None:
                raise NotFound(f"thread {thread_id!r} does not exist")
            return await self.finish(latest)
        record = await self._register.open(
            environment, account_id, thread_id, thread.agent_id, thread.user_id
        )
        return await self.finish(record)

    async def open_of_user(
        self, environment: str, account_id: str, thread_id: str, user_id: str
    ) -> DeletionRecord | None:
        """The deletion of the account's thread when it belongs to `user_id` (its incomplete one,
        else a new one, written to the register: the intent; `finish` runs it); None when the
        account has no such thread of that user (a user erasure, `core.user_erasure`)."""
        thread = await self._threads.get(environment, account_id, thread_id)
        if thread is None or thread.user_id != user_id:
            return None
        return await self._register.open(environment, account_id, thread_id, thread.agent_id, thread.user_id)

    async def get(self, deletion_id: int) -> DeletionRecord | None:
        """A deletion of the register, complete or not."""
        return await self._register.get(deletion_id)

    async def finish(self, record: DeletionRecord) -> DeletionRecord:
        """Run every step `record` has not done yet, then complete it; a completed one as it is.
        A step that fails raises DeletionIncomplete (caused by the failure): what was done stays
        recorded, and the next `finish` goes on from there."""
        if record.completed_at is not None:
            return record
        try:
            return await self._finish(record)
        except Exception as exc:
            try:
                latest = await self._register.get(record.deletion_id) or record
            except Exception:  # the register is away too
                latest = record
            done = ", ".join(latest.report) or "none"
            raise DeletionIncomplete(
                f"the deletion of thread {record.thread_id!r} (deletion {record.deletion_id}) stopped "
                f"({type(exc).__name__}: {exc}); steps done: {done}. It is finished when the node starts, "
                "or by the same DELETE again"
            ) from exc

    async def _finish(self, record: DeletionRecord) -> DeletionRecord:
        deletion_id = record.deletion_id
        scope = (record.environment, record.account_id, record.thread_id)
        if "thread" not in record.report:
            removed = await self._threads.delete(*scope)
            record = await self._register.record_step(deletion_id, "thread", {"rows": int(removed)})
        tombstone = record.tombstone
        if tombstone is None:
            ref = ThreadRef(environment=scope[0], account_id=scope[1], thread_id=scope[2])
            deleted = await journal_call(self._journal.delete_thread(ref), "deleting a thread")
            record = await self._register.record_journal(deletion_id, deleted)
            tombstone = record.tombstone
            assert tombstone is not None
        if (
            record.report.get("event", {}).get("up_to_seq") != tombstone.up_to_seq
        ):  # (a racing run's may be lower)
            await self._publish(deletion_id, tombstone, record.requested_at)
            event = {"published": True, "up_to_seq": tombstone.up_to_seq}
            record = await self._register.record_step(deletion_id, "event", event)
        for step in self._steps:
            if step.name not in record.report:
                record = await self._register.record_step(
                    deletion_id, step.name, dict(await step.run(record))
                )
        return await self._register.complete(deletion_id)

    async def resume(self) -> list[DeletionRecord]:
        """Finish every incomplete deletion (the node at start); one that fails again is logged and
        left for the next run (or a repeated DELETE)."""
        finished: list[DeletionRecord] = []
        for record in await self._register.incomplete():
            try:
                finished.append(await self.finish(record))
            except Exception:
                log.exception(
                    "thread deletion %s of %s could not be finished", record.deletion_id, record.thread_id
                )
        return finished
