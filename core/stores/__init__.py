"""The store interfaces the upper layers program against (`typing.Protocol`s); their
adapters live in `sinks/`.
"""
