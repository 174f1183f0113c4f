"""User erasures: the durable register behind `DELETE /v1/users/{user_id}` (`core.user_erasure`).

An erasure removes what one account holds of one of its users (every thread of the user through
a thread deletion, their private memory entries, their quarantined entries, their name on the
shared entries they wrote). Its `ErasureRecord` is written before anything is removed (the
intent); then the thread deletions it opens are added to it one by one, each BEFORE it runs (so a
crash midway finds them: a deletion is resumable on its own, `core.thread_deletion`), each
further step's report is stored under its name once done, and `completed_at` is stamped at the
end. The register keeps the user id of every erasure: it is the proof that (and when) the user
was erased, and what `memstream verify` checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class ErasureRecord:
    """One erasure in the register. `deletions` are the ids of the thread deletions it opened (in
    the thread-deletion register), in order; `report` holds each completed step's report by name."""

    erasure_id: int
    environment: str
    account_id: str
    user_id: str
    requested_at: datetime
    deletions: tuple[int, ...] = ()
    report: Mapping[str, Any] = field(default_factory=dict)
    completed_at: datetime | None = None


class ErasureRegister(Protocol):
    """The durable register of user erasures (module doc). Every call returns once durable;
    `core.errors.StoreUnavailable` (or the driver's connection errors) when it cannot be reached."""

    async def open(self, environment: str, account_id: str, user_id: str) -> ErasureRecord:
        """The user's incomplete erasure if there is one, else a new one (the intent)."""
        ...

    async def latest(self, environment: str, account_id: str, user_id: str) -> ErasureRecord | None:
        """The user's most recent erasure, complete or not."""
        ...

    async def get(self, erasure_id: int) -> ErasureRecord | None: ...

    async def add_deletion(self, erasure_id: int, deletion_id: int) -> ErasureRecord:
        """Add a thread deletion to the erasure (kept once: adding it again changes nothing)."""
        ...

    async def record_step(self, erasure_id: int, step: str, report: Mapping[str, Any]) -> ErasureRecord:
        """Store the report of `step` (done)."""
        ...

    async def complete(self, erasure_id: int) -> ErasureRecord:
        """Stamp `completed_at` (kept when already set)."""
        ...

    async def incomplete(self) -> list[ErasureRecord]:
        """Every erasure not completed, oldest first."""
        ...

    async def completed(self, environment: str) -> list[ErasureRecord]:
        """Every completed erasure of `environment`, oldest first (what `memstream verify` checks)."""
        ...
