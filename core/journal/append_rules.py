"""The journal contract's rules for one append (`core.stores.journal`), shared by every `Journal`.

- `check_messages(messages, max_message_bytes)`: at most `MAX_MESSAGES_PER_APPEND` messages, each a
  `NewMessage`, no `message_id` twice in one call, text that encodes (no lone surrogate), and each
  message at most `max_message_bytes` encoded; `InvalidInput` naming the message otherwise.
- `check_retry(new, stored, thread_id)`: a `message_id` already stored is an idempotent retry only
  in the same thread with the same role, content, reasoning and tool call (and the same
  `created_at` when the retry gives one); `Conflict` otherwise. An
  id taken in another thread gets one fixed answer, whatever that message holds, so that a conflict
  never confirms another thread's text.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_core import PydanticSerializationError

from core.errors import Conflict, InvalidInput
from core.journal.models import Message, NewMessage

MAX_MESSAGES_PER_APPEND = 1000


def check_messages(messages: Sequence[NewMessage], max_message_bytes: int) -> None:
    """Raise `InvalidInput` when `messages` break a rule of one append (module doc)."""
    if len(messages) > MAX_MESSAGES_PER_APPEND:
        raise InvalidInput(
            f"at most {MAX_MESSAGES_PER_APPEND} messages per append, got {len(messages)}",
            field="messages",
        )
    seen: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, NewMessage):
            raise InvalidInput(f"messages[{i}] is not a NewMessage", field=f"messages[{i}]")
        if message.message_id is not None:
            if message.message_id in seen:
                raise InvalidInput(
                    f"message_id {message.message_id!r} appears more than once in this append",
                    field=f"messages[{i}].message_id",
                )
            seen.add(message.message_id)
        try:
            size = len(message.model_dump_json().encode("utf-8"))
        except PydanticSerializationError:
            raise InvalidInput(
                f"messages[{i}] contains text that is not valid Unicode (a lone surrogate)",
                field=f"messages[{i}]",
            ) from None
        if size > max_message_bytes:
            raise InvalidInput(
                f"messages[{i}] is {size} bytes encoded; the limit is {max_message_bytes} bytes",
                field=f"messages[{i}]",
            )


def check_retry(new: NewMessage, stored: Message, thread_id: str) -> Message:
    """`stored` when `new` (appended to thread `thread_id`) retries it; `Conflict` otherwise."""
    if stored.thread_id != thread_id:
        raise Conflict(
            f"message_id {stored.message_id!r} is already used by a message of another thread in "
            "this account (message ids are unique per account); use a new message_id"
        )
    differing = [
        name
        for name, ours, theirs in (
            ("role", new.role, stored.role),
            ("content", new.content, stored.content),
            ("reasoning", new.reasoning, stored.reasoning),
            ("tool_call", new.tool_call, stored.tool_call),
            ("created_at", new.created_at or stored.created_at, stored.created_at),
        )
        if ours != theirs
    ]
    if differing:
        raise Conflict(
            f"message_id {stored.message_id!r} already exists in this thread with a different "
            f"{', '.join(differing)}; use a new message_id for a new message"
        )
    return stored
