"""Key layout of the journal in SlateDB.

All keys are ASCII bytes. Every id that appears in a key is a full match of `core.ids.ID`
(checked before any key is built; the environment one of `core.ids.ENVIRONMENT`), so it
cannot contain `/` or a line break, and `/` is a safe separator: a prefix that ends in `/`
never matches a longer id (thread `t1` does not match thread `t10`). Numbers are zero-padded
16-digit lower-case hex, so byte order equals numeric order and range/descending scans work.

    m/{env}/{account}/{thread}/{offset:016x}  ->  the message row: the stored `Message` as JSON
    s/{seq:016x}                              ->  key of the message row (a pointer)
    i/{env}/{account}/{message_id}            ->  key of the message row (a pointer)
    c/{name}                                  ->  a named cursor, decimal ASCII
    x/{env}/{account}/{thread}                ->  the thread was deleted: the highest seq deleted
    f/seq                                     ->  the seq floor: the highest seq allocated when a
                                                  thread was last deleted, decimal ASCII
    l/shards                                  ->  which journal shard this is: `{shard}/{shards}`,
                                                  ASCII (`sinks.slatedb.layout`)

Why the seq index and the message-id index hold pointers rather than copies of the message: the
message body is written (and copied byte by byte through the Python binding) exactly once, so
an append costs one body write plus two short keys, and storage is not doubled. The latency-
critical read, an agent's context (`last(thread, n)`), is a single prefix scan over full rows.
The relay's `read_from_seq` pays one point lookup per message (tens of microseconds), unless it
reads the last appends, which the writer keeps in memory (`sinks.slatedb.recent`); the message-id
lookup is only done for ids a caller supplied.

Per-thread offsets and global seqs are therefore recovered with a descending scan of the thread
prefix and of `s/` respectively (see `SlateJournal`).

Note: `scan_prefix` sub-ranges are relative to the prefix: use the `*_suffix` helpers for them.
"""

from __future__ import annotations

from pydantic import ValidationError

from core.errors import JournalUnavailable
from core.ids import ENVIRONMENT, ID
from core.journal.models import Message, ThreadRef

MESSAGE_ROOT = b"m/"
SEQ_PREFIX = b"s/"
MESSAGE_ID_ROOT = b"i/"
CURSOR_ROOT = b"c/"
SEQ_FLOOR_KEY = b"f/seq"
"""Seqs are never allocated at or below this (`sinks.slatedb.thread_delete`)."""
LAYOUT_KEY = b"l/shards"
"""The shard this journal is and the shard count it was created with (`sinks.slatedb.layout`)."""

_HEX_WIDTH = 16
MAX_NUMBER = (1 << 64) - 1
"""The largest offset or seq a key can hold."""


def check_key_part(value: str, field: str) -> str:
    """Return `value` if it may appear in a key (a full match of `ID`); else raise InvalidInput."""
    return ID.require(value, field)


def check_thread(thread: ThreadRef) -> ThreadRef:
    """Validate every part of a thread's scope for use in keys (environment included)."""
    ENVIRONMENT.require(thread.environment, "environment")
    check_key_part(thread.account_id, "account_id")
    check_key_part(thread.thread_id, "thread_id")
    return thread


def _hex(number: int) -> bytes:
    if not 0 <= number <= MAX_NUMBER:
        raise ValueError(f"{number} does not fit a 64-bit key component")
    return f"{number:0{_HEX_WIDTH}x}".encode("ascii")


def _parse_hex(raw: bytes) -> int:
    if len(raw) != _HEX_WIDTH:
        raise ValueError(f"malformed journal key component {raw!r}")
    return int(raw, 16)


# ---- per-thread message rows -------------------------------------------------------------------


def thread_prefix(thread: ThreadRef) -> bytes:
    """`m/{env}/{account}/{thread}/`: the prefix of every message row of one thread."""
    return b"%s%s/%s/%s/" % (
        MESSAGE_ROOT,
        thread.environment.encode("ascii"),
        thread.account_id.encode("ascii"),
        thread.thread_id.encode("ascii"),
    )


def offset_suffix(offset: int) -> bytes:
    """The part of a message key after `thread_prefix`: a sub-range bound for prefix scans."""
    return _hex(offset)


def message_key(thread: ThreadRef, offset: int) -> bytes:
    """The key of the message at `offset` in `thread`."""
    return thread_prefix(thread) + _hex(offset)


def offset_of(message_key_: bytes) -> int:
    """The offset encoded in a message row key."""
    return _parse_hex(message_key_.rsplit(b"/", 1)[1])


# ---- global seq index --------------------------------------------------------------------------


def seq_suffix(seq: int) -> bytes:
    """The part of a seq key after `SEQ_PREFIX`: a sub-range bound for prefix scans."""
    return _hex(seq)


def seq_key(seq: int) -> bytes:
    """`s/{seq:016x}`."""
    return SEQ_PREFIX + _hex(seq)


def seq_of(seq_key_: bytes) -> int:
    """The seq encoded in a seq index key."""
    if not seq_key_.startswith(SEQ_PREFIX):
        raise ValueError(f"not a seq key: {seq_key_!r}")
    return _parse_hex(seq_key_[len(SEQ_PREFIX) :])


# ---- message-id index and cursors --------------------------------------------------------------


def message_id_key(environment: str, account_id: str, message_id: str) -> bytes:
    """`i/{env}/{account}/{message_id}`: message ids are unique per (environment, account)."""
    return b"%s%s/%s/%s" % (
        MESSAGE_ID_ROOT,
        environment.encode("ascii"),
        account_id.encode("ascii"),
        message_id.encode("ascii"),
    )


def deleted_key(thread: ThreadRef) -> bytes:
    """`x/{env}/{account}/{thread}`: the marker of a deleted thread (its last deletion's up_to_seq)."""
    return b"x/" + thread_prefix(thread)[len(MESSAGE_ROOT) :].rstrip(b"/")


def cursor_key(name: str) -> bytes:
    """`c/{name}`; `name` must be an `ID`."""
    return CURSOR_ROOT + check_key_part(name, "cursor name").encode("ascii")


# ---- message rows ------------------------------------------------------------------------------


def parse_row(url: str, key: bytes, value: bytes) -> Message:
    """The `Message` stored in the row `key` of the journal at `url`; JournalUnavailable if unreadable."""
    try:
        return Message.model_validate_json(value)
    except ValidationError as exc:
        raise JournalUnavailable(f"journal at {url}: unreadable row {key!r}: {exc}") from exc
