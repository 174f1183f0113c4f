from __future__ import annotations

import pytest

from core.errors import InvalidInput
from sinks.slatedb import keys

from .helpers import thread


def test_message_keys_sort_by_offset_and_parse_back() -> None:
    t = thread()
    offsets = [0, 1, 9, 10, 15, 16, 255, 256, 2**40]
    encoded = [keys.message_key(t, o) for o in offsets]
    assert encoded == sorted(encoded)
    assert [keys.offset_of(k) for k in encoded] == offsets
    assert keys.message_key(t, 5) == b"m/test/acc1/t1/0000000000000005"


def test_thread_prefix_does_not_match_a_longer_thread_id() -> None:
    assert not keys.message_key(thread("t10"), 0).startswith(keys.thread_prefix(thread("t1")))
    assert keys.message_key(thread("t1"), 0).startswith(keys.thread_prefix(thread("t1")))


def test_prefix_includes_environment_and_account() -> None:
    a = keys.thread_prefix(thread(account_id="a1"))
    b = keys.thread_prefix(thread(account_id="a2"))
    c = keys.thread_prefix(thread(account_id="a1", environment="prod"))
    assert len({a, b, c}) == 3


def test_seq_keys_sort_and_parse_back() -> None:
    seqs = [1, 2, 15, 16, 4096, 2**63]
    encoded = [keys.seq_key(s) for s in seqs]
    assert encoded == sorted(encoded)
    assert [keys.seq_of(k) for k in encoded] == seqs
    assert keys.seq_key(1) == keys.SEQ_PREFIX + keys.seq_suffix(1)


def test_id_and_cursor_keys() -> None:
    assert keys.message_id_key("test", "acc1", "m-1") == b"i/test/acc1/m-1"
    assert keys.cursor_key("relay") == b"c/relay"


@pytest.mark.parametrize("bad", ["", "a/b", "-x", "x" * 129, "é"])
def test_key_parts_are_validated(bad: str) -> None:
    with pytest.raises(InvalidInput):
        keys.check_key_part(bad, "thread_id")
    with pytest.raises(InvalidInput):
        keys.cursor_key(bad)


def test_environment_with_a_slash_is_rejected() -> None:
    with pytest.raises(InvalidInput) as info:
        keys.check_thread(thread(environment="dev/x"))
    assert info.value.field == "environment"


def test_negative_numbers_are_rejected() -> None:
    with pytest.raises(ValueError):
        keys.seq_key(-1)
