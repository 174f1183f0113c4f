"""The streaming layer, between the processors above and the adapters below: the topics
(`topics.yaml`, `topics`, applied to a broker by `admin`, identified by `identity`), the wire
formats of their events (`events`, `sequencing` for the relay's stamp headers), idempotent
producers (`producer`), the relays that publish durable sources to topics (`relays`), the check
that republishes what a broker lost (`topic_sync`), and the processor runtime on faust-streaming
(`runtime`). It knows no processor: the application (`memstream.wiring`) builds them.
"""
