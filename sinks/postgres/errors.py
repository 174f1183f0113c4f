"""Is this failure "PostgreSQL cannot be reached right now"? One classification for every caller.

`is_postgres_unavailable(exc)` is True when `exc`, or an exception it was raised from (its
`__cause__`/`__context__` chain), means the server is down, restarting, shutting down, out of
connection slots, or the connection to it broke:
- asyncpg's connection-class errors (SQLSTATE class 08: refused, broken, does not exist), the
  server shutting down or starting up (57P01-57P03), too many connections (53300), and the
  driver's "connection is closed" / "pool is closing" interface errors;
- `OSError` (connection refused or reset, `TimeoutError`) raised inside asyncpg - connecting to a
  server that does not listen fails in asyncio's socket code, called by asyncpg, so the origin is
  read from the traceback: an `OSError` of any other library is not a Postgres outage;
- a connection the server ended while it sat idle in the pool (`ended_while_idle`).
Everything else - a failed query, a constraint, a bug - is not: retrying would not cure it.

`ended_while_idle(exc)`: a server that ends a connection (it shuts down, its postmaster died, an
administrator terminated the backend) sends the client a FATAL message. asyncpg reads one that
arrives while the connection is idle as a protocol error and leaves the connection's protocol in
an error state until the socket is seen to close; a pool may hand it out in between, and the next
operation fails at once with `InternalClientError: cannot switch to state N; another operation
(M) is in progress` - before anything was sent to the server. `sinks.postgres.pool` discards such
a connection and runs the statement on another one.
"""

from __future__ import annotations

import asyncpg
import asyncpg.exceptions as pg

from core.errors import error_chain

RETRY_AFTER_S = 5
"""What callers are told to wait before retrying while PostgreSQL is unavailable."""

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    pg.PostgresConnectionError,
    pg.CannotConnectNowError,
    pg.AdminShutdownError,
    pg.CrashShutdownError,
    pg.TooManyConnectionsError,
)
_CLOSED_MARKERS = ("connection is closed", "pool is closing", "connection was closed")
_NOT_IDLE_MARKER = "cannot switch to state "
"""How asyncpg refuses to start an operation on a connection whose protocol is not idle."""


def ended_while_idle(exc: BaseException) -> bool:
    """`exc` is asyncpg refusing to start an operation on a connection the server ended while it
    was idle (module doc): nothing was sent, the connection is unusable."""
    return isinstance(exc, asyncpg.InternalClientError) and str(exc).startswith(_NOT_IDLE_MARKER)


def _raised_in_asyncpg(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if isinstance(module, str) and (module == "asyncpg" or module.startswith("asyncpg.")):
            return True
        tb = tb.tb_next
    return False


def unavailable_itself(exc: BaseException) -> bool:
    """`exc` alone (not what it was raised from) means PostgreSQL is unavailable (module doc)."""
    if isinstance(exc, _UNAVAILABLE):
        return True
    if isinstance(exc, asyncpg.InterfaceError):
        return any(marker in str(exc) for marker in _CLOSED_MARKERS)
    if ended_while_idle(exc):
        return True
    return isinstance(exc, OSError) and _raised_in_asyncpg(exc)


def is_postgres_unavailable(exc: BaseException) -> bool:
    """See the module doc."""
    return any(unavailable_itself(err) for err in error_chain(exc))
