"""Where things are built: the processors by name (`processors`, the registry `memstream worker NAME`
and the node use, plus the node's compaction recovery) and the API's dependencies (`api`). The
engines one process shares are `memstream.engines.Engines`, below this package: the operator
commands (`memstream.ops`, run by the admin API) use them too.
"""
