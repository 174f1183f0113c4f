"""The transcript store on ClickHouse (`store.ClickHouseTranscriptStore`, implementing
`core.stores.transcripts.TranscriptStore`), for the embedded chdb and for servers: its schema
(`schema`), its client on a worker thread (`client`) and the settings factory (`factory`).
"""
