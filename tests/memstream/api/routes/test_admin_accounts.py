"""The account routes' pieces (unit): the export stream's lines (each export line wrapped, then the
result), a store failing midway ends the stream with an error line and no result, and an import
body that is not UTF-8 is refused naming its line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from core.errors import StoreUnavailable
from core.stores.agents import AgentRecord
from core.threads import Thread
from memstream.api.routes.admin_accounts import _lines, export_stream
from memstream.ops.account_export import AccountStores
from memstream.ops.export_format import InvalidExport
from tests.fakes.agents import InMemoryAgents
from tests.fakes.journal import InMemoryJournal
from tests.fakes.quarantine import InMemoryQuarantineStore
from tests.fakes.summaries import InMemorySummaryStore
from tests.fakes.threads import InMemoryThreadStore


class _Versions:
    def __init__(self, store: InMemorySummaryStore) -> None:
        self.store = store

    async def versions(self, thread: Any, agent_id: str) -> list[Any]:
        return list(
            self.store.summaries.get((thread.environment, thread.account_id, agent_id, thread.thread_id), [])
        )


class _NoRestore:
    """An export never restores anything."""

    async def restore_thread(self, thread: Thread) -> tuple[Thread, bool]:
        raise AssertionError("an export wrote a thread")

    async def restore_agent(
        self,
        environment: str,
        account_id: str,
        agent_id: str,
        capabilities: Sequence[str],
        created_at: datetime,
        updated_at: datetime,
    ) -> tuple[AgentRecord, bool]:
        raise AssertionError("an export wrote an agent")


class _ThreadsDown(InMemoryThreadStore):
    async def list_threads(self, *args: Any, **kwargs: Any) -> list[Thread]:
        raise StoreUnavailable("postgres went away")


def _stores(threads: InMemoryThreadStore) -> AccountStores:
    summaries = InMemorySummaryStore()
    return AccountStores(
        threads=threads,
        journal=InMemoryJournal(),
        summary_versions=_Versions(summaries),
        summaries=summaries,
        agents=InMemoryAgents(),
        entries=InMemoryQuarantineStore(),
        restore=_NoRestore(),
    )


async def _items(stores: AccountStores) -> list[dict[str, Any]]:
    return [json.loads(line) async for line in export_stream(stores, "test", "acme")]


async def test_the_stream_wraps_every_export_line_then_the_result() -> None:
    stores = _stores(InMemoryThreadStore())
    await stores.agents.upsert_capabilities("test", "acme", "bot", ["memory"])
    items = await _items(stores)
    lines = [json.loads(i["line"]) for i in items if "line" in i]
    assert [x["type"] for x in lines] == ["header", "agent", "end"]
    assert items[-1] == {
        "result": {
            "account_id": "acme",
            "counts": {"agent": 1, "memory_entry": 0, "message": 0, "summary": 0, "thread": 0},
        }
    }


async def test_a_store_failing_midway_ends_the_stream_with_an_error_and_no_result() -> None:
    items = await _items(_stores(_ThreadsDown()))
    assert json.loads(items[0]["line"])["type"] == "header"
    assert items[-1] == {"error": {"code": "store_unavailable", "message": "postgres went away"}}
    assert not any("result" in i for i in items)


def test_an_import_body_that_is_not_utf8_is_refused_naming_its_line() -> None:
    with pytest.raises(InvalidExport, match="line 2: the file is not UTF-8"):
        _lines(b'{"type":"header"}\n\xff\n')
