"""The durable thread journal: message model, interface, and the SlateDB implementation."""

from memstream.journal.base import Journal
from memstream.journal.models import ID_PATTERN, ROLES, Message, NewMessage, Role, ThreadRef, ToolCall
from memstream.journal.store import MAX_MESSAGES_PER_APPEND, JournalStats, SlateJournal
from memstream.journal.tokens import count_tokens, message_token_count

__all__ = [
    "ID_PATTERN",
    "MAX_MESSAGES_PER_APPEND",
    "ROLES",
    "Journal",
    "JournalStats",
    "Message",
    "NewMessage",
    "Role",
    "SlateJournal",
    "ThreadRef",
    "ToolCall",
    "count_tokens",
    "message_token_count",
]
