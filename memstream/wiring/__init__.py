"""Where things are built: the processors by name (`processors`, the registry `memstream worker NAME`
and the node use, plus the node's compaction recovery), the API's dependencies (`api`) and the
node's components (`node`, which `memstream.node` runs). The engines one process shares are
`memstream.engines.Engines`, below this package: the operator commands (`memstream.ops`, run by
the admin API) use them too.
"""
