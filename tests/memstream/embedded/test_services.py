"""The embedded servers start, answer and refuse clearly when misused."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from memstream.embedded import services
from memstream.embedded.process import ServiceError
from tests.conftest import EmbeddedStack


def test_stack_answers(embedded_stack: EmbeddedStack) -> None:
    meta = AdminClient({"bootstrap.servers": embedded_stack.broker}).list_topics(timeout=5)
    assert meta.brokers
    assert services.redis_answers(embedded_stack.redis_port)


@pytest.mark.engine
def test_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(
            ServiceError, match=rf"port 127.0.0.1:{port} is already in use.*MEMSTREAM_PORTS__REDIS"
        ):
            services.redis_process(tmp_path, port)
