"""`TopicSync` over the journal guards of several shards (real broker, real SlateDB journals): a
replaced `journal.messages` restarts its consumers once, and refills each shard from that shard's
own lowest watermark."""

from __future__ import annotations

from pathlib import Path

from core.config import Settings
from core.journal.models import NewMessage, ThreadRef
from core.stores.progress import GroupProgress
from sinks.slatedb.journal import SlateJournal
from streams.relays.journal import Relay
from streams.topic_guards import JournalTopicGuard
from streams.topic_sync import TopicSync
from tests.fakes.progress import InMemoryProgress
from tests.streams.relays.support import relay_settings_on

OTHER_TOPIC = 12345
"""The fingerprint of another broker's journal topic."""


async def test_each_shard_is_refilled_from_its_own_watermark_and_consumers_restart_once(
    broker: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings: Settings = relay_settings_on(broker, topic_prefix, tmp_path)
    topic = settings.topic("journal.messages")
    progress = InMemoryProgress()
    progress.groups["g"] = GroupProgress(watermarks={(topic, 0): 3, (topic, 1): 5})
    journals = [
        await SlateJournal.open(f"file://{tmp_path}/journal-shard-{k}", shard=k, shards=2) for k in range(2)
    ]
    relays = [Relay(journal, settings, bounds_store=progress, shard=k) for k, journal in enumerate(journals)]
    guards = [
        JournalTopicGuard(journal, relay, progress, ["g"])
        for journal, relay in zip(journals, relays, strict=True)
    ]
    restarted: list[str] = []

    async def restart(name: str) -> None:
        restarted.append(name)

    sync = TopicSync(settings, guards)
    sync.restart_consumers = restart
    try:
        for k, journal in enumerate(journals):
            for i in range(8 + k):
                ref = ThreadRef(environment="test", account_id="acme", thread_id=f"t-{k}-{i % 3}")
                await journal.append(ref, "bot", None, [NewMessage(role="user", content=f"m{i}")])
        for relay in relays:
            while await relay.run_once():
                pass
        assert [await relay.cursor() for relay in relays] == [8, 9]
        assert await sync.check() == []  # the first identity is recorded, nothing refilled
        for guard in guards:
            await guard.store(OTHER_TOPIC)  # both cursors were confirmed on another broker's topic
        assert await sync.check() == ["journal.messages"]
        assert restarted == ["journal.messages"]  # once for the topic, not once per shard
        assert [await relay.cursor() for relay in relays] == [3, 5]  # each from its own watermark
        assert [
            await journal.get_cursor(guard.floor_cursor)
            for journal, guard in zip(journals, guards, strict=True)
        ] == [3, 5]
        assert await sync.check() == []  # the new identity is stored for both
    finally:
        for relay in relays:
            await relay.close()
        for journal in journals:
            await journal.close()
