"""What the load sent and what the stack answered: the ground truth the checks hold the journal to.

Every message the appender sends is recorded once, before its first attempt, with the exact body it
sends on every attempt (so a retry is byte-for-byte the same request) and the wall time of that
first attempt. Its outcome is then:
- `acked`: a 201 answered it, with the offset the journal gave it (the append is durable: it must
  be in the journal exactly once, at that offset, with that content);
- `unknown`: no answer, a transport error or a 5xx; the appender keeps retrying with the same
  message ids until it gets a definite answer, so `unknown` remains only for appends still open
  when the run stopped (they may or may not be in the journal, but at most once);
- `rejected`: a 4xx (never expected for the load's valid requests: a check reports it).

Server errors (5xx) are recorded with their time, status and error code for the outage policy
(`faults.checks.check_server_errors`). All methods are thread-safe; `view()` is a consistent copy.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Outcome = Literal["acked", "unknown", "rejected"]


@dataclass(frozen=True)
class Conversation:
    """A thread the load writes to: its ids, and whether it is written often (`hot`)."""

    thread_id: str
    agent_id: str
    user_id: str | None
    hot: bool


@dataclass(frozen=True)
class Sent:
    """One message as sent, and what became of it."""

    thread_id: str
    message_id: str
    body: dict[str, Any]  # the NewMessage JSON, identical on every attempt
    first_sent: float  # time.time() of the first attempt
    outcome: Outcome = "unknown"
    offset: int | None = None  # the offset a 201 returned
    attempts: int = 0
    rejection: str | None = None  # "409 conflict: ..." for a rejected append


@dataclass(frozen=True)
class ServerError:
    """A 5xx answer to the load (or a probe): when, to what, and the error code it carried."""

    at: float  # time.time()
    method: str
    path: str
    status: int
    code: str | None  # `error.code` of the JSON body; None when the body had none


@dataclass(frozen=True)
class LedgerView:
    """A consistent copy of the ledger."""

    conversations: dict[str, Conversation]
    messages: dict[str, Sent]  # by message_id (unique over the run)
    server_errors: tuple[ServerError, ...]
    transport_errors: int

    def outcomes(self) -> Counter[str]:
        return Counter(sent.outcome for sent in self.messages.values())

    def of_thread(self, thread_id: str) -> list[Sent]:
        return [sent for sent in self.messages.values() if sent.thread_id == thread_id]


@dataclass
class Ledger:
    """See the module doc."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _conversations: dict[str, Conversation] = field(default_factory=dict)
    _messages: dict[str, Sent] = field(default_factory=dict)
    _server_errors: list[ServerError] = field(default_factory=list)
    _transport_errors: int = 0

    def add_conversation(self, conversation: Conversation) -> None:
        with self._lock:
            self._conversations[conversation.thread_id] = conversation

    def sending(self, thread_id: str, bodies: list[dict[str, Any]]) -> list[str]:
        """Record an append's messages before its first attempt; returns their message ids."""
        now = time.time()
        with self._lock:
            ids = []
            for body in bodies:
                message_id = str(body["message_id"])
                if message_id in self._messages:
                    raise ValueError(f"message id {message_id} was already sent")
                self._messages[message_id] = Sent(thread_id, message_id, body, now)
                ids.append(message_id)
            return ids

    def attempted(self, message_ids: list[str]) -> None:
        with self._lock:
            for message_id in message_ids:
                sent = self._messages[message_id]
                self._messages[message_id] = replace(sent, attempts=sent.attempts + 1)

    def acked(self, message_ids: list[str], offsets: list[int]) -> None:
        """A 201 for these messages, with the offsets it returned (same order)."""
        if len(message_ids) != len(offsets):
            raise ValueError(f"{len(message_ids)} messages sent but {len(offsets)} acknowledged")
        with self._lock:
            for message_id, offset in zip(message_ids, offsets, strict=True):
                self._messages[message_id] = replace(
                    self._messages[message_id], outcome="acked", offset=offset
                )

    def rejected(self, message_ids: list[str], reason: str) -> None:
        with self._lock:
            for message_id in message_ids:
                self._messages[message_id] = replace(
                    self._messages[message_id], outcome="rejected", rejection=reason
                )

    def server_error(self, error: ServerError) -> None:
        with self._lock:
            self._server_errors.append(error)

    def transport_error(self) -> None:
        with self._lock:
            self._transport_errors += 1

    def view(self) -> LedgerView:
        with self._lock:
            return LedgerView(
                conversations=dict(self._conversations),
                messages=dict(self._messages),
                server_errors=tuple(self._server_errors),
                transport_errors=self._transport_errors,
            )
