"""The node's read-only SQL endpoint for data teams: ClickHouse's HTTP interface (`http`) on a port
of its own (`server`), over `core.sql.service.SqlService`."""
