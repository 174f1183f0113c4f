"""Account export and import (`memstream.ops.account_export`, `memstream.ops.account_import`) on
the real engines: two nodes (own Postgres database, SlateDB journal, object store, environment),
the round trip byte for byte, a second import adding nothing, conflicts, screening, an import into
another account of the same node, and bad files that write nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from core.memory.restore import tenant_entry_id
from memstream.ops.account_import import import_account
from memstream.ops.export_format import InvalidExport
from tests.conftest import EmbeddedStack

from .account_nodes import INJECTION, AccountNode, open_node, populate, second_database


@pytest.fixture
async def node_a(pg_dsn: str, tmp_path: Path, redis_url: str) -> AsyncIterator[AccountNode]:
    async with open_node(pg_dsn, tmp_path / "a", "test-a", redis_url) as node:
        await populate(node)
        yield node


@pytest.fixture
async def node_b(
    node_a: AccountNode, embedded_stack: EmbeddedStack, tmp_path: Path, redis_url: str
) -> AsyncIterator[AccountNode]:
    async with (
        second_database(node_a.pool, embedded_stack.postgres_dsn) as dsn,
        open_node(dsn, tmp_path / "b", "test-b", redis_url) as node,
    ):
        yield node


def _types(text: str) -> list[str]:
    return [json.loads(line)["type"] for line in text.splitlines()]


COUNTS = {"agent": 1, "thread": 2, "message": 5, "summary": 2, "memory_entry": 2}


async def test_the_export_holds_the_account_and_nothing_node_specific(node_a: AccountNode) -> None:
    text = await node_a.export("acme")
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0] == {"type": "header", "format": "memstream.account", "format_version": 1}
    assert _types(text) == [
        "header",
        "agent",
        "thread",
        *["message"] * 4,
        "summary",
        "summary",
        "thread",
        "message",
        "memory_entry",
        "memory_entry",
        "end",
    ]
    assert lines[-1]["counts"] == COUNTS
    assert "globex" not in text and "eve" not in text  # the other account never leaks
    for forbidden in (
        '"seq"',
        '"environment"',
        '"account_id"',
        '"token_count":1',
        "test-a",
        '"version":1,"entry"',
    ):
        assert forbidden not in text
    tool = next(x for x in lines if x.get("message_id") == "m-3")
    assert tool["tool_call"] == {"id": "call-1", "name": None, "arguments": None, "result": "Tuesdays"}
    assert lines[3]["created_at"] == "2024-05-01T10:00:00.123456Z"  # the original time, kept
    assert [x["version"] for x in lines if x["type"] == "summary"] == [1, 2]
    entries = [x for x in lines if x["type"] == "memory_entry"]
    assert {e["visibility"] for e in entries} == {"shared", "private"}
    assert all(e["source"]["thread_id"] == "t-1" for e in entries)
    assert sorted(e["recall_count"] for e in entries) == [0, 1]
    assert await node_a.export("acme") == text  # deterministic


async def test_round_trip_into_an_empty_node_is_byte_identical_and_idempotent(
    node_a: AccountNode, node_b: AccountNode
) -> None:
    text = await node_a.export("acme")
    first = await import_account(node_b.stores, node_b.environment, "acme-copy", text.splitlines())
    assert first.ok, first.conflicts
    assert first.added == COUNTS
    assert not first.screened and not first.renumbered
    again = await node_b.export("acme-copy")
    assert again == text

    second = await import_account(node_b.stores, node_b.environment, "acme-copy", text.splitlines())
    assert second.ok
    assert second.added == dict.fromkeys(COUNTS, 0)
    assert second.unchanged == COUNTS
    assert await node_b.export("acme-copy") == text
    # each restored entry was published once for the Qdrant projection, and only once
    published = await node_b.pool.fetchval(
        "SELECT count(*) FROM memory_outbox WHERE record_key LIKE 'test-b/acme-copy/%' AND value IS NOT NULL"
    )
    assert published == 2
    # the imported thread's point-in-time history: both summary versions, the floor at 2
    versions = await node_b.stores.summary_versions.versions(node_b.ref("acme-copy", "t-1"), "bot")
    assert [s.version for s in versions] == [1, 2]
    assert await node_b.stores.summaries.read(node_b.ref("acme-copy", "t-1"), "bot") == versions[-1]


async def test_conflicting_data_is_reported_and_the_rest_imported(
    node_a: AccountNode, node_b: AccountNode
) -> None:
    from core.journal.models import NewMessage
    from sinks.postgres.threads import PostgresThreadStore

    await PostgresThreadStore(node_b.pool).upsert(node_b.environment, "acme", "t-1", "bot", "alice", {})
    await node_b.journal.append(
        node_b.ref("acme", "t-1"),
        "bot",
        "alice",
        [NewMessage(message_id="m-1", role="user", content="other")],
    )
    await node_b.journal.append(  # m-5 is t-2's message in the file
        node_b.ref("acme", "t-9"),
        "bot",
        None,
        [NewMessage(message_id="m-5", role="user", content="elsewhere")],
    )
    await node_b.stores.agents.upsert_capabilities(node_b.environment, "acme", "bot", [])
    text = await node_a.export("acme")
    report = await import_account(node_b.stores, node_b.environment, "acme", text.splitlines())
    assert not report.ok
    kinds = [(c["type"], c["id"]) for c in report.conflicts]
    assert kinds == [("agent", "bot"), ("thread", "t-1"), ("message", "m-1"), ("message", "m-5")]
    details = [c["detail"] for c in report.conflicts]
    assert "offset 0 of thread t-1" in details[2] and "skipped" in details[2]
    assert "the journal refused messages from offset 0 of thread t-2 (conflict:" in details[3]
    assert report.added == {"agent": 0, "thread": 1, "message": 0, "summary": 0, "memory_entry": 2}
    stored = await node_b.journal.after(node_b.ref("acme", "t-1"), -1)
    assert [m.content for m in stored] == ["other"]  # the target's thread is left as it was


async def test_an_entry_todays_screening_rejects_is_reported_not_imported(
    node_a: AccountNode, node_b: AccountNode
) -> None:
    text = (await node_a.export("acme")).replace("Deploys happen on Tuesdays.", INJECTION)
    report = await import_account(node_b.stores, node_b.environment, "acme", text.splitlines())
    assert report.ok
    assert report.added["memory_entry"] == 1
    assert [(s["key"], s["rule"]) for s in report.screened] == [("deploy.day", "ignore_instructions")]
    assert INJECTION not in await node_b.export("acme")


async def test_an_import_into_another_account_of_the_same_node_renumbers_taken_entry_ids(
    node_a: AccountNode,
) -> None:
    text = await node_a.export("acme")
    report = await import_account(node_a.stores, node_a.environment, "acme-2", text.splitlines())
    assert report.ok and report.added == COUNTS
    ids = [json.loads(x)["entry_id"] for x in text.splitlines() if '"type":"memory_entry"' in x]
    assert report.renumbered == [{"entry_id": i, "as": tenant_entry_id("test-a", "acme-2", i)} for i in ids]
    again = await import_account(node_a.stores, node_a.environment, "acme-2", text.splitlines())
    assert again.ok and again.added == dict.fromkeys(COUNTS, 0) and again.unchanged == COUNTS
    copy = await node_a.export("acme-2")
    for old in ids:
        copy = copy.replace(tenant_entry_id("test-a", "acme-2", old), old)
    assert sorted(copy.splitlines()) == sorted(text.splitlines())  # the same but for the entry ids
    assert await node_a.export("acme") == text  # the source is untouched


@pytest.mark.parametrize(
    ("edit", "line", "words"),
    [
        (
            lambda ls: [ls[0].replace('"format_version":1', '"format_version":2'), *ls[1:]],
            1,
            "format_version 2",
        ),
        (lambda ls: [*ls[:4], '{"type":"message",', *ls[5:]], 5, "not a JSON object"),
        (lambda ls: ls[:-1], 13, "without its end line"),
        (lambda ls: [*ls[:3], *ls[4:]], 4, "offset 1, expected 0"),
    ],
    ids=["wrong-version", "malformed-line", "truncated", "offset-gap"],
)
async def test_a_bad_file_is_refused_before_anything_is_written(
    node_a: AccountNode, node_b: AccountNode, edit: Callable[[list[str]], list[str]], line: int, words: str
) -> None:
    lines = (await node_a.export("acme")).splitlines()
    bad = edit(lines)
    with pytest.raises(InvalidExport) as caught:
        await import_account(node_b.stores, node_b.environment, "acme", bad)
    assert caught.value.line == line and words in caught.value.message
    assert await node_b.export("acme") == (
        '{"format":"memstream.account","format_version":1,"type":"header"}\n'
        '{"counts":{"agent":0,"memory_entry":0,"message":0,"summary":0,"thread":0},"type":"end"}\n'
    )
    assert await node_b.pool.fetchval("SELECT count(*) FROM threads") == 0


async def test_an_entry_changed_in_the_target_is_a_conflict_and_left_alone(
    node_a: AccountNode, node_b: AccountNode
) -> None:
    text = await node_a.export("acme")
    assert (await import_account(node_b.stores, node_b.environment, "acme", text.splitlines())).ok
    await node_b.pool.execute("UPDATE memory_entries SET importance = 0.2 WHERE key = 'deploy.day'")
    report = await import_account(node_b.stores, node_b.environment, "acme", text.splitlines())
    assert [(c["type"], c["detail"]) for c in report.conflicts] == [
        ("memory_entry", f"the target's entry {_entry_id(text, 'deploy.day')} differs in importance")
    ]
    assert report.unchanged == {**COUNTS, "memory_entry": 1}
    assert await node_b.pool.fetchval("SELECT importance FROM memory_entries WHERE key = 'deploy.day'") == 0.2


def _entry_id(text: str, key: str) -> str:
    entry = next(json.loads(x) for x in text.splitlines() if f'"key":"{key}"' in x)
    return str(entry["entry_id"])
