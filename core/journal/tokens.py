"""Exact OpenAI o200k token counts, offline (PyPI `bpe-openai`).

`count_tokens(text)` equals `len(get_encoding("o200k_base").encode_ordinary(text))`: special-token
text such as `<|endoftext|>` is counted as ordinary text, never rejected. The `Encoding` wrapper
refuses texts of 1,000,000+ characters or 200,000+ tokens, so counting goes straight to the same
Rust tokenizer it wraps (`PyTokenizer.count`, which has no such limits and builds no token list).

The tokenizer is loaded once, lazily, under a lock (about 50 ms), so it is safe to call from
several threads (e.g. `asyncio.to_thread` for very large texts).
"""

from __future__ import annotations

import threading
from typing import Protocol

from core.journal.models import Message, NewMessage

ENCODING_NAME = "o200k_base"


class _Counter(Protocol):
    def count(self, text: str) -> int: ...


_lock = threading.Lock()
_counter: _Counter | None = None


def _load() -> _Counter:
    global _counter
    counter = _counter
    if counter is None:
        with _lock:
            counter = _counter
            if counter is None:
                from bpe_openai import _bindings

                counter = _bindings.tokenizer_for_encoding(ENCODING_NAME)
                _counter = counter
    return counter


def count_tokens(text: str) -> int:
    """The number of o200k tokens of `text` (0 for the empty string).

    Text that is not valid Unicode (lone surrogates) raises `UnicodeEncodeError`.
    """
    if not text:
        return 0
    return _load().count(text)


def message_text_size(message: NewMessage | Message) -> int:
    """Characters that `message_token_count` tokenizes (to decide whether to count off-loop)."""
    size = len(message.content)
    tc = message.tool_call
    if tc is not None:
        size += len(tc.arguments or "") + len(tc.result or "")
    return size


def message_token_count(message: NewMessage | Message) -> int:
    """Tokens of content + tool_call.arguments + tool_call.result (reasoning is not counted)."""
    total = count_tokens(message.content)
    tc = message.tool_call
    if tc is not None:
        total += count_tokens(tc.arguments or "") + count_tokens(tc.result or "")
    return total
