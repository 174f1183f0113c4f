"""`core.thread_identities` and its use by `ThreadService` (in-memory store and journal): appends and
message reads look a committed thread up once; tenancy holds on every call (the scope is the key);
a thread whose creation rolled back is not remembered; metadata is always read from the store.
Against Postgres and another node: `tests/core/test_threads.py`."""

from __future__ import annotations

import pytest

from core.auth import Principal
from core.errors import Conflict, InvalidInput, NotFound
from core.journal.models import NewMessage, ThreadRef
from core.thread_identities import ThreadIdentities, ThreadIdentity
from core.threads import Thread, ThreadService
from tests.fakes.journal import InMemoryJournal
from tests.fakes.threads import InMemoryThreadStore

ACME = Principal(account_id="acme", environment="test", key_id="key_a")
GLOBEX = Principal(account_id="globex", environment="test", key_id="key_g")
ACME_PROD = Principal(account_id="acme", environment="prod", key_id="key_p")


class CountingThreads(InMemoryThreadStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    async def get(self, environment: str, account_id: str, thread_id: str) -> Thread | None:
        self.gets += 1
        return await super().get(environment, account_id, thread_id)


@pytest.fixture
def store() -> CountingThreads:
    return CountingThreads()


@pytest.fixture
def identities() -> ThreadIdentities:
    return ThreadIdentities(max_entries=2)


@pytest.fixture
def service(store: CountingThreads, identities: ThreadIdentities) -> ThreadService:
    return ThreadService(store, InMemoryJournal(), identities=identities)


def hi(text: str = "hi") -> list[NewMessage]:
    return [NewMessage(role="user", content=text)]


async def test_a_thread_is_looked_up_once(service: ThreadService, store: CountingThreads) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id="u1", metadata={})
    for _ in range(3):
        await service.append(ACME, "t1", agent_id=None, user_id=None, messages=hi())
    assert len(await service.messages_after(ACME, "t1", -1, 10)) == 3
    assert store.gets == 1


async def test_the_identity_is_still_checked_when_remembered(service: ThreadService) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id="u1", metadata={})
    await service.append(ACME, "t1", agent_id="bot", user_id="u1", messages=hi())
    with pytest.raises(Conflict, match="belongs to agent 'bot'"):
        await service.append(ACME, "t1", agent_id="other", user_id=None, messages=hi())
    with pytest.raises(Conflict, match="belongs to user 'u1'"):
        await service.append(ACME, "t1", agent_id=None, user_id="u2", messages=hi())


async def test_another_account_or_environment_never_sees_a_remembered_thread(service: ThreadService) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    await service.append(ACME, "t1", agent_id=None, user_id=None, messages=hi())
    for other in (GLOBEX, ACME_PROD):
        with pytest.raises(NotFound):
            await service.append(other, "t1", agent_id=None, user_id=None, messages=hi())
        with pytest.raises(NotFound):
            await service.messages_after(other, "t1", -1, 10)
        # its own thread of the same id, with its own agent
        await service.append(other, "t1", agent_id="their-bot", user_id=None, messages=hi("theirs"))
        [theirs] = await service.messages_after(other, "t1", -1, 10)
        assert (theirs.agent_id, theirs.content) == ("their-bot", "theirs")
    assert [m.content for m in await service.messages_after(ACME, "t1", -1, 10)] == ["hi"]


async def test_a_creation_rolled_back_is_not_remembered(
    service: ThreadService, identities: ThreadIdentities
) -> None:
    with pytest.raises(InvalidInput):
        twice = [NewMessage(message_id="m1", role="user", content=c) for c in ("a", "b")]
        await service.append(ACME, "t1", agent_id="bot", user_id=None, messages=twice)
    assert len(identities) == 0
    with pytest.raises(NotFound):
        await service.append(ACME, "t1", agent_id=None, user_id=None, messages=hi())


async def test_metadata_is_always_read_from_the_store(service: ThreadService) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    await service.append(ACME, "t1", agent_id=None, user_id=None, messages=hi())
    config = {"config": {"max_working_memory_messages": 3}}
    await service.patch_metadata(ACME, "t1", config)
    assert (await service.get(ACME, "t1")).window_size == 3


def test_the_least_recently_used_is_dropped(identities: ThreadIdentities) -> None:
    def identity(thread_id: str) -> ThreadIdentity:
        return ThreadIdentity(
            ref=ThreadRef(environment="test", account_id="acme", thread_id=thread_id),
            agent_id="a",
            user_id=None,
        )

    identities.put(identity("t1"))
    identities.put(identity("t2"))
    assert identities.get("test", "acme", "t1") is not None  # t2 is now the least recently used
    identities.put(identity("t3"))
    assert identities.get("test", "acme", "t2") is None
    assert identities.get("test", "acme", "t1") == identity("t1")
    assert identities.get("test", "globex", "t1") is None
    with pytest.raises(ValueError, match="max_entries"):
        ThreadIdentities(max_entries=0)
