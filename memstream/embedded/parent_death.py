"""Children that die with their parent: Linux's parent-death signal (`PR_SET_PDEATHSIG`).

`die_with_parent(sig)` returns a `preexec_fn` for `subprocess.Popen`: the child asks the kernel to
send it `sig` when its parent dies, even by SIGKILL, so no server of `memstream up` outlives the
supervisor. Contract and limits:
- The kernel sends the signal when the *thread* that forked the child exits; the supervisor forks
  every child from its main thread, whose end is the process's end.
- A change of the child's user or group ids clears the setting. `Popen` calls `preexec_fn` after
  its `user=`/`group=` switch, so a child run as another OS user (embedded PostgreSQL as root)
  keeps it; do not change ids after exec either.
- A server that daemonises (forks and lets its first process exit, e.g. `pg_ctl start` or
  `redis-server --daemonize yes`) escapes it: every embedded server runs in the foreground.
- The child's disposition of `sig` is reset to the default first: an ignored signal stays ignored
  across exec, and a supervisor started in the background by a shell (`memstream up &`, nohup, a
  CI runner) ignores SIGINT - which is PostgreSQL's stop signal - and would pass that on, so a
  server that keeps the inherited disposition would never stop.
- A parent that died between the fork and the `prctl` call would never signal: the child checks
  its parent id afterwards and signals itself.
- Not Linux: `die_with_parent` returns None (the supervisor still stops its children on any
  ordinary exit).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


_SIG_DFL = 0


def _libc() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """libc's `prctl` and `signal`; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    set_handler = libc.signal  # libc's, not Python's: a preexec_fn may run in a fork of any thread
    set_handler.argtypes = [ctypes.c_int, ctypes.c_void_p]
    set_handler.restype = ctypes.c_void_p
    return prctl, set_handler


_LIBC = _libc()


def die_with_parent(sig: int) -> Callable[[], None] | None:
    """A `preexec_fn` making the child receive `sig` when the calling process dies (module doc).

    Build it in the parent, right before `Popen`: it remembers the parent's pid. It does no
    allocation-heavy work and imports nothing, as code between fork and exec must.
    """
    if _LIBC is None:
        return None
    prctl, set_handler = _LIBC
    parent = os.getpid()

    def preexec() -> None:
        set_handler(sig, _SIG_DFL)  # an inherited "ignore" would outlive exec (module doc)
        if prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the prctl took effect
            os.kill(os.getpid(), sig)

    return preexec
