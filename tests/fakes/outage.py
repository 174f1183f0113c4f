"""`Outage(target, methods=..., error=...)`: a store (fake or real) whose `methods` fail.

While the outage lasts, every call of one of `methods` (coroutine methods: every store interface
is async) raises `error` without reaching `target`: an exception, a callable making one per call,
or None for a call that never returns (a server that accepts and never answers). The outage lasts
until `restore()`, or for the first `times` calls when `times` is given; `fail(error)` starts it
again. Every other attribute is `target`'s. `proxy` is the wrapper typed as `target`, to pass where
the store's interface is expected; `calls` counts the calls of `methods` (refused ones too),
`refused` the calls that failed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")

ErrorSpec = BaseException | Callable[[], BaseException] | None


class Outage(Generic[T]):
    """See the module doc."""

    def __init__(
        self, target: T, *, methods: Collection[str], error: ErrorSpec, times: int | None = None
    ) -> None:
        self.target = target
        self.methods = frozenset(methods)
        self.calls: Counter[str] = Counter()
        self.refused = 0
        self._error: ErrorSpec = error
        self._left = times
        self._down = True
        missing = [n for n in self.methods if not inspect.iscoroutinefunction(getattr(target, n, None))]
        if missing:
            raise TypeError(f"{type(target).__name__} has no coroutine method {', '.join(sorted(missing))}")

    @property
    def proxy(self) -> T:
        """This wrapper, typed as the target."""
        return cast(T, self)

    @property
    def down(self) -> bool:
        return self._down and (self._left is None or self._left > 0)

    def restore(self) -> None:
        """End the outage: calls reach the target again."""
        self._down = False

    def fail(self, error: ErrorSpec, *, times: int | None = None) -> None:
        """Start the outage (again), with `error`."""
        self._error = error
        self._left = times
        self._down = True

    async def _refuse(self, name: str) -> None:
        self.calls[name] += 1
        if not self.down:
            return
        if self._left is not None:
            self._left -= 1
        self.refused += 1
        error = self._error
        if error is None:
            await asyncio.Event().wait()  # never set: the call hangs until it is cancelled
        elif isinstance(error, BaseException):
            raise error
        else:
            raise error()

    def __getattr__(self, name: str) -> Any:
        if name == "target":  # not set yet (copying, unpickling)
            raise AttributeError(name)
        attribute = getattr(self.target, name)
        if name not in self.methods:
            return attribute

        async def refusing(*args: Any, **kwargs: Any) -> Any:
            await self._refuse(name)
            return await attribute(*args, **kwargs)

        return refusing
