from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import bpe_openai
import pytest

from core.journal import tokens
from core.journal.models import NewMessage, ToolCall
from core.journal.tokens import count_tokens, message_token_count

SAMPLES = [
    "",
    "hello world",
    "Bonjour, ça va ? 日本語のテキスト 🎉🎉",
    "def f(x):\n    return x ** 2\n\n\n",
    "special text <|endoftext|> is ordinary here",
    '{"city": "Paris", "units": "metric"}',
]


def test_counts_equal_the_o200k_encoding() -> None:
    encoding = bpe_openai.get_encoding("o200k_base")
    for text in SAMPLES:
        assert count_tokens(text) == len(encoding.encode_ordinary(text))
    assert count_tokens("hello world") == 2


def test_very_long_text_is_counted() -> None:
    # beyond the 1M-character / 200k-token limits of Encoding.encode_ordinary
    assert count_tokens(" word" * 300_000) == 300 * count_tokens(" word" * 1_000) == 300_000


def test_message_count_covers_content_arguments_and_result_not_reasoning() -> None:
    call = NewMessage(
        role="assistant",
        content="checking",
        reasoning="a long chain of thought " * 10,
        tool_call=ToolCall(id="c1", name="weather", arguments='{"city": "Paris"}'),
    )
    assert message_token_count(call) == count_tokens("checking") + count_tokens('{"city": "Paris"}')
    result = NewMessage(role="tool", tool_call=ToolCall(id="c1", result="18 C"))
    assert message_token_count(result) == count_tokens("18 C")


def test_lazy_loading_and_counting_are_thread_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_counter", None)  # force a concurrent first load
    with ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(count_tokens, SAMPLES * 50))
    assert counts == [count_tokens(t) for t in SAMPLES] * 50
