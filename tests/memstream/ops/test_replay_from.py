from datetime import UTC, datetime, timedelta

import pytest

from core.errors import InvalidInput
from memstream.ops.replay_from import Earliest, Offsets, Timestamp, parse_replay_from


def test_earliest_any_case() -> None:
    assert parse_replay_from("earliest") == Earliest()
    assert parse_replay_from(" EARLIEST ") == Earliest()


def test_partition_offsets() -> None:
    parsed = parse_replay_from("0:120,1:98")
    assert parsed == Offsets(((None, 0, 120), (None, 1, 98)))
    assert parsed.describe() == "0:120,1:98"


def test_topic_partition_offsets() -> None:
    parsed = parse_replay_from("journal.messages:3:7, memory.entries:0:0")
    assert parsed == Offsets((("journal.messages", 3, 7), ("memory.entries", 0, 0)))


def test_timestamp_with_zone_and_naive_is_utc() -> None:
    assert parse_replay_from("2026-05-01T12:00:00Z") == Timestamp(datetime(2026, 5, 1, 12, tzinfo=UTC))
    assert parse_replay_from("2026-05-01T12:00:00") == Timestamp(datetime(2026, 5, 1, 12, tzinfo=UTC))
    plus2 = parse_replay_from("2026-05-01T14:00:00+02:00")
    assert isinstance(plus2, Timestamp)
    assert plus2.at.utcoffset() == timedelta(hours=2)
    assert plus2.epoch_ms == int(datetime(2026, 5, 1, 12, tzinfo=UTC).timestamp() * 1000)


def test_date_only_is_midnight_utc() -> None:
    assert parse_replay_from("2026-05-01") == Timestamp(datetime(2026, 5, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("latest", "is not PARTITION:OFFSET"),
        ("0:-1", "is not PARTITION:OFFSET"),
        ("0:1,", "is not PARTITION:OFFSET"),
        ("a:b", "is not PARTITION:OFFSET"),
        ("0:1,0:2", "partition 0 is given twice"),
        ("2026-13-45T00:00:00", "not ISO-8601"),
    ],
)
def test_invalid_values_name_the_field(text: str, says: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_replay_from(text)
    assert info.value.field == "from"
    assert says in info.value.message
