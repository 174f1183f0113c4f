"""Is this error an outage? The one classifier of the runtime's retry rules.

An *outage* means a store, broker or other resource cannot be used right now and waiting cures
it; the records are fine. `run_batch` retries an outage without limit and never dead-letters for
it; any other error counts as possibly caused by the records (retried `max_attempts` times, then
the record that still fails alone is dead-lettered).

`is_outage(exc)` is True when `exc`, or an exception it was raised from (`__cause__`, or the
implicit `__context__` unless suppressed), is one of:
- `core.errors.StoreUnavailable` and its subclasses (the runtime's own `SinkUnavailable`,
  `DeadLetterUnavailable`, the stores' `TranscriptUnavailable`, ...); `core.errors.JournalUnavailable` and
  `JournalFenced` (the node's journal: a processor never dead-letters a record because the
  journal cannot be read - a fenced node is stopped by its owner);
- `ConnectionError` and `TimeoutError` (builtins), an `OSError` whose errno says the network or
  the disk (full) failed, `streams.producer.DeliveryAborted`, a `KafkaException` of a transport
  or timeout error;
- PostgreSQL unavailable, as `sinks.postgres.errors` classifies it for every caller (the API's
  503 included);
- connection-class errors of the other client libraries, matched by class name so that none of
  them is imported here: redis (`ConnectionError`, `TimeoutError`), httpx transport errors, qdrant-client's
  `ResponseHandlingException`;
- an HTTP error carrying `status_code` 429, 502, 503 or 504 (a server that says "later").
Errors a processor knows to be permanent must not be raised from one of these (use
`raise ... from None`, or InvalidMessage for a bad record).
"""

from __future__ import annotations

import errno

from confluent_kafka import KafkaError, KafkaException

from core.errors import JournalFenced, JournalUnavailable, StoreUnavailable, error_chain
from sinks.postgres.errors import unavailable_itself as postgres_unavailable
from streams.producer import DeliveryAborted

OUTAGE_TYPES: tuple[type[BaseException], ...] = (
    StoreUnavailable,
    JournalUnavailable,
    JournalFenced,
    DeliveryAborted,
    ConnectionError,
    TimeoutError,
)

OUTAGE_CLASS_NAMES = frozenset(
    {
        "redis.exceptions.ConnectionError",  # incl. BusyLoadingError
        "redis.exceptions.TimeoutError",
        "httpx.TransportError",  # incl. ConnectError, ReadTimeout, ...
        "qdrant_client.http.exceptions.ResponseHandlingException",
    }
)
"""Library exceptions (`module.QualifiedName` of the class or a base class) that mean an outage."""

OUTAGE_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.EHOSTDOWN,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.EAGAIN,
        errno.ENOSPC,
        errno.EDQUOT,
    }
)

OUTAGE_HTTP_STATUSES = frozenset({429, 502, 503, 504})

_KAFKA_OUTAGE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)


def is_outage(exc: BaseException) -> bool:
    """True when `exc` means a resource is unavailable right now (module doc)."""
    return any(_is_outage_itself(err) for err in error_chain(exc))


def _is_outage_itself(err: BaseException) -> bool:
    if isinstance(err, OUTAGE_TYPES) or postgres_unavailable(err):
        return True
    if isinstance(err, OSError) and err.errno in OUTAGE_ERRNOS:
        return True
    if isinstance(err, KafkaException):
        error = err.args[0] if err.args else None
        return isinstance(error, KafkaError) and (error.retriable() or error.code() in _KAFKA_OUTAGE_CODES)
    if getattr(err, "status_code", None) in OUTAGE_HTTP_STATUSES:
        return True
    return any(f"{cls.__module__}.{cls.__qualname__}" in OUTAGE_CLASS_NAMES for cls in type(err).__mro__)
