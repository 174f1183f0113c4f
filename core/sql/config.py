"""`SqlSettings`: the node's read-only SQL endpoint (`Settings.sql`, `MEMSTREAM_SQL__*`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

GIB = 1024**3
MIB = 1024**2


class SqlSettings(BaseModel):
    """Where the ClickHouse-compatible SQL endpoint listens and the limits every query runs under.
    Limits are ClickHouse settings the engine enforces; a client may lower them, never raise them."""

    enabled: bool = Field(default=True, description="serve the SQL endpoint (data-access keys only)")
    host: str = Field(default="127.0.0.1", description="address of the SQL endpoint")
    port: int = Field(
        default=8123, ge=0, le=65535, description="port of the SQL endpoint (ClickHouse's HTTP port)"
    )
    max_execution_time_s: int = Field(default=30, ge=1, description="a query running longer is stopped")
    max_memory_usage: int = Field(default=GIB, ge=MIB, description="bytes of memory one query may use")
    max_result_bytes: int = Field(
        default=GIB, ge=MIB, description="uncompressed bytes one result may have (streamed formats)"
    )
    max_buffered_result_bytes: int = Field(
        default=64 * MIB,
        ge=MIB,
        description="uncompressed bytes of a result in a format the node must hold whole before sending "
        "(JSON, XML, Arrow, Pretty, ... with the embedded engine)",
    )
    max_threads: int = Field(default=1, ge=1, description="engine threads one query may use")
    max_concurrent_queries: int = Field(default=2, ge=1, description="queries running at once")
    max_queued_queries: int = Field(
        default=32, ge=0, description="queries waiting for a slot; more are refused with 503"
    )
    max_query_bytes: int = Field(
        default=256 * 1024, ge=1024, description="bytes of SQL text one query may have"
    )
