"""The wire format of every memstream topic: one codec module per topic (`journal_messages`,
`compaction_requested`, `compaction_flushed`, `memory_entries`, `dead_letter`), each with its
`encode` and its `decode`, which raises `InvalidEvent` (`errors`) for a record that is not an event
of its topic. The schemas they implement are in topics.yaml; every example there decodes.
"""
