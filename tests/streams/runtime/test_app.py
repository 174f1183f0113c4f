"""build_app's configuration and the commit guard of ProcessorRuntime's consumer."""

from __future__ import annotations

import time
from pathlib import Path

from faust.types import TP, Message

from core.config import Settings
from streams.runtime import ProcessorRuntime, RuntimeOptions, build_app
from streams.runtime.consumer import FETCH_MAX_WAIT_MS, CommitGuardConsumer, CommitGuardTransport
from streams.topics import TopicRegistry
from tests.streams.runtime.support import PgWriter


def test_build_app_configures_one_isolated_consumer_group(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, topic_prefix="t1.", broker_url="kafka://h1:9092,h2:9093")
    options = RuntimeOptions(session_timeout_s=4.0, heartbeat_interval_s=0.5, commit_interval_s=1.5)
    app = build_app(PgWriter("writer", "postgresql://unused"), settings, options)
    conf = app.conf
    assert conf.id == "t1.memstream.writer"
    assert [str(url) for url in conf.broker] == ["kafka://h1:9092", "kafka://h2:9093"]
    assert conf.consumer_auto_offset_reset == "earliest"
    assert (conf.broker_session_timeout, conf.broker_heartbeat_interval) == (4.0, 0.5)
    assert conf.broker_commit_interval == 1.5
    assert conf.web_enabled is False
    assert conf.topic_allow_declare is False and conf.topic_disable_leader is True
    assert conf.stream_wait_empty is False
    assert str(conf.store) == "memory:"
    assert Path(conf.datadir).is_relative_to(tmp_path)
    assert isinstance(app.transport, CommitGuardTransport)
    assert isinstance(app.consumer, CommitGuardConsumer)  # created, not connected


async def test_the_consumer_does_not_wait_faust_s_fixed_1500_ms_per_fetch(tmp_path: Path) -> None:
    app = build_app(PgWriter("writer", "postgresql://unused"), Settings(data_dir=tmp_path))
    consumer = app.consumer
    assert isinstance(consumer, CommitGuardConsumer)
    client = consumer._thread._create_worker_consumer(app.transport)  # created, not started
    assert client._fetch_max_wait_ms == FETCH_MAX_WAIT_MS


async def test_faust_cannot_ack_a_message_the_runtime_did_not_process(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, effects_dsn: str
) -> None:
    runtime = ProcessorRuntime(PgWriter("writer", effects_dsn), rt_settings, rt_options, registry=registry)
    await runtime.start()
    try:
        topic = runtime.source_topics[0]
        assert runtime.app.topics.acks_enabled_for(topic)
        consumer = runtime.app.consumer
        assert isinstance(consumer, CommitGuardConsumer)
        message = Message(topic, 0, 5, time.time(), 0, [], b"k", b"v", None, tp=TP(topic, 0))
        assert consumer.ack(message) is False  # e.g. faust acking a message it skipped
        assert message.acked is False
        consumer.mark_processed([message])
        assert consumer.ack(message) is True
        assert message.acked is True
    finally:
        await runtime.stop()


def test_offsets_acked_behind_the_guards_back_are_never_committed(tmp_path: Path) -> None:
    """faust's Cython stream iterator acks by appending to the consumer's ack lists directly,
    without `Consumer.ack`; the guard drops those offsets when faust computes what to commit."""
    settings = Settings(data_dir=tmp_path, topic_prefix="t1.", broker_url="kafka://h1:9092")
    consumer = build_app(PgWriter("writer", "postgresql://unused"), settings).consumer
    assert isinstance(consumer, CommitGuardConsumer)
    tp = TP("t1.journal.messages", 0)

    def message(offset: int) -> Message:
        return Message(tp.topic, tp.partition, offset, time.time(), 0, [], b"k", b"v", None, tp=tp)

    def ack_like_the_cython_iterator(*offsets: int) -> None:
        for offset in offsets:
            consumer._acked_index[tp].add(offset)
            consumer._acked[tp].append(offset)

    consumer.mark_processed(message(offset) for offset in range(3))
    ack_like_the_cython_iterator(0, 1, 2, 3, 4, 5)  # 3..5 never reached the processor
    assert consumer._new_offset(tp) == 3
    assert consumer._new_offset(tp) is None  # the unprocessed acks are gone for good
    consumer.mark_processed([message(3), message(4)])
    ack_like_the_cython_iterator(3, 4)
    assert consumer._new_offset(tp) == 5
