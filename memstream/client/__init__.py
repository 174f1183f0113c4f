"""`memstream.client`: a typed Python client of the memstream HTTP API, sync and async.

    from memstream.client import MemstreamClient, chat_messages

    with MemstreamClient("http://127.0.0.1:8080", api_key) as ms:
        ms.append("t-1", [{"role": "user", "content": "Hi"}], agent_id="support-bot", user_id="u-42")
        messages = chat_messages(ms.get_context("t-1"))

`AsyncMemstreamClient` has the same methods, awaitable. Both share the request building
(`calls`: which calls are idempotent, message ids generated for safe retries), the retry rules
(`retry.RetryPolicy`: retry on 503 and network errors with exponential backoff and jitter,
honouring `Retry-After`, bounded in attempts and time) and the typed errors (`errors`).
"""

from memstream.client.aio import AsyncMemstreamClient
from memstream.client.errors import (
    AuthError,
    ConflictError,
    InvalidInputError,
    MemstreamApiError,
    NotFoundError,
    ServerError,
    UnavailableError,
)
from memstream.client.models import (
    Agent,
    AppendResult,
    Context,
    EditResult,
    MemoryEntry,
    MemoryPage,
    Message,
    MessagesPage,
    NewMessage,
    Thread,
    ThreadDeletion,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserErasure,
    chat_messages,
    tool_definitions,
)
from memstream.client.retry import NO_RETRY, RetryPolicy
from memstream.client.sync import MemstreamClient

__all__ = [
    "NO_RETRY",
    "Agent",
    "AppendResult",
    "AsyncMemstreamClient",
    "AuthError",
    "ConflictError",
    "Context",
    "EditResult",
    "InvalidInputError",
    "MemoryEntry",
    "MemoryPage",
    "MemstreamApiError",
    "MemstreamClient",
    "Message",
    "MessagesPage",
    "NewMessage",
    "NotFoundError",
    "RetryPolicy",
    "ServerError",
    "Thread",
    "ThreadDeletion",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "UnavailableError",
    "UserErasure",
    "chat_messages",
    "tool_definitions",
]
