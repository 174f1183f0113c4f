"""The outage classifier: which errors the runtime waits out instead of dead-lettering a record."""

from __future__ import annotations

import errno

import asyncpg
import httpx
import pytest
import redis.exceptions
from confluent_kafka import KafkaError, KafkaException
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from core.errors import JournalFenced, JournalUnavailable, StoreUnavailable
from core.errors import error_chain as chain
from core.stores.transcripts import TranscriptUnavailable
from core.stores.vectors import IndexUnavailable
from core.summaries.models import SummaryUnavailable
from processors.flush import FlushNotDelivered
from processors.summarizer import SummarizerBusy
from processors.thresholds import RequestNotDelivered
from streams.producer import DeliveryAborted
from streams.runtime.errors import DeadLetterUnavailable, SinkUnavailable
from streams.runtime.outages import is_outage


def raised_from(error: BaseException, cause: BaseException) -> BaseException:
    try:
        raise error from cause
    except BaseException as exc:
        return exc


def raised_while(error: BaseException, handling: BaseException) -> BaseException:
    try:
        try:
            raise handling
        except BaseException:
            raise error  # noqa: B904 - the implicit context is the point
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(
    "error",
    [
        StoreUnavailable("a store is down"),
        SinkUnavailable("ClickHouse down"),
        TranscriptUnavailable("ClickHouse insert failed: the store says so, no cause needed"),
        DeadLetterUnavailable("dlq not acknowledged"),
        RequestNotDelivered("compaction requests not confirmed"),
        FlushNotDelivered("flushed records not confirmed"),
        SummarizerBusy("another summarizer holds the lock"),
        JournalUnavailable("the journal at file:///x is closed"),
        JournalFenced("another writer opened the journal"),
        DeliveryAborted("stopping", 3),
        ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
        ConnectionResetError("reset by peer"),
        TimeoutError("no answer"),
        OSError(errno.EHOSTUNREACH, "no route to host"),
        OSError(errno.ENOSPC, "no space left on device"),
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.exceptions.TooManyConnectionsError("too many clients"),
        redis.exceptions.ConnectionError("Connection refused"),
        redis.exceptions.BusyLoadingError("loading the dataset"),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("read timed out"),
        ResponseHandlingException(httpx.ConnectError("refused")),
        UnexpectedResponse(503, "Service Unavailable", b"", httpx.Headers()),
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)),
        # a library's or processor's own error raised from one of these
        raised_from(TranscriptUnavailable("ClickHouse insert failed"), ConnectionRefusedError()),
        raised_from(IndexUnavailable("qdrant"), httpx.ConnectError("refused")),
        raised_from(SummaryUnavailable("cannot read summary objects"), TimeoutError()),
        raised_while(RuntimeError("retry gave up"), redis.exceptions.ConnectionError("refused")),
    ],
    ids=lambda e: type(e).__name__,
)
def test_outages(error: BaseException) -> None:
    assert is_outage(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("Could not parse path"),
        # what the thresholds processor saw for a thread id ending in a newline: a storage error
        # type, but raised from a ValueError about the record - not an outage
        raised_from(SummaryUnavailable("cannot read summary objects of .../t\n"), ValueError("bad path")),
        RuntimeError("Code: 62. Syntax error"),
        KeyError("thread_id"),
        IndexUnavailable("qdrant edge: vector dimension 3 != 384"),
        FileNotFoundError(errno.ENOENT, "no such file"),
        PermissionError(errno.EACCES, "permission denied"),
        asyncpg.exceptions.UniqueViolationError("duplicate key"),
        asyncpg.exceptions.QueryCanceledError("statement timeout"),
        redis.exceptions.ResponseError("WRONGTYPE"),
        UnexpectedResponse(400, "Bad Request", b"wrong vector size", httpx.Headers()),
        KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)),
    ],
    ids=lambda e: type(e).__name__,
)
def test_not_outages(error: BaseException) -> None:
    assert not is_outage(error)


def test_a_suppressed_context_is_not_followed() -> None:
    try:
        try:
            raise ConnectionError("refused")
        except ConnectionError:
            raise ValueError("a bad record, whatever happened before") from None
    except ValueError as exc:
        error = exc
    assert not is_outage(error)
    assert list(chain(error)) == [error]


def test_chain_ends_on_a_cycle() -> None:
    first, second = ValueError("a"), ValueError("b")
    first.__cause__, second.__cause__ = second, first
    assert list(chain(first)) == [first, second]


def test_every_store_unavailable_is_one_outage_signal() -> None:
    """The runtime's and the stores' own "unavailable" errors are `StoreUnavailable`s; their codes
    stay their own. `IndexUnavailable` is not one (Edge raises it for a closed index too)."""
    for kind, code in (
        (SinkUnavailable, "sink_unavailable"),
        (DeadLetterUnavailable, "dead_letter_unavailable"),
        (TranscriptUnavailable, "transcript_unavailable"),
    ):
        assert issubclass(kind, StoreUnavailable) and kind.code == code
    assert StoreUnavailable.code == "store_unavailable"
    assert not issubclass(IndexUnavailable, StoreUnavailable)
