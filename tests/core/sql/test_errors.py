"""Errors in ClickHouse's shape: parsed from the engine's text (chdb repeats the prefix), the HTTP
status ClickHouse gives each code, and the exception block appended after an output started."""

from __future__ import annotations

import pytest

from core.sql.errors import SqlError, http_status
from core.sql.exception_block import ExceptionScanner, write


def test_engine_errors_keep_code_name_and_message() -> None:
    text = (
        "Code: 164. DB::Exception: Code: 164. DB::Exception: Cannot modify 'readonly' setting in readonly "
        "mode. (READONLY) (version 26.9.2.1). (READONLY)"
    )
    error = SqlError.from_engine(text)
    assert (error.code, error.name, error.status) == (164, "READONLY", 403)
    assert (
        error.body()
        == "Code: 164. DB::Exception: Cannot modify 'readonly' setting in readonly mode. (READONLY)\n"
    )
    wrapped = SqlError.from_engine(
        "Received ClickHouse exception, code: 60, server response: Code: 60. DB::Exception: x"
    )
    assert (wrapped.code, wrapped.message) == (60, "x")
    assert SqlError.from_engine("boom").code == 1000


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (62, 400),
        (60, 404),
        (81, 404),
        (194, 401),
        (516, 403),
        (497, 403),
        (159, 408),
        (202, 503),
        (241, 400),
        (1000, 500),
    ],
)
def test_statuses_follow_clickhouse(code: int, status: int) -> None:
    assert http_status(code) == status


@pytest.mark.parametrize("step", [1, 2, 5, 64, 10_000])
def test_an_exception_block_is_taken_out_of_the_output_whatever_the_chunks(step: int) -> None:
    output = b"row 1\nrow 2 __exception__ lookalike\n" + write("t4g", SqlError(159, "Timeout exceeded"))
    scanner = ExceptionScanner("t4g")
    kept = b"".join(scanner.feed(output[i : i + step]) for i in range(0, len(output), step))
    with pytest.raises(SqlError) as caught:
        kept += scanner.finish()
    assert kept == b"row 1\nrow 2 __exception__ lookalike\n"
    assert (caught.value.code, caught.value.message) == (159, "Timeout exceeded")


def test_an_output_without_a_tag_or_a_block_passes_whole() -> None:
    assert ExceptionScanner(None).feed(b"__exception__\r\nx") == b"__exception__\r\nx"
    scanner = ExceptionScanner("t4g")
    assert scanner.feed(b"abc") + scanner.finish() == b"abc"
