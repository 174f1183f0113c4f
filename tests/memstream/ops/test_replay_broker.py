"""`GroupOffsets` against each broker tier (Tansu; real Apache Kafka with --kafka): plans, resets
refused while a member is active, true end offsets and lag, timestamps where the broker allows."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from core.errors import InvalidInput
from memstream.ops.replay import GroupActive, GroupOffsets, total_lag
from memstream.ops.replay_from import Earliest, Offsets, Timestamp

PARTITIONS = 2
PER_PARTITION = 12


@pytest.fixture
def topic(broker: str, topic_prefix: str) -> str:
    """A fresh topic with PER_PARTITION records on each partition, produced in several batches."""
    name = f"{topic_prefix}events"
    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=30)
    producer = Producer({"bootstrap.servers": broker, "linger.ms": 20})
    for i in range(PER_PARTITION):
        for partition in range(PARTITIONS):
            producer.produce(name, f"{partition}-{i}".encode(), partition=partition)
        if i % 5 == 4:
            producer.flush(30)  # several batches: Tansu's watermark is the last batch's base + 1
    assert producer.flush(30) == 0
    return name


def consume_and_commit(broker: str, topic: str, group: str, count: int) -> Consumer:
    """A member of `group` that consumed and committed `count` records (left open: still a member)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < count:
        assert time.monotonic() < deadline, f"consumed {seen} of {count}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    return consumer


@pytest.fixture
def group(topic_prefix: str) -> str:
    return f"{topic_prefix}memstream.test-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def offsets(broker: str) -> Iterator[GroupOffsets]:
    yield GroupOffsets(broker)


def test_end_offsets_are_read_not_trusted(offsets: GroupOffsets, topic: str) -> None:
    ends = offsets.end_offsets([(topic, 0), (topic, 1)])
    assert ends == {(topic, 0): PER_PARTITION, (topic, 1): PER_PARTITION}


def test_lag_after_a_member_committed_everything_then_a_reset_to_earliest(
    broker: str, offsets: GroupOffsets, topic: str, group: str
) -> None:
    lags = offsets.lag(group, [topic])
    assert [(x.committed, x.end, x.lag) for x in lags] == [(None, PER_PARTITION, PER_PARTITION)] * 2

    member = consume_and_commit(broker, topic, group, PARTITIONS * PER_PARTITION)
    try:
        assert total_lag(offsets.lag(group, [topic])) == 0
        plan = offsets.plan("test", group, {"events": topic}, Earliest())
        assert [(t.partition, t.committed, t.target) for t in plan.partitions] == [
            (0, PER_PARTITION, 0),
            (1, PER_PARTITION, 0),
        ]
        # a live member: the broker refuses (Tansu reports no members, but does refuse the commit)
        with pytest.raises(GroupActive, match="active members"):
            offsets.apply(plan)
        assert total_lag(offsets.lag(group, [topic])) == 0  # unchanged
    finally:
        member.close()

    deadline = time.monotonic() + 30
    while offsets.activity(group) is not None:
        assert time.monotonic() < deadline, offsets.activity(group)
        time.sleep(0.2)
    offsets.apply(plan)
    lags = offsets.lag(group, [topic])
    assert [(x.committed, x.lag) for x in lags] == [(0, PER_PARTITION), (0, PER_PARTITION)]


def test_explicit_offsets_change_only_the_named_partitions(
    broker: str, offsets: GroupOffsets, topic: str, group: str
) -> None:
    consume_and_commit(broker, topic, group, PARTITIONS * PER_PARTITION).close()
    plan = offsets.plan("test", group, {"events": topic}, Offsets(((None, 1, 5),)))
    assert [(t.partition, t.target) for t in plan.partitions] == [(1, 5)]
    deadline = time.monotonic() + 30
    while True:
        try:
            offsets.apply(plan)
            break
        except GroupActive:
            assert time.monotonic() < deadline
            time.sleep(0.3)
    assert offsets.committed(group, [(topic, 0), (topic, 1)]) == {(topic, 0): PER_PARTITION, (topic, 1): 5}


def test_explicit_offsets_are_validated(offsets: GroupOffsets, topic: str, group: str) -> None:
    with pytest.raises(InvalidInput, match=r"past the end of .*\[0\], which ends at 12"):
        offsets.plan("test", group, {"events": topic}, Offsets(((None, 0, PER_PARTITION + 1),)))
    with pytest.raises(InvalidInput, match="has no partition 7"):
        offsets.plan("test", group, {"events": topic}, Offsets(((None, 7, 0),)))
    with pytest.raises(InvalidInput, match="not a source of this processor"):
        offsets.plan("test", group, {"events": topic}, Offsets((("other", 0, 0),)))
    with pytest.raises(InvalidInput, match=r"\[0\] is given twice in --from '0:5,events:0:9'"):
        offsets.plan("test", group, {"events": topic}, Offsets(((None, 0, 5), ("events", 0, 9))))
    with pytest.raises(InvalidInput, match=r"\[1\] is given twice"):  # declared and broker-side names
        offsets.plan("test", group, {"events": topic}, Offsets((("events", 1, 5), (topic, 1, 9))))
    # the end itself is fine (skip everything)
    plan = offsets.plan("test", group, {"events": topic}, Offsets((("events", 0, PER_PARTITION),)))
    assert plan.partitions[0].target == PER_PARTITION


def test_timestamps_work_on_kafka_and_are_refused_on_tansu(
    request: pytest.FixtureRequest, offsets: GroupOffsets, topic: str, group: str
) -> None:
    start = Timestamp(datetime(2000, 1, 1, tzinfo=UTC))
    if request.node.callspec.params["broker"] == "tansu":
        with pytest.raises(InvalidInput, match="does not answer timestamp lookups correctly"):
            offsets.plan("test", group, {"events": topic}, start)
        return
    plan = offsets.plan("test", group, {"events": topic}, start)
    assert [t.target for t in plan.partitions] == [0, 0]
    future = Timestamp(datetime.now(UTC).replace(year=datetime.now(UTC).year + 1))
    plan = offsets.plan("test", group, {"events": topic}, future)
    assert [t.target for t in plan.partitions] == [PER_PARTITION, PER_PARTITION]  # nothing that late


def test_missing_topic_is_reported(offsets: GroupOffsets, topic_prefix: str, group: str) -> None:
    from memstream.ops.replay import BrokerOpFailed

    with pytest.raises(BrokerOpFailed, match="does not exist"):
        offsets.lag(group, [f"{topic_prefix}nope"])
