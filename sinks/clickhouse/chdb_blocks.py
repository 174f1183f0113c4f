"""One well-formed output from chdb's streamed blocks.

chdb streams a result block by block, each block written as a whole output of the format of its
own (its own header line, its own Parquet file). `assembler(fmt)` gives what turns those into the
one output a ClickHouse server sends (`core.sql.formats.Assembly` says which formats need what):
headers kept from the first block only, Parquet row groups written into one file as they come
(pyarrow, the Parquet library chdb itself depends on). Formats with a global header and footer
(`Assembly.WHOLE`) are not streamed at all: the engine writes them in one piece.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pyarrow.parquet as pq

from core.sql.errors import SqlError
from core.sql.formats import Assembly, OutputFormat

_INTERNAL = 1001  # STD_EXCEPTION: the engine's output was not what its format promised


class Assembler:
    """Concatenates the blocks' outputs (the formats without header or footer)."""

    def feed(self, block: bytes) -> Iterator[bytes]:
        if block:
            yield block

    def finish(self) -> Iterator[bytes]:
        yield from ()


class _HeaderStripper(Assembler):
    """Keeps the header of the first block; strips the same bytes from every later block."""

    def __init__(self) -> None:
        self.header: bytes | None = None

    def header_length(self, block: bytes) -> int:
        raise NotImplementedError

    def feed(self, block: bytes) -> Iterator[bytes]:
        if self.header is None:
            self.header = block[: self.header_length(block)]
            yield block
            return
        if not block.startswith(self.header):
            raise SqlError(
                _INTERNAL,
                "a block of the result did not start with the result's header",
                name="STD_EXCEPTION",
            )
        rest = block[len(self.header) :]
        if rest:
            yield rest


class _Lines(_HeaderStripper):
    """Header lines escaped as TSV or JSON: no newline inside one."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines = lines

    def header_length(self, block: bytes) -> int:
        end = 0
        for _ in range(self.lines):
            end = block.index(b"\n", end) + 1
        return end


class _CsvRecords(_HeaderStripper):
    """CSV header records: a quoted name may hold a newline (quotes inside are doubled)."""

    def __init__(self, records: int) -> None:
        super().__init__()
        self.records = records

    def header_length(self, block: bytes) -> int:
        quoted = False
        records = 0
        for index, byte in enumerate(block):
            if byte == 0x22:  # "
                quoted = not quoted
            elif byte == 0x0A and not quoted:
                records += 1
                if records == self.records:
                    return index + 1
        raise SqlError(_INTERNAL, "the CSV header of the result is incomplete", name="STD_EXCEPTION")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


class _RowBinaryHeader(_HeaderStripper):
    """RowBinaryWithNames(AndTypes): a varint column count, then that many length-prefixed names
    (and as many types)."""

    def __init__(self, lists: int) -> None:
        super().__init__()
        self.lists = lists

    def header_length(self, block: bytes) -> int:
        columns, at = _varint(block, 0)
        for _ in range(columns * self.lists):
            length, at = _varint(block, at)
            at += length
        return at


class _Sink(io.RawIOBase):
    """Where pyarrow writes the Parquet file: bytes handed on as they are written."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self.pending.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data, self.pending = b"".join(self.pending), []
        return data


class _Parquet(Assembler):
    """Every block's Parquet file read back, its rows written as row groups of one file."""

    def __init__(self) -> None:
        self.sink = _Sink()
        self.writer: pq.ParquetWriter | None = None

    def feed(self, block: bytes) -> Iterator[bytes]:
        table = pq.read_table(io.BytesIO(block))
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.sink, table.schema, compression="zstd")
        self.writer.write_table(table)
        data = self.sink.take()
        if data:
            yield data

    def finish(self) -> Iterator[bytes]:
        if self.writer is not None:
            self.writer.close()
            data = self.sink.take()
            if data:
                yield data


def assembler(fmt: OutputFormat) -> Assembler:
    """What assembles streamed blocks of `fmt` (never called for `Assembly.WHOLE`)."""
    match fmt.assembly:
        case Assembly.HEADER_LINES_1:
            return _Lines(1)
        case Assembly.HEADER_LINES_2:
            return _Lines(2)
        case Assembly.CSV_HEADER_1:
            return _CsvRecords(1)
        case Assembly.CSV_HEADER_2:
            return _CsvRecords(2)
        case Assembly.BINARY_HEADER_1:
            return _RowBinaryHeader(1)
        case Assembly.BINARY_HEADER_2:
            return _RowBinaryHeader(2)
        case Assembly.PARQUET:
            return _Parquet()
        case _:
            return Assembler()
