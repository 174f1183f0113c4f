"""`core.sharding.shards`: the thread -> shard hash (a compatibility promise: these values are
pinned for good) and where each shard's journal lives."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
from pydantic import ValidationError

from core.journal.models import Message
from core.sharding.shards import MAX_SHARDS, check_shard, check_shards, shard_journal_url, shard_of


@pytest.mark.parametrize(
    ("environment", "account", "thread", "shards", "shard"),
    [
        ("prod", "acme", "t-1", 3, 0),
        ("prod", "acme", "t-1", 16, 8),
        ("dev", "default", "t-1", 256, 63),
        ("prod", "acme", "Zürich-thread", 7, 4),
        ("dev", "a", "bc", 256, 175),
        ("dev", "ab", "c", 256, 101),
    ],
)
def test_pinned_values_never_change(
    environment: str, account: str, thread: str, shards: int, shard: int
) -> None:
    """Every release must map every thread to the same shard, or data written before would be
    looked for in the wrong journal: change nothing here."""
    assert shard_of(environment, account, thread, shards) == shard


def test_the_hash_is_sha256_of_length_prefixed_ids() -> None:
    digest = hashlib.sha256(b"\x00\x00\x00\x04prod\x00\x00\x00\x04acme\x00\x00\x00\x03t-1").digest()
    assert int.from_bytes(digest[:8], "big") == 2437429074550470504
    assert shard_of("prod", "acme", "t-1", 250) == 2437429074550470504 % 250


def test_ids_cannot_run_into_each_other() -> None:
    """("a", "bc") and ("ab", "c") are different threads (the lengths are hashed too)."""
    assert shard_of("dev", "a", "bc", 256) != shard_of("dev", "ab", "c", 256)


def test_one_shard_is_always_shard_0() -> None:
    assert {shard_of("prod", "acme", f"t-{i}", 1) for i in range(100)} == {0}


@pytest.mark.parametrize("shards", [2, 3, 8])
def test_threads_spread_evenly(shards: int) -> None:
    counts = Counter(shard_of("prod", "acme", f"thread-{i}", shards) for i in range(6000))
    assert set(counts) == set(range(shards))
    expected = 6000 / shards
    assert all(abs(count - expected) < 0.1 * expected for count in counts.values()), counts


def test_the_same_thread_id_in_two_accounts_may_live_in_different_shards() -> None:
    shards = {shard_of("prod", f"account-{i}", "t-1", 8) for i in range(50)}
    assert len(shards) > 1


def test_shard_counts_and_indexes_are_checked() -> None:
    assert check_shards(1) == 1 and check_shards(MAX_SHARDS) == MAX_SHARDS
    for bad in (0, MAX_SHARDS + 1, -1, True):
        with pytest.raises(ValueError, match="shard count"):
            check_shards(bad)
    assert check_shard(2, 3) == 2
    with pytest.raises(ValueError, match=r"shard 3 is not one of the 3 journal shards \(0\.\.2\)"):
        check_shard(3, 3)
    with pytest.raises(ValueError, match="shard count"):
        shard_of("prod", "acme", "t", 0)


@pytest.mark.parametrize(
    ("url", "shard", "expected"),
    [
        ("file:///data/journal", 0, "file:///data/journal"),
        ("file:///data/journal/", 0, "file:///data/journal/"),  # shard 0 is the URL as configured
        ("file:///data/journal", 2, "file:///data/journal-shard-2"),
        ("file:///data/journal/", 2, "file:///data/journal-shard-2"),
        ("s3://bucket/memstream/journal", 1, "s3://bucket/memstream/journal-shard-1"),
        ("s3://bucket", 0, "s3://bucket"),
    ],
)
def test_shard_journals_live_beside_shard_0(url: str, shard: int, expected: str) -> None:
    assert shard_journal_url(url, shard) == expected


@pytest.mark.parametrize("url", ["s3://bucket", "s3://bucket/", "file:///"])
def test_a_journal_url_without_a_path_has_no_room_for_siblings(url: str) -> None:
    with pytest.raises(ValueError, match="no directory or prefix"):
        shard_journal_url(url, 1)


def test_a_message_takes_any_shard_and_no_other() -> None:
    """`Message.shard`'s bound is MAX_SHARDS (written out there: core.sharding imports core.journal)."""
    base = {
        "message_id": "m",
        "environment": "dev",
        "account_id": "a",
        "agent_id": "b",
        "user_id": None,
        "thread_id": "t",
        "offset": 0,
        "seq": 1,
        "role": "user",
        "content": "x",
        "created_at": "2026-01-01T00:00:00Z",
        "token_count": 1,
    }
    assert Message.model_validate({**base, "shard": MAX_SHARDS - 1}).shard == MAX_SHARDS - 1
    assert Message.model_validate(base).shard == 0
    with pytest.raises(ValidationError):
        Message.model_validate({**base, "shard": MAX_SHARDS})
