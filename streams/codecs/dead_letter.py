"""`dlq.<processor>` (the `dead_letter` schema in topics.yaml): one record per input record a
processor gave up on, produced by the runtime (`streams.runtime.dlq`) with the original key."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from streams.codecs.records import Headers

SCHEMA_VERSION = 1


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def payload(
    *,
    processor: str,
    original_topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
    reason: str,
    error: BaseException | str,
    attempts: int = 1,
    failed_at: datetime | None = None,
) -> dict[str, Any]:
    """A dead-letter record (the `dead_letter` schema in topics.yaml) for one failed input record.

    `original_topic` is the broker-side name the record was read from; `error` is the exception
    (its class is recorded as `module.Class`) or an error type name. Key and value are kept byte
    for byte in base64, and also as text when they are UTF-8. Produce it to
    `dlq_topic(processor).broker_name(settings)` with the original key, as
    `json.dumps(payload).encode()`.
    """
    if isinstance(error, BaseException):
        error_type = f"{type(error).__module__}.{type(error).__qualname__}"
    else:
        error_type = error
    when = (failed_at or datetime.now(UTC)).astimezone(UTC)
    return {
        "schema_version": SCHEMA_VERSION,
        "processor": processor,
        "original_topic": original_topic,
        "partition": partition,
        "offset": offset,
        "key_base64": _b64(key),
        "key_text": _text(key),
        "value_base64": _b64(value),
        "value_text": _text(value),
        "headers": [{"key": k, "value_base64": _b64(v)} for k, v in headers or ()],
        "reason": reason,
        "error_type": error_type,
        "attempts": attempts,
        "failed_at": when.isoformat().replace("+00:00", "Z"),
    }
