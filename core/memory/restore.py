"""Restoring memory entries as an export holds them (`EntryRestorer`): the import side of
`memstream export` / `memstream import`.

An entry is restored with its `entry_id`, timestamps, recall counters and provenance (what a
normal write would renumber or reset), at version 1 of the target, with its `memory.entries`
outbox upsert in the same transaction (so the Qdrant projection indexes it), under the agent's
write lock. Outcomes (`RestoreOutcome`):
- `restored`: inserted;
- `unchanged`: the entry is already there as the file holds it (a second import adds nothing);
- `screened`: today's screening (`core.memory.rescreen.judge`) rejects it, or finds it sensitive in
  a shared entry: it is NOT imported, and the outcome carries the rule and a sentence;
- `conflict`: the target holds something else under its id or its key (another content, another
  owner): nothing is written, the detail says what differs.

Ids are global in the entries table. When `entry_id` is taken by another tenant (another
account or environment: an import into another account of the same node), the entry gets the id
`tenant_entry_id(...)` (a UUID derived from the tenant and the original id, so a second import
finds it again) and the outcome says `renumbered`.

Capacity limits are not applied: the entries were within them where they were written, and an
import must not drop some of them silently (the limits stay enforced on later writes).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

from core.memory.checks import content_hash
from core.memory.models import MemoryEntry
from core.memory.quarantine import QuarantineStore
from core.memory.rescreen import judge
from core.memory.store import Scope

Outcome = Literal["restored", "unchanged", "screened", "conflict"]

_RENUMBER_NAMESPACE = uuid.UUID("6f0d4f52-3c1e-4a8e-9a57-0c7e3f2b9d11")

_COMPARED = (
    "agent_id",
    "user_id",
    "author_user_id",
    "key",
    "content",
    "category",
    "visibility",
    "importance",
    "expires_at",
    "recall_count",
    "last_recalled_at",
    "created_at",
    "updated_at",
    "source",
)
"""The fields an existing entry must share with the file's to count as the same (not the hash,
derived, nor the version, the node's own change counter)."""


def tenant_entry_id(environment: str, account_id: str, entry_id: str) -> str:
    """The id an entry gets in a tenant where its own id belongs to another tenant (module doc)."""
    return str(uuid.uuid5(_RENUMBER_NAMESPACE, f"{environment}/{account_id}/{entry_id}"))


@dataclass(frozen=True)
class RestoreOutcome:
    outcome: Outcome
    entry_id: str
    """The id in the target (the derived one when `renumbered`)."""
    renumbered: bool = False
    rule: str = ""
    detail: str = ""


def differences(stored: MemoryEntry, wanted: MemoryEntry) -> list[str]:
    """The compared fields (module doc) whose values differ. Pure."""
    return [name for name in _COMPARED if getattr(stored, name) != getattr(wanted, name)]


class EntryRestorer:
    """Restores entries into a `QuarantineStore` (its blocks hold the agent's write lock and can
    see an entry id of any tenant)."""

    def __init__(self, store: QuarantineStore) -> None:
        self._store = store

    async def restore(self, entry: MemoryEntry) -> RestoreOutcome:
        """Restore `entry` (its environment and account are the target's; module doc)."""
        entry = entry.model_copy(update={"content_hash": content_hash(entry.content)})
        verdict = judge(entry)
        if verdict.action != "keep":
            return RestoreOutcome(
                "screened",
                entry.entry_id,
                rule=verdict.rule,
                detail=f"{verdict.reason} ({verdict.field}): {verdict.detail}",
            )
        async with self._store.writing(entry.environment, entry.account_id, entry.agent_id) as tx:
            wanted = entry
            existing = await tx.lock(uuid.UUID(entry.entry_id))
            renumbered = False
            if existing is not None and (
                existing.entry.environment,
                existing.entry.account_id,
            ) != (entry.environment, entry.account_id):
                renumbered = True
                wanted = entry.model_copy(
                    update={"entry_id": tenant_entry_id(entry.environment, entry.account_id, entry.entry_id)}
                )
                existing = await tx.lock(uuid.UUID(wanted.entry_id))
            if existing is not None:
                changed = differences(existing.entry, wanted)
                if not changed:
                    return RestoreOutcome("unchanged", wanted.entry_id, renumbered)
                return RestoreOutcome(
                    "conflict",
                    wanted.entry_id,
                    renumbered,
                    detail=f"the target's entry {wanted.entry_id} differs in {', '.join(changed)}",
                )
            scope = Scope(entry.environment, entry.account_id, entry.agent_id, entry.user_id)
            holder = await tx.find_by_key(scope, entry.key, entry.visibility)
            if holder is not None:
                return RestoreOutcome(
                    "conflict",
                    wanted.entry_id,
                    renumbered,
                    detail=(
                        f"the {entry.visibility} key {entry.key!r} of agent {entry.agent_id} is held by "
                        f"the target's entry {holder.entry.entry_id}"
                    ),
                )
            stored = await tx.insert(wanted)
            await tx.publish([stored])
            return RestoreOutcome("restored", wanted.entry_id, renumbered)
