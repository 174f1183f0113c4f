"""`Outage(target, methods=..., error=...)`: a store (fake or real) whose `methods` fail.

While the outage lasts, every call of one of `methods` raises `error` (an exception, or a callable
making one per call) without reaching `target`: all calls until `restore()`, or only the first
`times` calls when `times` is given. Every other attribute is `target`'s. `proxy` is the wrapper
typed as `target`, to pass where the store's interface is expected; `calls` counts the calls of
`methods` (refused ones too), `refused` the calls that raised.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")

ErrorSpec = BaseException | Callable[[], BaseException]


class Outage(Generic[T]):
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
        missing = [name for name in self.methods if not callable(getattr(target, name, None))]
        if missing:
            raise AttributeError(f"{type(target).__name__} has no method {', '.join(sorted(missing))}")

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

    def fail(self, error: ErrorSpec | None = None, *, times: int | None = None) -> None:
        """Start the outage (again), with another `error` when given."""
        self._error = self._error if error is None else error
        self._left = times
        self._down = True

    def _refuse(self, name: str) -> None:
        self.calls[name] += 1
        if not self.down:
            return
        if self._left is not None:
            self._left -= 1
        self.refused += 1
        error = self._error
        raise error if isinstance(error, BaseException) else error()

    def __getattr__(self, name: str) -> Any:
        if name == "target":  # not set yet (copying, unpickling)
            raise AttributeError(name)
        attribute = getattr(self.target, name)
        if name not in self.methods:
            return attribute
        if inspect.iscoroutinefunction(attribute):

            async def refusing_async(*args: Any, **kwargs: Any) -> Any:
                self._refuse(name)
                return await attribute(*args, **kwargs)

            return refusing_async

        def refusing(*args: Any, **kwargs: Any) -> Any:
            self._refuse(name)
            return attribute(*args, **kwargs)

        return refusing
