"""Where things are built: the engines one process shares (`engines`) and the processors by
name (`processors`, the registry `memstream worker NAME` and the node use).
"""
