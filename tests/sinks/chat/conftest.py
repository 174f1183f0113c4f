from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sinks.chat.chat_server import ChatServer, serve


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    with serve(ChatServer()) as server:
        yield server
