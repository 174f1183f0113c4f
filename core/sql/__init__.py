"""The SQL endpoint's domain: data-access keys (`access`), what a query may touch (`policy`), the
settings and row filters it runs under (`limits`), output formats (`formats`), ClickHouse-shaped
errors (`errors`) and the service that runs a query (`service`). No I/O here: the engine is a
`core.sql.engine.SqlEngine` handed in by the wiring."""
