"""scripts/kafka_broker.py: the helpers that need no broker."""

from __future__ import annotations

import re
from unittest import mock

from kafka_broker import new_cluster_id  # scripts/ is on the path (tests/conftest.py)


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """Regression: an id starting with "-" was read as an option by Kafka's storage tool, which then
    refused to format, and the whole Apache Kafka tier errored (1 start in 64)."""
    dashed = b"\xfb" + bytes(15)  # base64url "-wAAAA..."
    plain = bytes(16)
    with mock.patch("kafka_broker.uuid.uuid4", side_effect=[mock.Mock(bytes=dashed), mock.Mock(bytes=plain)]):
        assert new_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"
    for _ in range(500):
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", new_cluster_id())
