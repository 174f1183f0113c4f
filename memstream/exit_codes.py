"""Exit statuses of `memstream node` and `memstream up` (listed in the README).

- `OK` (0): stopped on request, in order.
- `FAILED` (1): stopped on an error (the log says which), or the orderly stop outlived its deadline
  after SIGINT/SIGTERM (acknowledged appends are durable either way).
- `FENCED` (4): another writer opened the journal; this node stopped for good. Restarting it would
  take the journal back and fence the other writer in turn: find out which writer should own the
  journal, stop the other, and only then start this one again. `memstream up` does not restart a
  node that exits with it: it stops the stack and exits with it too.
"""

from __future__ import annotations

OK = 0
FAILED = 1
FENCED = 4
