"""Logging of the API server with credentials redacted, whatever a client puts in a URL.

uvicorn's access log prints every request line with its query string, so a key sent as
`?api_key=msk_...` (refused by `memstream.api.request_guard`, but only after it was received)
would be written to the log. `log_config()` is uvicorn's logging configuration with
`RedactSecrets` on every handler (uvicorn's own and the root handler the node's loggers write
to): anything that looks like an API key (`msk_...`) and the value of a credential query
parameter (`api_key=`, `token=`, ...) become `[REDACTED]` before a record is written.
"""

from __future__ import annotations

import asyncio
import copy
import http
import logging
import re
from typing import Any, TextIO
from urllib.parse import unquote_plus

from uvicorn.config import LOGGING_CONFIG
from uvicorn.logging import AccessFormatter

from core.ids import API_KEY_IN_TEXT
from memstream.api.request_guard import CREDENTIAL_PARAMS

REDACTED = "[REDACTED]"
ROOT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_QUERY_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&;\s\"'#]*)=(?P<value>[^&;\s\"'#]*)")


def redact(text: str) -> str:
    """`text` with API keys and the values of credential query parameters replaced by [REDACTED]
    (also when percent-encoded). Text without `=` and without `msk_` cannot hold either, and is
    returned as it is without running a regular expression (most access log lines)."""
    if "=" not in text and "msk_" not in text:
        return text

    def param(match: re.Match[str]) -> str:
        name, value = match["name"], match["value"]
        decoded = unquote_plus(value)
        if unquote_plus(name).lower() in CREDENTIAL_PARAMS or API_KEY_IN_TEXT.search(decoded):
            return f"{match['lead']}{name}={REDACTED}"
        return match.group(0)

    return API_KEY_IN_TEXT.sub(f"msk_{REDACTED}", _QUERY_PARAM.sub(param, text))


def _redacted_arg(arg: object) -> object:
    """`arg` itself, or its text redacted when that text holds a secret (a URL object, a string)."""
    if arg is None or isinstance(arg, bool | int | float):
        return arg
    text = arg if type(arg) is str else str(arg)
    redacted = redact(text)
    return arg if redacted == text else redacted


class RedactSecrets(logging.Filter):
    """Rewrites every record's message and arguments through `redact` (arguments keep their
    position: uvicorn's access formatter unpacks them); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted_arg(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: _redacted_arg(value) for key, value in record.args.items()}
        if record.exc_info and not record.exc_text:  # formatters reuse exc_text when it is set
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's default logging configuration with `RedactSecrets` on its handlers, plus a root
    handler (the format of `memstream node`'s log lines) with it too."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_secrets"] = {"()": f"{__name__}.RedactSecrets"}
    config["formatters"]["root"] = {"format": ROOT_FORMAT}
    config["handlers"]["root"] = {
        "formatter": "root",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
    }
    for handler in config["handlers"].values():
        handler["filters"] = ["redact_secrets"]
    config["root"] = {"handlers": ["root"], "level": "INFO"}
    return config


_STATUS = {status.value: f"{status.value} {status.phrase}" for status in http.HTTPStatus}


class FastAccessLog:
    """What the node's HTTP protocol logs each request through instead of the `uvicorn.access`
    logger: the line uvicorn's `AccessFormatter` makes without colours
    (`INFO:     <client> - "<method> <path> HTTP/<version>" <status> <phrase>`), redacted like every
    log line (`redact`), made with one f-string and written with the other lines of the same
    event-loop turn in one write, from a callback scheduled with the first. Through `logging`, each
    request cost a record, the filter, a formatter copying the record and a write and flush (~5% of
    the node's CPU under load). The logger's level is still obeyed."""

    def __init__(self, logger: logging.Logger, stream: TextIO, loop: asyncio.AbstractEventLoop) -> None:
        self._logger = logger
        self.stream = stream
        self.loop = loop
        self._pending: list[str] = []

    def info(self, msg: str, *args: object) -> None:
        """Log one request: `args` are uvicorn's (client, method, path, HTTP version, status)."""
        if not self._logger.isEnabledFor(logging.INFO):
            return
        client, method, path, version, status = args
        code = int(status)  # type: ignore[call-overload]
        line = f'INFO:     {client} - "{method} {path} HTTP/{version}" {_STATUS.get(code) or f"{code} "}'
        if not self._pending:
            self.loop.call_soon(self.flush)
        self._pending.append(redact(line))

    def flush(self) -> None:
        """Write the pending lines (a closed stream drops them: the process is ending)."""
        if not self._pending:
            return
        text = "\n".join(self._pending) + "\n"
        self._pending.clear()
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass


_SHARED: dict[tuple[int, int], FastAccessLog] = {}


def fast_access_log(logger: logging.Logger, loop: asyncio.AbstractEventLoop) -> FastAccessLog | None:
    """The `FastAccessLog` of `loop` writing where `logger` writes (one for all the connections of
    the loop) when its only handler is the one of `log_config()` (a stream handler with uvicorn's
    access formatter without colours, redacting secrets); None when logging was configured
    otherwise (the caller keeps `logger`)."""
    if logger.propagate or len(logger.handlers) != 1:
        return None
    handler = logger.handlers[0]
    if (
        type(handler) is not logging.StreamHandler
        or handler.level > logging.INFO
        or type(handler.formatter) is not AccessFormatter
        or handler.formatter.use_colors
        or not any(isinstance(f, RedactSecrets) for f in handler.filters)
    ):
        return None
    key = (id(loop), id(handler))
    shared = _SHARED.get(key)
    if shared is None or shared.loop is not loop or shared.stream is not handler.stream:
        for stale in [k for k, log in _SHARED.items() if log.loop.is_closed()]:
            del _SHARED[stale]
        shared = _SHARED[key] = FastAccessLog(logger, handler.stream, loop)
    return shared
