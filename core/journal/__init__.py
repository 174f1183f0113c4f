"""The thread journal's domain: the message model (`models`) and token counts (`tokens`).

The interface is `core.stores.journal.Journal`; the SlateDB adapter is
`sinks.slatedb.journal.SlateJournal`. This package re-exports nothing: import from the module
that defines a name.
"""
