"""Who may read memstream's data: the user running it, nobody else.

The data directory holds every tenant's transcripts, the API key and the admin token. So:
- Every process memstream runs (the `up` supervisor, the node, the embedded servers) creates
  files with umask 077 (`PRIVATE_UMASK`): new files are 0600, new directories 0700.
- The data directory itself is 0700. One exception: when `memstream up` runs as root, embedded
  PostgreSQL runs as its own OS user (PostgreSQL refuses to run as root), which must reach
  `<data dir>/postgres`. Then the data directory is 0711 - other users may traverse it to a path
  they already know, but not list it - and `postgres/` is owned by that user with 0700 (PostgreSQL
  insists on it). Every other entry stays 0700/0600 and owned by the running user, so the postgres
  user reaches only its own directory and no other user reaches anything (`private_data_dir`).
- Files holding a secret (`api-key`, `admin.token`) are made 0600 explicitly (`private_file`),
  also when an older version left them readable.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077
_GROUP_OTHER_READ_WRITE = stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH


def restrict_umask() -> None:
    """From now on, this process creates files 0600 and directories 0700."""
    os.umask(PRIVATE_UMASK)


def private_data_dir(path: Path, *, traversable: bool) -> None:
    """Create `path` if needed and set it to 0700, or 0711 when `traversable` (module doc)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o711 if traversable else 0o700)


def restrict_dir(path: Path) -> None:
    """Create `path` 0700 if needed; else take read and write away from group and others (a
    traversal bit that `private_data_dir` granted stays)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & _GROUP_OTHER_READ_WRITE:
        path.chmod(mode & ~_GROUP_OTHER_READ_WRITE)


def private_file(path: Path) -> None:
    """Make an existing file 0600 (no-op when it does not exist)."""
    try:
        path.chmod(0o600)
    except FileNotFoundError:
        pass
