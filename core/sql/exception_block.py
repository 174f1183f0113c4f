"""An error after an output started, the way ClickHouse 25.11+ appends it to the output: a block
`__exception__\\r\\n<TAG>\\r\\n<message>\\n<length> <TAG>\\r\\n__exception__\\r\\n`, where TAG is the
response's `X-ClickHouse-Exception-Tag` (random per response, so output data cannot fake it).
`write` makes one; `ExceptionScanner` takes one out of an output read chunk by chunk."""

from __future__ import annotations

from core.sql.errors import SqlError


def write(tag: str, error: SqlError) -> bytes:
    message = error.body().rstrip("\n")
    return f"__exception__\r\n{tag}\r\n{message}\n{len(message)} {tag}\r\n__exception__\r\n".encode()


class ExceptionScanner:
    """Passes an output through (`feed`, then `finish`), holding back the exception block of `tag`
    (None: the output has none): `finish` raises it as a SqlError."""

    def __init__(self, tag: str | None) -> None:
        self.marker = f"__exception__\r\n{tag}".encode() if tag else None
        self.tail = b""
        self.error: bytearray | None = None

    def feed(self, chunk: bytes) -> bytes:
        """The part of `chunk` that is output (bytes that may begin the block are held back)."""
        if self.marker is None:
            return chunk
        if self.error is not None:
            self.error.extend(chunk)
            return b""
        data = self.tail + chunk
        at = data.find(self.marker)
        if at >= 0:
            self.error = bytearray(data[at:])
            self.tail = b""
            return data[:at]
        keep = min(len(data), len(self.marker) - 1)
        self.tail = data[len(data) - keep :]
        return data[: len(data) - keep]

    def finish(self) -> bytes:
        """The output held back; SqlError when the output ended with an exception block."""
        if self.error is not None:
            text = bytes(self.error).decode(errors="replace")
            lines = text.split("\r\n")
            message = lines[2].rsplit("\n", 1)[0] if len(lines) > 2 else text
            raise SqlError.from_engine(message)
        out, self.tail = self.tail, b""
        return out
