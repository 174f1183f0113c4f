"""The store interfaces the upper layers program against (`typing.Protocol`s); their
adapters live in `sinks/`. Agent memory's interface is `core.memory.store` (it speaks in
`core.memory.models` types; here it would make `core.stores` and `core.memory` import each other).
"""
