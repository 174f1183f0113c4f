"""Logging of the API server with credentials redacted, whatever a client puts in a URL.

uvicorn's access log prints every request line with its query string, so a key sent as
`?api_key=msk_...` (refused by `memstream.api.request_guard`, but only after it was received)
would be written to the log. `log_config()` is uvicorn's logging configuration with
`RedactSecrets` on every handler (uvicorn's own and the root handler the node's loggers write
to): anything that looks like an API key (`msk_...`) and the value of a credential query
parameter (`api_key=`, `token=`, ...) become `[REDACTED]` before a record is written.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any
from urllib.parse import unquote_plus

from uvicorn.config import LOGGING_CONFIG

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
