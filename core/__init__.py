"""The domain core, the bottom layer: settings, typed errors, ids and input rules (and, as
the layering proceeds, the domain models and the store interfaces the upper layers program
against). It imports no other memstream package: `memstream` > `processors` > `streams` >
`sinks` > `core`, each importing only the ones below it.
"""
