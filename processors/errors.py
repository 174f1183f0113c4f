"""Errors the processors share: a processor started where it cannot run (`memstream worker NAME`
for a processor that needs the node's journal or Postgres pool). Not restarted; their codes show in
`/readyz`."""

from __future__ import annotations

from streams.runtime.errors import ProcessorCannotRun


class NeedsNode(ProcessorCannotRun):
    """The processor was started without the node's journal or Postgres pool
    (e.g. `memstream worker flush`): it is not restarted."""

    code = "needs_node"


class NeedsNodeJournal(ProcessorCannotRun):
    """The processor was started without the node's journal (e.g. `memstream worker thresholds`):
    it is not restarted."""

    code = "needs_node_journal"
