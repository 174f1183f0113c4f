"""`memstream rebuild clickhouse|qdrant`: build a fresh projection from its topic and swap it in.

Both run inside the node while the live processors keep running; neither moves a consumer group
nor relies on the broker's high watermark. `rebuild_clickhouse` (memstream.ops.rebuild_clickhouse)
rebuilds the transcript store from `journal.messages`; `rebuild_qdrant`
(memstream.ops.rebuild_qdrant) rebuilds agent memory's vector index from `memory.entries`. Both
report progress through a `ProgressCallback` and return a `RebuildReport` (what the CLI prints),
or raise `RebuildFailed` saying why and what was left as it was.
"""

from memstream.ops.rebuild_base import RebuildFailed, RebuildReport
from memstream.ops.rebuild_clickhouse import rebuild_clickhouse
from memstream.ops.rebuild_qdrant import rebuild_qdrant

__all__ = ["RebuildFailed", "RebuildReport", "rebuild_clickhouse", "rebuild_qdrant"]
