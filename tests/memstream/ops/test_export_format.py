"""The account export format (`memstream.ops.export_format`), pure: canonical lines and times, and
`read_export`'s checks, each naming the line it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memstream.ops.export_format import InvalidExport, dump, header, read_export, split_lines, time_text

HEADER = '{"format":"memstream.account","format_version":1,"type":"header"}'
THREAD = (
    '{"agent_id":"bot","created_at":"2024-05-01T10:00:00.000000Z","metadata":{},"thread_id":"t-1",'
    '"type":"thread","updated_at":"2024-05-01T10:00:00.000000Z","user_id":null}'
)

AGENT = (
    '{"agent_id":"bot","capabilities":["memory"],"created_at":"2024-05-01T10:00:00.000000Z",'
    '"type":"agent","updated_at":"2024-05-01T10:00:00.000000Z"}'
)


def _message(offset: int, message_id: str = "", thread_id: str = "t-1") -> str:
    return dump(
        {
            "type": "message",
            "thread_id": thread_id,
            "offset": offset,
            "message_id": message_id or f"m-{offset}",
            "agent_id": "bot",
            "user_id": None,
            "role": "user",
            "content": "hi",
            "reasoning": None,
            "tool_call": None,
            "created_at": "2024-05-01T10:00:00.000000Z",
        }
    )


def _end(thread: int = 1, message: int = 0) -> str:
    return dump(
        {
            "type": "end",
            "counts": {"agent": 0, "thread": thread, "message": message, "summary": 0, "memory_entry": 0},
        }
    )


def test_lines_are_canonical_and_times_utc_with_microseconds() -> None:
    assert dump(header()) == HEADER
    assert dump({"b": "é", "a": [1, None]}) == '{"a":[1,null],"b":"é"}'
    odd = dump({"c": "a\u2028b\u2029c\x85d\r\n\x0c"})  # what some readers take for line ends
    assert odd == '{"c":"a\\u2028b\\u2029c\\u0085d\\r\\n\\f"}'
    assert split_lines(odd + "\n" + odd + "\n") == [odd, odd]
    local = datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert time_text(local) == "2024-05-01T10:00:00.000000Z"
    assert time_text(datetime(2024, 5, 1, 10, 0, 0, 5, tzinfo=UTC)) == "2024-05-01T10:00:00.000005Z"


def test_a_valid_file_is_parsed_with_its_threads_and_messages() -> None:
    parsed = read_export([HEADER, THREAD, _message(0), _message(1), _end(message=2)])
    assert [m.message_id for m in parsed.threads[0].messages] == ["m-0", "m-1"]
    assert parsed.counts()["message"] == 2


@pytest.mark.parametrize(
    ("lines", "line", "words"),
    [
        ([], 1, "empty"),
        (['{"type":"thread"}'], 1, "not a memstream account export"),
        ([HEADER.replace(":1,", ":2,")], 1, "unsupported format_version 2: this node reads format_version 1"),
        ([HEADER, "{not json", _end(0)], 2, "not a JSON object"),
        ([HEADER, '{"type":"tape"}', _end(0)], 2, "unknown type 'tape'"),
        ([HEADER, THREAD.replace('"metadata":{}', '"metadata":{},"seq":4'), _end()], 2, "invalid thread"),
        ([HEADER, _message(0), _end(0, 1)], 2, "comes before that thread's line"),
        ([HEADER, THREAD, _message(1), _end(1, 1)], 3, "offset 1, expected 0"),
        ([HEADER, THREAD, _message(0), _message(1, "m-0"), _end(1, 2)], 4, "message id m-0 appears twice"),
        ([HEADER, THREAD, _end(2)], 3, "the end line counts"),
        ([HEADER, THREAD], 2, "without its end line"),
        ([HEADER, THREAD, _end(), THREAD], 4, "content after the end line"),
        (
            [HEADER, THREAD, _message(0).replace('"role":"user"', '"role":"tool"'), _end(1, 1)],
            3,
            "tool message",
        ),
        (
            [HEADER, AGENT.replace('["memory"]', '["telepathy"]'), _end(0)],
            2,
            "unknown capability 'telepathy'",
        ),
    ],
    ids=[
        "empty",
        "no-header",
        "wrong-version",
        "malformed",
        "unknown-type",
        "unknown-field",
        "orphan-message",
        "offset-gap",
        "duplicate-id",
        "counts",
        "truncated",
        "after-end",
        "role-rules",
        "unknown-capability",
    ],
)
def test_a_bad_file_is_refused_naming_the_line(lines: list[str], line: int, words: str) -> None:
    with pytest.raises(InvalidExport) as caught:
        read_export(lines)
    assert caught.value.line == line
    assert words in caught.value.message
    assert caught.value.code == "invalid_export"
